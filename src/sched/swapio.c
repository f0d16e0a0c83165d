/* The engine's nvme tier: optimizer state (offload_optimizer nvme) and parameter shards
 * (offload_param nvme) homed in swap-store extents, moved through pinned staging views of
 * the host arena, which is registered with the aio engine as fixed buffers.
 *
 * Extents (per layer, this rank's shard): master, m, v in the optimizer's store (the master
 * is the parameter extent when fp32 parameters are on nvme too; m and v as
 * zinc.optimizer_states stores them, each rounded to 4 KiB), the parameter shard in the
 * parameters' store. Each store has its own paths (offload_*.nvme_path) and reserves its
 * files at create, so a full disk stops the run before training.
 *
 * Optimizer step: AdamW visits layers n-1 .. 0, each layer's shard in chunks of
 * plan.swap_chunk_numel elements (plan.h: the staging holds no more than the state), and
 * position p (the chunks in that order: sw.pos_first, sw.pos_layer) uses staging buffer
 * p mod K (K = plan.swap_buffers >= 2). Position p's read is issued once its buffer's
 * previous write (position p-K) is done: with pipeline_read, as far ahead as K-1 positions
 * without blocking (zn_swapio_opt_begin at the step's start issues positions 0 .. K-1 whose
 * buffers the previous step's write-behind has freed; every acquisition of a layer's
 * parameters (prefetch.c) tries again, and each acquire and release), else only when acquired. These reads are background work in the
 * I/O engine's queue (ZN_AIO_PRIO_BACKGROUND): they fill the read stream's gaps during the
 * forward and backward, and a parameter read that the compute waits for overtakes them;
 * the read AdamW waits for is promoted to normal. After AdamW the state is written back
 * (and the new parameter shard, parameters on nvme): behind, with pipeline_write, waited
 * for before the buffer is reused, before a fetch reads the same layer's extent, and
 * before anything else reads the extents (zn_swapio_quiesce: checkpoints, read-back,
 * eval's end, zn_engine_flush, destroy), so it runs on into the next step's forward;
 * else at once.
 *
 * Parameter fetch (prefetch.c): the shard of the layer going into working slot i is read into
 * fetch buffer i (after that buffer's previous copy up has completed), then copied up as a
 * host shard would be. The reads of one prefetch batch are all submitted before the first
 * is waited for.
 *
 * Hot layers (plan.h: layer 0 and 1 .. H, the forward's first fetches at the step's and
 * each micro-batch's start): their current shard stays in pinned memory (layer 0's in its
 * own fetch buffer, the others in sw.hot), written there when the extent is (the initial
 * state; AdamW's release, the same bytes it writes), so their fetches copy it up at once
 * instead of waiting for the previous step's write-behind and a read. The extent stays
 * the home (checkpoints, AdamW's aliased master read it).
 *
 * Errors: the aio engine logs the failed transfer with its file and offset; here one more
 * line says which layer and state; the step returns the error.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/size.h"
#include "sched/engine_impl.h"
#include "sched/swapio_impl.h"

bool zn_swapio_optim(const struct zn_engine *e)
{
	return e->plan.pl.optim == ZN_TIER_NVME;
}

bool zn_swapio_params(const struct zn_engine *e)
{
	return e->plan.pl.params == ZN_TIER_NVME;
}

struct zn_aio *zn_engine_aio(struct zn_engine *e)
{
	return e->sw.aio;
}

int zn_engine_set_nvme_cap(struct zn_engine *e, uint64_t bytes_per_s)
{
	if (!e->sw.aio)
		return -EINVAL;
	zn_aio_set_bandwidth_cap(e->sw.aio, bytes_per_s);
	return 0;
}

struct zn_swap_key zn_swapio_key(const struct zn_engine *e, int kind, int l)
{
	return (struct zn_swap_key){ .kind = kind, .layer = l, .rank = e->rt.rank };
}

uint64_t zn_swapio_param_shard_bytes(const struct zn_engine *e, int l)
{
	return e->L[l].sh.shard_numel * e->plan.param_bytes;
}

int zn_swapio_chunks(const struct zn_engine *e, int l)
{
	return zn_plan_swap_chunks(&e->plan, e->L[l].sh.shard_numel);
}

void zn_swapio_chunk(const struct zn_engine *e, int l, int c, uint64_t *off, uint64_t *len)
{
	uint64_t n = e->L[l].sh.shard_numel, cn = e->plan.swap_chunk_numel;

	*off = 0;
	*len = n;
	if (zn_swapio_chunks(e, l) == 1)
		return;
	*off = (uint64_t)c * cn;
	*len = n - *off < cn ? n - *off : cn;
}

/* the pinned buffer holding hot layer l's current shard, or NULL (l not hot) */
static struct zn_fbuf *hot_of(struct zn_engine *e, int l)
{
	if (!zn_swapio_params(e) || !e->plan.gathers || !e->sw.fbuf || l > e->plan.hot_layers)
		return NULL;
	return l == 0 ? &e->sw.fbuf[e->plan.fetch_buffers - 1] : &e->sw.hot[l - 1];
}

