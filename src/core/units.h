/* Rates and durations printed with a unit that suits the value: one rule for the step line,
 * the run summary and the bench commands' prose lines. Tables with a unit in the column
 * header (bench) keep fixed units. */
#ifndef ZN_CORE_UNITS_H
#define ZN_CORE_UNITS_H

#include <stddef.h>

/* per_s with an SI prefix (k, M, G, T) so the printed mantissa is below 1000: three
 * significant figures, "%.2f" below 1, "%.1f" below 100, "%.0f" below 1000, chosen after
 * rounding (999.96 prints "1.0k", never "1000"). The prefix goes before `unit`: with a unit
 * starting "B" it joins it ("820 MB/s", "1.2 GB/s"), else it follows the number ("5.4 tok/s",
 * "820 tok/s", "12.3k tok/s"). Zero, negative, NaN or infinite values print "0". Returns buf. */
const char *zn_format_rate(char *buf, size_t n, double per_s, const char *unit);

/* A duration from milliseconds: "850 us", "5.4 ms", "812 ms", "21.3 s", "4.5 min", "2.0 h"
 * (the same mantissa rule below 1 s; a value that would round to 1000 of a unit, or 60 s / 60 min,
 * moves to the next). Returns buf. */
const char *zn_format_ms(char *buf, size_t n, double ms);

#endif
