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
 * Parameter fetch (prefetch.c; swapio_fetch.c): the shard of the layer going into working
 * slot i is read into fetch buffer i (after that buffer's previous copy up has completed),
 * then copied up as a host shard would be. The fetch buffers are a tiered home
 * (store/home.h) on the parameter store's extents. The reads of one prefetch batch are all
 * submitted before the first is waited for.
 *
 * Hot layers (plan.h: layer 0 and 1 .. H, the forward's first fetches at the step's and
 * each micro-batch's start): their current shard stays in pinned memory (layer 0's in its
 * own fetch buffer, the others in the home's buffers after it), written there when the
 * extent is (the initial state; AdamW's release, the same bytes it writes), so their
 * fetches copy it up at once instead of waiting for the previous step's write-behind and a
 * read. The extent stays the home (checkpoints, AdamW's aliased master read it).
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
#include "sched/swapio.h"

#include "cpu/arena.h"
#include "sched/runtime.h"
#include "sched/swapio_impl.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

struct zn_aio *zn_swapio_aio(const struct zn_swapio *sw)
{
	return sw->aio;
}

void zn_swapio_io_stats(const struct zn_swapio *sw, struct zn_aio_stats *out)
{
	*out = (struct zn_aio_stats){ 0 };
	if (sw->aio)
		zn_aio_get_stats(sw->aio, out);
}

/* (false before zn_swapio_create: a zeroed plan places everything on the device) */
bool zn_swapio_optim(const struct zn_swapio *sw)
{
	return sw->c.plan.optim == ZN_TIER_NVME;
}

bool zn_swapio_params(const struct zn_swapio *sw)
{
	return sw->c.plan.params == ZN_TIER_NVME;
}

/* a view of the pinned arena (0 bytes: nothing), as the tiers allocate theirs */
static int halloc(struct zn_swapio *sw, void *pp, uint64_t bytes)
{
	return bytes ? zn_arena_alloc(sw->c.arena, zn_plan_host_alloc_bytes(bytes), 0,
				      (void **)pp) : 0;
}

struct zn_swap_key zn_swapio_key(const struct zn_swapio *sw, int kind, int l)
{
	return (struct zn_swap_key){ .kind = kind, .layer = l, .rank = sw->c.rt->rank };
}

int zn_swapio_chunks(const struct zn_swapio *sw, int l)
{
	return zn_plan_swap_chunks(sw->c.plan.swap_chunk_numel, sw->c.L[l].sh.shard_numel);
}

void zn_swapio_chunk(const struct zn_swapio *sw, int l, int c, uint64_t *off, uint64_t *len)
{
	uint64_t n = sw->c.L[l].sh.shard_numel, cn = sw->c.plan.swap_chunk_numel;

	*off = 0;
	*len = n;
	if (zn_swapio_chunks(sw, l) == 1)
		return;
	*off = (uint64_t)c * cn;
	*len = n - *off < cn ? n - *off : cn;
}

uint64_t zn_swapio_moment_bytes(const struct zn_swapio *sw, int l)
{
	if (sw->c.plan.states == ZN_STATES_FP32)
		return 0;
	return zn_plan_host_alloc_bytes(zn_plan_moment_bytes(sw->c.plan.states,
							     sw->c.L[l].sh.shard_numel));
}

int zn_swapio_opt_parts(const struct zn_swapio *sw, int l, const struct zn_sbuf *sb,
			struct zn_swapio_part p[3])
{
	bool alias = sw->c.plan.master_aliases_params;
	uint64_t mb = zn_swapio_moment_bytes(sw, l);

	p[0] = (struct zn_swapio_part){ alias ? sw->swap_param : sw->swap_opt,
					zn_swapio_key(sw, alias ? ZN_SWAP_PARAM : ZN_SWAP_MASTER, l),
					sb->master_h, 4, 0 };
	p[1] = (struct zn_swapio_part){ sw->swap_opt, zn_swapio_key(sw, ZN_SWAP_EXP_AVG, l),
					sb->m_h, 4, mb };
	p[2] = (struct zn_swapio_part){ sw->swap_opt, zn_swapio_key(sw, ZN_SWAP_EXP_AVG_SQ, l),
					sb->v_h, 4, mb };
	if (sw->c.plan.states != ZN_STATES_FP32)
		p[1].elem = p[2].elem = 0; /* stored whole (one chunk: plan.c) */
	return 3;
}

int zn_swapio_wait_reqs(struct zn_swapio *sw, struct zn_swap_req *r, int *n, const char *what,
			int l)
{
	double t0 = zn_runtime_now_ms();
	int rc = 0;

	for (int i = 0; i < *n; i++) {
		int x = zn_swap_wait(&r[i]);

		if (x && !rc)
			rc = x;
	}
	sw->c.rt->wait_ms += zn_runtime_now_ms() - t0;
	if (rc && l >= 0)
		zn_error("nvme: %s layer %d (rank %d) failed: %s", what, l, sw->c.rt->rank,
			 zn_strerror(rc));
	else if (rc)
		zn_error("nvme: %s (rank %d) failed: %s", what, sw->c.rt->rank, zn_strerror(rc));
	*n = 0;
	return rc;
}

/* trace_reqs of writes, in the step that issued them */
static void trace_write(struct zn_swapio *sw, struct zn_sbuf *sb, const char *what,
			struct zn_swap_req *r, int n)
{
	uint64_t bytes, t1 = zn_swapio_reqs_end(r, n, &bytes);

	if (n)
		zn_tracer_add_step(sw->c.tr, sb->wr_step, ZN_TRACE_NVME_WRITE, what, sb->layer,
				   sb->wr_t0, t1, bytes);
}

/* --trace: a staging buffer's n finished writes: the optimizer state's, then the new
 * parameter shard's, in the trace of the step that issued them (write-behind is waited for
 * in the next step, or at the end) */
static void trace_writes(struct zn_swapio *sw, struct zn_sbuf *sb, int n)
{
	int k = zn_swapio_optim(sw) ? 3 : 0;

	if (!sb->wr_traced || !zn_tracer_attached(sw->c.tr))
		return;
	if (k > n)
		k = n;
	trace_write(sw, sb, "write optim", sb->wr, k);
	trace_write(sw, sb, "write param", sb->wr + k, n - k);
	sb->wr_traced = false;
}

/* waits for a staging buffer's writes (traced) */
static int wait_writes(struct zn_swapio *sw, struct zn_sbuf *sb, int l)
{
	int n = sb->wr_n, rc = zn_swapio_wait_reqs(sw, sb->wr, &sb->wr_n, "writing back the state of", l);

	if (!rc && n)
		trace_writes(sw, sb, n);
	return rc;
}

static struct zn_sbuf *sbuf_of(struct zn_swapio *sw, int pos)
{
	return &sw->sbuf[pos % sw->c.plan.swap_buffers];
}

/* layer l's write-behind, in whichever staging buffers still have a chunk of it in flight
 * (a position's buffer is reused only after its writes are waited for) */
static int wait_layer_writes(struct zn_swapio *sw, int l)
{
	int rc = 0;

	for (int i = 0; !rc && sw->sbuf && i < sw->c.plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &sw->sbuf[i];

		if (sb->layer == l && sb->wr_n)
			rc = wait_writes(sw, sb, l);
	}
	return rc;
}

/* waits for a staging buffer's reads (traced), promoted first: someone waits for them */
static int wait_reads(struct zn_swapio *sw, struct zn_sbuf *sb, int l)
{
	for (int i = 0; i < sb->rd_n; i++)
		zn_swap_promote(&sb->rd[i]);
	int n = sb->rd_n, rc = zn_swapio_wait_reqs(sw, sb->rd, &sb->rd_n, "reading optimizer state of", l);

	if (!rc && zn_tracer_on(sw->c.tr))
		zn_swapio_trace_reqs(sw, ZN_TRACE_NVME_READ, "read optim", sb->layer, sb->rd, n, sb->rd_t0);
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

static int make_store(struct zn_swapio *sw, struct zn_swap **out, const char *what,
		      const struct zn_offload_config *off, const struct zn_swap_extent *ext,
		      size_t count)
{
	static atomic_int seq;
	char run_id[ZN_RUN_ID_MAX + 40];
	struct zn_swap_config sc = { .rank = sw->c.rt->rank, .extents = ext, .extent_count = count,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };

	/* zinc.run_id (default p<pid>): runs sharing a path keep apart */
	if (sw->c.cfg->runtime.run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-e%d-%s", sw->c.cfg->runtime.run_id,
			 atomic_fetch_add(&seq, 1), what);
	else
		snprintf(run_id, sizeof(run_id), "p%ld-e%d-%s", (long)getpid(),
			 atomic_fetch_add(&seq, 1), what);
	sc.run_id = run_id;
	zn_swap_config_set_paths(&sc, off);
	return zn_swap_create(out, sw->aio, &sc);
}

/* A layer moved in chunks is checksummed per chunk (elem: bytes per element), so every
 * chunk read is verified; a layer of one chunk as one block. */
static uint64_t crc_block(const struct zn_swapio *sw, int l, uint64_t elem)
{
	return zn_swapio_chunks(sw, l) > 1 ? sw->c.plan.swap_chunk_numel * elem : 0;
}

static int make_stores(struct zn_swapio *sw)
{
	struct zn_swap_extent *ext = calloc((size_t)(3 * sw->c.n), sizeof(*ext));
	size_t k = 0;
	int rc = 0;

	if (!ext)
		return -ENOMEM;
	if (zn_swapio_optim(sw)) {
		for (int l = 0; l < sw->c.n; l++) {
			uint64_t b = sw->c.L[l].sh.shard_numel * 4, cb = crc_block(sw, l, 4);
			uint64_t mb = sw->c.plan.states == ZN_STATES_FP32 ? b : zn_swapio_moment_bytes(sw, l);

			if (!sw->c.plan.master_aliases_params)
				ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_MASTER, l),
								    b, cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_EXP_AVG, l), mb,
							    cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_EXP_AVG_SQ, l), mb,
							    cb };
		}
		rc = make_store(sw, &sw->swap_opt, "optim", &sw->c.cfg->zero.offload_optimizer, ext, k);
	}
	if (!rc && zn_swapio_params(sw)) {
		for (int l = 0; l < sw->c.n; l++)
			ext[l] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_PARAM, l),
							  zn_swapio_param_shard_bytes(sw, l),
							  crc_block(sw, l, sw->c.plan.param_bytes) };
		rc = make_store(sw, &sw->swap_param, "param", &sw->c.cfg->zero.offload_param, ext,
				(size_t)sw->c.n);
	}
	free(ext);
	return rc;
}