/* hot layer l's shard at byte off := src (bytes), once no copy up reads the buffer */
int zn_swapio_hot_put(struct zn_engine *e, int l, uint64_t off, const void *src,
		      uint64_t bytes)
{
	struct zn_fbuf *h = hot_of(e, l);
	int rc = 0;

	if (!h)
		return 0;
	if (h->copy_pending)
		rc = zn_runtime_wait(&e->rt, h->copied);
	h->copy_pending = false;
	if (!rc && (char *)h->h + off != src)
		memcpy((char *)h->h + off, src, bytes);
	h->layer = l;
	return rc;
}

uint64_t zn_swapio_moment_bytes(const struct zn_engine *e, int l)
{
	if (e->plan.states == ZN_STATES_FP32)
		return 0;
	return zn_plan_host_alloc_bytes(zn_plan_moment_bytes(e->plan.states,
							     e->L[l].sh.shard_numel));
}

int zn_swapio_opt_parts(const struct zn_engine *e, int l, const struct zn_sbuf *sb,
			struct zn_swapio_part p[3])
{
	bool alias = e->plan.master_aliases_params;
	uint64_t mb = zn_swapio_moment_bytes(e, l);

	p[0] = (struct zn_swapio_part){ alias ? e->sw.swap_param : e->sw.swap_opt,
					zn_swapio_key(e, alias ? ZN_SWAP_PARAM : ZN_SWAP_MASTER, l),
					sb->master_h, 4, 0 };
	p[1] = (struct zn_swapio_part){ e->sw.swap_opt, zn_swapio_key(e, ZN_SWAP_EXP_AVG, l),
					sb->m_h, 4, mb };
	p[2] = (struct zn_swapio_part){ e->sw.swap_opt, zn_swapio_key(e, ZN_SWAP_EXP_AVG_SQ, l),
					sb->v_h, 4, mb };
	if (e->plan.states != ZN_STATES_FP32)
		p[1].elem = p[2].elem = 0; /* stored whole (one chunk: plan.c) */
	return 3;
}

int zn_swapio_wait_reqs(struct zn_engine *e, struct zn_swap_req *r, int *n, const char *what,
			int l)
{
	double t0 = zn_runtime_now_ms();
	int rc = 0;

	for (int i = 0; i < *n; i++) {
		int x = zn_swap_wait(&r[i]);

		if (x && !rc)
			rc = x;
	}
	e->rt.wait_ms += zn_runtime_now_ms() - t0;
	if (rc && l >= 0)
		zn_error("nvme: %s layer %d (rank %d) failed: %s", what, l, e->rt.rank,
			 zn_strerror(rc));
	else if (rc)
		zn_error("nvme: %s (rank %d) failed: %s", what, e->rt.rank, zn_strerror(rc));
	*n = 0;
	return rc;
}

