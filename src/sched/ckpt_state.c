/* The engine's optimizer state for checkpoints: this rank's slice of each layer's master, m
 * and v read from whichever tier holds them (device, pinned host, nvme extents), and m and v
 * put back after a resume. Called between steps only (the step's streams drained and nvme
 * requests waited for: every step ends that way), so nothing here races an update. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "sched/engine_impl.h"

void zn_ckpt_state_slice(const struct zn_engine *e, int l, uint64_t *first, uint64_t *count)
{
	*first = e->L[l].sh.offset;
	*count = e->L[l].sh.real_numel;
}

void zn_ckpt_state_span(const struct zn_engine *e, int l, uint64_t *first, uint64_t *count)
{
	*first = e->L[l].opt_off;
	*count = e->L[l].opt_count;
}

uint64_t zn_ckpt_state_max_slice(const struct zn_engine *e)
{
	uint64_t m = 0;

	for (int l = 0; l < e->n; l++) {
		uint64_t c = e->cfg.zero.stage == 0 ? e->numel[l] : e->L[l].sh.shard_numel;

		if (c > m)
			m = c;
	}
	return m;
}

static int copy_down(struct zn_engine *e, float *dst, const float *src, uint64_t n,
		     bool on_device)
{
	if (!on_device) {
		memcpy(dst, src, n * 4);
		return 0;
	}
	return zn_memcpy_async(e->rt.copy_out, dst, src, n * 4, ZN_COPY_D2H);
}

/* nvme: a chunk of master, m and v into the checkpoint's [master | m | v] (count each) */
struct state_out {
	float *buf;
	uint64_t count;
};

static int state_out_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	const struct state_out *o = ctx;
	const float *src[3] = { sb->master_h, sb->m_h, sb->v_h };
	uint64_t n = o->count > off ? o->count - off : 0; /* the real elements of the chunk */

	if (n > len)
		n = len;
	for (int k = 0; k < 3; k++)
		memcpy(o->buf + k * o->count + off, src[k], n * 4);
	return 0;
}

int zn_ckpt_state_read(struct zn_engine *e, int l, float *buf)
{
	struct zn_layer *ly = &e->L[l];
	uint64_t first, count, shift;
	const float *src[3];
	bool dev = e->plan.pl.optim == ZN_TIER_DEVICE;
	int rc = 0;

	zn_ckpt_state_slice(e, l, &first, &count);
	shift = first - ly->opt_off; /* 0 except at stage 0 (the span is the whole layer) */
	if (e->plan.pl.optim == ZN_TIER_NVME) {
		/* stage >= 1: the slice is the shard's first elements; after the last step's
		 * write-behind, in chunks (a layer of one chunk: whole extents, whose CRC32C
		 * the swap store checks as they come in) */
		struct state_out o = { buf, count };

		return zn_swapio_state_io(e, l, ZN_SWAPIO_MASTER | ZN_SWAPIO_M | ZN_SWAPIO_V,
					  false, state_out_chunk, &o);
	}
	src[0] = zn_tiers_master_span(e, l, NULL);
	src[1] = dev ? ly->m_d : ly->m_h;
	src[2] = dev ? ly->v_d : ly->v_h;
	for (int k = 0; !rc && k < 3; k++)
		rc = copy_down(e, buf + k * count, src[k] + shift, count, dev);
	if (!rc && dev)
		rc = zn_stream_synchronize(e->rt.copy_out);
	return rc;
}

/* nvme: a chunk of the resumed m and v (n real elements), zero beyond them as at create */
struct state_in {
	const float *m, *v;
	uint64_t n;
};

static int state_in_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	const struct state_in *in = ctx;
	uint64_t n = in->n > off ? in->n - off : 0;

	if (n > len)
		n = len;
	memset(sb->m_h, 0, len * 4);
	memset(sb->v_h, 0, len * 4);
	memcpy(sb->m_h, in->m + off, n * 4);
	memcpy(sb->v_h, in->v + off, n * 4);
	return 0;
}

int zn_ckpt_state_put(struct zn_engine *e, int l, const float *m, const float *v)
{
	struct zn_layer *ly = &e->L[l];
	uint64_t n = ly->opt_count;
	int rc = 0;

	if (e->plan.pl.optim == ZN_TIER_NVME) {
		struct state_in in = { m, v, n };

		return zn_swapio_state_io(e, l, ZN_SWAPIO_M | ZN_SWAPIO_V, true, state_in_chunk,
					  &in);
	}
	if (e->plan.pl.optim == ZN_TIER_HOST) {
		memcpy(ly->m_h, m, n * 4);
		memcpy(ly->v_h, v, n * 4);
		return 0;
	}
	rc = zn_memcpy_async(e->rt.copy_in, ly->m_d, m, n * 4, ZN_COPY_H2D);
	if (!rc)
		rc = zn_memcpy_async(e->rt.copy_in, ly->v_d, v, n * 4, ZN_COPY_H2D);
	if (!rc)
		rc = zn_stream_synchronize(e->rt.copy_in);
	return rc;
}

