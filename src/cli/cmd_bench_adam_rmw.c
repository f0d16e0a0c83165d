/* zinc bench adam's bound: AdamW's streams with no arithmetic to speak of. zero is 0 at run
 * time, so nothing changes, but the compiler cannot know that and must load and store every
 * stream: the gradient read; the master, m and v (as stored: 4, 2 or 1 bytes) read and
 * written in place; int8's block scales (one float per 256 elements each) read and written;
 * the output copy written. Same loop structure as zn_adamw_step (static schedule over 16
 * Ki-element chunks, `omp simd` bodies specialised per element size), so the two differ
 * only in the arithmetic. */
#include <math.h>
#include <stdint.h>

#include "cli/cmd_bench_adam.h"
#include "cpu/q8.h"

#define RMW_CHUNK_COUNT 16384 /* a multiple of the int8 block */
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void rmw_chunk(float *restrict mst, void *restrict m, void *restrict v,
				    const void *restrict grad, void *restrict out, size_t gsize,
				    size_t osize, size_t es, float zero, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float g = gsize == 4 ? ((const float *)grad)[i]
				     : (float)((const uint16_t *)grad)[i];
		float x = fmaf(g, zero, mst[i]);

		g *= zero;
		mst[i] = x;
		if (es == 4) {
			((float *)m)[i] += g;
			((float *)v)[i] += g;
		} else if (es == 2) {
			((uint16_t *)m)[i] += (uint16_t)g;
			((uint16_t *)v)[i] += (uint16_t)g;
		} else {
			((uint8_t *)m)[i] += (uint8_t)g;
			((uint8_t *)v)[i] += (uint8_t)g;
		}
		if (osize == 4)
			((float *)out)[i] = x;
		else if (osize == 2)
			((uint16_t *)out)[i] = (uint16_t)(x * zero);
	}
}

static ALWAYS_INLINE void rmw_out(float *mst, void *m, void *v, const void *g, void *o,
				  size_t gsize, size_t osize, size_t es, float zero, size_t n)
{
	if (osize == 4)
		rmw_chunk(mst, m, v, g, o, gsize, 4, es, zero, n);
	else if (osize == 2)
		rmw_chunk(mst, m, v, g, o, gsize, 2, es, zero, n);
	else
		rmw_chunk(mst, m, v, g, o, gsize, 0, es, zero, n);
}

static ALWAYS_INLINE void rmw_grad(float *mst, void *m, void *v, const void *g, void *o,
				   size_t gsize, size_t osize, size_t es, float zero, size_t n)
{
	if (gsize == 4)
		rmw_out(mst, m, v, g, o, 4, osize, es, zero, n);
	else
		rmw_out(mst, m, v, g, o, 2, osize, es, zero, n);
}

/* elements [at, at + n) of every stream */
static void rmw_range(float *master, const struct zn_adamw_moments *mo, const void *grad,
		      size_t gsize, void *out, size_t osize, size_t at, size_t n, float zero)
{
	const char *g = (const char *)grad + at * gsize;
	char *o = out ? (char *)out + at * osize : NULL;
	struct zn_adamw_moments a;

	zn_adamw_moments_at(&a, mo, at);
	if (mo->states == ZN_STATES_INT8) {
		rmw_grad(master + at, a.m, a.v, g, o, gsize, osize, 1, zero, n);
		for (size_t k = 0; k < zn_q8_blocks(n); k++) {
			a.m_absmax[k] += zero;
			a.v_absmax[k] += zero;
		}
	} else if (mo->states == ZN_STATES_BF16) {
		rmw_grad(master + at, a.m, a.v, g, o, gsize, osize, 2, zero, n);
	} else {
		rmw_grad(master + at, a.m, a.v, g, o, gsize, osize, 4, zero, n);
	}
}

void zn_bench_adam_rmw(float *master, const struct zn_adamw_moments *mo, const void *grad,
		       size_t gsize, void *out, size_t osize, size_t n, int threads, float zero)
{
	int64_t chunks = ((int64_t)n + RMW_CHUNK_COUNT - 1) / RMW_CHUNK_COUNT;

#pragma omp parallel for schedule(static) num_threads(threads)
	for (int64_t c = 0; c < chunks; c++) {
		int64_t at = c * RMW_CHUNK_COUNT;
		int64_t len = (int64_t)n - at < RMW_CHUNK_COUNT ? (int64_t)n - at : RMW_CHUNK_COUNT;

		rmw_range(master, mo, grad, gsize, out, osize, (size_t)at, (size_t)len, zero);
	}
}
