/* zinc bench adam: CPU AdamW throughput against the memory-bandwidth bound of the same run.
 *
 * For each thread count it measures, on the same pinned arena:
 *   triad  STREAM triad a[i] = b[i] + s*c[i] over fp32 arrays of N:   12 N bytes
 *   rmw    AdamW's access pattern with no arithmetic to speak of: grad read; master, m, v
 *          (as --optimizer-states stores them) read and written in place; the output copy
 *          written (cmd_bench_adam_rmw.c):                       bytes_per_param * N
 *   adamw  zn_adamw_step_states over N params:                   bytes_per_param * N
 *   norm   zn_grad_sumsq (squared L2 norm + inf/NaN):            grad_bytes * N
 * Each figure is best of --reps after one warm-up; GB/s = bytes / seconds / 1e9. The AdamW
 * result is checked against zn_adamw_step_states_ref on three windows (start, middle, end)
 * outside the timed loop. bytes_per_param counts what the algorithm must move (fp32 grad,
 * bf16 out: 4 + 8 + 8 + 8 + 2 = 30; int8 m and v: 4 + 8 + 2 + 2 + 0.0625 + 2 = 18.0625);
 * write-allocate reads of the output are not counted (in rmw either), so %rmw compares
 * like with like.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
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

#include "cli/cmd_bench_adam.h"
#include "cpu/q8.h"

#define CHECK_WINDOW ZN_BENCH_ADAM_WINDOW

struct bufs {
	float *master, *ta, *tb, *tc;
	void *m, *v;        /* as stored (o->states): n rounded up to whole int8 blocks */
	struct zn_adamw_moments mo;
	void *grad, *out;
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
		"  --l2              L2-regularised Adam (adam_w_mode false) instead of AdamW\n"
		"  --optimizer-states fp32|bf16|int8  m and v as stored (default fp32; docs/cpu.md):\n"
		"                    AdamW and its rmw bound move their bytes\n");
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

