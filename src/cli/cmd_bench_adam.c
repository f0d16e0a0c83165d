/* zinc bench adam: CPU AdamW throughput against the memory-bandwidth bound of the same run.
 *
 * For each thread count it measures, on the same pinned arena:
 *   triad  STREAM triad a[i] = b[i] + s*c[i] over fp32 arrays of N:   12 N bytes
 *   rmw    AdamW's access pattern with no arithmetic to speak of: grad read; master, m, v
 *          read and written in place; the output copy written:   bytes_per_param * N
 *   adamw  zn_adamw_step over N params:                          bytes_per_param * N
 *   norm   zn_grad_sumsq (squared L2 norm + inf/NaN):            grad_bytes * N
 * Each figure is best of --reps after one warm-up; GB/s = bytes / seconds / 1e9. The AdamW
 * result is checked against zn_adamw_step_ref on three windows (start, middle, end) outside
 * the timed loop. bytes_per_param counts what the algorithm must move (fp32 grad, bf16 out:
 * 4 + 8 + 8 + 8 + 2 = 30); write-allocate reads of the output are not counted (in rmw
 * either), so %rmw compares like with like.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "core/dtype.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/units.h"
#include "cpu/adamw.h"
#include "cpu/arena.h"
#include "cpu/topo.h"
#include "zinc.h"

#define MAX_THREAD_ROWS 64
#define CHECK_WINDOW 4099 /* odd: windows end off the SIMD width */

struct opts {
	uint64_t n;
	int threads[MAX_THREAD_ROWS];
	int thread_rows;
	enum zn_dtype grad_dtype;
	int out_dtype; /* -1 = none */
	int reps;
	int numa_node;
	bool json;
	bool bind;
	bool l2; /* L2-regularised Adam instead of AdamW */
};

struct bufs {
	float *master, *m, *v, *ta, *tb, *tc;
	void *grad, *out;
};

struct row {
	int threads;
	double triad_gbs, rmw_gbs, adamw_gbs, adamw_gparams, norm_gbs;
	double max_rel_err;
	bool check_ok;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc bench adam [options]\n"
		"  --params N        parameters per step (default 64Mi = 67108864; K/M/G = 1e3..,\n"
		"                    Ki/Mi/Gi = 2^10..)\n"
		"  --threads LIST    thread counts, e.g. 1,2,4 (default 1 .. all cores)\n"
		"  --grad DTYPE      fp32 (default), bf16 or fp16\n"
		"  --out DTYPE       bf16 (default), fp16, fp32 or none\n"
		"  --reps R          timed repetitions per figure, best kept (default 5)\n"
		"  --numa-node N     NUMA node of the arena and the threads (default: this thread's)\n"
		"  --no-bind         leave OpenMP threads unbound (default: one per core, hwloc)\n"
		"  --json            print JSON instead of the table\n"
		"  --l2              L2-regularised Adam (adam_w_mode false) instead of AdamW\n");
}

/* "64M" = 64e6, "64Mi" = 2^26 (zinc.h's count convention, plus binary suffixes). */
static int parse_count(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);
	double mul = 1;

	if (end == s || v < 0)
		return -1;
	if (*end) {
		const char *u = "KMGT";
		const char *p = strchr(u, *end);

		if (!p || !*end)
			return -1;
		int k = (int)(p - u) + 1;

		mul = end[1] == 'i' ? pow(1024, k) : pow(1000, k);
		end += end[1] == 'i' ? 2 : 1;
		if (*end)
			return -1;
	}
	*out = (uint64_t)(v * mul);
	return 0;
}

static int parse_dtype(const char *s, bool allow_none, int *out)
{
	if (!strcmp(s, "fp32"))
		*out = ZN_DTYPE_F32;
	else if (!strcmp(s, "bf16"))
		*out = ZN_DTYPE_BF16;
	else if (!strcmp(s, "fp16"))
		*out = ZN_DTYPE_F16;
	else if (allow_none && !strcmp(s, "none"))
		*out = -1;
	else
		return -1;
	return 0;
}

