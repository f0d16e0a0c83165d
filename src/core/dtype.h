/* Scalar dtype conversions: bf16 and fp16 to and from fp32.
 *
 * bf16: round-to-nearest-even; NaN stays a (quiet) NaN; overflow rounds to inf as IEEE does.
 * fp16: round-to-nearest-even, subnormals kept, overflow to inf, NaN stays NaN.
 * Array versions are OpenMP-parallel for large n. Hot loops that need the conversion
 * inline (AdamW) keep their own copy of the bit arithmetic and are tested against these.
 */
#ifndef ZN_CORE_DTYPE_H
#define ZN_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

uint16_t zn_f32_to_bf16(float f);
float zn_bf16_to_f32(uint16_t h);
uint16_t zn_f32_to_f16(float f);
float zn_f16_to_f32(uint16_t h);

/* x rounded once (to nearest, ties to even) to a value of dtype t, returned as the fp32 that
 * holds it exactly, so converting it to t afterwards changes nothing: a float64 result
 * stored as bf16 or fp16 without first rounding to fp32 (which could round twice). Past t's
 * largest finite value: inf; NaN stays NaN; fp16 subnormals kept. */
float zn_f64_round_to(double x, enum zn_dtype t);

void zn_cast_f32_to_bf16(uint16_t *out, const float *in, size_t n);
void zn_cast_bf16_to_f32(float *out, const uint16_t *in, size_t n);
void zn_cast_f32_to_f16(uint16_t *out, const float *in, size_t n);
void zn_cast_f16_to_f32(float *out, const uint16_t *in, size_t n);

size_t zn_dtype_size(enum zn_dtype t);
const char *zn_dtype_name(enum zn_dtype t); /* "fp32", "bf16", "fp16" */

#endif
