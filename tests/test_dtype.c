/* bf16/fp16 conversions (core/dtype.c) and AdamW's branchless copies of them (cpu/adamw.c):
 * edge cases, ties to even, subnormals, overflow, NaN, exhaustive round trips, and an
 * independent round-to-nearest-even reference computed in double. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "cpu/adamw.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float flt(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* ---- independent references (double arithmetic, rint = ties to even) --------------- */

/* bf16 bits for finite or infinite x, NaN handled by the caller. */
static uint16_t bf16_ref(float x)
{
	uint32_t u = bits(x);
	uint32_t sign = u & 0x80000000u;
	uint32_t a = u & 0x7fffffffu;

	if (a >= 0x7f800000u)
		return (uint16_t)((sign | a) >> 16);
	/* bf16 has fp32's exponent range and 8 mantissa bits: the grid spacing is 2^16 units
	 * of the fp32 bit pattern within a binade, so rounding |x| on the grid of its own
	 * exponent is rint(|x| / ulp) * ulp with ulp = 2^(e - 7) (2^-133 for subnormals). */
	int e = (int)(a >> 23) - 127;
	double ulp = ldexp(1.0, (e < -126 ? -126 : e) - 7);
	double r = rint(fabs((double)x) / ulp) * ulp;

	if (r >= ldexp(1.0, 128)) /* past the largest bf16: overflow to inf */
		return (uint16_t)((sign >> 16) | 0x7f80u);
	float rf = (float)r; /* exact: r has at most 8 significant bits */

	return (uint16_t)((sign | bits(rf)) >> 16);
}

/* fp16 bits for finite or infinite x. */
static uint16_t f16_ref(float x)
{
	uint32_t sign = (bits(x) >> 16) & 0x8000u;
	double ax = fabs((double)x);

	if (isinf(x))
		return (uint16_t)(sign | 0x7c00u);
	int e = ax > 0 ? ilogb(ax) : -30;
	double ulp = ldexp(1.0, (e < -14 ? -14 : e) - 10);
	double r = rint(ax / ulp) * ulp;

	if (r > 65504.0)
		return (uint16_t)(sign | 0x7c00u);
	if (r < ldexp(1.0, -14)) /* subnormal or zero: r = k * 2^-24 */
		return (uint16_t)(sign | (uint16_t)ldexp(r, 24));
	int re = ilogb(r);
	uint32_t mant = (uint32_t)(ldexp(r, 10 - re) - 1024.0);

	return (uint16_t)(sign | ((uint32_t)(re + 15) << 10) | mant);
}

static void expect_bf16(uint32_t in, uint16_t want)
{
	uint16_t got = zn_f32_to_bf16(flt(in));

	cr_expect_eq(got, want, "f32 0x%08x (%.9g) -> bf16 0x%04x, want 0x%04x", in, flt(in),
		     got, want);
}

static void expect_f16(uint32_t in, uint16_t want)
{
	uint16_t got = zn_f32_to_f16(flt(in));

	cr_expect_eq(got, want, "f32 0x%08x (%.9g) -> fp16 0x%04x, want 0x%04x", in, flt(in),
		     got, want);
}

