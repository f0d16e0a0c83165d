/* The block passes of the int8 moments (q8.h's quantization one block at a time) and, on a
 * CPU with AVX-512 VBMI, their tables (q8_block.c). Internal to src/cpu (adamw_q8.c, q8.c)
 * and its tests; C only (kernels/cuda includes q8.h, not this). */
#ifndef ZN_CPU_Q8_BLOCK_H
#define ZN_CPU_Q8_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/q8.h"

/* The tables of the block passes below on a CPU with AVX-512 VBMI (q8_block.c).
 * Widening and the code's last step read a 256-entry float table as four planes of 256
 * bytes (byte p of every entry: four 128-byte lookups per plane cover 64 codes).
 * The code starts from an estimate: |x| (clamped to [2^-24, 2]) picks its decade (that of
 * its binade's start, plus 1 when |x| >= the power of ten inside the binade), the decade and
 * the sign a line, floor(seg_a[r] |x| + seg_b[r]) (r = decade + 8 for x <= -0), clamped to
 * [0, 255]. The line puts each midpoint inside a decade half a code above the count it ends
 * (the linspace points of the map's comment are those midpoints): the estimate is the count
 * or one below it, and one comparison with bounds[estimate] finishes it (the tests compare
 * the result with q8_code's over every float sign, decade edge and midpoint). */
struct zn_q8_vtab {
	_Alignas(64) uint8_t map_plane[4][256];
	uint8_t bound_plane[4][256];
	float seg_a[16], seg_b[16];
	/* by binade ((float bits >> 23) & 31): the float bits of the power of ten inside it
	 * (or of a NaN), whose low 4 bits are the decade of the binade's start */
	uint32_t bin_edge[32];
};
const struct zn_q8_vtab *zn_q8_vtab(bool is_signed);

/* One block: y[i] = map[codes[i]] for i < ZN_Q8_BLOCK (the caller multiplies by absmax). */
void zn_q8_widen_block(float *y, const uint8_t *codes, bool is_signed);
/* Both moments of a block: zn_q8_widen_block for m (signed map) and v (unsigned). */
void zn_q8_widen_pair(float *m, const uint8_t *m_codes, float *v, const uint8_t *v_codes);
/* One block of ZN_Q8_BLOCK values: its codes, as zn_q8_quantize(codes, &absmax, x,
 * ZN_Q8_BLOCK, is_signed) (the same bits); returns absmax. */
float zn_q8_quantize_block(uint8_t *codes, const float *x, bool is_signed);
/* Both moments of a block at once, as zn_q8_quantize_block for m (signed) and v (unsigned)
 * (the same bits; with AVX-512 VBMI their codes are interleaved, which is faster). */
void zn_q8_quantize_pair(uint8_t *m_codes, float *m_absmax, const float *m, uint8_t *v_codes,
			 float *v_absmax, const float *v);
/* Its codes for a given scale: codes[i] for x[i] * inv, as q8_code (adamw_simd.h) gives them
 * for every float, with m's sign rule (x[i] < 0 never gets ZN_Q8_ZERO_SIGNED). */
void zn_q8_code_block(uint8_t *codes, const float *x, float inv, bool is_signed);

#endif