/* --trace: finished requests r[0 .. n-1]: their bytes, and when the last completed */
static uint64_t reqs_end(struct zn_swap_req *r, int n, uint64_t *bytes)
{
	uint64_t t1 = 0;

	*bytes = 0;
	for (int i = 0; i < n; i++) {
		uint64_t d = zn_swap_done_ns(&r[i]);

		*bytes += r[i].bytes;
		if (d > t1)
			t1 = d;
	}
	return t1 ? t1 : zn_trace_now_ns();
}

/* --trace: requests r[0 .. n-1], finished, as one span from t0 to the last completion */
static void trace_reqs(struct zn_engine *e, int track, const char *what, int l,
		       struct zn_swap_req *r, int n, uint64_t t0)
{
	uint64_t bytes, t1 = reqs_end(r, n, &bytes);

	if (n)
		zn_tracer_add_host(&e->tr, track, 0, what, l, t0, t1, bytes);
}

/* trace_reqs of writes, in the step that issued them */
static void trace_write(struct zn_engine *e, struct zn_sbuf *sb, const char *what,
			struct zn_swap_req *r, int n)
{
	uint64_t bytes, t1 = reqs_end(r, n, &bytes);

	if (n)
		zn_tracer_add_step(&e->tr, sb->wr_step, ZN_TRACE_NVME_WRITE, what, sb->layer,
				   sb->wr_t0, t1, bytes);
}

/* --trace: a staging buffer's n finished writes: the optimizer state's, then the new
 * parameter shard's, in the trace of the step that issued them (write-behind is waited for
 * in the next step, or at the end) */
static void trace_writes(struct zn_engine *e, struct zn_sbuf *sb, int n)
{
	int k = zn_swapio_optim(e) ? 3 : 0;

	if (!sb->wr_traced || !zn_tracer_attached(&e->tr))
		return;
	if (k > n)
		k = n;
	trace_write(e, sb, "write optim", sb->wr, k);
	trace_write(e, sb, "write param", sb->wr + k, n - k);
	sb->wr_traced = false;
}

/* waits for a staging buffer's writes (traced) */
static int wait_writes(struct zn_engine *e, struct zn_sbuf *sb, int l)
{
	int n = sb->wr_n, rc = zn_swapio_wait_reqs(e, sb->wr, &sb->wr_n, "writing back the state of", l);

	if (!rc && n)
		trace_writes(e, sb, n);
	return rc;
}

static struct zn_sbuf *sbuf_of(struct zn_engine *e, int pos)
{
	return &e->sw.sbuf[pos % e->plan.swap_buffers];
}

/* layer l's write-behind, in whichever staging buffers still have a chunk of it in flight
 * (a position's buffer is reused only after its writes are waited for) */
static int wait_layer_writes(struct zn_engine *e, int l)
{
	int rc = 0;

	for (int i = 0; !rc && e->sw.sbuf && i < e->plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &e->sw.sbuf[i];

		if (sb->layer == l && sb->wr_n)
			rc = wait_writes(e, sb, l);
	}
	return rc;
}

/* waits for a staging buffer's reads (traced), promoted first: someone waits for them */
static int wait_reads(struct zn_engine *e, struct zn_sbuf *sb, int l)
{
	for (int i = 0; i < sb->rd_n; i++)
		zn_swap_promote(&sb->rd[i]);
	int n = sb->rd_n, rc = zn_swapio_wait_reqs(e, sb->rd, &sb->rd_n, "reading optimizer state of", l);

	if (!rc && zn_tracer_on(&e->tr))
		trace_reqs(e, ZN_TRACE_NVME_READ, "read optim", sb->layer, sb->rd, n, sb->rd_t0);
	return rc;
}

static bool reqs_busy(struct zn_swap_req *r, int n)
{
	for (int i = 0; i < n; i++)
		if (zn_swap_poll(&r[i]) == -EINPROGRESS)
			return true;
	return false;
}

/* ---- create and destroy ------------------------------------------------------------------ */

