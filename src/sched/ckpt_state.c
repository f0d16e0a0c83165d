/* The engine's optimizer state for checkpoints: this rank's slice of each layer's master, m
 * and v read from whichever tier holds them (device, pinned host, nvme extents), and m and v
 * put back after a resume, as stored (zinc.optimizer_states: int8 m and v are their codes
 * and block scales, never widened, so a resume is exact). Called between steps only (the step's streams drained and nvme
 * requests waited for: every step ends that way), so nothing here races an update. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "cpu/q8.h"
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

/* A slice [shift, shift + count) of a moment buffer of n_buf elements, as the tiers hold it
 * (int8: the absmax after all n_buf codes), and as a rank file holds it (the codes of the
 * count elements, then their blocks' absmax): at most two pieces, each {offset in the
 * buffer, offset in the file's moment, bytes}. shift is a multiple of the int8 block (a
 * shard offset). */
static int moment_pieces(enum zn_optim_states s, uint64_t n_buf, uint64_t shift,
			 uint64_t count, uint64_t pc[2][3])
{
	uint64_t es = zn_plan_moment_bytes(s, ZN_Q8_BLOCK) / ZN_Q8_BLOCK; /* 4, 2, 1 */

	pc[0][0] = shift * es;
	pc[0][1] = 0;
	pc[0][2] = count * es;
	if (s != ZN_STATES_INT8)
		return 1;
	pc[1][0] = n_buf + shift / ZN_Q8_BLOCK * 4;
	pc[1][1] = count;
	pc[1][2] = zn_plan_moment_bytes(s, count) - count;
	return 2;
}

int zn_ckpt_state_pieces(const struct zn_engine *e, int l, int k, uint64_t piece[2][2])
{
	uint64_t pc[2][3], first, count;
	int n;

	zn_ckpt_state_slice(e, l, &first, &count);
	if (k == 0) {
		piece[0][0] = 0;
		piece[0][1] = count * 4;
		return 1;
	}
	/* nvme homes stage 1-3 state: the extent is the shard, the slice its real part */
	n = moment_pieces(e->plan.states, e->L[l].sh.shard_numel, 0, count, pc);
	for (int i = 0; i < n; i++) {
		piece[i][0] = pc[i][0];
		piece[i][1] = pc[i][2];
	}
	return n;
}

static int copy_down(struct zn_engine *e, void *dst, const void *src, uint64_t bytes,
		     bool on_device)
{
	if (!on_device) {
		memcpy(dst, src, bytes);
		return 0;
	}
	return zn_memcpy_async(e->rt.copy_out, dst, src, bytes, ZN_COPY_D2H);
}

/* nvme: a chunk of master, m and v into the checkpoint's [master | m | v] (count elements
 * each, m and v in file layout); compact m and v are one chunk (plan.c) */
struct state_out {
	char *buf;
	uint64_t count, n_buf;
	enum zn_optim_states st;
};

static int state_out_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	const struct state_out *o = ctx;
	const void *src[3] = { sb->master_h, sb->m_h, sb->v_h };
	uint64_t n = o->count > off ? o->count - off : 0; /* the real elements of the chunk */
	uint64_t mb = zn_plan_moment_bytes(o->st, o->count), pc[2][3];
	int np = moment_pieces(o->st, o->n_buf, 0, n > len ? len : n, pc);

	if (n > len)
		n = len;
	memcpy(o->buf + off * 4, src[0], n * 4);
	for (int k = 1; k < 3; k++) {
		char *dst = o->buf + o->count * 4 + (uint64_t)(k - 1) * mb;

		if (o->st == ZN_STATES_FP32) {
			memcpy(dst + off * 4, src[k], n * 4);
			continue;
		}
		for (int i = 0; i < np; i++)
			memcpy(dst + pc[i][1], (const char *)src[k] + pc[i][0], pc[i][2]);
	}
	return 0;
}

int zn_ckpt_state_read(struct zn_engine *e, int l, void *buf)
{
	struct zn_layer *ly = &e->L[l];
	enum zn_optim_states st = e->plan.states;
	uint64_t first, count, shift, n_buf = zn_tiers_optim_numel(&e->ti, l);
	uint64_t mb, pc[2][3];
	struct zn_adamw_moments mo;
	const void *src[3];
	bool dev = e->plan.pl.optim == ZN_TIER_DEVICE;
	char *out = buf;
	int rc = 0, np;

	zn_ckpt_state_slice(e, l, &first, &count);
	shift = first - ly->opt_off; /* 0 except at stage 0 (the span is the whole layer) */
	mb = zn_plan_moment_bytes(st, count);
	if (e->plan.pl.optim == ZN_TIER_NVME) {
		/* stage >= 1: the slice is the shard's first elements; after the last step's
		 * write-behind, in chunks (a layer of one chunk: whole extents, whose CRC32C
		 * the swap store checks as they come in) */
		struct state_out o = { out, count, n_buf, st };

		return zn_swapio_state_io(&e->sw, l, ZN_SWAPIO_MASTER | ZN_SWAPIO_M | ZN_SWAPIO_V,
					  false, state_out_chunk, &o);
	}
	zn_tiers_moments(&e->ti, l, NULL, &mo); /* on the optimizer's tier, as stored */
	src[0] = zn_tiers_master_span(&e->ti, l, NULL);
	src[1] = mo.m;
	src[2] = mo.v;
	if (!rc)
		rc = copy_down(e, out, (const float *)src[0] + shift, count * 4, dev);
	np = moment_pieces(st, n_buf, shift, count, pc);
	for (int k = 1; !rc && k < 3; k++)
		for (int i = 0; !rc && i < np; i++)
			rc = copy_down(e, out + count * 4 + (uint64_t)(k - 1) * mb + pc[i][1],
				       (const char *)src[k] + pc[i][0], pc[i][2], dev);
	if (!rc && dev)
		rc = zn_stream_synchronize(e->rt.copy_out);
	return rc;
}

