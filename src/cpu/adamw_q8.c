/* AdamW with int8 moments (adamw.h, "compact moments"): one pass over each block of
 * ZN_Q8_BLOCK elements, OpenMP over fixed chunks of blocks, `omp simd` bodies.
 *
 * A block is widened, updated and quantized while it sits in L1: zn_q8_widen_pair turns
 * m's and v's codes into map entries (byte-plane permutes with AVX-512 VBMI, table loads
 * otherwise), the loop runs adamw.h's update, writes the master and the parameter copy and
 * keeps the fresh m and v in two local arrays, and zn_q8_quantize_pair finds their absmax
 * and codes, both moments in one loop (q8_block.c). Memory sees each stream once.
 *
 * Weight decay is per element: a block may straddle two tensors (the shard is one flat
 * buffer, cut into blocks from its start), so each block gets its decay factors in a
 * small array, refilled only when the block's span changes. The result does not depend on
 * the thread count (blocks are independent) and equals zn_adamw_step_states_ref bit for bit
 * (the tests check it): the same operations, in the same order, from the same tables.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "core/log.h"
#include "cpu/adamw_impl.h"
#include "cpu/adamw_simd.h"
#include "cpu/q8.h"
#include "cpu/q8_block.h"

/* 64 blocks: 16 Ki elements, as adamw.c's chunks */
#define CHUNK_BLOCKS 64u
#define CHUNK_COUNT (CHUNK_BLOCKS * ZN_Q8_BLOCK)

struct q8_call {
	struct zn_adamw_consts k;  /* decay and l2_decay come per element */
	const float *span_decay, *span_l2; /* per span */
	const struct zn_adamw_span *spans;
	int span_count;
	float *master;
	uint8_t *mq, *vq;
	float *m_absmax, *v_absmax;
	const void *grad;
	enum zn_dtype gt;
	size_t gsize;
	void *out;
	int ot;
	size_t osize;
	size_t n;
};

static ALWAYS_INLINE void q8_block(const struct q8_call *a, const float *restrict dec,
				   const float *restrict l2d, size_t b0, size_t len,
				   enum zn_dtype gt, int ot, bool l2)
{
	const struct zn_adamw_consts *k = &a->k;
	const float beta1 = k->beta1, beta2 = k->beta2, omb1 = k->omb1, omb2 = k->omb2;
	const float eps = k->eps, neg_step = k->neg_step_size, ibc2 = k->inv_bc2_sqrt;
	const float scale = k->grad_scale;
	size_t b = b0 / ZN_Q8_BLOCK;
	const float am = a->m_absmax[b], av = a->v_absmax[b];
	float *restrict master = a->master + b0;
	uint8_t *restrict mq = a->mq + b0, *restrict vq = a->vq + b0;
	const void *restrict grad = (const char *)a->grad + b0 * a->gsize;
	void *restrict out = a->out ? (char *)a->out + b0 * a->osize : NULL;
	_Alignas(64) float mt[ZN_Q8_BLOCK], vt[ZN_Q8_BLOCK];

	/* the block's map entries (the padding's too: the codes cover whole blocks) */
	zn_q8_widen_pair(mt, mq, vt, vq);
#pragma omp simd
	for (size_t i = 0; i < len; i++) {
		float graw = load_grad(grad, gt, i);
		/* exponent all ones: inf or NaN (bitsandbytes resets such an element) */
		bool ok = (f32_bits(graw) & 0x7f800000u) != 0x7f800000u;
		float g = graw * scale;

		if (l2) /* a constant here: folded away */
			g = fma_simd(l2d[i], master[i], g);
		float mi = fma_simd(beta1, mt[i] * am, omb1 * g);
		float vi = fma_simd(beta2, vt[i] * av, (omb2 * g) * g);
		float denom = fma_simd(sqrtf(vi), ibc2, eps);
		float p = fma_simd(neg_step, mi / denom, master[i] * dec[i]);

		p = ok ? p : master[i];
		mi = ok ? mi : 0.0f;
		vi = ok ? vi : 0.0f;
		master[i] = p;
		store_out(out, ot, i, p);
		mt[i] = mi;
		vt[i] = vi;
	}
	/* the rest of the last block is padding: 0, whose codes are 0's */
	for (size_t i = len; i < ZN_Q8_BLOCK; i++) {
		mt[i] = 0.0f;
		vt[i] = 0.0f;
	}
	zn_q8_quantize_pair(mq, &a->m_absmax[b], mt, vq, &a->v_absmax[b], vt);
}

