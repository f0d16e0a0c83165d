/* A layer's optimizer state on nvme chunk by chunk through staging buffer 0 (swapio.h
 * zn_swapio_state_io), outside the step: the initial state, the master's read-back and
 * checkpoints (ckpt_state.c). The step's own chunks are swapio_opt.c's. */
#include <errno.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "sched/runtime.h"
#include "sched/swapio.h"
#include "sched/swapio_impl.h"
#include "sched/tiers.h"

/* waits for r (counted as the runtime's), a failure logged with what and layer l */
static int wait_req(struct zn_swapio *sw, struct zn_swap_req *r, const char *what, int l)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_swap_wait(r);

	sw->c.rt->wait_ms += zn_runtime_now_ms() - t0;
	if (rc)
		zn_error("nvme: %s layer %d (rank %d) failed: %s", what, l, sw->c.rt->rank,
			 zn_strerror(rc));
	return rc;
}

static int write_sync(struct zn_swapio *sw, struct zn_swap *s, struct zn_swap_key k,
		      uint64_t bytes, const void *buf_h)
{
	struct zn_swap_req r;
	int rc = zn_swap_write(s, k, 0, bytes, buf_h, &r);

	return rc ? rc : wait_req(sw, &r, "writing the initial state of", k.layer);
}

int zn_swapio_state_locate(const struct zn_swapio *sw, int l, int k, uint64_t off,
			   const char **file, uint64_t *file_off)
{
	struct zn_swapio_part p[3];
	int pi, rc;

	zn_swapio_opt_parts(sw, l, p);
	rc = zn_swap_locate(p[k].store, p[k].key, off, &pi, file_off);
	if (!rc)
		*file = zn_swap_file(p[k].store, pi);
	return rc;
}

/* chunk by chunk through staging buffer 0: the optimizer staging home's transfers
 * (swapio_opt.c), at normal priority, each waited */
int zn_swapio_state_io(struct zn_swapio *sw, int l, unsigned parts, bool write,
		       int (*each)(void *ctx, uint64_t off, uint64_t len,
				   const struct zn_sbuf *sb),
		       void *ctx)
{
	const struct zn_sbuf *sb = &sw->sbuf[0];
	int rc = zn_swapio_quiesce(sw); /* write-behind: in the extents and from this buffer */

	for (int c = 0; !rc && c < zn_swapio_chunks(sw, l); c++) {
		uint64_t off, len;

		zn_swapio_chunk(sw, l, c, &off, &len);
		if (write)
			rc = each(ctx, off, len, sb);
		if (!rc)
			rc = zn_swapio_opt_io(sw, zn_swapio_opt_pos(sw, l, c), parts, write);
		if (!rc && !write)
			rc = each(ctx, off, len, sb);
	}
	return rc;
}

struct init_ctx {
	const float *src_h;   /* the layer's shard of tmp_h */
	uint64_t moment_bytes; /* compact m (or v) of the whole shard; 0: fp32 */
};

/* the initial master (the parameters) and zero m, v of one chunk: all-zero bytes are the
 * zero state of every optimizer_states setting (cpu/adamw.h) */
static int init_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	const struct init_ctx *c = ctx;
	uint64_t mb = c->moment_bytes ? c->moment_bytes : len * 4;

	memcpy(sb->master_h, c->src_h + off, len * 4);
	memset(sb->m_h, 0, mb);
	memset(sb->v_h, 0, mb);
	return 0;
}

int zn_swapio_init_layer(struct zn_swapio *sw, int l, const float *params_h)
{
	struct zn_layer *ly = &sw->c.L[l];
	uint64_t n = ly->sh.shard_numel;
	const float *src = params_h + ly->sh.offset;
	int rc = 0;

	if (zn_swapio_params(sw)) {
		/* a fetch buffer the shard fits: layer 0's own, a ring one for the others */
		void *buf = zn_swapio_fetch_scratch(sw, l);

		if (sw->c.pdt == ZN_DTYPE_BF16)
			zn_cast_f32_to_bf16(buf, src, n);
		else if (sw->c.pdt == ZN_DTYPE_F16)
			zn_cast_f32_to_f16(buf, src, n);
		else
			memcpy(buf, src, n * 4);
		rc = write_sync(sw, sw->swap_param, zn_swapio_key(sw, ZN_SWAP_PARAM, l),
				zn_swapio_param_shard_bytes(sw, l), buf);
		if (!rc)
			rc = zn_swapio_hot_put(sw, l, 0, buf, zn_swapio_param_shard_bytes(sw, l));
	}
	/* an aliased master is the parameter extent, written above */
	if (!rc && zn_swapio_optim(sw))
		rc = zn_swapio_state_io(sw, l, (sw->c.plan.master_aliases_params ? 0 : ZN_SWAPIO_MASTER) |
					ZN_SWAPIO_M | ZN_SWAPIO_V, true, init_chunk,
					&(struct init_ctx){ src, zn_swapio_moment_bytes(sw, l) });
	return rc;
}

struct master_copy {
	float *dst_h;
};

static int master_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	struct master_copy *m = ctx;

	memcpy(m->dst_h + off, sb->master_h, len * 4);
	return 0;
}

int zn_swapio_read_master(struct zn_swapio *sw, int l, float *dst_h)
{
	struct master_copy m = { dst_h };

	return zn_swapio_state_io(sw, l, ZN_SWAPIO_MASTER, false, master_chunk, &m);
}