Test(dtype, bf16_edge_cases)
{
	expect_bf16(0x00000000u, 0x0000);  /* +0 */
	expect_bf16(0x80000000u, 0x8000);  /* -0 */
	expect_bf16(bits(1.0f), 0x3f80);
	expect_bf16(0x3f808000u, 0x3f80);  /* tie, even below: down */
	expect_bf16(0x3f818000u, 0x3f82);  /* tie, odd below: up */
	expect_bf16(0x3f808001u, 0x3f81);  /* just above the tie */
	expect_bf16(0x3f807fffu, 0x3f80);  /* just below the tie */
	expect_bf16(0x7f7f7fffu, 0x7f7f);  /* largest bf16 */
	expect_bf16(0x7f7f8000u, 0x7f80);  /* tie at the top, odd: overflow to inf */
	expect_bf16(bits(FLT_MAX), 0x7f80); /* FLT_MAX rounds up to inf */
	expect_bf16(0xff7fffffu, 0xff80);  /* -FLT_MAX to -inf */
	expect_bf16(0x7f800000u, 0x7f80);  /* inf */
	expect_bf16(0xff800000u, 0xff80);  /* -inf */
	expect_bf16(0x7fc00000u, 0x7fc0);  /* quiet NaN */
	expect_bf16(0x7f800001u, 0x7fc0);  /* signalling NaN, payload only in the dropped bits */
	expect_bf16(0xff800001u, 0xffc0);  /* negative NaN keeps its sign */
	expect_bf16(0x7fffffffu, 0x7fff);  /* NaN must not round into the sign bit */
	expect_bf16(0x00000001u, 0x0000);  /* smallest fp32 subnormal */
	expect_bf16(0x00008000u, 0x0000);  /* subnormal tie, even: down */
	expect_bf16(0x00018000u, 0x0002);  /* subnormal tie, odd: up */
	expect_bf16(0x00010000u, 0x0001);  /* smallest bf16 subnormal */
	expect_bf16(0x007fffffu, 0x0080);  /* largest fp32 subnormal rounds to the smallest normal */
	expect_bf16(0x807fffffu, 0x8080);
}

Test(dtype, f16_edge_cases)
{
	expect_f16(bits(0.0f), 0x0000);
	expect_f16(bits(-0.0f), 0x8000);
	expect_f16(bits(1.0f), 0x3c00);
	expect_f16(bits(1.0f + 0x1p-11f), 0x3c00);        /* tie, even: down */
	expect_f16(bits(1.0f + 3 * 0x1p-11f), 0x3c02);    /* tie, odd: up */
	expect_f16(bits(65504.0f), 0x7bff);               /* largest fp16 */
	expect_f16(bits(65519.996f), 0x7bff);             /* below the overflow tie */
	expect_f16(bits(65520.0f), 0x7c00);               /* tie at the top: inf */
	expect_f16(bits(1e10f), 0x7c00);
	expect_f16(bits(-1e10f), 0xfc00);
	expect_f16(bits(FLT_MAX), 0x7c00);
	expect_f16(0x7f800000u, 0x7c00);
	expect_f16(0xff800000u, 0xfc00);
	expect_f16(bits(0x1p-14f), 0x0400);               /* smallest normal */
	expect_f16(bits(0x1p-14f - 0x1p-25f), 0x0400);    /* tie between 0x3ff and 0x400: even */
	expect_f16(bits(0x1p-24f), 0x0001);               /* smallest subnormal */
	expect_f16(bits(0x1p-25f), 0x0000);               /* tie between 0 and 1: even (0) */
	expect_f16(bits(0x1p-25f) + 1, 0x0001);           /* just above: up */
	expect_f16(bits(3 * 0x1p-25f), 0x0002);           /* tie between 1 and 2: even (2) */
	expect_f16(bits(5 * 0x1p-25f), 0x0002);           /* tie between 2 and 3: even (2) */
	expect_f16(bits(-0x1p-24f), 0x8001);
	expect_f16(bits(0x1p-30f), 0x0000);               /* underflow keeps... zero */
	expect_f16(bits(-0x1p-30f), 0x8000);              /* ...and its sign */
	expect_f16(0x00000001u, 0x0000);                  /* fp32 subnormal */
	uint16_t n = zn_f32_to_f16(flt(0x7fc00000u));

	cr_expect((n & 0x7c00) == 0x7c00 && (n & 0x3ff), "NaN -> 0x%04x is not a NaN", n);
	n = zn_f32_to_f16(flt(0x7f800001u)); /* payload only in the dropped bits */
	cr_expect((n & 0x7c00) == 0x7c00 && (n & 0x200), "sNaN -> 0x%04x is not a quiet NaN", n);
	n = zn_f32_to_f16(flt(0xffc00000u));
	cr_expect(n & 0x8000, "-NaN -> 0x%04x lost its sign", n);
}