void zn_ckpt_state_counters(struct zn_engine *e, int64_t *step, int64_t *skipped,
			    struct zn_lossscale *ls)
{
	*step = e->step;
	*skipped = e->opt.skipped;
	*ls = e->opt.ls;
}

void zn_ckpt_state_set_counters(struct zn_engine *e, int64_t step, int64_t skipped,
				const struct zn_lossscale *ls)
{
	e->step = step;
	e->opt.skipped = skipped;
	if (!e->cfg.precision.fp16)
		return;
	/* the scaler's settings come from this run's config; a dynamic scaler's position
	 * from an fp16 checkpoint; a static scale is the config's */
	if (ls && e->opt.ls.dynamic) {
		e->opt.ls.scale = ls->scale;
		e->opt.ls.cur_hysteresis = ls->cur_hysteresis < e->opt.ls.hysteresis ?
						   ls->cur_hysteresis : e->opt.ls.hysteresis;
		e->opt.ls.iter = ls->iter;
		e->opt.ls.last_overflow_iter = ls->last_overflow_iter;
		if (e->opt.ls.scale < e->opt.ls.min_scale)
			e->opt.ls.scale = e->opt.ls.min_scale;
	} else if (e->rt.rank == 0) {
		zn_info("--resume: the checkpoint has no %s loss scale to go on with: it starts "
			"at %g", ls ? "dynamic" : "fp16", e->opt.ls.scale);
	}
}

/* ---- nvme extents copied file to file ------------------------------------------------- */

static atomic_uint_fast64_t copied_bytes;

uint64_t zn_ckpt_nvme_copied_bytes(void)
{
	return atomic_load(&copied_bytes);
}

bool zn_ckpt_state_on_nvme(const struct zn_engine *e)
{
	return e->plan.pl.optim == ZN_TIER_NVME;
}

/* Appends the first `bytes` of layer l's part k (0 master, 1 m, 2 v) to fd at its file
 * position with copy_file_range (the kernel copies, or reflinks where the filesystem
 * can), stripe unit by stripe unit. -EOPNOTSUPP (nothing appended) when the filesystems
 * do not support it: the caller copies through the staging buffer instead. */
int zn_ckpt_state_copy(struct zn_engine *e, int l, int k, int fd, uint64_t bytes,
		       const char *path)
{
	bool alias = e->plan.master_aliases_params;
	struct zn_swap *s = k == 0 && alias ? e->sw.swap_param : e->sw.swap_opt;
	int kind = k == 0 ? (alias ? ZN_SWAP_PARAM : ZN_SWAP_MASTER) :
		   k == 1 ? ZN_SWAP_EXP_AVG : ZN_SWAP_EXP_AVG_SQ;
	struct zn_swap_key key = { .kind = kind, .layer = l, .rank = e->rt.rank };
	uint64_t done = 0;
	int rc = zn_swapio_quiesce(e); /* the last step's write-behind is in the extent */

	while (!rc && done < bytes) {
		uint64_t fo, n;
		int pi, in;
		off64_t off;

		rc = zn_swap_locate(s, key, done, &pi, &fo);
		if (rc)
			break;
		n = ZN_PLAN_SWAP_STRIPE - fo % ZN_PLAN_SWAP_STRIPE;
		if (n > bytes - done)
			n = bytes - done;
		in = open(zn_swap_file(s, pi), O_RDONLY | O_CLOEXEC);
		if (in < 0) {
			rc = -errno;
			break;
		}
		off = (off64_t)fo;
		rc = zn_ckpt_fault_point("copy", path);
		while (!rc && n > 0) {
			ssize_t c = copy_file_range(in, &off, fd, NULL, n, 0);

			if (c > 0) {
				n -= (uint64_t)c;
				done += (uint64_t)c;
			} else {
				rc = c == 0 ? -EIO : -errno;
			}
		}
		close(in);
	}
	if (rc && done == 0 && (rc == -EXDEV || rc == -ENOSYS || rc == -EOPNOTSUPP ||
				rc == -EINVAL))
		return -EOPNOTSUPP;
	if (rc)
		zn_error("checkpoint %s: copying layer %d's %s from the swap store failed: %s",
			 path, l, k == 0 ? "master" : k == 1 ? "m" : "v", zn_strerror(rc));
	else
		atomic_fetch_add(&copied_bytes, bytes);
	return rc;
}
