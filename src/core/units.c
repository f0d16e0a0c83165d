/* Rates and durations with a unit that suits the value (see units.h). */
#include "core/units.h"

#include <math.h>
#include <stdio.h>

/* The mantissa's format: 3 significant figures for m in [0, 999.5). */
static const char *mant_fmt(double m)
{
	if (m < 0.995)
		return "%.2f";
	if (m < 99.95)
		return "%.1f";
	return "%.0f";
}

const char *zn_format_rate(char *buf, size_t n, double per_s, const char *unit)
{
	static const char *const prefix[] = { "", "k", "M", "G", "T" };
	char num[32];
	double m = per_s;
	int p = 0;

	if (!(m > 0) || isinf(m))
		m = 0;
	while (m >= 999.5 && p < 4) {
		m /= 1000.0;
		p++;
	}
	snprintf(num, sizeof(num), m == 0 ? "0" : mant_fmt(m), m);
	if (unit[0] == 'B')
		snprintf(buf, n, "%s %s%s", num, prefix[p], unit);
	else
		snprintf(buf, n, "%s%s %s", num, prefix[p], unit);
	return buf;
}

const char *zn_format_ms(char *buf, size_t n, double ms)
{
	char num[32];
	double v = ms;

	if (!(v > 0) || isinf(v))
		v = 0;
	if (v > 0 && v < 0.9995) {
		snprintf(num, sizeof(num), mant_fmt(v * 1e3), v * 1e3);
		snprintf(buf, n, "%s us", num);
	} else if (v < 999.5) {
		snprintf(num, sizeof(num), v == 0 ? "0" : mant_fmt(v), v);
		snprintf(buf, n, "%s ms", num);
	} else if (v < 59950.0) {
		snprintf(buf, n, "%.1f s", v / 1e3);
	} else if (v < 59.95 * 60e3) {
		snprintf(buf, n, "%.1f min", v / 60e3);
	} else {
		snprintf(buf, n, "%.1f h", v / 3600e3);
	}
	return buf;
}
