/* Option parsing and unit formatting shared by the subcommands. */
#include "core/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/log.h"
#include "zinc.h"

const char *zn_arg_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		zn_error("%s needs a value", argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

int zn_arg_int(int argc, char **argv, int *i, int min, int max, int *out)
{
	const char *flag = argv[*i], *v = zn_arg_value(argc, argv, i);
	char *end;
	long x;

	if (!v)
		return ZN_EUSAGE;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < min || x > max) {
		zn_error("%s '%s': give an integer from %d to %d", flag, v, min, max);
		return ZN_EUSAGE;
	}
	*out = (int)x;
	return 0;
}

int zn_arg_double(int argc, char **argv, int *i, double min, double max, double *out)
{
	const char *flag = argv[*i], *v = zn_arg_value(argc, argv, i);
	char *end;
	double x;

	if (!v)
		return ZN_EUSAGE;
	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= min && x <= max)) {
		zn_error("%s '%s': give a number from %g to %g", flag, v, min, max);
		return ZN_EUSAGE;
	}
	*out = x;
	return 0;
}

int zn_arg_count(int argc, char **argv, int *i, uint64_t *out)
{
	const char *flag = argv[*i], *v = zn_arg_value(argc, argv, i);

	if (!v)
		return ZN_EUSAGE;
	if (zn_parse_count(v, out)) {
		zn_error("%s '%s': give a count such as 1500000, 1.5M, 70B or 5e8", flag, v);
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_arg_size(int argc, char **argv, int *i, uint64_t *out)
{
	const char *flag = argv[*i], *v = zn_arg_value(argc, argv, i);

	if (!v)
		return ZN_EUSAGE;
	if (zn_parse_size(v, out)) {
		zn_error("%s '%s': give a size such as 4096, 1M, 512K or 80G", flag, v);
		return ZN_EUSAGE;
	}
	return 0;
}

static const char *fmt_scaled(double v, double base, const char *const *units, char *buf,
			      size_t size)
{
	int u = 0;

	while (v >= base && units[u + 1]) {
		v /= base;
		u++;
	}
	snprintf(buf, size, u ? "%.2f %s" : "%.0f %s", v, units[u]);
	return buf;
}

const char *zn_arg_fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KB", "MB", "GB", "TB", "PB", NULL };

	return fmt_scaled((double)bytes, 1000.0, units, buf, size);
}

const char *zn_arg_fmt_ibytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", NULL };

	return fmt_scaled((double)bytes, 1024.0, units, buf, size);
}

const char *zn_arg_fmt_count(uint64_t n, char *buf, size_t size)
{
	double v = (double)n;

	if (v >= 1e12)
		snprintf(buf, size, "%.2fT", v / 1e12);
	else if (v >= 1e9)
		snprintf(buf, size, "%.2fB", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, size, "%.2fM", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, size, "%.2fK", v / 1e3);
	else
		snprintf(buf, size, "%llu", (unsigned long long)n);
	return buf;
}

void zn_arg_config_inputs(int argc, char **argv, struct zn_io *io, int *n, int max)
{
	for (int i = 1; i < argc && *n < max; i++) {
		const char *path = NULL;

		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			path = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			path = argv[i] + 9;
		if (path)
			io[(*n)++] = (struct zn_io){ .path = path, .what = "--config" };
	}
}