static int parse_threads(const char *s, struct opts *o)
{
	char *end;

	o->thread_rows = 0;
	while (*s) {
		long t = strtol(s, &end, 10);

		if (end == s || t < 1 || t > 4096 || o->thread_rows == MAX_THREAD_ROWS)
			return -1;
		o->threads[o->thread_rows++] = (int)t;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return o->thread_rows ? 0 : -1;
}

static int parse_opts(int argc, char **argv, struct opts *o, int cores)
{
	*o = (struct opts){ .n = 1ull << 26, .grad_dtype = ZN_DTYPE_F32,
			    .out_dtype = ZN_DTYPE_BF16, .reps = 5, .numa_node = -1,
			    .bind = true };
	for (int t = 1; t <= cores && o->thread_rows < MAX_THREAD_ROWS; t++)
		o->threads[o->thread_rows++] = t;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int d, bad = 0;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		} else if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		} else if (!strcmp(a, "--no-bind")) {
			o->bind = false;
			continue;
		} else if (!strcmp(a, "--l2")) {
			o->l2 = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "zinc bench adam: %s needs a value (see --help)\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--params"))
			bad = parse_count(v, &o->n) || o->n == 0;
		else if (!strcmp(a, "--threads"))
			bad = parse_threads(v, o);
		else if (!strcmp(a, "--grad"))
			bad = parse_dtype(v, false, &d) || (o->grad_dtype = d, 0);
		else if (!strcmp(a, "--out"))
			bad = parse_dtype(v, true, &o->out_dtype);
		else if (!strcmp(a, "--reps"))
			bad = (o->reps = atoi(v)) < 1;
		else if (!strcmp(a, "--numa-node"))
			bad = (o->numa_node = atoi(v)) < 0;
		else {
			zn_cli_unknown_flag("zinc bench adam", a, usage);
			return -1;
		}
		if (bad) {
			fprintf(stderr, "zinc bench adam: bad value '%s' for %s (see --help)\n", v, a);
			return -1;
		}
	}
	return 0;
}

static size_t out_size(int out_dtype)
{
	return out_dtype < 0 ? 0 : zn_dtype_size(out_dtype);
}

static int carve(struct zn_arena *ar, const struct opts *o, struct bufs *b)
{
	uint64_t n4 = o->n * 4;
	int rc = 0;

	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->master);
	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->m);
	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->v);
	if (!rc)
		rc = zn_arena_alloc(ar, o->n * zn_dtype_size(o->grad_dtype), 0, &b->grad);
	if (o->out_dtype >= 0)
		if (!rc)
			rc = zn_arena_alloc(ar, o->n * out_size(o->out_dtype), 0, &b->out);
	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->ta);
	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->tb);
	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->tc);
	return rc;
}

static uint64_t arena_bytes(const struct opts *o)
{
	uint64_t per = 4 * 6 + zn_dtype_size(o->grad_dtype) + out_size(o->out_dtype);

	return o->n * per + 16 * 4096; /* each view rounds up to a page */
}

/* splitmix64 of the index: the same data for any thread count */
static float hash_uniform(uint64_t i, float lo, float hi)
{
	uint64_t z = zn_hash_seeded(i, 0);

	return lo + (hi - lo) * (float)((z >> 40) * (1.0 / (1ull << 24)));
}

