/* zinc bench adam's output (cmd_bench_adam.h): the nccl-tests style table with its
 * preamble (version, machine, arena, problem, every figure's formula) and the same as JSON. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/cmd_bench_adam.h"
#include "core/dtype.h"
#include "core/units.h"
#include "cpu/adamw.h"

static size_t out_size(int out_dtype)
{
	return out_dtype < 0 ? 0 : zn_dtype_size(out_dtype);
}

double zn_bench_adam_bpp(const struct zn_ba_opts *o)
{
	return zn_adamw_states_bytes_per_param(o->states, o->grad_dtype, o->out_dtype >= 0,
					       o->out_dtype < 0 ? 0 : o->out_dtype);
}

static void print_bytes_formula(FILE *f, const struct zn_ba_opts *o, double bpp)
{
	static const char *const mv[] = { "m 4+4 + v 4+4", "m 2+2 + v 2+2",
					  "m 1+1 + v 1+1 + absmax (4+4) x 2 / 256" };

	fprintf(f, "# bytes per param: grad %zu + master 4+4 + %s", zn_dtype_size(o->grad_dtype),
		mv[o->states]);
	if (o->out_dtype >= 0)
		fprintf(f, " + out %zu", out_size(o->out_dtype));
	fprintf(f, " = %g (write-allocate reads of the output not counted, in rmw neither)\n",
		bpp);
}

void zn_bench_adam_print_table(const struct zn_ba_opts *o, const struct zn_cpu_info *ci,
			struct zn_arena *ar, const char *load, const struct zn_ba_row *rows, int nrows)
{
	double bpp = zn_bench_adam_bpp(o);
	const char *out = o->out_dtype < 0 ? "none" : zn_dtype_name(o->out_dtype);
	char touched[32];

	zn_bench_preamble(stdout, "adam");
	printf("# simd %s (cpu %s), OpenMP %d; %d cores, %d NUMA node(s); load at the start "
	       "%s\n", ci->simd_built, ci->simd_cpu, _OPENMP, ci->core_count, ci->numa_count,
	       load);
	printf("# arena: %.2f GiB on NUMA node %d, %s, %.2f GiB in huge pages, touched in %s\n",
	       zn_arena_size(ar) / 1073741824.0, zn_arena_numa_node(ar),
	       zn_arena_pin_name(zn_arena_pinned(ar)), zn_arena_huge_bytes(ar) / 1073741824.0,
	       zn_format_ms(touched, sizeof(touched), zn_arena_populate_s(ar) * 1e3));
	printf("# problem: N = %llu params, grad %s, out %s, m and v %s, lr 1e-3, betas 0.9 "
	       "0.999, wd 0.01; best of %d (interleaved) after 1 warm-up; threads %s\n",
	       (unsigned long long)o->n, zn_dtype_name(o->grad_dtype), out,
	       zn_optim_states_name(o->states), o->reps,
	       o->bind ? "bound one per core (hwloc)" : "unbound");
	print_bytes_formula(stdout, o, bpp);
	printf("# triad GB/s = 12 N / t        (a[i] = b[i] + s*c[i], fp32: STREAM triad)\n");
	printf("# rmw   GB/s = %g N / t        (AdamW's streams, no arithmetic: the bound)\n", bpp);
	printf("# adamw GB/s = %g N / t, Gparam/s = N / t / 1e9, %%rmw = adamw GB/s / rmw GB/s\n",
	       bpp);
	printf("# norm  GB/s = %zu N / t         (zn_grad_sumsq: squared L2 norm + inf/NaN check)\n",
	       zn_dtype_size(o->grad_dtype));
	if (o->states == ZN_STATES_FP32)
		printf("# check: AdamW vs the scalar reference on 3 windows of %d (rel <= 1e-6, "
		       "copy exact)\n", ZN_BENCH_ADAM_WINDOW);
	else
		printf("# check: AdamW vs the scalar reference on 3 windows of %d (every byte of "
		       "master, m, v, absmax and copy equal)\n", ZN_BENCH_ADAM_WINDOW);
	printf("#\n");
	printf("# %7s %8s %8s %9s %8s %6s %8s %6s\n", "threads", "triad", "rmw", "adamw", "adamw",
	       "%rmw", "norm", "check");
	printf("# %7s %8s %8s %9s %8s %6s %8s %6s\n", "", "GB/s", "GB/s", "Gparam/s", "GB/s", "%",
	       "GB/s", "");
	for (int i = 0; i < nrows; i++) {
		const struct zn_ba_row *r = &rows[i];

		printf("  %7d %8.2f %8.2f %9.3f %8.2f %6.1f %8.2f %6s\n", r->threads, r->triad_gbs,
		       r->rmw_gbs, r->adamw_gparams, r->adamw_gbs, 100 * r->adamw_gbs / r->rmw_gbs,
		       r->norm_gbs, r->check_ok ? "ok" : "FAIL");
	}
}

void zn_bench_adam_print_json(const struct zn_ba_opts *o, const struct zn_cpu_info *ci, struct zn_arena *ar,
		       const char *load, const struct zn_ba_row *rows, int nrows)
{
	cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray();

	cJSON_AddStringToObject(j, "bench", "adam");
	cJSON_AddStringToObject(j, "version", ZN_VERSION);
	cJSON_AddStringToObject(j, "compiler", "gcc " __VERSION__);
	cJSON_AddStringToObject(j, "simd_built", ci->simd_built);
	cJSON_AddStringToObject(j, "cpu", ci->model);
	cJSON_AddNumberToObject(j, "cores", ci->core_count);
	cJSON_AddNumberToObject(j, "cpus", ci->cpu_count);
	cJSON_AddStringToObject(j, "load", load);
	cJSON_AddNumberToObject(j, "params", (double)o->n);
	cJSON_AddStringToObject(j, "grad", zn_dtype_name(o->grad_dtype));
	cJSON_AddStringToObject(j, "out", o->out_dtype < 0 ? "none" : zn_dtype_name(o->out_dtype));
	cJSON_AddStringToObject(j, "optimizer_states", zn_optim_states_name(o->states));
	cJSON_AddNumberToObject(j, "bytes_per_param", zn_bench_adam_bpp(o));
	cJSON_AddStringToObject(j, "pinned", zn_arena_pin_name(zn_arena_pinned(ar)));
	cJSON_AddNumberToObject(j, "numa_node", zn_arena_numa_node(ar));
	cJSON_AddNumberToObject(j, "huge_page_bytes", (double)zn_arena_huge_bytes(ar));
	cJSON_AddNumberToObject(j, "reps", o->reps);
	cJSON_AddBoolToObject(j, "bound", o->bind);
	for (int i = 0; i < nrows; i++) {
		cJSON *r = cJSON_CreateObject();

		cJSON_AddNumberToObject(r, "threads", rows[i].threads);
		cJSON_AddNumberToObject(r, "triad_gbs", rows[i].triad_gbs);
		cJSON_AddNumberToObject(r, "rmw_gbs", rows[i].rmw_gbs);
		cJSON_AddNumberToObject(r, "adamw_gbs", rows[i].adamw_gbs);
		cJSON_AddNumberToObject(r, "adamw_gparams_per_s", rows[i].adamw_gparams);
		cJSON_AddNumberToObject(r, "fraction_of_rmw", rows[i].adamw_gbs / rows[i].rmw_gbs);
		cJSON_AddNumberToObject(r, "norm_gbs", rows[i].norm_gbs);
		cJSON_AddNumberToObject(r, "max_rel_err", rows[i].max_rel_err);
		cJSON_AddBoolToObject(r, "check_ok", rows[i].check_ok);
		cJSON_AddItemToArray(arr, r);
	}
	cJSON_AddItemToObject(j, "rows", arr);
	char *s = cJSON_Print(j);

	if (s)
		puts(s);
	free(s);
	cJSON_Delete(j);
}