/* AdamW's positions: layer n-1's chunks first (sw.pos_first, sw.pos_layer). */
static int make_positions(struct zn_swapio *sw)
{
	int p = 0;

	sw->pos_first = calloc((size_t)sw->c.n + 1, sizeof(*sw->pos_first));
	if (!sw->pos_first)
		return -ENOMEM;
	for (int l = sw->c.n - 1; l >= 0; l--) {
		sw->pos_first[l] = p;
		p += zn_swapio_chunks(sw, l);
	}
	sw->pos_first[sw->c.n] = p; /* unused: the end */
	sw->positions = p;
	sw->pos_layer = calloc((size_t)p, sizeof(*sw->pos_layer));
	if (!sw->pos_layer)
		return -ENOMEM;
	for (int l = 0; l < sw->c.n; l++)
		for (int c = 0; c < zn_swapio_chunks(sw, l); c++)
			sw->pos_layer[sw->pos_first[l] + c] = l;
	zn_debug("nvme: %d staging positions for %d layers, chunks of %llu elements", p, sw->c.n,
		 (unsigned long long)sw->c.plan.swap_chunk_numel);
	return 0;
}

static int make_staging(struct zn_swapio *sw)
{
	uint64_t n = sw->c.plan.swap_chunk_numel, pb = sw->c.plan.param_bytes;
	int rc = make_positions(sw);

	if (rc)
		return rc;

	sw->sbuf = zn_size_calloc((uint64_t)sw->c.plan.swap_buffers, sizeof(*sw->sbuf),
				    "the optimizer staging buffers");
	if (!sw->sbuf)
		return -ENOMEM;
	for (int i = 0; !rc && i < sw->c.plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &sw->sbuf[i];

		if (zn_swapio_optim(sw)) {
			rc = halloc(sw, &sb->master_h, n * 4);
			if (!rc)
				rc = halloc(sw, &sb->m_h, sw->c.plan.swap_moment_bytes);
			if (!rc)
				rc = halloc(sw, &sb->v_h, sw->c.plan.swap_moment_bytes);
		}
		if (!rc && zn_swapio_params(sw) && !(zn_swapio_optim(sw) &&
						    sw->c.plan.master_aliases_params))
			rc = halloc(sw, &sb->param_h, n * pb);
	}
	/* the parameter fetch buffers and hot layers (swapio_fetch.c), after the staging */
	if (!rc)
		rc = zn_swapio_fetch_open(sw);
	return rc;
}

