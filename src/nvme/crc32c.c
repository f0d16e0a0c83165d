/* CRC32C: SSE4.2 crc32 instruction over three interleaved streams when available, a
 * byte table otherwise. The streams are joined with a precomputed GF(2) operator that
 * appends STREAM_BYTES zero bytes to a CRC state (as zlib's crc32_combine does, but for
 * one fixed length, so joining costs 32 XORs).
 */
#include "nvme/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define STREAM_BYTES 8192u

static uint32_t table[256];
static uint32_t shift_op[32]; /* state -> state after STREAM_BYTES zero bytes */
static bool have_sse42;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;

	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *out, const uint32_t *mat)
{
	int n;

	for (n = 0; n < 32; n++)
		out[n] = gf2_times(mat, mat[n]);
}

static void init(void)
{
	uint32_t op[32], sq[32];
	unsigned i, k;
	int n;

	for (i = 0; i < 256; i++) {
		uint32_t c = i;

		for (k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[i] = c;
	}
	/* One zero bit: bit 0 folds in the polynomial, every other bit moves down one. */
	op[0] = POLY;
	for (n = 1; n < 32; n++)
		op[n] = 1u << (n - 1);
	/* Square up to 8 * STREAM_BYTES = 2^16 bits. */
	for (i = 1; i < 8 * STREAM_BYTES; i <<= 1) {
		gf2_square(sq, op);
		memcpy(op, sq, sizeof(op));
	}
	memcpy(shift_op, op, sizeof(op));
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t sw_raw(uint32_t s, const unsigned char *p, size_t n)
{
	while (n--)
		s = table[(s ^ *p++) & 0xff] ^ (s >> 8);
	return s;
}

uint32_t zn_crc32c_sw(uint32_t crc, const void *buf, size_t bytes)
{
	pthread_once(&once, init);
	return ~sw_raw(~crc, buf, bytes);
}

/* The one architecture #if in zinc: the instruction exists only on x86 (aarch64's crc32c
 * instructions would go in an #elif here). */
#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t hw_raw(uint32_t s, const unsigned char *p, size_t n)
{
	uint64_t s64;

	while (n && ((uintptr_t)p & 7)) {
		s = __builtin_ia32_crc32qi(s, *p++);
		n--;
	}
	/* Three independent streams hide the instruction's 3-cycle latency. */
	while (n >= 3 * STREAM_BYTES) {
		const unsigned char *a = p, *b = p + STREAM_BYTES, *c = p + 2 * STREAM_BYTES;
		uint64_t sa = s, sb = 0, sc = 0, w;
		size_t i;

		for (i = 0; i < STREAM_BYTES; i += 8) {
			memcpy(&w, a + i, 8);
			sa = __builtin_ia32_crc32di(sa, w);
			memcpy(&w, b + i, 8);
			sb = __builtin_ia32_crc32di(sb, w);
			memcpy(&w, c + i, 8);
			sc = __builtin_ia32_crc32di(sc, w);
		}
		s = gf2_times(shift_op, (uint32_t)sa) ^ (uint32_t)sb;
		s = gf2_times(shift_op, s) ^ (uint32_t)sc;
		p += 3 * STREAM_BYTES;
		n -= 3 * STREAM_BYTES;
	}
	s64 = s;
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		s64 = __builtin_ia32_crc32di(s64, w);
		p += 8;
		n -= 8;
	}
	s = (uint32_t)s64;
	while (n--)
		s = __builtin_ia32_crc32qi(s, *p++);
	return s;
}
#else
static uint32_t hw_raw(uint32_t s, const unsigned char *p, size_t n)
{
	return sw_raw(s, p, n);
}
#endif

uint32_t zn_crc32c(uint32_t crc, const void *buf, size_t bytes)
{
	pthread_once(&once, init);
	if (have_sse42)
		return ~hw_raw(~crc, buf, bytes);
	return ~sw_raw(~crc, buf, bytes);
}
