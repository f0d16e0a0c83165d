/* Swap I/O's parameter fetch (parameters on nvme): the shards live in a tiered home
 * (store/home.h) opened on swapio's own parameter swap store (the extents that the initial
 * state and AdamW write), so the parameters, the activation checkpoints and layer-major's
 * boundaries move through one kind of store.
 *
 * The home's buffers (plan.h): fetch buffer i for ring slot i (0 .. F-2, plan.fetch_ring_numel
 * elements), layer 0's own (F-1), then hot layer l's current shard (F-1 + l, l = 1 .. H);
 * F = plan.fetch_buffers, H = plan.hot_layers. The items are the layers' shards, read
 * whole (their exact bytes). A fetch into buffer i reads the layer's shard there (after
 * the buffer's previous copy up: the home's UP state, b->up the `copied` event), or, for a
 * hot layer, reads nothing and copies up the hot buffer (sw->fetch_src[i]). Each read
 * waited for is one --trace span from its submission (b->t0) to its completion.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "core/trace.h"
#include "sched/runtime.h"
#include "sched/swapio.h"
#include "sched/swapio_impl.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

static bool params_on_nvme(const struct zn_swapio *sw)
{
	return sw->c.plan.params == ZN_TIER_NVME;
}

uint64_t zn_swapio_param_shard_bytes(const struct zn_swapio *sw, int l)
{
	return sw->c.L[l].sh.shard_numel * sw->c.plan.param_bytes;
}

static void name_of(const void *ctx, int id, char *out, size_t size)
{
	const struct zn_swapio *sw = ctx;

	snprintf(out, size, "nvme: fetching the parameters of layer %d (rank %d)", id,
		 sw->c.rt->rank);
}

int zn_swapio_fetch_open(struct zn_swapio *sw)
{
	int F = sw->c.plan.fetch_buffers, H = sw->c.plan.hot_layers;
	uint64_t pb = sw->c.plan.param_bytes;
	struct zn_home_config c;

	if (!params_on_nvme(sw))
		return 0;
	if (H < 0)
		H = 0;
	sw->fetch_src = zn_size_calloc((uint64_t)F + 1, sizeof(*sw->fetch_src),
				       "the parameter fetch buffers");
	sw->shard_bytes = zn_size_calloc((uint64_t)sw->c.n, sizeof(*sw->shard_bytes),
					 "the parameter shard sizes");
	sw->fetch_bytes = zn_size_calloc((uint64_t)F + (uint64_t)H + 1, sizeof(*sw->fetch_bytes),
					 "the parameter fetch buffers");
	if (!sw->fetch_src || !sw->shard_bytes || !sw->fetch_bytes)
		return -ENOMEM;
	for (int l = 0; l < sw->c.n; l++)
		sw->shard_bytes[l] = zn_swapio_param_shard_bytes(sw, l);
	for (int i = 0; i < F; i++) {
		sw->fetch_src[i] = i;
		sw->fetch_bytes[i] = i < F - 1 ? sw->c.plan.fetch_ring_numel * pb :
				     sw->shard_bytes[0];
	}
	for (int l = 1; l <= H; l++)
		sw->fetch_bytes[F - 1 + l] = sw->shard_bytes[l];
	c = (struct zn_home_config){
		.tier = ZN_TIER_NVME, .count = sw->c.n, .buf_n = F + H,
		.item_size = sw->shard_bytes, .buf_bytes = sw->fetch_bytes,
		.dev = sw->c.rt->dev, .arena = sw->c.arena, .rank = sw->c.rt->rank,
		.kind = ZN_SWAP_PARAM, .store = sw->swap_param, .engine = sw->aio,
		.what = "param", .name = name_of, .ctx = sw,
	};
	return zn_home_open(&sw->fetch, &c);
}

void zn_swapio_fetch_close(struct zn_swapio *sw)
{
	zn_home_close(&sw->fetch);
	free(sw->fetch_src);
	free(sw->shard_bytes);
	free(sw->fetch_bytes);
	sw->fetch_src = NULL;
	sw->shard_bytes = sw->fetch_bytes = NULL;
}

void *zn_swapio_fetch_scratch(struct zn_swapio *sw, int l)
{
	return zn_home_buf(&sw->fetch, l == 0 ? sw->c.plan.fetch_buffers - 1 : 0)->h;
}

/* the home's buffer holding hot layer l's current shard, or NULL (l not hot) */
static struct zn_home_buf *hot_of(struct zn_swapio *sw, int l)
{
	if (!params_on_nvme(sw) || !sw->c.plan.gathers || !sw->fetch.buf ||
	    l > sw->c.plan.hot_layers)
		return NULL;
	return zn_home_buf(&sw->fetch, sw->c.plan.fetch_buffers - 1 + l);
}