static void fill(const struct opts *o, struct bufs *b)
{
	int64_t n = (int64_t)o->n;

#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++) {
		float g = hash_uniform(4 * i + 3, -1e-2f, 1e-2f);

		b->master[i] = hash_uniform(4 * i, -1, 1);
		b->m[i] = hash_uniform(4 * i + 1, -1e-3f, 1e-3f);
		b->v[i] = hash_uniform(4 * i + 2, 0, 1e-5f);
		if (o->grad_dtype == ZN_DTYPE_F32)
			((float *)b->grad)[i] = g;
		else if (o->grad_dtype == ZN_DTYPE_BF16)
			((uint16_t *)b->grad)[i] = zn_f32_to_bf16(g);
		else
			((uint16_t *)b->grad)[i] = zn_f32_to_f16(g);
		b->ta[i] = 0;
		b->tb[i] = hash_uniform(i, 0, 1);
		b->tc[i] = hash_uniform(i + 1, 0, 1);
	}
}

static void triad(struct bufs *b, int64_t n, int threads, float s)
{
	float *restrict a = b->ta;
	const float *restrict x = b->tb, *restrict y = b->tc;

#pragma omp parallel for simd schedule(static) num_threads(threads)
	for (int64_t i = 0; i < n; i++)
		a[i] = x[i] + s * y[i];
}

/* The AdamW streams with no arithmetic to speak of: zero is 0 at run time, so nothing
 * changes, but the compiler cannot know that and must load and store every stream. Same
 * loop structure as zn_adamw_step (static schedule over 16 Ki-element chunks, `omp simd`
 * bodies specialised per element size), so the two differ only in the arithmetic. */
#define RMW_CHUNK_COUNT 16384

static inline __attribute__((always_inline)) void
rmw_chunk(float *restrict mst, float *restrict m, float *restrict v, const void *restrict grad,
	  void *restrict out, size_t gsize, size_t osize, float zero, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++) {
		float g = gsize == 4 ? ((const float *)grad)[i]
				     : (float)((const uint16_t *)grad)[i];
		float x = fmaf(g, zero, mst[i]);

		g *= zero;
		mst[i] = x;
		m[i] += g;
		v[i] += g;
		if (osize == 4)
			((float *)out)[i] = x;
		else if (osize == 2)
			((uint16_t *)out)[i] = (uint16_t)(x * zero);
	}
}

static void rmw_range(struct bufs *b, size_t at, size_t n, size_t gsize, size_t osize, float zero)
{
	const char *g = (const char *)b->grad + at * gsize;
	char *o = b->out ? (char *)b->out + at * osize : NULL;
	float *mst = b->master + at, *m = b->m + at, *v = b->v + at;

	if (gsize == 4 && osize == 2)
		rmw_chunk(mst, m, v, g, o, 4, 2, zero, n);
	else if (gsize == 2 && osize == 2)
		rmw_chunk(mst, m, v, g, o, 2, 2, zero, n);
	else if (gsize == 4 && osize == 4)
		rmw_chunk(mst, m, v, g, o, 4, 4, zero, n);
	else if (gsize == 2 && osize == 4)
		rmw_chunk(mst, m, v, g, o, 2, 4, zero, n);
	else if (gsize == 4)
		rmw_chunk(mst, m, v, g, o, 4, 0, zero, n);
	else
		rmw_chunk(mst, m, v, g, o, 2, 0, zero, n);
}

static void rmw(struct bufs *b, int64_t n, int threads, size_t gsize, size_t osize, float zero)
{
	int64_t chunks = (n + RMW_CHUNK_COUNT - 1) / RMW_CHUNK_COUNT;

#pragma omp parallel for schedule(static) num_threads(threads)
	for (int64_t c = 0; c < chunks; c++) {
		int64_t at = c * RMW_CHUNK_COUNT;
		int64_t len = n - at < RMW_CHUNK_COUNT ? n - at : RMW_CHUNK_COUNT;

		rmw_range(b, (size_t)at, (size_t)len, gsize, osize, zero);
	}
}

struct window {
	size_t at, len;
	float master[CHECK_WINDOW], m[CHECK_WINDOW], v[CHECK_WINDOW];
	float ref_out[CHECK_WINDOW]; /* room for fp32 output */
};

/* Saves three windows, runs one step on everything (also the warm-up), and compares the
 * windows with the reference run on the saved copies. */