Test(dtype, f16_and_bf16_to_f32_edge_cases)
{
	cr_expect_eq(bits(zn_f16_to_f32(0x0001)), bits(0x1p-24f));
	cr_expect_eq(bits(zn_f16_to_f32(0x03ff)), bits(1023 * 0x1p-24f));
	cr_expect_eq(bits(zn_f16_to_f32(0x0400)), bits(0x1p-14f));
	cr_expect_eq(bits(zn_f16_to_f32(0x8001)), bits(-0x1p-24f));
	cr_expect_eq(bits(zn_f16_to_f32(0x7bff)), bits(65504.0f));
	cr_expect_eq(bits(zn_f16_to_f32(0x7c00)), 0x7f800000u);
	cr_expect_eq(bits(zn_f16_to_f32(0xfc00)), 0xff800000u);
	cr_expect_eq(bits(zn_f16_to_f32(0x8000)), 0x80000000u);
	cr_expect(isnan(zn_f16_to_f32(0x7e00)) && isnan(zn_f16_to_f32(0x7c01)));
	cr_expect_eq(bits(zn_bf16_to_f32(0x0001)), 0x00010000u); /* bf16 subnormal */
	cr_expect_eq(bits(zn_bf16_to_f32(0xff80)), 0xff800000u);
	cr_expect(isnan(zn_bf16_to_f32(0x7f81)));
}

/* Every bf16 / fp16 value: to fp32 and back is the identity, except that a NaN comes back
 * as a quiet NaN with the same sign (and payload, plus the quiet bit). */
Test(dtype, exhaustive_round_trips)
{
	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t b = zn_f32_to_bf16(zn_bf16_to_f32((uint16_t)h));
		bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
		uint16_t want = nan ? (uint16_t)(h | 0x40) : (uint16_t)h;

		cr_assert_eq(b, want, "bf16 0x%04x -> 0x%04x", h, b);
		uint16_t f = zn_f32_to_f16(zn_f16_to_f32((uint16_t)h));

		nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
		want = nan ? (uint16_t)(h | 0x200) : (uint16_t)h;
		cr_assert_eq(f, want, "fp16 0x%04x -> 0x%04x", h, f);
	}
}

/* fp16 -> fp32 is exact: compare the value of every fp16 with its definition. */
Test(dtype, exhaustive_f16_values)
{
	for (uint32_t h = 0; h < 65536; h++) {
		int e = (h >> 10) & 0x1f, m = h & 0x3ff;
		double s = (h & 0x8000) ? -1 : 1;
		float got = zn_f16_to_f32((uint16_t)h);

		if (e == 0x1f) {
			cr_assert(m ? isnan(got) : got == s * INFINITY, "fp16 0x%04x -> %g", h, got);
			continue;
		}
		double want = e ? s * ldexp(1024 + m, e - 25) : s * ldexp(m, -24);

		cr_assert(got == want && !signbit(got) == !signbit(want),
			  "fp16 0x%04x -> %.9g, want %.9g", h, got, want);
	}
}

/* fp32 patterns around every rounding boundary: each high part with low parts at, just
 * below and just above the tie, plus the ends; compared with the double references. */
