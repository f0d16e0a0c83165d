/* What the three bench commands share (zinc bench nvme, adam and step: cmd_bench_*.c), as
 * nccl-tests' common.cu does for its tests: one parser of their own options, the machine
 * and build lines every preamble opens with, so a figure always carries where it was
 * measured, and the statistics of repeated runs. Internal to src/cli.
 *
 *     static const struct zn_bench_opt opts[] = { { "--reps", true }, { "--json", false } };
 *     rc = zn_bench_args("zinc bench adam", argc, argv, opts, 2, set, &o, usage, NULL, NULL);
 *     // set(&o, 0, "3") for "--reps 3" or "--reps=3", set(&o, 1, NULL) for "--json"
 *
 *     zn_bench_preamble(stdout, "nvme");   // # zinc 0.x bench nvme
 *                                          // # build: gcc 12.2.0, optimized
 *                                          // # machine: AMD EPYC ..., 2 CPUs, 23.5 GiB RAM,
 *                                          //   kernel 6.18.44; load 0.52 0.60 0.71 ...
 */
#ifndef ZN_CLI_BENCH_H
#define ZN_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* One option of a bench command: "--name" and whether a value follows it. */
struct zn_bench_opt {
	const char *name;
	bool value;
};

/* What an option's set callback returns besides 0: the value was bad (the parser says so,
 * naming the flag, unless the callback already logged why: ZN_BENCH_SAID), or the option
 * is also the caller's passthrough (copied to rest with its value, bench step's --seq). */
enum { ZN_BENCH_BAD = 1, ZN_BENCH_SAID = 2, ZN_BENCH_PASS = 3 };

/* Walks argv[1 .. argc): "--name VALUE", "--name=VALUE" or a bare "--name", calling
 * set(ctx, index into opts, value or NULL) for each in order. -h / --help writes usage to
 * stdout and returns 1 (nothing else is set after it). Returns ZN_EXIT_USAGE after one
 * line for a missing value, a value given to a flag that takes none, a bad value, or an
 * unknown option (zn_cli_unknown_flag's "did you mean", help lists the choices) or a
 * stray argument; with rest non-NULL, unknown arguments go to rest[(*rest_n)++] instead
 * (the caller parses them; rest holds argc entries). */
int zn_bench_args(const char *cmd, int argc, char **argv, const struct zn_bench_opt *opts,
		  int nopts, int (*set)(void *ctx, int opt, const char *value), void *ctx,
		  void (*usage)(FILE *f), char **rest, int *rest_n);

/* s as a whole number from lo to hi into *out: 0, or ZN_BENCH_BAD ("3x", "", overflow) */
int zn_bench_int(const char *s, long lo, long hi, int *out);

/* the three lines above */
void zn_bench_preamble(FILE *f, const char *cmd);
/* /proc/loadavg's line, or "?" */
void zn_bench_load_avg(char *buf, size_t n);
/* "optimized", "debug" or "sanitizers": how this binary was built */
const char *zn_bench_build_kind(void);
/* the median of v[0 .. n) (sorts v); the smallest (the machine's figures: other load only
 * ever slows a run down) */
double zn_bench_median(double *v, int n);
double zn_bench_fastest(const double *v, int n);

#endif
