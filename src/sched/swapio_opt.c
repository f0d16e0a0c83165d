/* Swap I/O's optimizer staging (offload_optimizer nvme; with offload_param nvme, AdamW's
 * new parameter shard too): a tiered home (store/home.h) on swapio's own swap stores.
 *
 * Items: AdamW's positions, layer n-1's chunks first (sw.pos_first, sw.pos_layer), each
 * chunk plan.swap_chunk_numel elements of the layer's shard. A position's read is its
 * chunk of the master (the parameter extent in swap_param when the master aliases the
 * parameters), of m and of v (m and v whole when zinc.optimizer_states is not fp32: their
 * layer is one chunk, plan.c); its write is the same plus the new parameter shard's chunk
 * in swap_param (parameters on nvme, not aliased). The home's segs callback gives these
 * ranges (opt_segs; sw.opt_moves says which parts a transfer moves), so the home submits,
 * waits and names the swap requests.
 *
 * Buffers: the K = plan.swap_buffers staging buffers, each the sections master | m | v |
 * param (sw.sec_at, sw.sec_bytes; a section not on nvme has none); position p uses buffer
 * p mod K. struct zn_sbuf i views buffer i's sections for AdamW and remembers the position's
 * layer and chunk and, for --trace, the step that issued its writes.
 *
 * The order (swapio.c's opening comment): reads at background priority as buffers free,
 * promoted when AdamW waits; writes behind, waited before the buffer's next read, before a
 * fetch of the same layer and at quiesce. Each read AdamW waits for is one "read optim"
 * span from its submission (b->t0) to its last completion; a buffer's writes are "write
 * optim" and "write param" spans in the trace of the step that issued them.
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

/* (false before zn_swapio_create: a zeroed plan places everything on the device) */
bool zn_swapio_optim(const struct zn_swapio *sw)
{
	return sw->c.plan.optim == ZN_TIER_NVME;
}

