/* zinc bench step (cmd_bench_step.c measures, cmd_bench_step_out.c prints): one row per NVMe
 * bandwidth cap. Every formula is in docs/bench-step.md. */
#ifndef ZN_CLI_CMD_BENCH_STEP_H
#define ZN_CLI_CMD_BENCH_STEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "zinc.h"

#define ZN_BS_MAX_CAPS 16
#define ZN_BS_BURST_MS 10.0 /* the aio cap's token-bucket burst (src/nvme/aio.c) */

struct zn_bs_row {
	char cap[24];             /* as given: "250M", "max" */
	uint64_t cap_bps;         /* bytes/s per direction; 0 = max (uncapped) */
	double step_ms, step_min_ms, step_max_ms; /* median, min, max of the timed steps */
	double fwd_ms, bwd_ms, opt_ms, wait_ms;   /* medians */
	uint64_t read_bytes, write_bytes;         /* NVMe per step (median) */
	uint64_t h2d_bytes, d2h_bytes;            /* host-device copies per step */
	double base_step_ms, base_compute_ms; /* the baseline rounds just before and after */
	double nvme_ms, copy_ms, adamw_ms, compute_ms;
	double bound_ms, efficiency;
	const char *bound_by;     /* "nvme", "copy", "compute+adamw", "compute", "adamw" */
	double x_bps;             /* the cap, or for max the measured mixed bandwidth */
};

struct zn_bs_env {
	char model[320];          /* "gpt2 small, 12 layers, 124.4M params" */
	char setting[ZN_PATH_MAX + 160]; /* stage and offload, nvme paths */
	char schedule[400];       /* the step's order as the plan chose it (zinc.schedule) */
	uint64_t plan_read_bytes; /* the plan's NVMe reads per step */
	char device[64];
	bool host_device;
	int warmup, steps;
	double h2d_bps, d2h_bps;  /* measured pinned copy bandwidth */
	double adamw_ms;          /* CPU AdamW over this rank's whole shard, alone */
	double base_step_ms, base_compute_ms; /* state in pinned memory: step, fwd + bwd */
	int base_rounds;          /* baseline rounds: before the first cap and after each */
	double base_round_min_ms, base_round_max_ms; /* the rounds' median steps: min, max */
	double mixed_ms, mixed_bps; /* the step's NVMe reads and writes at once, uncapped */
	uint64_t mix_read_bytes, mix_write_bytes;
	char load[64];            /* /proc/loadavg at the end */
	char date[32];
};

void zn_bs_finish_rows(const struct zn_bs_env *env, struct zn_bs_row *rows, int n);
void zn_bs_print_table(FILE *f, const struct zn_bs_env *env, const struct zn_bs_row *rows,
		       int n);
int zn_bs_print_json(FILE *f, const struct zn_bs_env *env, const struct zn_bs_row *rows,
		     int n);
int zn_bs_write_csv(const char *path, const struct zn_bs_row *rows, int n);
/* gnuplot's PNG of rows, through an exclusive temporary beside path renamed into place
 * (core/fsio.h); without gnuplot says so and writes FILE.csv instead */
int zn_bs_plot(const char *path, const struct zn_bs_env *env, const struct zn_bs_row *rows,
	       int n);
/* The CSV zn_bs_plot writes instead of path when gnuplot is missing (in buf), or NULL when
 * gnuplot will draw path itself. */
const char *zn_bs_plot_fallback(const char *path, char *buf, size_t size);
/* --bw LIST into caps; usage errors logged naming --bw */
int zn_bs_parse_bw(const char *list, struct zn_bs_row *rows, int *n);

#endif