static bool check_step(const struct opts *o, struct bufs *b, struct zn_adamw_params *p,
		       double *max_rel)
{
	static struct window w[3];
	size_t gs = zn_dtype_size(o->grad_dtype), os = out_size(o->out_dtype);
	size_t len = o->n < CHECK_WINDOW ? o->n : CHECK_WINDOW;
	size_t at[3] = { 0, (o->n - len) / 2 | 1, o->n - len };
	bool ok = true;

	at[1] = at[1] + len > o->n ? 0 : at[1];
	for (int k = 0; k < 3; k++) {
		w[k].at = at[k];
		w[k].len = len;
		memcpy(w[k].master, b->master + at[k], len * 4);
		memcpy(w[k].m, b->m + at[k], len * 4);
		memcpy(w[k].v, b->v + at[k], len * 4);
	}
	if (zn_adamw_step(p, b->master, b->m, b->v, b->grad, o->grad_dtype, b->out,
			  o->out_dtype < 0 ? 0 : o->out_dtype, o->n))
		return false;
	*max_rel = 0;
	for (int k = 0; k < 3; k++) {
		const char *g = (const char *)b->grad + w[k].at * gs;

		zn_adamw_step_ref(p, w[k].master, w[k].m, w[k].v, g, o->grad_dtype,
				  os ? w[k].ref_out : NULL, o->out_dtype < 0 ? 0 : o->out_dtype,
				  w[k].len);
		for (size_t i = 0; i < w[k].len; i++) {
			size_t j = w[k].at + i;
			float got[3] = { b->master[j], b->m[j], b->v[j] };
			float want[3] = { w[k].master[i], w[k].m[i], w[k].v[i] };

			for (int q = 0; q < 3; q++) {
				double s = fmax(fabs(got[q]), fabs(want[q]));
				double e = s > 0 ? fabs((double)got[q] - want[q]) / s : 0;

				if (!(e <= 1e-6))
					ok = false;
				*max_rel = fmax(*max_rel, isnan(e) ? INFINITY : e);
			}
			if (os && memcmp((char *)b->out + j * os, (char *)w[k].ref_out + i * os, os) &&
			    memcmp(got, want, 4) == 0)
				ok = false; /* same master, different rounding of the copy */
		}
	}
	return ok;
}

struct run_ctx {
	const struct opts *o;
	struct bufs *b;
	struct zn_adamw_params *p;
	int threads;
	volatile float zero;
	double sumsq;
	bool nonfinite;
};

static void run_triad(void *arg)
{
	struct run_ctx *c = arg;

	triad(c->b, (int64_t)c->o->n, c->threads, 3.0f);
}

static void run_rmw(void *arg)
{
	struct run_ctx *c = arg;

	rmw(c->b, (int64_t)c->o->n, c->threads, zn_dtype_size(c->o->grad_dtype),
	    out_size(c->o->out_dtype), c->zero);
}

static void run_adamw(void *arg)
{
	struct run_ctx *c = arg;
	const struct opts *o = c->o;

	c->p->step++;
	zn_adamw_step(c->p, c->b->master, c->b->m, c->b->v, c->b->grad, o->grad_dtype, c->b->out,
		      o->out_dtype < 0 ? 0 : o->out_dtype, o->n);
}

static void run_norm(void *arg)
{
	struct run_ctx *c = arg;

	zn_grad_sumsq(c->b->grad, c->o->grad_dtype, c->o->n, c->threads, &c->sumsq, &c->nonfinite);
}