/* b's copy up (if any) done, its wait counted as the runtime's */
static int settle_copy(struct zn_swapio *sw, struct zn_home_buf *b)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_home_settle(&sw->fetch, b);

	sw->c.rt->wait_ms += zn_runtime_now_ms() - t0;
	return rc;
}

/* b's read waited for (counted as the runtime's unless quiet) and traced */
static int wait_read(struct zn_swapio *sw, struct zn_home_buf *b, bool counted)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_home_wait(&sw->fetch, b);

	if (counted)
		sw->c.rt->wait_ms += zn_runtime_now_ms() - t0;
	if (!rc && zn_tracer_on(sw->c.tr))
		zn_swapio_trace_reqs(sw, ZN_TRACE_NVME_READ, "read param", b->id, b->req, b->nreq,
				     b->t0);
	return rc;
}

int zn_swapio_hot_put(struct zn_swapio *sw, int l, uint64_t off, const void *src,
		      uint64_t bytes)
{
	struct zn_home_buf *b = hot_of(sw, l);
	int rc;

	if (!b)
		return 0;
	rc = settle_copy(sw, b);
	if (!rc && (char *)b->h + off != src)
		memcpy((char *)b->h + off, src, bytes);
	b->id = l;
	return rc;
}

int zn_swapio_fetch_prepare(struct zn_swapio *sw, int i, int l)
{
	struct zn_home_buf *h = hot_of(sw, l);

	sw->fetch_src[i] = h ? (int)(h - sw->fetch.buf) : i;
	if (h)
		return 1;
	/* the buffer's previous shard must be up on the device first */
	return settle_copy(sw, zn_home_buf(&sw->fetch, i));
}

int zn_swapio_fetch_read(struct zn_swapio *sw, int i, int l, int rc)
{
	struct zn_home_buf *b = zn_home_buf(&sw->fetch, i);

	if (!rc)
		rc = zn_home_read_ahead(&sw->fetch, b, l);
	b->id = l;
	return rc;
}

int zn_swapio_fetch_end(struct zn_swapio *sw, int i, void **shard_h)
{
	struct zn_home_buf *b = zn_home_buf(&sw->fetch, i);
	int rc = 0;

	if (sw->fetch_src[i] != i) {
		*shard_h = zn_home_buf(&sw->fetch, sw->fetch_src[i])->h;
		return 0;
	}
	if (b->state == ZN_HOME_READING)
		rc = wait_read(sw, b, true);
	*shard_h = b->h;
	return rc;
}

bool zn_swapio_fetch_ready(struct zn_swapio *sw, int i)
{
	return sw->fetch_src[i] != i || zn_home_ready(&sw->fetch, zn_home_buf(&sw->fetch, i));
}

/* the copy up read the buffer fetch_end returned: it is busy until `copied` (b->up) */
int zn_swapio_fetch_copied(struct zn_swapio *sw, int i)
{
	struct zn_home_buf *b = zn_home_buf(&sw->fetch, sw->fetch_src[i]);
	int rc = zn_event_record(b->up, sw->c.rt->copy_in);

	if (!rc)
		zn_home_emptying(&sw->fetch, b);
	return rc;
}

/* A fetch read of layer l's parameter extent still outstanding is waited for before the
 * extent is written: a write must not overlap a read of the same extent, whose checksum
 * it changes (the read would then fail verification). Layer-major with a tied head
 * fetches the last layer once more after its AdamW may have begun (lmajor.h), and a slow
 * shard can put that AdamW's write between the read's submission and its wait. The read
 * holds the shard as it was; that fetch does not use it. Its fetch_end finds it read: the
 * span is this wait's. */
int zn_swapio_fetch_wait_layer(struct zn_swapio *sw, int l)
{
	int rc = 0;

	for (int i = 0; sw->fetch.buf && i < sw->c.plan.fetch_buffers; i++) {
		struct zn_home_buf *b = zn_home_buf(&sw->fetch, i);
		int x;

		if (b->state != ZN_HOME_READING || b->id != l)
			continue;
		x = wait_read(sw, b, true);
		if (!rc)
			rc = x;
	}
	return rc;
}

/* every fetch read still outstanding (the step's end, quiesce) */
int zn_swapio_fetch_wait_all(struct zn_swapio *sw)
{
	int rc = 0;

	for (int i = 0; sw->fetch.buf && i < sw->c.plan.fetch_buffers; i++) {
		struct zn_home_buf *b = zn_home_buf(&sw->fetch, i);
		int x;

		if (b->state != ZN_HOME_READING)
			continue;
		x = wait_read(sw, b, false);
		if (!rc)
			rc = x;
	}
	return rc;
}