static int make_store(struct zn_engine *e, struct zn_swap **out, const char *what,
		      const struct zn_offload_config *off, const struct zn_swap_extent *ext,
		      size_t count)
{
	static atomic_int seq;
	char run_id[ZN_RUN_ID_MAX + 40];
	struct zn_swap_config sc = { .rank = e->rt.rank, .extents = ext, .extent_count = count,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };

	/* zinc.run_id (default p<pid>): runs sharing a path keep apart */
	if (e->cfg.runtime.run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-e%d-%s", e->cfg.runtime.run_id,
			 atomic_fetch_add(&seq, 1), what);
	else
		snprintf(run_id, sizeof(run_id), "p%ld-e%d-%s", (long)getpid(),
			 atomic_fetch_add(&seq, 1), what);
	sc.run_id = run_id;
	zn_swap_config_set_paths(&sc, off);
	return zn_swap_create(out, e->sw.aio, &sc);
}

/* A layer moved in chunks is checksummed per chunk (elem: bytes per element), so every
 * chunk read is verified; a layer of one chunk as one block. */
static uint64_t crc_block(const struct zn_engine *e, int l, uint64_t elem)
{
	return zn_swapio_chunks(e, l) > 1 ? e->plan.swap_chunk_numel * elem : 0;
}

static int make_stores(struct zn_engine *e)
{
	struct zn_swap_extent *ext = calloc((size_t)(3 * e->n), sizeof(*ext));
	size_t k = 0;
	int rc = 0;

	if (!ext)
		return -ENOMEM;
	if (zn_swapio_optim(e)) {
		for (int l = 0; l < e->n; l++) {
			uint64_t b = e->L[l].sh.shard_numel * 4, cb = crc_block(e, l, 4);
			uint64_t mb = e->plan.states == ZN_STATES_FP32 ? b : zn_swapio_moment_bytes(e, l);

			if (!e->plan.master_aliases_params)
				ext[k++] = (struct zn_swap_extent){ zn_swapio_key(e, ZN_SWAP_MASTER, l),
								    b, cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(e, ZN_SWAP_EXP_AVG, l), mb,
							    cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(e, ZN_SWAP_EXP_AVG_SQ, l), mb,
							    cb };
		}
		rc = make_store(e, &e->sw.swap_opt, "optim", &e->cfg.zero.offload_optimizer, ext, k);
	}
	if (!rc && zn_swapio_params(e)) {
		for (int l = 0; l < e->n; l++)
			ext[l] = (struct zn_swap_extent){ zn_swapio_key(e, ZN_SWAP_PARAM, l),
							  zn_swapio_param_shard_bytes(e, l),
							  crc_block(e, l, e->plan.param_bytes) };
		rc = make_store(e, &e->sw.swap_param, "param", &e->cfg.zero.offload_param, ext,
				(size_t)e->n);
	}
	free(ext);
	return rc;
}

/* AdamW's positions: layer n-1's chunks first (sw.pos_first, sw.pos_layer). */
static int make_positions(struct zn_engine *e)
{
	int p = 0;

	e->sw.pos_first = calloc((size_t)e->n + 1, sizeof(*e->sw.pos_first));
	if (!e->sw.pos_first)
		return -ENOMEM;
	for (int l = e->n - 1; l >= 0; l--) {
		e->sw.pos_first[l] = p;
		p += zn_swapio_chunks(e, l);
	}
	e->sw.pos_first[e->n] = p; /* unused: the end */
	e->sw.positions = p;
	e->sw.pos_layer = calloc((size_t)p, sizeof(*e->sw.pos_layer));
	if (!e->sw.pos_layer)
		return -ENOMEM;
	for (int l = 0; l < e->n; l++)
		for (int c = 0; c < zn_swapio_chunks(e, l); c++)
			e->sw.pos_layer[e->sw.pos_first[l] + c] = l;
	zn_debug("nvme: %d staging positions for %d layers, chunks of %llu elements", p, e->n,
		 (unsigned long long)e->plan.swap_chunk_numel);
	return 0;
}