static void measure(const struct opts *o, struct bufs *b, int threads, int node, struct row *r)
{
	struct zn_adamw_params p;
	struct run_ctx c = { o, b, &p, threads, 0.0f, 0, false };
	double bpp = zn_adamw_bytes_per_param(o->grad_dtype, o->out_dtype >= 0,
					      o->out_dtype < 0 ? 0 : o->out_dtype);
	double n = (double)o->n;

	zn_adamw_params_init(&p, NULL);
	p.l2 = o->l2;
	p.thread_count = threads;
	p.step = 1;
	if (o->bind)
		zn_topo_bind_omp_threads(node, threads);
	r->threads = threads;
	r->check_ok = check_step(o, b, &p, &r->max_rel_err); /* also AdamW's warm-up */
	run_triad(&c);
	run_rmw(&c);
	run_norm(&c);
	/* Interleaved, so that the load of a shared machine weighs on all four alike. */
	double best[4] = { INFINITY, INFINITY, INFINITY, INFINITY };
	void (*fns[4])(void *) = { run_triad, run_rmw, run_adamw, run_norm };

	for (int rep = 0; rep < o->reps; rep++)
		for (int k = 0; k < 4; k++) {
			double t0 = now_s();

			fns[k](&c);
			best[k] = fmin(best[k], now_s() - t0);
		}
	r->triad_gbs = 12 * n / best[0] / 1e9;
	r->rmw_gbs = bpp * n / best[1] / 1e9;
	r->adamw_gbs = bpp * n / best[2] / 1e9;
	r->adamw_gparams = n / best[2] / 1e9;
	r->norm_gbs = zn_dtype_size(o->grad_dtype) * n / best[3] / 1e9;
	if (c.nonfinite)
		r->check_ok = false;
}

