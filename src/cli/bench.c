/* The bench commands' shared lines and statistics (bench.h). */
#include "cli/bench.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

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
