/* q8.h's block passes: widen one block's codes to map entries, code one block. With
 * AVX-512 VBMI (and BW) both go through byte-plane lookups of 64 codes (vpermi2b, 128
 * bytes a lookup: no gathers, no table larger than 2 KiB per map) and the code through
 * q8.h's estimate and one comparison; without it, plain loops through the map and the
 * bucket tables. Both give q8_code's count for every float (the tests compare them over
 * every sign, decade edge and midpoint); AdamW's int8 pass (adamw_q8.c) calls the pair
 * versions once per block, which with VBMI interleave m's and v's runs. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu/adamw_simd.h"
#include "cpu/q8.h"
#include "cpu/q8_block.h"

#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>

/* lookup()'s output k, element 4 l + r (l the 128-bit lane, r 0 .. 3) comes from byte
 * 16 l + 4 k + r of its index: element 16 k + m of a run of 64 codes goes there (a 4 x 4
 * transpose of 4-byte groups, its own inverse) */
static _Alignas(64) const uint8_t lookup_order[64] = {
	0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,
	4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
	8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
	12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63,
};

/* 64 entries of a 256-float table kept as four byte planes, for 64 codes in lookup_order:
 * each plane is two 128-byte lookups and a blend on the code's top bit; the interleave of
 * the four planes makes the floats. */
static inline void lookup(__m512 out[4], __m512i idx, const uint8_t plane[4][256])
{
	__mmask64 upper = _mm512_movepi8_mask(idx);
	__m512i p[4];

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(plane[k]), idx,
						      _mm512_load_si512(plane[k] + 64));
		__m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(plane[k] + 128), idx,
						      _mm512_load_si512(plane[k] + 192));

		p[k] = _mm512_mask_blend_epi8(upper, lo, hi);
	}
	__m512i b01 = _mm512_unpacklo_epi8(p[0], p[1]), t01 = _mm512_unpackhi_epi8(p[0], p[1]);
	__m512i b23 = _mm512_unpacklo_epi8(p[2], p[3]), t23 = _mm512_unpackhi_epi8(p[2], p[3]);

	out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(b01, b23));
	out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(b01, b23));
	out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(t01, t23));
	out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(t01, t23));
}

static ALWAYS_INLINE void widen_run(float *y, const uint8_t *codes, const struct zn_q8_vtab *t)
{
	__m512 f[4];

	lookup(f, _mm512_permutexvar_epi8(_mm512_load_si512(lookup_order),
					  _mm512_loadu_si512(codes)),
	       t->map_plane);
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
		_mm512_storeu_ps(y + 16 * k, f[k]);
}

void zn_q8_widen_block(float *y, const uint8_t *codes, bool is_signed)
{
	const struct zn_q8_vtab *t = zn_q8_vtab(is_signed);

	for (int i = 0; i < ZN_Q8_BLOCK; i += 64)
		widen_run(y + i, codes + i, t);
}

void zn_q8_widen_pair(float *m, const uint8_t *m_codes, float *v, const uint8_t *v_codes)
{
	const struct zn_q8_vtab *tm = zn_q8_vtab(true), *tv = zn_q8_vtab(false);

	for (int i = 0; i < ZN_Q8_BLOCK; i += 64) {
		widen_run(m + i, m_codes + i, tm);
		widen_run(v + i, v_codes + i, tv);
	}
}

/* q8.h's estimate for 16 scaled values: the count of midpoints below each or one less,
 * where it lies in [0, 255]; below 0 the count is 0, above 255 it is 255 (pack() clamps) */