static void load_avg(char *buf, size_t n)
{
	FILE *f = fopen("/proc/loadavg", "r"); /* 1, 5, 15-minute load */

	snprintf(buf, n, "?");
	if (f) {
		if (fgets(buf, (int)n, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
}

static void print_bytes_formula(FILE *f, const struct opts *o, unsigned bpp)
{
	fprintf(f, "# bytes per param: grad %zu + master 4+4 + m 4+4 + v 4+4", zn_dtype_size(o->grad_dtype));
	if (o->out_dtype >= 0)
		fprintf(f, " + out %zu", out_size(o->out_dtype));
	fprintf(f, " = %u (write-allocate reads of the output not counted, in rmw neither)\n", bpp);
}

static void print_table(const struct opts *o, const struct zn_cpu_info *ci,
			struct zn_arena *ar, const char *load, const struct row *rows, int nrows)
{
	unsigned bpp = zn_adamw_bytes_per_param(o->grad_dtype, o->out_dtype >= 0,
						o->out_dtype < 0 ? 0 : o->out_dtype);
	const char *out = o->out_dtype < 0 ? "none" : zn_dtype_name(o->out_dtype);
	char touched[32];

	printf("# zinc bench adam: zinc %s, %s, simd %s (cpu %s), OpenMP %d\n", ZN_VERSION,
	       "gcc " __VERSION__, ci->simd_built, ci->simd_cpu, _OPENMP);
	printf("# machine: %s, %d cores, %d CPUs, %d NUMA node(s), %.1f GiB RAM, load %s\n",
	       ci->model, ci->core_count, ci->cpu_count, ci->numa_count,
	       ci->mem_total_bytes / 1073741824.0, load);
	printf("# arena: %.2f GiB on NUMA node %d, %s, %.2f GiB in huge pages, touched in %s\n",
	       zn_arena_size(ar) / 1073741824.0, zn_arena_numa_node(ar),
	       zn_arena_pin_name(zn_arena_pinned(ar)), zn_arena_huge_bytes(ar) / 1073741824.0,
	       zn_format_ms(touched, sizeof(touched), zn_arena_populate_s(ar) * 1e3));
	printf("# problem: N = %llu params, grad %s, out %s, lr 1e-3, betas 0.9 0.999, wd 0.01; "
	       "best of %d (interleaved) after 1 warm-up; threads %s\n", (unsigned long long)o->n,
	       zn_dtype_name(o->grad_dtype), out, o->reps, o->bind ? "bound one per core (hwloc)" : "unbound");
	print_bytes_formula(stdout, o, bpp);
	printf("# triad GB/s = 12 N / t        (a[i] = b[i] + s*c[i], fp32: STREAM triad)\n");
	printf("# rmw   GB/s = %u N / t        (AdamW's streams, no arithmetic: the bound)\n", bpp);
	printf("# adamw GB/s = %u N / t, Gparam/s = N / t / 1e9, %%rmw = adamw GB/s / rmw GB/s\n", bpp);
	printf("# norm  GB/s = %zu N / t         (zn_grad_sumsq: squared L2 norm + inf/NaN check)\n",
	       zn_dtype_size(o->grad_dtype));
	printf("# check: AdamW vs the scalar reference on 3 windows of %d (rel <= 1e-6, copy exact)\n",
	       CHECK_WINDOW);
	printf("#\n");
	printf("# %7s %8s %8s %9s %8s %6s %8s %6s\n", "threads", "triad", "rmw", "adamw", "adamw",
	       "%rmw", "norm", "check");
	printf("# %7s %8s %8s %9s %8s %6s %8s %6s\n", "", "GB/s", "GB/s", "Gparam/s", "GB/s", "%",
	       "GB/s", "");
	for (int i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		printf("  %7d %8.2f %8.2f %9.3f %8.2f %6.1f %8.2f %6s\n", r->threads, r->triad_gbs,
		       r->rmw_gbs, r->adamw_gparams, r->adamw_gbs, 100 * r->adamw_gbs / r->rmw_gbs,
		       r->norm_gbs, r->check_ok ? "ok" : "FAIL");
	}
}

static void print_json(const struct opts *o, const struct zn_cpu_info *ci, struct zn_arena *ar,
		       const char *load, const struct row *rows, int nrows)
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
	cJSON_AddNumberToObject(j, "bytes_per_param",
				zn_adamw_bytes_per_param(o->grad_dtype, o->out_dtype >= 0,
							 o->out_dtype < 0 ? 0 : o->out_dtype));
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

int zn_cmd_bench_adam(int argc, char **argv)
{
	struct zn_cpu_info ci;
	struct zn_arena_config ac;
	struct zn_arena *ar = NULL;
	struct bufs b = { 0 };
	static struct row rows[MAX_THREAD_ROWS];
	struct opts o;
	char load[128];
	bool all_ok = true;
	int rc;

	load_avg(load, sizeof(load));
	if (zn_cpu_info_get(&ci))
		return 1;
	rc = parse_opts(argc, argv, &o, ci.core_count > 0 ? ci.core_count : 1);
	if (rc)
		return rc > 0 ? 0 : ZN_EXIT_USAGE;
	zn_arena_config_init(&ac, NULL);
	ac.bytes = arena_bytes(&o);
	ac.numa_node = o.numa_node;
	ac.pin_required = false; /* measure anyway; the preamble says whether it is pinned */
	rc = zn_arena_create(&ar, &ac);
	if (rc) {
		fprintf(stderr, "zinc bench adam: no arena of %.2f GiB for %llu params: %s\n",
			ac.bytes / 1073741824.0, (unsigned long long)o.n, zn_strerror(rc));
		return 1;
	}
	if (carve(ar, &o, &b))
		goto destroy_arena;
	fill(&o, &b);
	for (int i = 0; i < o.thread_rows; i++) {
		measure(&o, &b, o.threads[i], zn_arena_numa_node(ar), &rows[i]);
		all_ok &= rows[i].check_ok;
	}
	if (o.json)
		print_json(&o, &ci, ar, load, rows, o.thread_rows);
	else
		print_table(&o, &ci, ar, load, rows, o.thread_rows);
	zn_arena_destroy(ar);
	if (!all_ok)
		fprintf(stderr, "zinc bench adam: AdamW result differs from the reference (check FAIL)\n");
	return all_ok ? 0 : 1;

destroy_arena:
	zn_arena_destroy(ar);
	return 1;
}