static int make_staging(struct zn_engine *e)
{
	uint64_t n = e->plan.swap_chunk_numel, pb = e->plan.param_bytes;
	int rc = make_positions(e);

	if (rc)
		return rc;

	e->sw.sbuf = zn_size_calloc((uint64_t)e->plan.swap_buffers, sizeof(*e->sw.sbuf),
				    "the optimizer staging buffers");
	e->sw.fbuf = zn_size_calloc((uint64_t)e->plan.fetch_buffers + 1, sizeof(*e->sw.fbuf),
				    "the parameter fetch buffers");
	if (!e->sw.sbuf || !e->sw.fbuf)
		return -ENOMEM;
	for (int i = 0; !rc && i < e->plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &e->sw.sbuf[i];

		if (zn_swapio_optim(e)) {
			rc = zn_tiers_halloc(e, &sb->master_h, n * 4);
			if (!rc)
				rc = zn_tiers_halloc(e, &sb->m_h, e->plan.swap_moment_bytes);
			if (!rc)
				rc = zn_tiers_halloc(e, &sb->v_h, e->plan.swap_moment_bytes);
		}
		if (!rc && zn_swapio_params(e) && !(zn_swapio_optim(e) &&
						    e->plan.master_aliases_params))
			rc = zn_tiers_halloc(e, &sb->param_h, n * pb);
	}
	/* the ring's, then layer 0's (plan.h) */
	for (int i = 0; !rc && i < e->plan.fetch_buffers; i++) {
		uint64_t fn = i < e->plan.fetch_buffers - 1 ? e->plan.fetch_ring_numel :
			      e->L[0].sh.shard_numel;

		rc = zn_tiers_halloc(e, &e->sw.fbuf[i].h, fn * pb);
		if (!rc)
			rc = zn_event_create(e->rt.dev, &e->sw.fbuf[i].copied);
	}
	if (!rc && zn_swapio_params(e) && e->plan.hot_layers > 0) {
		e->sw.hot = calloc((size_t)e->plan.hot_layers, sizeof(*e->sw.hot));
		if (!e->sw.hot)
			return -ENOMEM;
	}
	for (int l = 1; !rc && zn_swapio_params(e) && l <= e->plan.hot_layers; l++) {
		struct zn_fbuf *h = &e->sw.hot[l - 1];

		h->layer = l;
		rc = zn_tiers_halloc(e, &h->h, zn_swapio_param_shard_bytes(e, l));
		if (!rc)
			rc = zn_event_create(e->rt.dev, &h->copied);
	}
	return rc;
}

int zn_swapio_create(struct zn_engine *e)
{
	int rc;

	if (!zn_swapio_optim(e) && !zn_swapio_params(e))
		return 0;
	rc = zn_aio_create(&e->sw.aio, &e->cfg.aio);
	if (rc)
		return rc;
	/* the whole arena: staging views and every other pinned buffer are fixed buffers */
	rc = zn_aio_register_buffer(e->sw.aio, zn_arena_base(e->arena),
				    zn_arena_size(e->arena) / ZN_AIO_ALIGN * ZN_AIO_ALIGN);
	if (rc)
		return rc;
	e->sw.arena_registered = true;
	rc = make_stores(e);
	if (!rc)
		rc = make_staging(e);
	if (!rc)
		zn_debug("nvme: %s%s%s through %s", zn_swapio_optim(e) ? "optimizer state" : "",
			zn_swapio_optim(e) && zn_swapio_params(e) ? " and " : "",
			zn_swapio_params(e) ? "parameter shards" : "", zn_aio_describe(e->sw.aio));
	return rc;
}