bool zn_swapio_params(const struct zn_swapio *sw)
{
	return sw->c.plan.params == ZN_TIER_NVME;
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

int zn_swapio_opt_parts(const struct zn_swapio *sw, int l, struct zn_swapio_part p[3])
{
	bool alias = sw->c.plan.master_aliases_params;
	uint64_t mb = zn_swapio_moment_bytes(sw, l);

	p[0] = (struct zn_swapio_part){ alias ? sw->swap_param : sw->swap_opt,
					zn_swapio_key(sw, alias ? ZN_SWAP_PARAM : ZN_SWAP_MASTER, l),
					4, 0 };
	p[1] = (struct zn_swapio_part){ sw->swap_opt, zn_swapio_key(sw, ZN_SWAP_EXP_AVG, l), 4, mb };
	p[2] = (struct zn_swapio_part){ sw->swap_opt, zn_swapio_key(sw, ZN_SWAP_EXP_AVG_SQ, l), 4,
					mb };
	if (sw->c.plan.states != ZN_STATES_FP32)
		p[1].elem = p[2].elem = 0; /* stored whole (one chunk: plan.c) */
	return 3;
}

int zn_swapio_opt_pos(const struct zn_swapio *sw, int l, int c)
{
	return sw->pos_first[l] + c;
}

/* ---- the home --------------------------------------------------------------------------- */

/* position pos's read (master, m, v: those in sw.opt_moves) or write (and the new
 * parameter shard) as the home's ranges */
static int opt_segs(const void *ctx, int pos, bool write, struct zn_home_seg *out)
{
	const struct zn_swapio *sw = ctx;
	int l = sw->pos_layer[pos], n = 0;
	uint64_t off, len, pb = sw->c.plan.param_bytes;
	struct zn_swapio_part p[3];

	zn_swapio_chunk(sw, l, pos - sw->pos_first[l], &off, &len);
	zn_swapio_opt_parts(sw, l, p);
	for (int i = 0; i < 3; i++)
		if (sw->opt_moves & (1u << i))
			out[n++] = (struct zn_home_seg){ p[i].store, p[i].key,
							 zn_swapio_part_at(&p[i], off),
							 zn_swapio_part_bytes(&p[i], len),
							 sw->sec_at[i] };
	if (write && (sw->opt_moves & ZN_SWAPIO_PARAM))
		out[n++] = (struct zn_home_seg){ sw->swap_param,
						 zn_swapio_key(sw, ZN_SWAP_PARAM, l), off * pb,
						 len * pb, sw->sec_at[3] };
	return n;
}

static void opt_name(const void *ctx, int pos, char *out, size_t size)
{
	const struct zn_swapio *sw = ctx;
	int l = pos >= 0 ? sw->pos_layer[pos] : -1;

	snprintf(out, size, "nvme: %s of layer %d (chunk %d, rank %d)",
		 zn_swapio_optim(sw) ? "the optimizer state" : "the new parameter shard", l,
		 l >= 0 ? pos - sw->pos_first[l] : -1, sw->c.rt->rank);
}

/* AdamW's positions: layer n-1's chunks first (sw.pos_first, sw.pos_layer). */
static int make_positions(struct zn_swapio *sw)
{
	int p = 0;

	sw->pos_first = zn_size_calloc((uint64_t)sw->c.n + 1, sizeof(*sw->pos_first),
				       "the optimizer positions");
	if (!sw->pos_first)
		return -ENOMEM;
	for (int l = sw->c.n - 1; l >= 0; l--) {
		sw->pos_first[l] = p;
		p += zn_swapio_chunks(sw, l);
	}
	sw->pos_first[sw->c.n] = p; /* unused: the end */
	sw->positions = p;
	sw->pos_layer = zn_size_calloc((uint64_t)p, sizeof(*sw->pos_layer),
				       "the optimizer positions");
	if (!sw->pos_layer)
		return -ENOMEM;
	for (int l = 0; l < sw->c.n; l++)
		for (int c = 0; c < zn_swapio_chunks(sw, l); c++)
			sw->pos_layer[sw->pos_first[l] + c] = l;
	zn_debug("nvme: %d staging positions for %d layers, chunks of %llu elements", p, sw->c.n,
		 (unsigned long long)sw->c.plan.swap_chunk_numel);
	return 0;
}

/* a staging buffer's sections: master | m | v (optimizer on nvme) | param (parameters on
 * nvme, not aliased), each rounded as the arena rounds a view */
static uint64_t layout(struct zn_swapio *sw)
{
	uint64_t n = sw->c.plan.swap_chunk_numel, at = 0;
	bool opt = zn_swapio_optim(sw), alias = opt && sw->c.plan.master_aliases_params;

	sw->sec_bytes[0] = opt ? zn_plan_host_alloc_bytes(n * 4) : 0;
	sw->sec_bytes[1] = sw->sec_bytes[2] = opt ? sw->c.plan.swap_moment_bytes : 0;
	sw->sec_bytes[3] = zn_swapio_params(sw) && !alias ?
			   zn_plan_host_alloc_bytes(n * sw->c.plan.param_bytes) : 0;
	for (int i = 0; i < 4; i++) {
		sw->sec_at[i] = at;
		at += sw->sec_bytes[i];
	}
	sw->opt_moves = (opt ? ZN_SWAPIO_MASTER | ZN_SWAPIO_M | ZN_SWAPIO_V : 0) |
			(sw->sec_bytes[3] ? ZN_SWAPIO_PARAM : 0);
	return at;
}

static void *section(struct zn_swapio *sw, struct zn_home_buf *b, int i)
{
	return sw->sec_bytes[i] ? (char *)b->h + sw->sec_at[i] : NULL;
}

int zn_swapio_opt_open(struct zn_swapio *sw)
{
	int K = sw->c.plan.swap_buffers, rc = make_positions(sw);
	struct zn_home_config c;

	if (rc)
		return rc;
	sw->sbuf = zn_size_calloc((uint64_t)K, sizeof(*sw->sbuf), "the optimizer staging buffers");
	if (!sw->sbuf)
		return -ENOMEM;
	c = (struct zn_home_config){
		.tier = ZN_TIER_NVME, .count = sw->positions, .buf_n = K,
		.item_bytes = layout(sw), .dev = sw->c.rt->dev, .arena = sw->c.arena,
		.bare = true, .rank = sw->c.rt->rank, .kind = ZN_SWAP_MASTER,
		.store = sw->swap_opt ? sw->swap_opt : sw->swap_param, .engine = sw->aio,
		.what = "optim", .name = opt_name, .segs = opt_segs, .ctx = sw,
	};
	rc = zn_home_open(&sw->opt, &c);
	for (int i = 0; !rc && i < K; i++) {
		struct zn_home_buf *b = zn_home_buf(&sw->opt, i);

		sw->sbuf[i] = (struct zn_sbuf){ section(sw, b, 0), section(sw, b, 1),
						section(sw, b, 2), section(sw, b, 3), .layer = -1 };
	}
	return rc;
}

void zn_swapio_opt_close(struct zn_swapio *sw)
{
	zn_home_close(&sw->opt);
	free(sw->sbuf);
	free(sw->pos_first);
	free(sw->pos_layer);
	sw->sbuf = NULL;
	sw->pos_first = sw->pos_layer = NULL;
}

/* ---- waits ------------------------------------------------------------------------------ */

/* b brought to FREE, the wait counted as the runtime's */
static int settle(struct zn_swapio *sw, struct zn_home_buf *b)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_home_settle(&sw->opt, b);

	sw->c.rt->wait_ms += zn_runtime_now_ms() - t0;
	return rc;
}

