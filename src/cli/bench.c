/* The bench commands' shared parser, lines and statistics (bench.h). */
#include "cli/bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cli/flags.h"
#include "zinc.h"

/* the index of a's option ("--name" or "--name=..."), its value in *eq (NULL: none) */
static int find_opt(const struct zn_bench_opt *opts, int nopts, const char *a, const char **eq)
{
	for (int k = 0; k < nopts; k++) {
		size_t len = strlen(opts[k].name);

		if (!strncmp(a, opts[k].name, len) && (a[len] == 0 || a[len] == '=')) {
			*eq = a[len] == '=' ? a + len + 1 : NULL;
			return k;
		}
	}
	return -1;
}

int zn_bench_int(const char *s, long lo, long hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return ZN_BENCH_BAD;
	*out = (int)v;
	return 0;
}

int zn_bench_args(const char *cmd, int argc, char **argv, const struct zn_bench_opt *opts,
		  int nopts, int (*set)(void *ctx, int opt, const char *value), void *ctx,
		  void (*usage)(FILE *f), char **rest, int *rest_n)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		int k = find_opt(opts, nopts, a, &v), rc;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 1;
		}
		if (k < 0 && rest) {
			rest[(*rest_n)++] = argv[i];
			continue;
		}
		if (k < 0 && strncmp(a, "--", 2)) {
			fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", cmd, a);
			return ZN_EXIT_USAGE;
		}
		if (k < 0) {
			zn_cli_unknown_flag(cmd, a, usage);
			return ZN_EXIT_USAGE;
		}
		if (opts[k].value && !v && i + 1 >= argc) {
			fprintf(stderr, "%s: %s needs a value (see --help)\n", cmd, a);
			return ZN_EXIT_USAGE;
		}
		if (!opts[k].value && v) {
			fprintf(stderr, "%s: %s takes no value (see --help)\n", cmd, opts[k].name);
			return ZN_EXIT_USAGE;
		}
		if (opts[k].value && !v)
			v = argv[++i];
		rc = set(ctx, k, v);
		if (rc == ZN_BENCH_PASS && rest) {
			rest[(*rest_n)++] = argv[i - (v == argv[i])];
			if (v == argv[i])
				rest[(*rest_n)++] = argv[i];
			continue;
		}
		if (rc == ZN_BENCH_BAD)
			fprintf(stderr, "%s: bad value '%s' for %s (see --help)\n", cmd, v ? v : "",
				opts[k].name);
		if (rc)
			return ZN_EXIT_USAGE;
	}
	return 0;
}

static void cpu_model(char *out, size_t n)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(out, n, "unknown CPU");
	while (f && fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':');

		if (!strncmp(line, "model name", 10) && c) {
			c += 2;
			c[strcspn(c, "\n")] = 0;
			snprintf(out, n, "%s", c);
			break;
		}
	}
	if (f)
		fclose(f);
}

void zn_bench_load_avg(char *buf, size_t n)
{
	FILE *f = fopen("/proc/loadavg", "r"); /* 1, 5, 15-minute load */

	snprintf(buf, n, "?");
	if (f) {
		if (fgets(buf, (int)n, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

const char *zn_bench_build_kind(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return "sanitizers";
#elif defined(__OPTIMIZE__)
	return "optimized";
#else
	return "debug";
#endif
}

void zn_bench_preamble(FILE *f, const char *cmd)
{
	char cpu[128], load[128];
	struct utsname u;

	cpu_model(cpu, sizeof(cpu));
	zn_bench_load_avg(load, sizeof(load));
	if (uname(&u))
		snprintf(u.release, sizeof(u.release), "?");
	fprintf(f, "# zinc %s bench %s\n", ZN_VERSION, cmd);
	fprintf(f, "# build: gcc %s, %s\n", __VERSION__, zn_bench_build_kind());
	fprintf(f, "# machine: %s, %ld CPUs, %.1f GiB RAM, kernel %s; load %s\n", cpu,
		sysconf(_SC_NPROCESSORS_ONLN),
		(double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1073741824.0,
		u.release, load);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double zn_bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double zn_bench_fastest(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		if (v[i] < m)
			m = v[i];
	return m;
}
