/* Activation checkpoints' homes (recompute.h): which run a layer is in and where checkpoint
 * c lives on the device; on the host or nvme (the store's tiered home, store/home.h),
 * copies down during the forward and nvme writes behind; the copies up one run ahead of
 * each recompute, and the nvme reads two runs ahead, as a user of the store's prefetch ring
 * (store/ring.h), whose sequence is the backward's runs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/acts.h"
#include "sched/runtime.h"

/* ---- runs and checkpoint slots (recompute.h) ---------------------------------------- */

int zn_recompute_run_of(const struct zn_recompute *ck, int l)
{
	return (l - 1) / ck->every;
}

int zn_recompute_run_first(const struct zn_recompute *ck, int r)
{
	return 1 + r * ck->every;
}

int zn_recompute_run_last(const struct zn_recompute *ck, int r)
{
	int l = (r + 1) * ck->every;

	return l > ck->n - 1 ? ck->n - 1 : l;
}

/* the copy-up ring's item of checkpoint c (the backward's runs, R-1 first) */
static int item_of(const struct zn_recompute *ck, int c)
{
	return ck->runs - 1 - c;
}

float *zn_recompute_x(struct zn_recompute *ck, int c)
{
	return ck->home == ZN_TIER_DEVICE ? ck->x_d[c] :
	       ck->x_d[zn_ring_slot(&ck->up, item_of(ck, c))];
}

/* ---- copies down and nvme writes behind (the forward) -------------------------------- */

static struct zn_home_buf *ckbuf(struct zn_recompute *ck, int c)
{
	return zn_home_buf(&ck->st, ck->home == ZN_TIER_HOST ? c : c % ck->buf_n);
}

/* the checkpoint layer l makes in its forward, or -1 */
static int made_by(const struct zn_recompute *ck, int l)
{
	if (l == 0)
		return 0;
	if (l == ck->n - 1 || l != zn_recompute_run_last(ck, zn_recompute_run_of(ck, l)))
		return -1;
	return zn_recompute_run_of(ck, l) + 1;
}

int zn_recompute_fwd_before(struct zn_recompute *ck, int l)
{
	int c;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	/* the slot's previous checkpoint must be down before the layer overwrites it */
	c = made_by(ck, l);
	if (c < 2)
		return 0;
	return zn_stream_wait_event(ck->rt->compute, ckbuf(ck, c - 2)->down);
}