int zn_swapio_create(struct zn_swapio *sw, const struct zn_swapio_config *c)
{
	int rc;

	*sw = (struct zn_swapio){ .c = *c };
	if (!zn_swapio_optim(sw) && !zn_swapio_params(sw))
		return 0;
	rc = zn_aio_create(&sw->aio, &sw->c.cfg->aio);
	if (rc)
		return rc;
	/* the whole arena: staging views and every other pinned buffer are fixed buffers */
	rc = zn_aio_register_buffer(sw->aio, zn_arena_base(sw->c.arena),
				    zn_arena_size(sw->c.arena) / ZN_AIO_ALIGN * ZN_AIO_ALIGN);
	if (rc)
		return rc;
	sw->arena_registered = true;
	rc = make_stores(sw);
	if (!rc)
		rc = make_staging(sw);
	if (!rc)
		zn_debug("nvme: %s%s%s through %s", zn_swapio_optim(sw) ? "optimizer state" : "",
			zn_swapio_optim(sw) && zn_swapio_params(sw) ? " and " : "",
			zn_swapio_params(sw) ? "parameter shards" : "", zn_aio_describe(sw->aio));
	return rc;
}

void zn_swapio_destroy(struct zn_swapio *sw)
{
	if (!sw->c.rt)
		return; /* never created */
	zn_swapio_quiesce(sw);
	zn_swapio_fetch_close(sw);
	free(sw->sbuf);
	free(sw->pos_first);
	free(sw->pos_layer);
	sw->sbuf = NULL;
	sw->pos_first = sw->pos_layer = NULL;
	zn_swap_destroy(sw->swap_opt);
	zn_swap_destroy(sw->swap_param);
	sw->swap_opt = sw->swap_param = NULL;
	if (sw->arena_registered)
		zn_aio_unregister_buffer(sw->aio, zn_arena_base(sw->c.arena));
	sw->arena_registered = false;
	zn_aio_destroy(sw->aio);
	sw->aio = NULL;
}

