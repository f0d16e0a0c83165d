/* Saturating size arithmetic and allocations that name what failed (size.h). */
#include "core/size.h"

#include <stdlib.h>

#include "core/log.h"

uint64_t zn_size_mul(uint64_t a, uint64_t b)
{
	if (a == ZN_SIZE_OVERFLOW || b == ZN_SIZE_OVERFLOW)
		return a == 0 || b == 0 ? 0 : ZN_SIZE_OVERFLOW;
	if (a != 0 && b > (ZN_SIZE_OVERFLOW - 1) / a)
		return ZN_SIZE_OVERFLOW;
	return a * b;
}

uint64_t zn_size_add(uint64_t a, uint64_t b)
{
	if (a >= ZN_SIZE_OVERFLOW - b)
		return ZN_SIZE_OVERFLOW;
	return a + b;
}

uint64_t zn_size_round_up(uint64_t a, uint64_t align)
{
	if (a > ZN_SIZE_OVERFLOW - align)
		return ZN_SIZE_OVERFLOW;
	return (a + align - 1) / align * align;
}

bool zn_size_overflowed(uint64_t size)
{
	return size == ZN_SIZE_OVERFLOW;
}

void zn_size_report_oom(uint64_t bytes, const char *what)
{
	if (bytes == ZN_SIZE_OVERFLOW)
		zn_error("out of memory allocating %s: its size overflows 64 bits", what);
	else
		zn_error("out of memory allocating %s: %llu bytes (%.2f GiB)", what,
			 (unsigned long long)bytes, (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

void *zn_size_alloc(uint64_t bytes, const char *what)
{
	void *p = NULL;

	if (bytes != ZN_SIZE_OVERFLOW && bytes <= (uint64_t)SIZE_MAX)
		p = malloc(bytes ? (size_t)bytes : 1);
	if (!p)
		zn_size_report_oom(bytes, what);
	return p;
}

void *zn_size_calloc(uint64_t count, uint64_t size, const char *what)
{
	uint64_t bytes = zn_size_mul(count, size);
	void *p = NULL;

	if (bytes != ZN_SIZE_OVERFLOW && bytes <= (uint64_t)SIZE_MAX)
		p = calloc(bytes ? (size_t)count : 1, bytes ? (size_t)size : 1);
	if (!p)
		zn_size_report_oom(bytes, what);
	return p;
}