/* One instantiation per (gradient dtype, output dtype, mode). */
static ALWAYS_INLINE void q8_block_out(const struct q8_call *a, const float *dec,
				       const float *l2d, size_t b0, size_t len,
				       enum zn_dtype gt, bool l2)
{
	switch (a->ot) {
	case ZN_DTYPE_F32:
		q8_block(a, dec, l2d, b0, len, gt, ZN_DTYPE_F32, l2);
		break;
	case ZN_DTYPE_BF16:
		q8_block(a, dec, l2d, b0, len, gt, ZN_DTYPE_BF16, l2);
		break;
	case ZN_DTYPE_F16:
		q8_block(a, dec, l2d, b0, len, gt, ZN_DTYPE_F16, l2);
		break;
	default:
		q8_block(a, dec, l2d, b0, len, gt, ZN_ADAMW_OUT_NONE, l2);
		break;
	}
}

static ALWAYS_INLINE void q8_block_mode(const struct q8_call *a, const float *dec,
					const float *l2d, size_t b0, size_t len, bool l2)
{
	switch (a->gt) {
	case ZN_DTYPE_F32:
		q8_block_out(a, dec, l2d, b0, len, ZN_DTYPE_F32, l2);
		break;
	case ZN_DTYPE_BF16:
		q8_block_out(a, dec, l2d, b0, len, ZN_DTYPE_BF16, l2);
		break;
	case ZN_DTYPE_F16:
		q8_block_out(a, dec, l2d, b0, len, ZN_DTYPE_F16, l2);
		break;
	}
}

static void q8_block_any(const struct q8_call *a, const float *dec, const float *l2d,
			 size_t b0, size_t len)
{
	if (a->k.l2)
		q8_block_mode(a, dec, l2d, b0, len, true);
	else
		q8_block_mode(a, dec, l2d, b0, len, false);
}

static size_t span_end(const struct q8_call *a, int s)
{
	return a->spans[s].first + a->spans[s].count;
}

/* Blocks of chunk c, each with its elements' decay factors. */
static void q8_chunk(const void *arg, size_t c)
{
	const struct q8_call *a = arg;
	float dec[ZN_Q8_BLOCK], l2d[ZN_Q8_BLOCK];
	size_t first = c * CHUNK_COUNT;
	size_t end = a->n - first < CHUNK_COUNT ? a->n : first + CHUNK_COUNT;
	int s = 0, filled = -1; /* filled: the span dec and l2d hold throughout, or -1 */

	for (size_t b0 = first; b0 < end; b0 += ZN_Q8_BLOCK) {
		size_t len = end - b0 < ZN_Q8_BLOCK ? end - b0 : ZN_Q8_BLOCK;

		while (b0 >= span_end(a, s))
			s++;
		if (b0 + len <= span_end(a, s)) {
			for (size_t i = 0; filled != s && i < ZN_Q8_BLOCK; i++) {
				dec[i] = a->span_decay[s];
				l2d[i] = a->span_l2[s];
			}
			filled = s;
		} else {
			/* the block straddles spans (tensors) */
			for (size_t i = 0, t = (size_t)s; i < len; i++) {
				while (b0 + i >= span_end(a, (int)t))
					t++;
				dec[i] = a->span_decay[t];
				l2d[i] = a->span_l2[t];
			}
			filled = -1;
		}
		q8_block_any(a, dec, l2d, b0, len);
	}
}

int zn_adamw_q8_step(const struct zn_adamw_params *p, float *master,
		     const struct zn_adamw_moments *mo, const void *grad, enum zn_dtype grad_dtype,
		     void *param_out, enum zn_dtype out_dtype, size_t n,
		     const struct zn_adamw_span *spans, int span_count)
{
	struct q8_call a = {
		.spans = spans, .span_count = span_count, .master = master, .mq = mo->m,
		.vq = mo->v, .m_absmax = mo->m_absmax, .v_absmax = mo->v_absmax, .grad = grad,
		.gt = grad_dtype, .gsize = grad_dtype == ZN_DTYPE_F32 ? 4 : 2, .out = param_out,
		.ot = param_out ? (int)out_dtype : ZN_ADAMW_OUT_NONE,
		.osize = out_dtype == ZN_DTYPE_F32 ? 4 : 2, .n = n,
	};
	float *sc = malloc(2 * (size_t)(span_count > 0 ? span_count : 1) * sizeof(*sc));

	if (!sc) {
		zn_error("AdamW (int8 moments): no memory for the decay factors of %d spans",
			 span_count);
		return -ENOMEM;
	}
	/* each span's decay factors, rounded as zn_adamw_consts_get rounds them */
	for (int s = 0; s < span_count; s++) {
		struct zn_adamw_params q = *p;

		q.weight_decay = spans[s].weight_decay;
		zn_adamw_consts_get(&a.k, &q);
		sc[s] = a.k.decay;
		sc[span_count + s] = a.k.l2_decay;
	}
	zn_adamw_consts_get(&a.k, p);
	a.span_decay = sc;
	a.span_l2 = sc + span_count;
	zn_adamw_run_chunks(p, n, (n + CHUNK_COUNT - 1) / CHUNK_COUNT, q8_chunk, &a);
	free(sc);
	return 0;
}