static int wait_all(struct zn_swapio *sw, bool writes)
{
	int rc = 0, x;

	for (int i = 0; sw->sbuf && i < sw->c.plan.swap_buffers; i++) {
		struct zn_sbuf *sb = &sw->sbuf[i];

		x = wait_reads(sw, sb, sb->layer);
		if (!rc)
			rc = x;
		x = writes ? wait_writes(sw, sb, sb->layer) : 0;
		if (!rc)
			rc = x;
	}
	x = zn_swapio_fetch_wait_all(sw);
	if (!rc)
		rc = x;
	return rc;
}

int zn_swapio_quiesce(struct zn_swapio *sw)
{
	sw->in_step = false;
	return wait_all(sw, true);
}

int zn_swapio_step_end(struct zn_swapio *sw)
{
	sw->in_step = false;
	return wait_all(sw, !sw->c.cfg->zero.offload_optimizer.pipeline_write);
}

/* ---- the step --------------------------------------------------------------------------- */

static int issue_reads(struct zn_swapio *sw, int upto, bool block);

int zn_swapio_step_begin(struct zn_swapio *sw, int64_t step)
{
	sw->step = step;
	sw->opt_next_read = 0;
	sw->in_step = true;
	return zn_swapio_opt_begin(sw);
}

/* fetch buffer i gets layer l's shard (swapio_fetch.c): a hot layer's pinned copy, or a
 * read after the buffer's previous copy up and the previous step's write-behind of this
 * extent */
int zn_swapio_fetch_begin(struct zn_swapio *sw, int i, int l)
{
	int rc = zn_swapio_fetch_prepare(sw, i, l);

	if (rc > 0) /* its pinned shard is current: nothing to read */
		return 0;
	if (!rc)
		rc = wait_layer_writes(sw, l);
	return zn_swapio_fetch_read(sw, i, l, rc);
}

/* ---- optimizer step ---------------------------------------------------------------------- */

