/* core/units.h: rates and durations with a unit that suits the value, at the boundaries. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/units.h"

static void rate_is(double v, const char *unit, const char *want)
{
	char buf[64];

	cr_assert_str_eq(zn_format_rate(buf, sizeof(buf), v, unit), want, "%.17g %s", v, unit);
}

static void ms_is(double v, const char *want)
{
	char buf[64];

	cr_assert_str_eq(zn_format_ms(buf, sizeof(buf), v), want, "%.17g ms", v);
}

Test(units, rate_tokens)
{
	rate_is(5.4, "tok/s", "5.4 tok/s");
	rate_is(820, "tok/s", "820 tok/s");
	rate_is(12345, "tok/s", "12.3k tok/s");
	rate_is(20, "tok/s", "20.0 tok/s"); /* the old "%.1fk" printed 0.0k */
	rate_is(49.9, "tok/s", "49.9 tok/s");
	rate_is(0.5, "tok/s", "0.50 tok/s");
	rate_is(0.994, "tok/s", "0.99 tok/s");
	rate_is(0.996, "tok/s", "1.0 tok/s");
	rate_is(99.94, "tok/s", "99.9 tok/s");
	rate_is(99.96, "tok/s", "100 tok/s");
	rate_is(999.4, "tok/s", "999 tok/s");
	rate_is(999.6, "tok/s", "1.0k tok/s"); /* never "1000 tok/s" */
	rate_is(999.6e3, "tok/s", "1.0M tok/s");
	rate_is(2.5e9, "tok/s", "2.5G tok/s");
	rate_is(3e15, "tok/s", "3000T tok/s"); /* the largest prefix keeps the digits */
	rate_is(0, "tok/s", "0 tok/s");
	rate_is(-3, "tok/s", "0 tok/s");
	rate_is(NAN, "tok/s", "0 tok/s");
	rate_is(INFINITY, "tok/s", "0 tok/s");
}

Test(units, rate_bytes_join_the_prefix)
{
	rate_is(820e6, "B/s", "820 MB/s");
	rate_is(1.23e9, "B/s", "1.2 GB/s");
	rate_is(12.34e9, "B/s", "12.3 GB/s");
	rate_is(512, "B/s", "512 B/s");
	rate_is(999.5e3, "B/s", "1.0 MB/s");
	rate_is(0, "B/s", "0 B/s");
}

Test(units, durations)
{
	ms_is(0, "0 ms");
	ms_is(0.0004, "0.40 us");
	ms_is(0.85, "850 us");
	ms_is(0.99949, "999 us");
	ms_is(0.9996, "1.0 ms"); /* would round to 1000 us */
	ms_is(5.4, "5.4 ms");
	ms_is(99.96, "100 ms");
	ms_is(812, "812 ms");
	ms_is(999.4, "999 ms");
	ms_is(999.6, "1.0 s");
	ms_is(21300, "21.3 s");
	ms_is(59940, "59.9 s");
	ms_is(59960, "1.0 min"); /* not "60.0 s" */
	ms_is(270e3, "4.5 min");
	ms_is(3597e3, "1.0 h"); /* 59.95 min */
	ms_is(7200e3, "2.0 h");
	ms_is(-1, "0 ms");
}
