/* Blockwise 8-bit quantization of AdamW's moments, as bitsandbytes' 8-bit blockwise
 * optimizers store them (docs/cpu.md, "Compact optimizer state").
 *
 * A tensor of n floats is cut into blocks of ZN_Q8_BLOCK consecutive elements from its
 * first; block b keeps absmax[b] = max |x| over its elements (fp32) and one byte per
 * element, the index of the map entry nearest to x * (1 / absmax[b]). The maps are
 * bitsandbytes' create_dynamic_map: 256 sorted values in [-1, 1] whose magnitudes run
 * from about 1e-7 to 1 (an exponent for the decade, a fraction whose bits shrink as the
 * exponent grows):
 *
 *   signed (m):   for i = 0 .. 6, the midpoints of the 2^i intervals of linspace(0.1, 1,
 *                 2^i + 1) times 10^(i - 6), each with both signs; 0; 1.0
 *                 (127 negative values, 0 at code ZN_Q8_ZERO_SIGNED, 128 positive)
 *   unsigned (v): the same with 2^(i + 1) intervals and no negative values; 0; 1.0
 *                 (0 at code 0)
 *
 * computed here in double and rounded once to float (bitsandbytes computes linspace and
 * the products in float32: an entry may differ from its map by an ulp).
 *
 * Rounding: x * (1 / absmax) is compared with the 255 midpoints between neighbouring
 * entries, each (a + b) * 0.5f in float as bitsandbytes' kernel computes it; the code is
 * the number of midpoints below x (nearest entry; a tie goes to the lower entry).
 * bitsandbytes' binary search sends a tie to whichever neighbour its search ended on.
 * Sign (signed map): a negative x that rounds to the entry 0 gets the nearest negative
 * entry instead (bitsandbytes' "state1 keeps its sign" rule; it tests signbit, so there
 * -0.0 is moved too, here it stays 0). A block whose absmax is 0 gets the code of 0.
 *
 *     zn_q8_quantize(codes, absmax, x, n, true);    // m: codes[n], absmax[blocks]
 *     zn_q8_dequantize(y, codes, absmax, n, true);  // y[i] = map[codes[i]] * absmax[i / 256]
 *
 * Pure; thread-safe (the maps are built once, on first use).
 */
#ifndef ZN_CPU_Q8_H
#define ZN_CPU_Q8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZN_Q8_BLOCK 256 /* bitsandbytes' block for optimizer state (BLOCKSIZE_2STATE) */
#define ZN_Q8_ZERO_SIGNED 127
#define ZN_Q8_ZERO_UNSIGNED 0
/* bitsandbytes' min_8bit_size: it keeps fp32 state for a tensor with fewer elements;
 * zinc quantizes whole layers' flat shards (docs/cpu.md says why) */
#define ZN_Q8_BNB_MIN_SIZE 4096

/* Blocks of n elements: n / ZN_Q8_BLOCK rounded up. */
size_t zn_q8_blocks(size_t n);

/* The 256 map entries, ascending. */
const float *zn_q8_map(bool is_signed);
/* The 255 midpoints between neighbouring entries, then +infinity (256 floats): the code
 * of x is the number of them below x. */
const float *zn_q8_bounds(bool is_signed);

/* A shortcut to that count for SIMD loops (one table load per value instead of eight
 * halvings through the midpoints): a bucket per bf16 value of |x| (the top 16 bits of its
 * float) from 2^-26 up (every smaller magnitude in bucket 0, every magnitude of 1 or more
 * in the last), each holding at most one midpoint (the maps' entries are at least 0.7 %
 * apart; a bucket spans 0.8 %: the tests check every bucket). Entry k (x >= +0) or
 * ZN_Q8_LUT_COUNT + k (x <= -0) is c << 16 | lo: c the midpoints below the bucket's values,
 * lo the low 16 bits of the magnitude of the midpoint inside it, whose top 16 bits are the
 * bucket's, as x's: so x > that midpoint exactly when x's low 16 bits are above lo (x >= 0)
 * or below it (x < 0). Without a midpoint inside, lo is 0xffff (x >= 0) or 0: never. The
 * code is c plus that one comparison: the same count as the halvings for every x but NaN.
 * (One 32-bit load: a second load indexed by the first's result would wait for it, and
 * GCC vectorizes 32-bit table loads only.) */
#define ZN_Q8_LUT_BASE (101u << 7) /* bf16 bits of 2^-26 */
#define ZN_Q8_LUT_COUNT 3329       /* buckets up to 1.0's, then 1.0 and above */
struct zn_q8_lut {
	int32_t entry[2 * ZN_Q8_LUT_COUNT]; /* x >= +0, then x <= -0 */
};
const struct zn_q8_lut *zn_q8_lut(bool is_signed);

/* Codes and block scales of x[0 .. n): codes[n], absmax[zn_q8_blocks(n)]. */
void zn_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, bool is_signed);
/* x[i] = map[codes[i]] * absmax[i / ZN_Q8_BLOCK] for i < n (one float multiply). */
void zn_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
		      bool is_signed);

#endif