static int submit_reads(struct zn_swapio *sw, struct zn_sbuf *sb, int l, int c)
{
	struct zn_swapio_part p[3];
	uint64_t off, len;
	int rc = 0;

	if (!zn_swapio_optim(sw))
		return 0;
	zn_swapio_opt_parts(sw, l, sb, p);
	zn_swapio_chunk(sw, l, c, &off, &len);
	if (zn_tracer_on(sw->c.tr))
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
static int issue_reads(struct zn_swapio *sw, int upto, bool block)
{
	int rc = 0;

	if (upto > sw->positions - 1)
		upto = sw->positions - 1;
	while (!rc && sw->opt_next_read <= upto) {
		int pos = sw->opt_next_read;
		struct zn_sbuf *sb = sbuf_of(sw, pos);

		if (!block && reqs_busy(sb->wr, sb->wr_n))
			break;
		rc = wait_writes(sw, sb, sb->layer);
		sb->layer = sw->pos_layer[pos];
		sb->chunk = pos - sw->pos_first[sb->layer];
		if (!rc)
			rc = submit_reads(sw, sb, sb->layer, sb->chunk);
		sw->opt_next_read++;
	}
	return rc;
}

/* the step's start (step.c) and the optimizer's: the first K positions' state, read ahead in
 * the background (a layer's state changes only in its own AdamW, later in the step); a
 * second call issues nothing new */
int zn_swapio_opt_begin(struct zn_swapio *sw)
{
	if (!sw->sbuf)
		return 0;
	if (!sw->c.cfg->zero.offload_optimizer.pipeline_read)
		return 0;
	return issue_reads(sw, sw->c.plan.swap_buffers - 1, false);
}

int zn_swapio_opt_poke(struct zn_swapio *sw)
{
	return sw->in_step ? zn_swapio_opt_begin(sw) : 0;
}

int zn_swapio_opt_acquire(struct zn_swapio *sw, int l, int c, struct zn_sbuf **out)
{
	int pos, rc;
	struct zn_sbuf *sb;

	*out = NULL;
	if (!sw->sbuf)
		return 0;
	pos = sw->pos_first[l] + c;
	sb = sbuf_of(sw, pos);
	rc = issue_reads(sw, pos, true);
	if (!rc && sw->c.cfg->zero.offload_optimizer.pipeline_read)
		rc = issue_reads(sw, pos + sw->c.plan.swap_buffers - 1, false);
	if (!rc)
		rc = wait_reads(sw, sb, l);
	if (!rc)
		*out = sb;
	return rc;
}

bool zn_swapio_opt_ready(struct zn_swapio *sw, int l)
{
	int pos;
	struct zn_sbuf *sb;

	if (!sw->sbuf || !zn_swapio_optim(sw))
		return true;
	pos = sw->pos_first[l];
	if (pos >= sw->opt_next_read)
		return false;
	sb = sbuf_of(sw, pos);
	return sb->layer == l && sb->chunk == 0 && !reqs_busy(sb->rd, sb->rd_n);
}

int zn_swapio_opt_release(struct zn_swapio *sw, int l, int c)
{
	struct zn_layer *ly = &sw->c.L[l];
	int pos, rc = 0;
	struct zn_sbuf *sb;
	uint64_t off, n, real, pb = sw->c.plan.param_bytes;

	if (!sw->sbuf)
		return 0;
	pos = sw->pos_first[l] + c;
	zn_swapio_chunk(sw, l, c, &off, &n);
	/* AdamW wrote the chunk's real elements (the shard's first opt_count) */
	real = ly->opt_count > off ? ly->opt_count - off : 0;
	if (real > n)
		real = n;
	if (zn_swapio_params(sw))
		rc = zn_swapio_fetch_wait_layer(sw, l);
	if (rc)
		return rc;
	sb = sbuf_of(sw, pos);
	sb->layer = l;
	sb->chunk = c;
	sb->wr_traced = zn_tracer_on(sw->c.tr);
	sb->wr_step = sw->step;
	if (zn_tracer_on(sw->c.tr))
		sb->wr_t0 = zn_trace_now_ns();
	if (zn_swapio_optim(sw)) {
		struct zn_swapio_part p[3];

		zn_swapio_opt_parts(sw, l, sb, p);
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
		rc = zn_swap_write(sw->swap_param, zn_swapio_key(sw, ZN_SWAP_PARAM, l), off * pb, n * pb,
				   sb->param_h, &sb->wr[sb->wr_n]);
		if (!rc)
			sb->wr_n++;
	}
	/* a hot layer keeps what its parameter extent now gets: the new shard, or the
	 * master it aliases */
	if (!rc && zn_swapio_params(sw))
		rc = zn_swapio_hot_put(sw, l, off * pb, sb->param_h ? sb->param_h : (void *)sb->master_h,
			     n * pb);
	if (rc)
		return rc;
	if (!sw->c.cfg->zero.offload_optimizer.pipeline_write)
		return wait_writes(sw, sb, l);
	if (sw->c.cfg->zero.offload_optimizer.pipeline_read)
		rc = issue_reads(sw, pos + sw->c.plan.swap_buffers - 1, false);
	return rc;
}