static int parse_threads(const char *s, struct zn_ba_opts *o)
{
	char *end;

	o->thread_rows = 0;
	while (*s) {
		long t = strtol(s, &end, 10);

		if (end == s || t < 1 || t > 4096 || o->thread_rows == ZN_BA_MAX_THREAD_ROWS)
			return -1;
		o->threads[o->thread_rows++] = (int)t;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return o->thread_rows ? 0 : -1;
}

static int parse_opts(int argc, char **argv, struct zn_ba_opts *o, int cores)
{
	*o = (struct zn_ba_opts){ .n = 1ull << 26, .grad_dtype = ZN_DTYPE_F32,
			    .out_dtype = ZN_DTYPE_BF16, .reps = 5, .numa_node = -1,
			    .bind = true };
	for (int t = 1; t <= cores && o->thread_rows < ZN_BA_MAX_THREAD_ROWS; t++)
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
		else if (!strcmp(a, "--optimizer-states"))
			bad = zn_optim_states_parse(v, &o->states);
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

/* elements of the moments: whole int8 blocks (the rest of the last one is padding) */
static uint64_t moment_numel(const struct zn_ba_opts *o)
{
	return (uint64_t)zn_q8_blocks(o->n) * ZN_Q8_BLOCK;
}

static int carve(struct zn_arena *ar, const struct zn_ba_opts *o, struct bufs *b)
{
	uint64_t n4 = o->n * 4, mb = zn_adamw_state_bytes(o->states, moment_numel(o));
	int rc = 0;

	if (!rc)
		rc = zn_arena_alloc(ar, n4, 0, (void **)&b->master);
	if (!rc)
		rc = zn_arena_alloc(ar, mb, 0, &b->m);
	if (!rc)
		rc = zn_arena_alloc(ar, mb, 0, &b->v);
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
	zn_adamw_moments_of(&b->mo, o->states, b->m, b->v, moment_numel(o));
	return rc;
}

static uint64_t arena_bytes(const struct zn_ba_opts *o)
{
	uint64_t per = 4 * 4 + zn_dtype_size(o->grad_dtype) + out_size(o->out_dtype);

	/* each view rounds up to a page */
	return o->n * per + 2 * zn_adamw_state_bytes(o->states, moment_numel(o)) + 16 * 4096;
}

/* splitmix64 of the index: the same data for any thread count */
static float hash_uniform(uint64_t i, float lo, float hi)
{
	uint64_t z = zn_hash_seeded(i, 0);

	return lo + (hi - lo) * (float)((z >> 40) * (1.0 / (1ull << 24)));
}

/* m and v of block k (elements [k x 256, ...)) as stored */
static void fill_moments_block(const struct zn_ba_opts *o, struct bufs *b, size_t k)
{
	float m[ZN_Q8_BLOCK], v[ZN_Q8_BLOCK];
	size_t first = k * ZN_Q8_BLOCK, len = ZN_Q8_BLOCK;
	struct zn_adamw_moments at;

	for (size_t j = 0; j < len; j++) {
		bool real = first + j < o->n; /* the padding stays zero */

		m[j] = real ? hash_uniform(4 * (first + j) + 1, -1e-3f, 1e-3f) : 0.0f;
		v[j] = real ? hash_uniform(4 * (first + j) + 2, 0, 1e-5f) : 0.0f;
	}
	zn_adamw_moments_at(&at, &b->mo, first);
	if (o->states == ZN_STATES_INT8) {
		zn_q8_quantize(at.m, at.m_absmax, m, len, true);
		zn_q8_quantize(at.v, at.v_absmax, v, len, false);
	} else if (o->states == ZN_STATES_BF16) {
		zn_cast_f32_to_bf16(at.m, m, len);
		zn_cast_f32_to_bf16(at.v, v, len);
	} else {
		memcpy(at.m, m, sizeof(m));
		memcpy(at.v, v, sizeof(v));
	}
}

static void fill(const struct zn_ba_opts *o, struct bufs *b)
{
	int64_t n = (int64_t)o->n, blocks = (int64_t)zn_q8_blocks(o->n);

#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++) {
		float g = hash_uniform(4 * i + 3, -1e-2f, 1e-2f);

		b->master[i] = hash_uniform(4 * i, -1, 1);
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
#pragma omp parallel for schedule(static)
	for (int64_t k = 0; k < blocks; k++)
		fill_moments_block(o, b, (size_t)k);
}

static void triad(struct bufs *b, int64_t n, int threads, float s)
{
	float *restrict a = b->ta;
	const float *restrict x = b->tb, *restrict y = b->tc;

#pragma omp parallel for simd schedule(static) num_threads(threads)
	for (int64_t i = 0; i < n; i++)
		a[i] = x[i] + s * y[i];
}

struct window {
	size_t at, len;
	float master[CHECK_WINDOW];
	/* m and v as stored, then (int8) their blocks' absmax */
	uint8_t m[CHECK_WINDOW * 4 + 256], v[CHECK_WINDOW * 4 + 256];
	struct zn_adamw_moments mo;
	float ref_out[CHECK_WINDOW]; /* room for fp32 output */
};

/* The windows: start, middle, end. int8 ones start on a block and hold whole blocks, or
 * end at n (the reference pads the last block as the whole run does). */
static void windows(const struct zn_ba_opts *o, size_t at[3], size_t len[3])
{
	size_t n = o->n, w = n < CHECK_WINDOW ? n : CHECK_WINDOW;

	if (o->states != ZN_STATES_INT8) {
		at[0] = 0;
		at[1] = (n - w) / 2 | 1;
		at[1] = at[1] + w > n ? 0 : at[1];
		at[2] = n - w;
		len[0] = len[1] = len[2] = w;
		return;
	}
	w = n < 15 * ZN_Q8_BLOCK ? n : 15 * ZN_Q8_BLOCK;
	at[0] = 0;
	at[1] = n / 2 / ZN_Q8_BLOCK * ZN_Q8_BLOCK;
	at[2] = (n - w) / ZN_Q8_BLOCK * ZN_Q8_BLOCK;
	for (int k = 0; k < 3; k++)
		len[k] = at[k] + w > n || k == 2 ? n - at[k] : w;
}

/* window k's copy of the state before the step */
static void window_save(const struct zn_ba_opts *o, const struct bufs *b, struct window *w)
{
	size_t es = zn_adamw_state_bytes(o->states, ZN_Q8_BLOCK) / ZN_Q8_BLOCK;
	uint64_t cap = o->states == ZN_STATES_INT8 ? zn_q8_blocks(w->len) * ZN_Q8_BLOCK : w->len;
	struct zn_adamw_moments at;

	zn_adamw_moments_at(&at, &b->mo, w->at);
	zn_adamw_moments_of(&w->mo, o->states, w->m, w->v, cap);
	memcpy(w->master, b->master + w->at, w->len * 4);
	memcpy(w->m, at.m, w->len * es);
	memcpy(w->v, at.v, w->len * es);
	if (o->states == ZN_STATES_INT8) {
		memcpy(w->mo.m_absmax, at.m_absmax, zn_q8_blocks(w->len) * 4);
		memcpy(w->mo.v_absmax, at.v_absmax, zn_q8_blocks(w->len) * 4);
	}
}

/* fp32 moments: within 1e-6 of the reference (its FMA choice is the pass's); compact ones:
 * every byte of master, m, v and their scales */
static bool window_same(const struct zn_ba_opts *o, const struct bufs *b, const struct window *w,
			double *max_rel)
{
	size_t es = zn_adamw_state_bytes(o->states, ZN_Q8_BLOCK) / ZN_Q8_BLOCK;
	struct zn_adamw_moments at;
	bool ok = true;

	zn_adamw_moments_at(&at, &b->mo, w->at);
	if (o->states != ZN_STATES_FP32) {
		size_t nb = o->states == ZN_STATES_INT8 ? zn_q8_blocks(w->len) * 4 : 0;

		return !memcmp(b->master + w->at, w->master, w->len * 4) &&
		       !memcmp(at.m, w->m, w->len * es) && !memcmp(at.v, w->v, w->len * es) &&
		       (!nb || (!memcmp(at.m_absmax, w->mo.m_absmax, nb) &&
				!memcmp(at.v_absmax, w->mo.v_absmax, nb)));
	}
	for (size_t i = 0; i < w->len; i++) {
		float got[3] = { b->master[w->at + i], ((float *)at.m)[i], ((float *)at.v)[i] };
		float want[3] = { w->master[i], ((const float *)w->m)[i], ((const float *)w->v)[i] };

		for (int q = 0; q < 3; q++) {
			double s = fmax(fabs(got[q]), fabs(want[q]));
			double e = s > 0 ? fabs((double)got[q] - want[q]) / s : 0;

			if (!(e <= 1e-6))
				ok = false;
			*max_rel = fmax(*max_rel, isnan(e) ? INFINITY : e);
		}
	}
	return ok;
}

/* Saves three windows, runs one step on everything (also the warm-up), and compares the
 * windows with the reference run on the saved copies. */
static bool check_step(const struct zn_ba_opts *o, struct bufs *b, struct zn_adamw_params *p,
		       double *max_rel)
{
	static struct window w[3];
	size_t gs = zn_dtype_size(o->grad_dtype), os = out_size(o->out_dtype), at[3], len[3];
	struct zn_adamw_span all = { 0, o->n, p->weight_decay };
	bool ok = true;

	windows(o, at, len);
	for (int k = 0; k < 3; k++) {
		w[k].at = at[k];
		w[k].len = len[k];
		window_save(o, b, &w[k]);
	}
	if (zn_adamw_step_states(p, b->master, &b->mo, b->grad, o->grad_dtype, b->out,
				 o->out_dtype < 0 ? 0 : o->out_dtype, o->n, &all, 1))
		return false;
	*max_rel = 0;
	for (int k = 0; k < 3; k++) {
		const char *g = (const char *)b->grad + w[k].at * gs;
		struct zn_adamw_span span = { 0, w[k].len, p->weight_decay };

		zn_adamw_step_states_ref(p, w[k].master, &w[k].mo, g, o->grad_dtype,
					 os ? w[k].ref_out : NULL,
					 o->out_dtype < 0 ? 0 : o->out_dtype, w[k].len, &span, 1);
		if (!window_same(o, b, &w[k], max_rel))
			ok = false;
		for (size_t i = 0; os && i < w[k].len; i++)
			if (memcmp((char *)b->out + (w[k].at + i) * os,
				   (char *)w[k].ref_out + i * os, os) &&
			    memcmp(&b->master[w[k].at + i], &w[k].master[i], 4) == 0)
				ok = false; /* same master, different rounding of the copy */
	}
	return ok;
}

struct run_ctx {
	const struct zn_ba_opts *o;
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

	zn_bench_adam_rmw(c->b->master, &c->b->mo, c->b->grad, zn_dtype_size(c->o->grad_dtype),
			  c->b->out, out_size(c->o->out_dtype), c->o->n, c->threads, c->zero);
}

static void run_adamw(void *arg)
{
	struct run_ctx *c = arg;
	const struct zn_ba_opts *o = c->o;

	struct zn_adamw_span all = { 0, o->n, c->p->weight_decay };

	c->p->step++;
	zn_adamw_step_states(c->p, c->b->master, &c->b->mo, c->b->grad, o->grad_dtype, c->b->out,
			     o->out_dtype < 0 ? 0 : o->out_dtype, o->n, &all, 1);
}

static void run_norm(void *arg)
{
	struct run_ctx *c = arg;

	zn_grad_sumsq(c->b->grad, c->o->grad_dtype, c->o->n, c->threads, &c->sumsq, &c->nonfinite);
}

static void measure(const struct zn_ba_opts *o, struct bufs *b, int threads, int node, struct zn_ba_row *r)
{
	struct zn_adamw_params p;
	struct run_ctx c = { o, b, &p, threads, 0.0f, 0, false };
	double bpp = zn_bench_adam_bpp(o);
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

int zn_cmd_bench_adam(int argc, char **argv)
{
	struct zn_cpu_info ci;
	struct zn_arena_config ac;
	struct zn_arena *ar = NULL;
	struct bufs b = { 0 };
	static struct zn_ba_row rows[ZN_BA_MAX_THREAD_ROWS];
	struct zn_ba_opts o;
	char load[128];
	bool all_ok = true;
	int rc;

	zn_bench_load_avg(load, sizeof(load));
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
		zn_bench_adam_print_json(&o, &ci, ar, load, rows, o.thread_rows);
	else
		zn_bench_adam_print_table(&o, &ci, ar, load, rows, o.thread_rows);
	zn_arena_destroy(ar);
	if (!all_ok)
		fprintf(stderr, "zinc bench adam: AdamW result differs from the reference (check FAIL)\n");
	return all_ok ? 0 : 1;

destroy_arena:
	zn_arena_destroy(ar);
	return 1;
}