int zn_recompute_fwd_after(struct zn_recompute *ck, int l)
{
	struct zn_home_buf *b;
	int c, rc;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	c = made_by(ck, l);
	if (c < 0 || c >= ck->runs - 1)
		return 0;
	b = ckbuf(ck, c);
	rc = zn_home_settle(&ck->st, b);
	if (!rc)
		rc = zn_event_record(ck->made, ck->rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(ck->rt->copy_out, ck->made);
	if (!rc)
		rc = zn_memcpy_async(ck->rt->copy_out, b->h, zn_recompute_x(ck, c), ck->x_bytes,
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(b->down, ck->rt->copy_out);
	if (rc)
		return rc;
	zn_home_filled(b, c);
	/* nvme: checkpoint c - 2 is written behind (its copy down is done by now or soon) */
	if (ck->home == ZN_TIER_NVME && c >= 2) {
		struct zn_home_buf *p = ckbuf(ck, c - 2);

		if (p->id == c - 2 && p->state == ZN_HOME_DOWN)
			rc = zn_home_put(&ck->st, p);
	}
	return rc;
}

/* The forward is done: both slots free for the backward's copies up (the forward's layers
 * read and wrote them on the compute stream), the last copies down written behind, and the
 * copy-up ring's sequence begins: the backward's R runs. */
int zn_recompute_fwd_end(struct zn_recompute *ck)
{
	int rc = 0;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	for (int i = 0; !rc && i < 2; i++)
		rc = zn_event_record(zn_ring_free_event(&ck->up, i), ck->rt->compute);
	for (int i = 0; !rc && ck->home == ZN_TIER_NVME && i < ck->buf_n; i++)
		if (zn_home_buf(&ck->st, i)->state == ZN_HOME_DOWN)
			rc = zn_home_put(&ck->st, zn_home_buf(&ck->st, i));
	return rc ? rc : zn_ring_begin(&ck->up, ck->runs);
}

/* ---- copies up: the prefetch ring's ops (store/ring.h) -------------------------------- */

static int up_layer(void *ctx, int item)
{
	const struct zn_recompute *ck = ctx;

	return zn_recompute_run_first(ck, item_of(ck, item));
}

/* nvme: checkpoint c's read into its staging buffer starts (not again if under way; host:
 * nothing); checkpoint R-1 never left the device */
static int up_stage(void *ctx, int item, int layer, int slot)
{
	struct zn_recompute *ck = ctx;
	int c = item_of(ck, item);

	(void)layer;
	(void)slot;
	return c == ck->runs - 1 ? 0 : zn_home_read_ahead(&ck->st, ckbuf(ck, c), c);
}

/* Checkpoint c up into its slot on copy_in once its nvme read is in (the host waits for
 * it), the slot's last reader is done and its copy down too; the compute waits for the
 * ring's ready event, the home's buffer is busy until b->up. Checkpoint R-1 was made in its
 * slot by the forward on the compute stream: ready is recorded there. */
static int up_fill(void *ctx, int item, int layer, int slot)
{
	struct zn_recompute *ck = ctx;
	struct zn_stream *in = ck->rt->copy_in;
	int c = item_of(ck, item), rc;
	struct zn_home_buf *b;

	(void)layer;
	if (c == ck->runs - 1)
		return zn_event_record(zn_ring_ready_event(&ck->up, slot), ck->rt->compute);
	b = ckbuf(ck, c);
	rc = zn_home_wait(&ck->st, b);
	if (!rc)
		rc = zn_stream_wait_event(in, zn_ring_free_event(&ck->up, slot));
	if (!rc)
		rc = zn_stream_wait_event(in, b->down);
	if (!rc)
		rc = zn_memcpy_async(in, ck->x_d[slot], b->h, ck->x_bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(b->up, in);
	if (!rc)
		rc = zn_event_record(zn_ring_ready_event(&ck->up, slot), in);
	if (!rc)
		zn_home_emptying(&ck->st, b);
	return rc;
}

int zn_recompute_up_create(struct zn_recompute *ck)
{
	static const struct zn_ring_ops ops = {
		.layer = up_layer, .fill = up_fill, .stage = up_stage,
	};
	/* Two slots, each run's start fills the next run's: in order, whether its read is in
	 * or not (the fill waits for it), so the copy runs during the run; the reads go one
	 * run further ahead, into the staging buffers (ZN_RECOMPUTE_STAGES of them). */
	struct zn_ring_config c = {
		.dev = ck->rt->dev, .compute = ck->rt->compute, .slots = 2, .depth = 1,
		.in_order = true, .stage_ahead = 1, .ops = &ops, .ctx = ck,
	};

	return zn_ring_create(&ck->up, &c);
}

/* backward use k ends a run: the backward of its first layer */
static bool run_ends(const struct zn_recompute *ck, int k)
{
	struct zn_use u = ck->use[k];

	return u.bwd && u.layer == zn_recompute_run_first(ck, zn_recompute_run_of(ck, u.layer));
}

/* the copy-up ring's item of use k's run */
static int use_item(const struct zn_recompute *ck, int k)
{
	return item_of(ck, zn_recompute_run_of(ck, ck->use[k].layer));
}

int zn_recompute_use_before(struct zn_recompute *ck, int k)
{
	int slot;

	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < ck->n - 1)
		return 0;
	/* a run starts (the backward's first use, or the one after a run's end): the compute
	 * waits for its checkpoint, brought up one run ago; the next run's comes up now */
	if (k > ck->n - 1 && !run_ends(ck, k - 1))
		return 0;
	return zn_ring_acquire(&ck->up, use_item(ck, k), &slot);
}

int zn_recompute_use_after(struct zn_recompute *ck, int k)
{
	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < ck->n - 1 || !run_ends(ck, k))
		return 0;
	/* the run's last reader of its checkpoint is done: the slot's next copy up waits */
	return zn_ring_release(&ck->up, use_item(ck, k));
}

int zn_recompute_quiesce(struct zn_recompute *ck)
{
	return zn_home_quiesce(&ck->st);
}