Test(dtype, rounding_matches_double_reference)
{
	static const uint32_t lows16[] = { 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc001 };
	static const uint32_t lows13[] = { 0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x0abc, 0x1800 };
	uint64_t bad_bf16 = 0, bad_f16 = 0;

	for (uint32_t hi = 0; hi < 65536; hi++) {
		for (int l = 0; l < 8; l++) {
			float x = flt(hi << 16 | lows16[l]);

			if (isnan(x))
				continue;
			uint16_t got = zn_f32_to_bf16(x), want = bf16_ref(x);

			if (got != want && bad_bf16++ < 5)
				cr_expect_fail("bf16(0x%08x %.9g) = 0x%04x, want 0x%04x", bits(x), x,
					       got, want);
		}
	}
	/* fp16 keeps 10 mantissa bits: walk sign, exponent and the top 10 bits (2^19). */
	for (uint32_t hi = 0; hi < (1u << 19); hi++) {
		for (int l = 0; l < 8; l++) {
			float x = flt(hi << 13 | lows13[l]);

			if (isnan(x))
				continue;
			uint16_t got = zn_f32_to_f16(x), want = f16_ref(x);

			if (got != want && bad_f16++ < 5)
				cr_expect_fail("fp16(0x%08x %.9g) = 0x%04x, want 0x%04x", bits(x), x,
					       got, want);
		}
	}
	cr_expect_eq(bad_bf16 + bad_f16, 0, "%llu bf16 and %llu fp16 mismatches",
		     (unsigned long long)bad_bf16, (unsigned long long)bad_f16);
}

#ifdef __FLT16_MAX__
/* The compiler's _Float16 conversion (IEEE, F16C where present) agrees on random floats. */
Test(dtype, f16_matches_compiler_float16)
{
	uint64_t s = 0x2545f4914f6cdd1dull;
	for (int i = 0; i < 2000000; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		/* bias the exponent into fp16's range half of the time */
		uint32_t u = (uint32_t)s;

		if (i & 1)
			u = (u & 0x807fffffu) | ((100u + (uint32_t)(s >> 40) % 45u) << 23);
		float x = flt(u);

		if (isnan(x))
			continue;
		_Float16 h = (_Float16)x;
		uint16_t want;

		memcpy(&want, &h, 2);
		cr_assert_eq(zn_f32_to_f16(x), want, "fp16(0x%08x %.9g) = 0x%04x, _Float16 0x%04x",
			     u, x, zn_f32_to_f16(x), want);
	}
}
#endif

