/* What the three bench commands share (zinc bench nvme, adam and step: cmd_bench_*.c), as
 * nccl-tests' common.cu does for its tests: the machine and build lines every preamble
 * opens with, so a figure always carries where it was measured, and the statistics of
 * repeated runs. Internal to src/cli.
 *
 *     zn_bench_preamble(stdout, "nvme");   // # zinc 0.x bench nvme
 *                                          // # build: gcc 12.2.0, optimized
 *                                          // # machine: AMD EPYC ..., 2 CPUs, 23.5 GiB RAM,
 *                                          //   kernel 6.18.44; load 0.52 0.60 0.71 ...
 */
#ifndef ZN_CLI_BENCH_H
#define ZN_CLI_BENCH_H

#include <stddef.h>
#include <stdio.h>

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