/* --trace: requests r[0 .. n-1] of a buffer's writes, in the step that issued them */
static void trace_write(struct zn_swapio *sw, struct zn_sbuf *sb, const char *what,
			struct zn_home_buf *b, int i, int n)
{
	uint64_t bytes, t1 = zn_swapio_reqs_end(b->req + i, n, &bytes);

	if (n)
		zn_tracer_add_step(sw->c.tr, sb->wr_step, ZN_TRACE_NVME_WRITE, what, sb->layer,
				   b->t0, t1, bytes);
}

/* waits for staging buffer i's writes, if any, and traces them (the optimizer state's,
 * then the new parameter shard's) */
static int wait_writes(struct zn_swapio *sw, int i)
{
	struct zn_home_buf *b = zn_home_buf(&sw->opt, i);
	struct zn_sbuf *sb = &sw->sbuf[i];
	int k = zn_swapio_optim(sw) ? 3 : 0, rc;

	if (b->state != ZN_HOME_WRITING)
		return 0;
	rc = settle(sw, b);
	if (rc || !sb->wr_traced || !zn_tracer_attached(sw->c.tr))
		return rc;
	if (k > b->nreq)
		k = b->nreq;
	trace_write(sw, sb, "write optim", b, 0, k);
	trace_write(sw, sb, "write param", b, k, b->nreq - k);
	sb->wr_traced = false;
	return 0;
}

/* waits for staging buffer i's reads, if any, promoted first (someone waits for them),
 * and traces them */
static int wait_reads(struct zn_swapio *sw, int i)
{
	struct zn_home_buf *b = zn_home_buf(&sw->opt, i);
	int rc;

	if (b->state != ZN_HOME_READING)
		return 0;
	zn_home_promote(b);
	rc = settle(sw, b);
	if (!rc && zn_tracer_on(sw->c.tr))
		zn_swapio_trace_reqs(sw, ZN_TRACE_NVME_READ, "read optim", sw->sbuf[i].layer,
				     b->req, b->nreq, b->t0);
	return rc;
}

int zn_swapio_opt_wait_layer(struct zn_swapio *sw, int l)
{
	int rc = 0;

	for (int i = 0; !rc && sw->sbuf && i < sw->c.plan.swap_buffers; i++)
		if (sw->sbuf[i].layer == l)
			rc = wait_writes(sw, i);
	return rc;
}

int zn_swapio_opt_wait_all(struct zn_swapio *sw, bool writes)
{
	int rc = 0, x;

	for (int i = 0; sw->sbuf && i < sw->c.plan.swap_buffers; i++) {
		x = wait_reads(sw, i);
		if (!rc)
			rc = x;
		x = writes ? wait_writes(sw, i) : 0;
		if (!rc)
			rc = x;
	}
	return rc;
}

int zn_swapio_opt_io(struct zn_swapio *sw, int pos, unsigned parts, bool write)
{
	struct zn_home_buf *b = zn_home_buf(&sw->opt, 0);
	unsigned moves = sw->opt_moves;
	int rc;

	sw->opt_moves = parts;
	rc = write ? zn_home_write(&sw->opt, b, pos) : zn_home_read_ahead(&sw->opt, b, pos);
	if (!rc)
		rc = settle(sw, b);
	sw->opt_moves = moves;
	return rc;
}

