/* fp32 <-> bf16 and fp16 casts: src/core/dtype's (round to nearest even, NaN stays a quiet NaN). */
#include "ops.h"

#include "core/dtype.h"

void zn_cpu_cast_f32_to_bf16(uint16_t *out, const float *inp, size_t N)
{
	zn_cast_f32_to_bf16(out, inp, N);
}

void zn_cpu_cast_bf16_to_f32(float *out, const uint16_t *inp, size_t N)
{
	zn_cast_bf16_to_f32(out, inp, N);
}

void zn_cpu_cast_f32_to_f16(uint16_t *out, const float *inp, size_t N)
{
	zn_cast_f32_to_f16(out, inp, N);
}

void zn_cpu_cast_f16_to_f32(float *out, const uint16_t *inp, size_t N)
{
	zn_cast_f16_to_f32(out, inp, N);
}