void zn_swapio_destroy(struct zn_engine *e)
{
	zn_swapio_quiesce(e);
	for (int i = 0; e->sw.fbuf && i < e->plan.fetch_buffers; i++)
		zn_event_destroy(e->sw.fbuf[i].copied);
	for (int i = 0; e->sw.hot && i < e->plan.hot_layers; i++)
		zn_event_destroy(e->sw.hot[i].copied);
	free(e->sw.fbuf);
	free(e->sw.hot);
	free(e->sw.sbuf);
	free(e->sw.pos_first);
	free(e->sw.pos_layer);
	e->sw.fbuf = NULL;
	e->sw.hot = NULL;
	e->sw.sbuf = NULL;
	e->sw.pos_first = e->sw.pos_layer = NULL;
	zn_swap_destroy(e->sw.swap_opt);
	zn_swap_destroy(e->sw.swap_param);
	e->sw.swap_opt = e->sw.swap_param = NULL;
	if (e->sw.arena_registered)
		zn_aio_unregister_buffer(e->sw.aio, zn_arena_base(e->arena));
	e->sw.arena_registered = false;
	zn_aio_destroy(e->sw.aio);
	e->sw.aio = NULL;
}

static int wait_all(struct zn_engine *e, bool writes)
{
	int rc = 0, x;

	for (int i = 0; e->sw.sbuf && i < e->plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &e->sw.sbuf[i];

		x = wait_reads(e, sb, sb->layer);
		if (!rc)
			rc = x;
		x = writes ? wait_writes(e, sb, sb->layer) : 0;
		if (!rc)
			rc = x;
	}
	for (int i = 0; e->sw.fbuf && i < e->plan.fetch_buffers; i++) {
		if (!e->sw.fbuf[i].reading)
			continue;
		x = zn_swap_wait(&e->sw.fbuf[i].req);
		e->sw.fbuf[i].reading = false;
		if (!x && zn_tracer_on(&e->tr))
			trace_reqs(e, ZN_TRACE_NVME_READ, "read param", e->sw.fbuf[i].layer,
				   &e->sw.fbuf[i].req, 1, e->sw.fbuf[i].t0);
		if (!rc)
			rc = x;
	}
	return rc;
}

int zn_swapio_quiesce(struct zn_engine *e)
{
	e->sw.in_step = false;
	return wait_all(e, true);
}

int zn_swapio_step_end(struct zn_engine *e)
{
	e->sw.in_step = false;
	return wait_all(e, !e->cfg.zero.offload_optimizer.pipeline_write);
}

/* ---- parameter fetch --------------------------------------------------------------------- */

static int issue_reads(struct zn_engine *e, int upto, bool block);

int zn_swapio_step_begin(struct zn_engine *e)
{
	e->sw.opt_next_read = 0;
	e->sw.in_step = true;
	return zn_swapio_opt_begin(e);
}

int zn_swapio_fetch_begin(struct zn_engine *e, int i, int l)
{
	struct zn_fbuf *f = &e->sw.fbuf[i], *h = hot_of(e, l);
	int rc = 0;

	f->src = h ? h : f;
	if (h) /* its pinned shard is current: nothing to read */
		return 0;
	if (f->copy_pending) {
		/* the buffer's previous shard must be up on the device first */
		rc = zn_runtime_wait(&e->rt, f->copied);
		f->copy_pending = false;
	}
	/* the previous step's write-behind of this extent lands first */
	if (!rc)
		rc = wait_layer_writes(e, l);
	if (zn_tracer_on(&e->tr))
		f->t0 = zn_trace_now_ns();
	if (!rc)
		rc = zn_swap_read(e->sw.swap_param, zn_swapio_key(e, ZN_SWAP_PARAM, l), 0,
				  zn_swapio_param_shard_bytes(e, l), f->h, &f->req);
	if (!rc)
		f->reading = true;
	f->layer = l;
	return rc;
}

int zn_swapio_fetch_end(struct zn_engine *e, int i, void **shard_h)
{
	struct zn_fbuf *f = &e->sw.fbuf[i];
	int n = 1, rc = 0;

	if (f->src && f->src != f) {
		*shard_h = f->src->h;
		return 0;
	}
	if (f->reading) {
		rc = zn_swapio_wait_reqs(e, &f->req, &n, "fetching the parameters of", f->layer);
		f->reading = false;
		if (!rc && zn_tracer_on(&e->tr))
			trace_reqs(e, ZN_TRACE_NVME_READ, "read param", f->layer, &f->req, 1, f->t0);
	}
	*shard_h = f->h;
	return rc;
}