/* ---- the optimizer step ----------------------------------------------------------------- */

/* Issues the reads of positions up to `upto` in order; without `block` it stops at the
 * first whose buffer is still being written. */
static int issue_reads(struct zn_swapio *sw, int upto, bool block)
{
	int K = sw->c.plan.swap_buffers, rc = 0;

	if (upto > sw->positions - 1)
		upto = sw->positions - 1;
	while (!rc && sw->opt_next_read <= upto) {
		int pos = sw->opt_next_read;
		struct zn_home_buf *b = zn_home_buf(&sw->opt, pos % K);
		struct zn_sbuf *sb = &sw->sbuf[pos % K];

		if (!block && !zn_home_idle(&sw->opt, b))
			break;
		rc = wait_writes(sw, pos % K);
		sb->layer = sw->pos_layer[pos];
		sb->chunk = pos - sw->pos_first[sb->layer];
		if (!rc && zn_swapio_optim(sw))
			rc = zn_home_read_ahead_prio(&sw->opt, b, pos, ZN_AIO_PRIO_BACKGROUND);
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

	*out = NULL;
	if (!sw->sbuf)
		return 0;
	pos = zn_swapio_opt_pos(sw, l, c);
	rc = issue_reads(sw, pos, true);
	if (!rc && sw->c.cfg->zero.offload_optimizer.pipeline_read)
		rc = issue_reads(sw, pos + sw->c.plan.swap_buffers - 1, false);
	if (!rc)
		rc = wait_reads(sw, pos % sw->c.plan.swap_buffers);
	if (!rc)
		*out = &sw->sbuf[pos % sw->c.plan.swap_buffers];
	return rc;
}

bool zn_swapio_opt_ready(struct zn_swapio *sw, int l)
{
	int pos, i;

	if (!sw->sbuf || !zn_swapio_optim(sw))
		return true;
	pos = sw->pos_first[l];
	if (pos >= sw->opt_next_read)
		return false;
	i = pos % sw->c.plan.swap_buffers;
	return sw->sbuf[i].layer == l && sw->sbuf[i].chunk == 0 &&
	       zn_home_ready(&sw->opt, zn_home_buf(&sw->opt, i));
}

int zn_swapio_opt_release(struct zn_swapio *sw, int l, int c)
{
	struct zn_layer *ly = &sw->c.L[l];
	int pos, rc = 0;
	struct zn_home_buf *b;
	struct zn_sbuf *sb;
	uint64_t off, n, real, pb = sw->c.plan.param_bytes;

	if (!sw->sbuf)
		return 0;
	pos = zn_swapio_opt_pos(sw, l, c);
	zn_swapio_chunk(sw, l, c, &off, &n);
	/* AdamW wrote the chunk's real elements (the shard's first opt_count) */
	real = ly->opt_count > off ? ly->opt_count - off : 0;
	if (real > n)
		real = n;
	if (zn_swapio_params(sw))
		rc = zn_swapio_fetch_wait_layer(sw, l);
	if (rc)
		return rc;
	b = zn_home_buf(&sw->opt, pos % sw->c.plan.swap_buffers);
	sb = &sw->sbuf[pos % sw->c.plan.swap_buffers];
	sb->layer = l;
	sb->chunk = c;
	sb->wr_traced = zn_tracer_on(sw->c.tr);
	sb->wr_step = sw->step;
	/* the shard's padding stays zero */
	if (sb->param_h)
		memset((char *)sb->param_h + real * pb, 0, (n - real) * pb);
	rc = zn_home_write(&sw->opt, b, pos);
	/* a hot layer keeps what its parameter extent now gets: the new shard, or the
	 * master it aliases */
	if (!rc && zn_swapio_params(sw))
		rc = zn_swapio_hot_put(sw, l, off * pb, sb->param_h ? sb->param_h : (void *)sb->master_h,
			     n * pb);
	if (rc)
		return rc;
	if (!sw->c.cfg->zero.offload_optimizer.pipeline_write)
		return wait_writes(sw, pos % sw->c.plan.swap_buffers);
	if (sw->c.cfg->zero.offload_optimizer.pipeline_read)
		rc = issue_reads(sw, pos + sw->c.plan.swap_buffers - 1, false);
	return rc;
}
