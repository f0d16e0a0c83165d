/* zinc bench adam (cmd_bench_adam.c measures, cmd_bench_adam_out.c prints): one row per
 * thread count. Every printed figure's formula is printed in the table's preamble and in
 * docs/cpu.md. */
#ifndef ZN_CLI_CMD_BENCH_ADAM_H
#define ZN_CLI_CMD_BENCH_ADAM_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/adamw.h"
#include "cpu/arena.h"
#include "cpu/topo.h"
#include "zinc.h"

#define ZN_BA_MAX_THREAD_ROWS 64
#define ZN_BENCH_ADAM_WINDOW 4099 /* checked elements per window: odd, off the SIMD width */

struct zn_ba_opts {
	uint64_t n;
	int threads[ZN_BA_MAX_THREAD_ROWS];
	int thread_rows;
	enum zn_dtype grad_dtype;
	int out_dtype; /* -1 = none */
	enum zn_optim_states states; /* m and v as stored (--optimizer-states) */
	int reps;
	int numa_node;
	bool json;
	bool bind;
	bool l2; /* L2-regularised Adam instead of AdamW */
};

struct zn_ba_row {
	int threads;
	double triad_gbs, rmw_gbs, adamw_gbs, adamw_gparams, norm_gbs;
	double max_rel_err;
	bool check_ok;
};

/* AdamW's streams with no arithmetic (zero is 0 at run time): the same bytes as AdamW with
 * o->states moments (cmd_bench_adam_rmw.c). */
void zn_bench_adam_rmw(float *master, const struct zn_adamw_moments *mo, const void *grad,
		       size_t gsize, void *out, size_t osize, size_t n, int threads, float zero);
/* Bytes each element of AdamW moves (the rmw bound moves the same). */
double zn_bench_adam_bpp(const struct zn_ba_opts *o);
void zn_bench_adam_print_table(const struct zn_ba_opts *o, const struct zn_cpu_info *ci,
			       struct zn_arena *ar, const char *load, const struct zn_ba_row *rows,
			       int nrows);
void zn_bench_adam_print_json(const struct zn_ba_opts *o, const struct zn_cpu_info *ci,
			      struct zn_arena *ar, const char *load, const struct zn_ba_row *rows,
			      int nrows);

#endif
