/* Option parsing and unit formatting shared by the subcommands. */
#include "cli/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "core/log.h"
#include "cpu/adamw.h"
#include "sched/plan.h"
#include "zinc.h"

const char *zn_cli_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		zn_error("%s needs a value", argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

int zn_cli_int(int argc, char **argv, int *i, int min, int max, int *out)
{
	const char *flag = argv[*i], *v = zn_cli_value(argc, argv, i);
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

int zn_cli_count(int argc, char **argv, int *i, uint64_t *out)
{
	const char *flag = argv[*i], *v = zn_cli_value(argc, argv, i);

	if (!v)
		return ZN_EUSAGE;
	if (zn_parse_count(v, out)) {
		zn_error("%s '%s': give a count such as 1500000, 1.5M, 70B or 5e8", flag, v);
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_cli_size(int argc, char **argv, int *i, uint64_t *out)
{
	const char *flag = argv[*i], *v = zn_cli_value(argc, argv, i);

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

const char *zn_cli_fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KB", "MB", "GB", "TB", "PB", NULL };

	return fmt_scaled((double)bytes, 1000.0, units, buf, size);
}

const char *zn_cli_fmt_ibytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", NULL };

	return fmt_scaled((double)bytes, 1024.0, units, buf, size);
}

const char *zn_cli_fmt_count(uint64_t n, char *buf, size_t size)
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

const char *zn_cli_fmt_state_bytes(const char *dtype, enum zn_optim_states states, char *buf,
				   size_t size)
{
	bool mixed = strcmp(dtype, "fp32") != 0;
	struct zn_state_bytes b;
	char st[48] = "";

	zn_plan_state_bytes(mixed, states, &b);
	if (states != ZN_STATES_FP32)
		snprintf(st, sizeof(st), ", %s optimizer states", zn_optim_states_name(states));
	snprintf(buf, size, "%s%s%s (%u+%u+%.3g B/param)", dtype,
		 mixed ? " mixed precision" : "", st, b.param, b.grad, b.optim);
	return buf;
}

int zn_cli_optimizer_states(int argc, char **argv, int *i, enum zn_optim_states *out)
{
	const char *v = zn_cli_value(argc, argv, i);

	if (!v)
		return ZN_EUSAGE;
	for (int s = ZN_STATES_FP32; s <= ZN_STATES_INT8; s++)
		if (!strcmp(v, zn_optim_states_name(s))) {
			*out = s;
			return 0;
		}
	zn_error("--optimizer-states takes fp32, bf16 or int8 (AdamW's m and v; docs/cpu.md), "
		 "not '%s'", v);
	return ZN_EUSAGE;
}

void zn_cli_config_inputs(int argc, char **argv, struct zn_io *io, int *n, int max)
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