/* a moment in file layout (count elements) into a whole buffer of n_buf elements: zero,
 * then the pieces (the padding stays zero, as at create) */
static int put_moment(struct zn_engine *e, void *dst, const void *src, uint64_t n_buf,
		      uint64_t count, bool on_device)
{
	uint64_t pc[2][3];
	int np = moment_pieces(e->plan.states, n_buf, 0, count, pc), rc = 0;
	uint64_t whole = zn_plan_moment_bytes(e->plan.states, n_buf);

	if (!on_device) {
		memset(dst, 0, whole);
		for (int i = 0; i < np; i++)
			memcpy((char *)dst + pc[i][0], (const char *)src + pc[i][1], pc[i][2]);
		return 0;
	}
	rc = zn_memset_async(e->rt.copy_in, dst, 0, whole);
	for (int i = 0; !rc && i < np; i++)
		rc = zn_memcpy_async(e->rt.copy_in, (char *)dst + pc[i][0],
				     (const char *)src + pc[i][1], pc[i][2], ZN_COPY_H2D);
	return rc;
}

/* nvme: a chunk of the resumed m and v (n real elements, file layout), zero beyond them as
 * at create; compact m and v are one chunk (plan.c) */
struct state_in {
	struct zn_engine *e;
	const void *m, *v;
	uint64_t n, n_buf;
};

static int state_in_chunk(void *ctx, uint64_t off, uint64_t len, const struct zn_sbuf *sb)
{
	const struct state_in *in = ctx;
	uint64_t n = in->n > off ? in->n - off : 0;

	if (n > len)
		n = len;
	if (in->e->plan.states != ZN_STATES_FP32) {
		put_moment(in->e, sb->m_h, in->m, in->n_buf, n, false);
		return put_moment(in->e, sb->v_h, in->v, in->n_buf, n, false);
	}
	memset(sb->m_h, 0, len * 4);
	memset(sb->v_h, 0, len * 4);
	memcpy(sb->m_h, (const float *)in->m + off, n * 4);
	memcpy(sb->v_h, (const float *)in->v + off, n * 4);
	return 0;
}

int zn_ckpt_state_put(struct zn_engine *e, int l, const void *m, const void *v)
{
	uint64_t n = e->L[l].opt_count, n_buf = zn_tiers_optim_numel(&e->ti, l);
	struct zn_adamw_moments mo;
	int rc = 0;

	if (e->plan.pl.optim == ZN_TIER_NVME) {
		struct state_in in = { e, m, v, n, n_buf };

		return zn_swapio_state_io(&e->sw, l, ZN_SWAPIO_M | ZN_SWAPIO_V, true, state_in_chunk,
					  &in);
	}
	zn_tiers_moments(&e->ti, l, NULL, &mo); /* on the optimizer's tier, as stored */
	if (e->plan.pl.optim == ZN_TIER_HOST) {
		put_moment(e, mo.m, m, n_buf, n, false);
		return put_moment(e, mo.v, v, n_buf, n, false);
	}
	rc = put_moment(e, mo.m, m, n_buf, n, true);
	if (!rc)
		rc = put_moment(e, mo.v, v, n_buf, n, true);
	if (!rc)
		rc = zn_stream_synchronize(e->rt.copy_in);
	return rc;
}

void zn_ckpt_state_counters(struct zn_engine *e, int64_t *step, int64_t *skipped,
			    struct zn_lossscale *ls)
{
	*step = e->step;
	zn_optim_counters(&e->opt, skipped, ls);
}

void zn_ckpt_state_set_counters(struct zn_engine *e, int64_t step, int64_t skipped,
				const struct zn_lossscale *ls)
{
	e->step = step;
	zn_optim_resume_counters(&e->opt, skipped, ls);
}

/* ---- nvme extents copied file to file ------------------------------------------------- */

static atomic_uint_fast64_t copied_bytes;

uint64_t zn_ckpt_nvme_copied_bytes(void)
{
	return atomic_load(&copied_bytes);
}

enum zn_optim_states zn_ckpt_state_states(const struct zn_engine *e)
{
	return e->plan.states;
}

bool zn_ckpt_state_on_nvme(const struct zn_engine *e)
{
	return e->plan.pl.optim == ZN_TIER_NVME;
}

/* Appends bytes [from, from + bytes) of layer l's part k (0 master, 1 m, 2 v) to fd at its
 * file position with copy_file_range (the kernel copies, or reflinks where the filesystem
 * can), stripe unit by stripe unit. -EOPNOTSUPP (nothing appended) when the filesystems
 * do not support it: the caller copies through the staging buffer instead. */
int zn_ckpt_state_copy(struct zn_engine *e, int l, int k, int fd, uint64_t from,
		       uint64_t bytes, const char *path)
{
	uint64_t done = 0;
	int rc = zn_swapio_quiesce(&e->sw); /* the last step's write-behind is in the extent */

	while (!rc && done < bytes) {
		const char *file;
		uint64_t fo, n;
		off64_t off;
		int in;

		rc = zn_swapio_state_locate(&e->sw, l, k, from + done, &file, &fo);
		if (rc)
			break;
		n = ZN_PLAN_SWAP_STRIPE - fo % ZN_PLAN_SWAP_STRIPE;
		if (n > bytes - done)
			n = bytes - done;
		in = open(file, O_RDONLY | O_CLOEXEC);
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