static inline __m512i estimate(__m512 xs, const struct zn_q8_vtab *t)
{
	__m512i bits = _mm512_castps_si512(xs);
	/* NaN clamps to 2 (count 255 or, negative, 0 as q8_code's last bucket), tiny and
	 * subnormal values to 2^-24 (inside decade 0's line) */
	__m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
	__m512i ab = _mm512_min_epu32(_mm512_max_epu32(mag, _mm512_set1_epi32(0x33800000)),
				      _mm512_set1_epi32(0x40000000));
	__m512 y = _mm512_castsi512_ps(ab);
	/* the binade's power of ten, its low 4 bits the decade of the binade's start (q8.h);
	 * the line's permute reads those 4 bits only */
	__m512i r = _mm512_permutex2var_epi32(_mm512_loadu_si512(t->bin_edge),
					      _mm512_srli_epi32(ab, 23),
					      _mm512_loadu_si512(t->bin_edge + 16));
	__mmask16 upper = _mm512_cmp_ps_mask(y, _mm512_castsi512_ps(r), _CMP_GE_OQ);

	r = _mm512_mask_add_epi32(r, upper, r, _mm512_set1_epi32(1));
	r = _mm512_mask_add_epi32(r, _mm512_movepi32_mask(bits), r, _mm512_set1_epi32(8));
	__m512 line = _mm512_fmadd_ps(_mm512_permutexvar_ps(r, _mm512_loadu_ps(t->seg_a)), y,
				      _mm512_permutexvar_ps(r, _mm512_loadu_ps(t->seg_b)));

	return _mm512_cvt_roundps_epi32(line, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}

/* four vectors of 16 counts as bytes clamped to [0, 255] (signed saturation to words,
 * unsigned to bytes), in lookup_order's layout: byte 16 l + 4 k + r is element 4 l + r of
 * z[k], as the packs interleave per 128-bit lane */
static inline __m512i pack(const __m512i z[4])
{
	return _mm512_packus_epi16(_mm512_packs_epi32(z[0], z[1]),
				   _mm512_packs_epi32(z[2], z[3]));
}

/* A run of 64 values being coded: loaded (x), scaled (xs), estimated (z). Coding is a
 * long chain of dependent steps (scale, estimate, pack, lookup, compare, pack), so the
 * passes keep four runs in flight, estimating all before finishing any: the CPU overlaps
 * their chains (one run at a time waited on each step: 1.3x the time). */
struct run {
	__m512 x[4], xs[4];
	__m512i z[4];
};

static ALWAYS_INLINE void run_estimate(struct run *r, const float *x, __m512 scale,
				       const struct zn_q8_vtab *t)
{
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		r->x[k] = _mm512_loadu_ps(x + 16 * k);
		r->xs[k] = _mm512_mul_ps(r->x[k], scale);
		r->z[k] = estimate(r->xs[k], t);
	}
}

/* one instantiation per map: the sign rule folds away for v */
static ALWAYS_INLINE void run_finish(uint8_t *codes, struct run *r, const struct zn_q8_vtab *t,
				     bool is_signed)
{
	__m512 bound[4];

	/* an estimate below 0 or above 255 is the count clamped: the comparison with
	 * bounds[0] (x not above it) or bounds[255] (+inf) keeps it so */
	lookup(bound, pack(r->z), t->bound_plane);
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		/* one midpoint more below x: the estimate was one short */
		__mmask16 above = _mm512_cmp_ps_mask(r->xs[k], bound[k], _CMP_GT_OQ);

		r->z[k] = _mm512_mask_add_epi32(r->z[k], above, r->z[k], _mm512_set1_epi32(1));
		/* m keeps its sign: a negative m never becomes 0 (code 127) */
		if (is_signed)
			r->z[k] = _mm512_mask_min_epi32(
				r->z[k], _mm512_cmp_ps_mask(r->x[k], _mm512_setzero_ps(), _CMP_LT_OQ),
				r->z[k], _mm512_set1_epi32(ZN_Q8_ZERO_SIGNED - 1));
	}
	_mm512_storeu_si512(codes, _mm512_permutexvar_epi8(_mm512_load_si512(lookup_order),
							   pack(r->z)));
}

static inline __m512 scale_of(float absmax)
{
	/* one reciprocal per block; 0 for an all-zero block (q8.h) */
	return _mm512_set1_ps(absmax > 0.0f ? 1.0f / absmax : 0.0f);
}

/* max(|x|, amax) keeps amax where x is NaN, as zn_q8_quantize's comparison */
static inline __m512 absmax_acc(__m512 amax, const float *x)
{
	return _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)), amax);
}

/* the block's four runs in flight */
static ALWAYS_INLINE void code_simd(uint8_t *codes, const float *x, __m512 scale,
				    const struct zn_q8_vtab *t, bool is_signed)
{
	struct run r[ZN_Q8_BLOCK / 64];

#pragma GCC unroll 4
	for (int j = 0; j < ZN_Q8_BLOCK / 64; j++)
		run_estimate(&r[j], x + 64 * j, scale, t);
#pragma GCC unroll 4
	for (int j = 0; j < ZN_Q8_BLOCK / 64; j++)
		run_finish(codes + 64 * j, &r[j], t, is_signed);
}

void zn_q8_code_block(uint8_t *codes, const float *x, float inv, bool is_signed)
{
	const struct zn_q8_vtab *t = zn_q8_vtab(is_signed);

	if (is_signed)
		code_simd(codes, x, _mm512_set1_ps(inv), t, true);
	else
		code_simd(codes, x, _mm512_set1_ps(inv), t, false);
}

