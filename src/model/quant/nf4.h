/* bitsandbytes' 4-bit blockwise quantization (QLoRA's NF4, and FP4 for reading), and its
 * nested ("double") quantization of the block scales, on the host (docs/qlora.md). Pure
 * functions of their inputs, no allocation; the device dequantizes with the kernel table's
 * dequant_4bit / dequant_absmax8, which compute what zn_q4_dequantize computes here.
 *
 * The rules are bitsandbytes' (functional.py quantize_4bit / dequantize_4bit, csrc kernels):
 *   - a tensor is cut into blocks of `blocksize` consecutive elements of its row-major
 *     data; each block's absmax = max |x| in fp32; each element x * (1 / absmax) (fp32:
 *     the reciprocal, then the product) is given the NF4 code whose interval holds it (the
 *     15 midpoints of bitsandbytes' decision tree, x > t strictly; NaN, as for an all-zero
 *     block whose 0 * inf is NaN, gets code 0);
 *   - two codes per byte: element 2j in the high nibble, 2j + 1 in the low one;
 *   - dequantized: code value x absmax in fp32, then rounded to the quant state's dtype;
 *   - double quant (compress_statistics): offset = mean of the tensor's absmax (fp32),
 *     absmax - offset quantized blockwise (blocks of 256) to 8 bits with bitsandbytes'
 *     signed dynamic map (create_dynamic_map), the nearest entry as its kernel's binary
 *     search chooses it; dequantized: map[q] x absmax2[i / 256] + offset, fp32.
 * zinc quantizes only tensors whose size is a multiple of the block (callers refuse others).
 */
#ifndef ZN_MODEL_QUANT_NF4_H
#define ZN_MODEL_QUANT_NF4_H

#include <stdint.h>

#include "zinc.h"

#define ZN_Q4_BLOCK 64        /* bitsandbytes' default 4-bit blocksize (transformers') */
#define ZN_Q4_NESTED_BLOCK 256 /* quantize_4bit's nested blocksize */

enum zn_q4_type { ZN_Q4_NF4 = 0, ZN_Q4_FP4 = 1 };

/* The 16 code values of type t, as bitsandbytes' get_4bit_type (fp32). */
const float *zn_q4_code(enum zn_q4_type t);
/* bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(), 256 sorted fp32 values),
 * computed as torch's fp32 linspace formula computes it. */
void zn_q4_dynamic_map(float out[256]);

/* NF4 code of x (already scaled into [-1, 1]). */
uint8_t zn_nf4_encode(float x);

/* Quantizes n elements (n % blocksize == 0, blocksize even) of x to NF4: packed[n / 2],
 * absmax[n / blocksize]. */
void zn_nf4_quantize(uint8_t *packed, float *absmax, const float *x, uint64_t n, int blocksize);

/* Nested quantization of nb block scales: q[nb] 8-bit codes, absmax2[ceil(nb / 256)],
 * *offset (the mean), with map = zn_q4_dynamic_map's. */
void zn_q4_nest(uint8_t *q, float *absmax2, float *offset, const float *absmax, uint64_t nb,
		const float map[256]);
/* Its inverse, as bitsandbytes' dequantize_blockwise + offset: absmax[nb]. */
void zn_q4_unnest(float *absmax, const uint8_t *q, const float *absmax2, float offset,
		  uint64_t nb, const float map[256]);

/* n elements from packed codes of type t and per-block absmax, rounded to qdtype (the quant
 * state's dtype: fp32, bf16 or fp16) and returned as fp32. */
void zn_q4_dequantize(float *out, const uint8_t *packed, const float *absmax, uint64_t n,
		      int blocksize, enum zn_q4_type t, enum zn_dtype qdtype);

#endif