bool zn_swapio_fetch_ready(struct zn_engine *e, int i)
{
	struct zn_fbuf *f = &e->sw.fbuf[i];

	return (f->src && f->src != f) || !f->reading || zn_swap_poll(&f->req) != -EINPROGRESS;
}

/* the copy up read the buffer fetch_end returned: it is busy until `copied` */
int zn_swapio_fetch_copied(struct zn_engine *e, int i)
{
	struct zn_fbuf *f = e->sw.fbuf[i].src ? e->sw.fbuf[i].src : &e->sw.fbuf[i];
	int rc = zn_event_record(f->copied, e->rt.copy_in);

	f->copy_pending = !rc;
	return rc;
}

/* ---- optimizer step ---------------------------------------------------------------------- */

static int submit_reads(struct zn_engine *e, struct zn_sbuf *sb, int l, int c)
{
	struct zn_swapio_part p[3];
	uint64_t off, len;
	int rc = 0;

	if (!zn_swapio_optim(e))
		return 0;
	zn_swapio_opt_parts(e, l, sb, p);
	zn_swapio_chunk(e, l, c, &off, &len);
	if (zn_tracer_on(&e->tr))
		sb->rd_t0 = zn_trace_now_ns();
	for (int i = 0; !rc && i < 3; i++) {
		rc = zn_swap_read_prio(p[i].store, p[i].key, zn_swapio_part_at(&p[i], off),
				       zn_swapio_part_bytes(&p[i], len), p[i].buf_h,
				       ZN_AIO_PRIO_BACKGROUND, &sb->rd[sb->rd_n]);
		if (!rc)
			sb->rd_n++;
	}
	return rc;
}

/* Issues the reads of positions up to `upto` in order; without `block` it stops at the
 * first whose buffer is still being written. */
static int issue_reads(struct zn_engine *e, int upto, bool block)
{
	int rc = 0;

	if (upto > e->sw.positions - 1)
		upto = e->sw.positions - 1;
	while (!rc && e->sw.opt_next_read <= upto) {
		int pos = e->sw.opt_next_read;
		struct zn_sbuf *sb = sbuf_of(e, pos);

		if (!block && reqs_busy(sb->wr, sb->wr_n))
			break;
		rc = wait_writes(e, sb, sb->layer);
		sb->layer = e->sw.pos_layer[pos];
		sb->chunk = pos - e->sw.pos_first[sb->layer];
		if (!rc)
			rc = submit_reads(e, sb, sb->layer, sb->chunk);
		e->sw.opt_next_read++;
	}
	return rc;
}

/* the step's start (step.c) and the optimizer's: the first K positions' state, read ahead in
 * the background (a layer's state changes only in its own AdamW, later in the step); a
 * second call issues nothing new */
int zn_swapio_opt_begin(struct zn_engine *e)
{
	if (!e->sw.sbuf)
		return 0;
	if (!e->cfg.zero.offload_optimizer.pipeline_read)
		return 0;
	return issue_reads(e, e->plan.swap_buffers - 1, false);
}

int zn_swapio_opt_poke(struct zn_engine *e)
{
	return e->sw.in_step ? zn_swapio_opt_begin(e) : 0;
}

int zn_swapio_opt_acquire(struct zn_engine *e, int l, int c, struct zn_sbuf **out)
{
	int pos, rc;
	struct zn_sbuf *sb;

	*out = NULL;
	if (!e->sw.sbuf)
		return 0;
	pos = e->sw.pos_first[l] + c;
	sb = sbuf_of(e, pos);
	rc = issue_reads(e, pos, true);
	if (!rc && e->cfg.zero.offload_optimizer.pipeline_read)
		rc = issue_reads(e, pos + e->plan.swap_buffers - 1, false);
	if (!rc)
		rc = wait_reads(e, sb, l);
	if (!rc)
		*out = sb;
	return rc;
}