float zn_q8_quantize_block(uint8_t *codes, const float *x, bool is_signed)
{
	__m512 amax = _mm512_setzero_ps();

	for (int i = 0; i < ZN_Q8_BLOCK; i += 16)
		amax = absmax_acc(amax, x + i);

	const float absmax = _mm512_reduce_max_ps(amax);

	zn_q8_code_block(codes, x, absmax > 0.0f ? 1.0f / absmax : 0.0f, is_signed);
	return absmax;
}

void zn_q8_quantize_pair(uint8_t *m_codes, float *m_absmax, const float *m, uint8_t *v_codes,
			 float *v_absmax, const float *v)
{
	const struct zn_q8_vtab *tm = zn_q8_vtab(true), *tv = zn_q8_vtab(false);
	__m512 am = _mm512_setzero_ps(), av = _mm512_setzero_ps();

	for (int i = 0; i < ZN_Q8_BLOCK; i += 16) {
		am = absmax_acc(am, m + i);
		av = absmax_acc(av, v + i);
	}
	*m_absmax = _mm512_reduce_max_ps(am);
	*v_absmax = _mm512_reduce_max_ps(av);

	const __m512 sm = scale_of(*m_absmax), sv = scale_of(*v_absmax);

	/* two runs of each in flight */
	for (int i = 0; i < ZN_Q8_BLOCK; i += 2 * 64) {
		struct run r[4];

		run_estimate(&r[0], m + i, sm, tm);
		run_estimate(&r[1], v + i, sv, tv);
		run_estimate(&r[2], m + i + 64, sm, tm);
		run_estimate(&r[3], v + i + 64, sv, tv);
		run_finish(m_codes + i, &r[0], tm, true);
		run_finish(v_codes + i, &r[1], tv, false);
		run_finish(m_codes + i + 64, &r[2], tm, true);
		run_finish(v_codes + i + 64, &r[3], tv, false);
	}
}

#else

void zn_q8_widen_block(float *y, const uint8_t *codes, bool is_signed)
{
	const float *restrict map = zn_q8_map(is_signed);
	const uint8_t *restrict c = codes;

#pragma omp simd
	for (int i = 0; i < ZN_Q8_BLOCK; i++)
		y[i] = map[c[i]];
}

/* one loop per map, so the sign rule folds away for v */
static ALWAYS_INLINE void code_loop(uint8_t *restrict codes, const float *restrict x, float inv,
				    const int32_t *restrict entry, bool is_signed)
{
#pragma omp simd
	for (int i = 0; i < ZN_Q8_BLOCK; i++) {
		unsigned c = q8_code(entry, x[i] * inv);

		/* m keeps its sign: a negative m never becomes 0 */
		c -= is_signed && x[i] < 0.0f && c == ZN_Q8_ZERO_SIGNED ? 1u : 0u;
		codes[i] = (uint8_t)c;
	}
}

void zn_q8_code_block(uint8_t *codes, const float *x, float inv, bool is_signed)
{
	const int32_t *entry = zn_q8_lut(is_signed)->entry;

	if (is_signed)
		code_loop(codes, x, inv, entry, true);
	else
		code_loop(codes, x, inv, entry, false);
}

float zn_q8_quantize_block(uint8_t *codes, const float *x, bool is_signed)
{
	float absmax = 0.0f;

	/* max is exact: any order gives zn_q8_quantize's bits */
#pragma omp simd reduction(max : absmax)
	for (int i = 0; i < ZN_Q8_BLOCK; i++)
		absmax = fabsf(x[i]) > absmax ? fabsf(x[i]) : absmax;
	zn_q8_code_block(codes, x, absmax > 0.0f ? 1.0f / absmax : 0.0f, is_signed);
	return absmax;
}

void zn_q8_quantize_pair(uint8_t *m_codes, float *m_absmax, const float *m, uint8_t *v_codes,
			 float *v_absmax, const float *v)
{
	*m_absmax = zn_q8_quantize_block(m_codes, m, true);
	*v_absmax = zn_q8_quantize_block(v_codes, v, false);
}

void zn_q8_widen_pair(float *m, const uint8_t *m_codes, float *v, const uint8_t *v_codes)
{
	zn_q8_widen_block(m, m_codes, true);
	zn_q8_widen_block(v, v_codes, false);
}

#endif