Test(dtype, array_casts_match_scalar)
{
	const size_t n = 200003; /* above the OpenMP threshold */
	float *f = malloc(n * 4), *back = malloc(n * 4);
	uint16_t *h = malloc(n * 2);
	uint64_t s = 99;

	cr_assert(f && back && h);
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		f[i] = flt(((uint32_t)s & 0x8fffffffu) | 0x30000000u);
	}
	zn_cast_f32_to_bf16(h, f, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(h[i], zn_f32_to_bf16(f[i]), "bf16 cast [%zu]", i);
	zn_cast_bf16_to_f32(back, h, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(bits(back[i]), bits(zn_bf16_to_f32(h[i])), "bf16 back [%zu]", i);
	zn_cast_f32_to_f16(h, f, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(h[i], zn_f32_to_f16(f[i]), "fp16 cast [%zu]", i);
	zn_cast_f16_to_f32(back, h, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(bits(back[i]), bits(zn_f16_to_f32(h[i])), "fp16 back [%zu]", i);
	cr_expect_eq(zn_dtype_size(ZN_DTYPE_F32), 4);
	cr_expect_eq(zn_dtype_size(ZN_DTYPE_BF16), 2);
	cr_expect_str_eq(zn_dtype_name(ZN_DTYPE_F16), "fp16");
	free(f);
	free(back);
	free(h);
}

/* ---- AdamW's inline copies -------------------------------------------------------- */

/* With beta1 = beta2 = 0 and step 1, m after the step is exactly the loaded gradient
 * (fma(0, -0.5, 1 * g) = -0 + g = g, keeping the sign of a zero g): this reads back AdamW's own bf16/fp16 -> fp32 conversion for all
 * 65536 values, in SIMD lanes. */
Test(dtype, adamw_gradient_loads_exhaustive)
{
	const size_t n = 65536;
	float *master = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
	uint16_t *g = malloc(n * 2);
	struct zn_adamw_params p;
	enum zn_dtype types[] = { ZN_DTYPE_BF16, ZN_DTYPE_F16 };

	cr_assert(master && m && v && g);
	zn_adamw_params_init(&p, NULL);
	p.beta1 = 0;
	p.beta2 = 0;
	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; i < n; i++) {
			g[i] = (uint16_t)i;
			master[i] = 1;
			m[i] = -0.5f;
			v[i] = 0.5f;
		}
		cr_assert_eq(zn_adamw_step(&p, master, m, v, g, types[t], NULL, 0, n), 0);
		for (size_t i = 0; i < n; i++) {
			float want = types[t] == ZN_DTYPE_BF16 ? zn_bf16_to_f32(g[i])
							       : zn_f16_to_f32(g[i]);

			cr_assert(bits(m[i]) == bits(want) || (isnan(m[i]) && isnan(want)),
				  "%s 0x%04zx loads as %.9g (0x%08x), want %.9g",
				  zn_dtype_name(types[t]), i, m[i], bits(m[i]), want);
		}
	}
	free(master);
	free(m);
	free(v);
	free(g);
}

/* With lr = 0 master is unchanged (fma(-0, 0, master * 1) = master), so the output copy
 * shows AdamW's own fp32 -> bf16/fp16 rounding of chosen masters: edge cases and the
 * patterns around every fp16 rounding boundary. */
Test(dtype, adamw_output_rounding_matches)
{
	static const uint32_t lows13[] = { 0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x1800, 0x0800 };
	const size_t n = (1u << 19) * 8;
	float *master = malloc(n * 4), *m = calloc(n, 4), *v = malloc(n * 4), *g = calloc(n, 4);
	uint16_t *out = malloc(n * 2);
	struct zn_adamw_params p;
	enum zn_dtype types[] = { ZN_DTYPE_BF16, ZN_DTYPE_F16 };

	cr_assert(master && m && v && g && out);
	zn_adamw_params_init(&p, NULL);
	p.lr = 0;
	p.weight_decay = 0;
	for (int t = 0; t < 2; t++) {
		for (size_t i = 0; i < n; i++) {
			master[i] = flt((uint32_t)(i / 8) << 13 | lows13[i % 8]);
			m[i] = 0;
			v[i] = 1;
			g[i] = 0;
		}
		cr_assert_eq(zn_adamw_step(&p, master, m, v, g, ZN_DTYPE_F32, out, types[t], n), 0);
		for (size_t i = 0; i < n; i++) {
			float x = master[i]; /* after the step: unchanged, NaN made quiet */
			uint16_t want = types[t] == ZN_DTYPE_BF16 ? zn_f32_to_bf16(x)
								  : zn_f32_to_f16(x);

			cr_assert_eq(out[i], want, "%s(0x%08x %.9g) = 0x%04x in AdamW, 0x%04x in "
				     "dtype.c", zn_dtype_name(types[t]), bits(x), x, out[i], want);
		}
	}
	free(master);
	free(m);
	free(v);
	free(g);
	free(out);
}

/* ---- zn_f64_round_to: one rounding from float64 --------------------------------------- */

static float from16(uint16_t b, enum zn_dtype t)
{
	return t == ZN_DTYPE_BF16 ? zn_bf16_to_f32(b) : zn_f16_to_f32(b);
}

static uint16_t to16(float f, enum zn_dtype t)
{
	return t == ZN_DTYPE_BF16 ? zn_f32_to_bf16(f) : zn_f32_to_f16(f);
}

/* r is a value of t, and no value of t is nearer to x (x > 0, finite result): its
 * neighbours in t's bit order are at least as far; on a tie r's last bit is even */
static void expect_nearest(double x, enum zn_dtype t)
{
	float r = zn_f64_round_to(x, t);
	uint16_t b = to16(r, t);
	double up, dn;

	cr_assert(isfinite(r) && from16(b, t) == r, "%s(%.17g) = %.9g is not a %s value",
		  zn_dtype_name(t), x, (double)r, zn_dtype_name(t));
	up = from16((uint16_t)(b + 1), t);
	dn = b ? (double)from16((uint16_t)(b - 1), t) : -(double)from16(1, t);
	cr_assert(fabs(x - r) <= fabs(x - up) && fabs(x - r) <= fabs(x - dn),
		  "%s(%.17g) = %.9g; %.9g or %.9g is nearer", zn_dtype_name(t), x, (double)r,
		  up, dn);
	if (fabs(x - r) == fabs(x - up) || fabs(x - r) == fabs(x - dn))
		cr_assert_eq(b & 1, 0, "%s(%.17g): a tie goes to the even neighbour",
			     zn_dtype_name(t), x);
	cr_assert_eq(zn_f64_round_to(-x, t), -r, "the rounding is symmetric");
}

Test(dtype, f64_round_to_is_one_rounding_to_nearest_even)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	/* 1 + 2^-7 is a bf16 value with an odd last bit; x just below the midpoint to the
	 * next one rounds down, but through fp32 it would become the midpoint and then round
	 * up to the even 1 + 2^-6: the double rounding this function exists to avoid */
	double x = 1.0 + 0x1p-7 + 0x1p-8 - 0x1p-30;

	cr_assert_eq(zn_f64_round_to(x, ZN_DTYPE_BF16), 1.0f + 0x1p-7f);
	cr_assert_eq(zn_f32_to_bf16((float)x), zn_f32_to_bf16(1.0f + 0x1p-6f),
		     "the example must round twice through fp32");
	/* the same for fp16 (10 bits): 1 + 2^-10 odd, the midpoint at 1 + 1.5 * 2^-10 */
	x = 1.0 + 0x1p-10 + 0x1p-11 - 0x1p-40;
	cr_assert_eq(zn_f64_round_to(x, ZN_DTYPE_F16), 1.0f + 0x1p-10f);
	/* exact ties go to even; fp32 is the plain conversion; inf, NaN, overflow */
	cr_assert_eq(zn_f64_round_to(1.0 + 0x1p-8, ZN_DTYPE_BF16), 1.0f);
	cr_assert_eq(zn_f64_round_to(1.0 + 3 * 0x1p-8, ZN_DTYPE_BF16), 1.0f + 0x1p-6f);
	cr_assert_eq(zn_f64_round_to(0.1, ZN_DTYPE_F32), 0.1f);
	cr_assert(isinf(zn_f64_round_to(65520.0, ZN_DTYPE_F16)), "65520 rounds to fp16 inf");
	cr_assert_eq(zn_f64_round_to(65519.99, ZN_DTYPE_F16), 65504.0f);
	cr_assert(isinf(zn_f64_round_to(INFINITY, ZN_DTYPE_BF16)));
	cr_assert(isnan(zn_f64_round_to(NAN, ZN_DTYPE_F16)));
	cr_assert_eq(zn_f64_round_to(0x1p-25, ZN_DTYPE_F16), 0.0f, "half the least: even 0");
	cr_assert_eq(zn_f64_round_to(0x1p-25 + 0x1p-40, ZN_DTYPE_F16), 0x1p-24f);
	/* random magnitudes from fp16's and bf16's subnormals up to their largest values */
	for (int i = 0; i < 200000; i++) {
		double m, e;

		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		m = 1.0 + (double)(s >> 11) * 0x1p-53;
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		e = (double)(int)(s % 60) - 40.0; /* 2^-40 .. 2^19 */
		if (ldexp(m, (int)e) < 65504.0)
			expect_nearest(ldexp(m, (int)e), ZN_DTYPE_F16);
		e = (double)(int)(s % 250) - 130.0; /* 2^-130 .. 2^119 */
		expect_nearest(ldexp(m, (int)e), ZN_DTYPE_BF16);
	}
}