bool zn_swapio_opt_ready(struct zn_engine *e, int l)
{
	int pos;
	struct zn_sbuf *sb;

	if (!e->sw.sbuf || !zn_swapio_optim(e))
		return true;
	pos = e->sw.pos_first[l];
	if (pos >= e->sw.opt_next_read)
		return false;
	sb = sbuf_of(e, pos);
	return sb->layer == l && sb->chunk == 0 && !reqs_busy(sb->rd, sb->rd_n);
}

/* A fetch read of layer l's parameter extent still outstanding is waited for before the
 * extent is written: a write must not overlap a read of the same extent, whose checksum
 * it changes (the read would then fail verification). Layer-major with a tied head
 * fetches the last layer once more after its AdamW may have begun (lmajor.h), and a slow
 * shard can put that AdamW's write between the read's submission and its wait. The read
 * holds the shard as it was; that fetch does not use it. */
static int wait_layer_reads(struct zn_engine *e, int l)
{
	int rc = 0;

	for (int i = 0; e->sw.fbuf && i < e->plan.fetch_buffers; i++) {
		struct zn_fbuf *f = &e->sw.fbuf[i];
		int n = 1, x;

		if (!f->reading || f->layer != l)
			continue;
		x = zn_swapio_wait_reqs(e, &f->req, &n, "fetching the parameters of", l);
		f->reading = false;
		if (!rc)
			rc = x;
	}
	return rc;
}

int zn_swapio_opt_release(struct zn_engine *e, int l, int c)
{
	struct zn_layer *ly = &e->L[l];
	int pos, rc = 0;
	struct zn_sbuf *sb;
	uint64_t off, n, real, pb = e->plan.param_bytes;

	if (!e->sw.sbuf)
		return 0;
	pos = e->sw.pos_first[l] + c;
	zn_swapio_chunk(e, l, c, &off, &n);
	/* AdamW wrote the chunk's real elements (the shard's first opt_count) */
	real = ly->opt_count > off ? ly->opt_count - off : 0;
	if (real > n)
		real = n;
	if (zn_swapio_params(e))
		rc = wait_layer_reads(e, l);
	if (rc)
		return rc;
	sb = sbuf_of(e, pos);
	sb->layer = l;
	sb->chunk = c;
	sb->wr_traced = zn_tracer_on(&e->tr);
	sb->wr_step = e->step;
	if (zn_tracer_on(&e->tr))
		sb->wr_t0 = zn_trace_now_ns();
	if (zn_swapio_optim(e)) {
		struct zn_swapio_part p[3];

		zn_swapio_opt_parts(e, l, sb, p);
		for (int i = 0; !rc && i < 3; i++) {
			rc = zn_swap_write(p[i].store, p[i].key, zn_swapio_part_at(&p[i], off),
					   zn_swapio_part_bytes(&p[i], n), p[i].buf_h,
					   &sb->wr[sb->wr_n]);
			if (!rc)
				sb->wr_n++;
		}
	}
	if (!rc && sb->param_h) {
		/* the shard's padding stays zero */
		memset((char *)sb->param_h + real * pb, 0, (n - real) * pb);
		rc = zn_swap_write(e->sw.swap_param, zn_swapio_key(e, ZN_SWAP_PARAM, l), off * pb, n * pb,
				   sb->param_h, &sb->wr[sb->wr_n]);
		if (!rc)
			sb->wr_n++;
	}
	/* a hot layer keeps what its parameter extent now gets: the new shard, or the
	 * master it aliases */
	if (!rc && zn_swapio_params(e))
		rc = zn_swapio_hot_put(e, l, off * pb, sb->param_h ? sb->param_h : (void *)sb->master_h,
			     n * pb);
	if (rc)
		return rc;
	if (!e->cfg.zero.offload_optimizer.pipeline_write)
		return wait_writes(e, sb, l);
	if (e->cfg.zero.offload_optimizer.pipeline_read)
		rc = issue_reads(e, pos + e->plan.swap_buffers - 1, false);
	return rc;
}
