/* The sparse MoE block (src/model/moe/moe.h) on the CPU kernels against an independent
 * float64 implementation of transformers' MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock
 * (softmax in full precision, top-k, optional renormalization, per-expert SwiGLU MLPs,
 * the weighted sum) and its load_balancing_loss_func; gradients against central
 * differences of that reference. Also: an expert no token routes to leaves its gradient
 * untouched, and two runs give the same bits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "model/moe/moe.h"

struct ref {
	int N, C, E, K, I, norm;
	double *h, *router, *gu, *down; /* the same shapes as moe.h's */
};

static double silu(double g)
{
	return g / (1.0 + exp(-g));
}

/* out [N,C]; aux: the load-balancing loss of this one layer (transformers' formula) */
static void ref_forward(const struct ref *r, double *out, double *aux)
{
	int N = r->N, C = r->C, E = r->E, K = r->K, I = r->I;
	double f[64] = { 0 }, P[64] = { 0 };

	memset(out, 0, sizeof(double) * (size_t)N * C);
	for (int t = 0; t < N; t++) {
		const double *x = r->h + (size_t)t * C;
		double lg[64], p[64], mx = -INFINITY, sum = 0.0, s = 0.0, w[8];
		int sel[8];
		bool used[64] = { false };

		for (int e = 0; e < E; e++) {
			lg[e] = 0.0;
			for (int c = 0; c < C; c++)
				lg[e] += x[c] * r->router[(size_t)e * C + c];
			mx = fmax(mx, lg[e]);
		}
		for (int e = 0; e < E; e++)
			sum += p[e] = exp(lg[e] - mx);
		for (int e = 0; e < E; e++) {
			p[e] /= sum;
			P[e] += p[e];
		}
		for (int k = 0; k < K; k++) {
			int b = -1;

			for (int e = 0; e < E; e++)
				if (!used[e] && (b < 0 || p[e] > p[b]))
					b = e;
			used[b] = true;
			sel[k] = b;
			s += p[b];
			f[b] += 1.0;
		}
		for (int k = 0; k < K; k++)
			w[k] = r->norm ? p[sel[k]] / s : p[sel[k]];
		/* index_add_ over the experts in ascending order */
		for (int e = 0; e < E; e++)
			for (int k = 0; k < K; k++) {
				if (sel[k] != e)
					continue;
				double a[64];

				for (int i = 0; i < I; i++) {
					double g = 0.0, u = 0.0;

					for (int c = 0; c < C; c++) {
						g += r->gu[((size_t)e * 2 * I + i) * C + c] * x[c];
						u += r->gu[((size_t)e * 2 * I + I + i) * C + c] * x[c];
					}
					a[i] = silu(g) * u;
				}
				for (int c = 0; c < C; c++) {
					double y = 0.0;

					for (int i = 0; i < I; i++)
						y += r->down[((size_t)e * C + c) * I + i] * a[i];
					out[(size_t)t * C + c] += w[k] * y;
				}
			}
	}
	*aux = 0.0;
	for (int e = 0; e < E; e++)
		*aux += (f[e] / N) * (P[e] / N);
	*aux *= E;
}

static uint64_t rng = 12345;

static double uni(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double *rnd(size_t n, double s)
{
	double *x = malloc(n * sizeof(*x));

	for (size_t i = 0; i < n; i++)
		x[i] = s * uni();
	return x;
}

static float *to_f32(const double *x, size_t n)
{
	float *y = malloc(n * sizeof(*y));

	for (size_t i = 0; i < n; i++)
		y[i] = (float)x[i];
	return y;
}

struct run {
	struct zn_moe_dims d;
	float *h, *router, *gu, *down, *out, *dh, *g_router, *g_gu, *g_down, aux[128];
	void *acts, *scratch;
	int offsets_h[65];
	struct zn_moe_acts a;
	struct zn_moe_scratch s;
};

static size_t n_router(const struct ref *r) { return (size_t)r->E * r->C; }
static size_t n_gu(const struct ref *r) { return (size_t)r->E * 2 * r->I * r->C; }
static size_t n_down(const struct ref *r) { return (size_t)r->E * r->C * r->I; }

/* forward and backward on the CPU table with dout = R and the aux loss's gradient at
 * coef (0: none) */
static void run_block(const struct ref *r, struct run *x, const double *R, float coef)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	size_t NC = (size_t)r->N * r->C;
	float *dout = malloc(NC * sizeof(float)), dprob[64];

	x->d = (struct zn_moe_dims){ r->N, r->C, r->E, r->K, r->I, r->norm };
	x->h = to_f32(r->h, NC);
	x->router = to_f32(r->router, n_router(r));
	x->gu = to_f32(r->gu, n_gu(r));
	x->down = to_f32(r->down, n_down(r));
	x->out = calloc(NC, sizeof(float));
	x->dh = calloc(NC, sizeof(float));
	x->g_router = calloc(n_router(r), sizeof(float));
	x->g_gu = calloc(n_gu(r), sizeof(float));
	x->g_down = calloc(n_down(r), sizeof(float));
	x->acts = aligned_alloc(256, zn_moe_acts_bytes(&x->d));
	x->scratch = aligned_alloc(256, zn_moe_scratch_bytes(&x->d));
	memset(x->scratch, 0, zn_moe_scratch_bytes(&x->d));
	memset(x->aux, 0, sizeof(x->aux));
	zn_moe_acts_carve(&x->a, x->acts, x->offsets_h, &x->d);
	zn_moe_scratch_carve(&x->s, x->scratch, &x->d);
	for (size_t i = 0; i < NC; i++)
		dout[i] = (float)R[i];
	{
		struct zn_moe_weights W = { x->router, x->gu, x->down };
		struct zn_moe_grads G = { x->g_router, x->g_gu, x->g_down };

		zn_moe_forward(k, NULL, &x->d, &W, NULL, &x->a, x->h, x->out, x->aux);
		k->moe_aux_finish(NULL, NULL, dprob, x->aux, r->E, (float)r->N, coef);
		zn_moe_backward(k, NULL, &x->d, &W, NULL, &G, &x->a, &x->s, x->h, dout,
				coef != 0.0f ? dprob : NULL, x->dh);
	}
	free(dout);
}

static void run_free(struct run *x)
{
	free(x->h);
	free(x->router);
	free(x->gu);
	free(x->down);
	free(x->out);
	free(x->dh);
	free(x->g_router);
	free(x->g_gu);
	free(x->g_down);
	free(x->acts);
	free(x->scratch);
}

/* sum(out R) + coef aux of the reference */
static double objective(const struct ref *r, const double *R, double coef)
{
	size_t NC = (size_t)r->N * r->C;
	double *out = malloc(NC * sizeof(double)), aux, s = 0.0;

	ref_forward(r, out, &aux);
	for (size_t i = 0; i < NC; i++)
		s += out[i] * R[i];
	free(out);
	return s + coef * aux;
}

/* each element of x's gradient against a central difference of the objective */
static void check_grad(const struct ref *r, double *param, const float *got, size_t n,
		       const double *R, double coef, const char *what)
{
	double mx = 1e-12;

	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(got[i]));
	for (size_t i = 0; i < n; i++) {
		double keep = param[i], h = 1e-5, fd;

		param[i] = keep + h;
		fd = objective(r, R, coef);
		param[i] = keep - h;
		fd -= objective(r, R, coef);
		param[i] = keep;
		fd /= 2 * h;
		cr_assert(fabs(fd - got[i]) <= 2e-4 * mx + 1e-6,
			  "%s[%zu]: finite difference %.8g, block %.8g", what, i, fd, got[i]);
	}
}

static struct ref make_ref(int N, int C, int E, int K, int I, int norm)
{
	struct ref r = { .N = N, .C = C, .E = E, .K = K, .I = I, .norm = norm };

	r.h = rnd((size_t)N * C, 1.0);
	r.router = rnd((size_t)E * C, 0.5);
	r.gu = rnd((size_t)E * 2 * I * C, 0.4);
	r.down = rnd((size_t)E * C * I, 0.4);
	return r;
}

static void ref_free(struct ref *r)
{
	free(r->h);
	free(r->router);
	free(r->gu);
	free(r->down);
}

static void against_reference(int norm, float coef)
{
	struct ref r = make_ref(10, 12, 5, 2, 6, norm);
	size_t NC = (size_t)r.N * r.C;
	double *R = rnd(NC, 1.0), *out = malloc(NC * sizeof(double)), aux;
	struct run x;

	run_block(&r, &x, R, coef);
	ref_forward(&r, out, &aux);
	for (size_t i = 0; i < NC; i++)
		cr_assert(fabs(out[i] - x.out[i]) <= 1e-5 * (1.0 + fabs(out[i])),
			  "out[%zu]: reference %.8g, block %.8g", i, out[i], x.out[i]);
	{
		float l;

		zn_kernels_cpu.moe_aux_finish(NULL, &l, NULL, x.aux, r.E, (float)r.N, 1.0f);
		cr_assert(fabs(l - aux) < 1e-6, "load-balancing loss %.8g, reference %.8g", l,
			  aux);
	}
	check_grad(&r, r.h, x.dh, NC, R, coef, "dh");
	check_grad(&r, r.router, x.g_router, n_router(&r), R, coef, "router");
	check_grad(&r, r.gu, x.g_gu, n_gu(&r), R, coef, "gate_up");
	check_grad(&r, r.down, x.g_down, n_down(&r), R, coef, "down");
	run_free(&x);
	free(R);
	free(out);
	ref_free(&r);
}

Test(moe, mixtral_block_renormalized_top2_matches_float64)
{
	against_reference(1, 0.0f);
}

Test(moe, qwen3_block_without_renormalization_matches_float64)
{
	against_reference(0, 0.0f);
}

Test(moe, load_balancing_loss_gradient_matches_float64)
{
	against_reference(1, 0.02f);
}

/* Expert 3 gets no token (its router row points away from every h): no work, its
 * gradient exactly zero, the rest still right, and a rerun gives the same bits. */
Test(moe, an_expert_without_tokens_keeps_a_zero_gradient)
{
	struct ref r = make_ref(9, 8, 4, 1, 5, 1);
	size_t NC = (size_t)r.N * r.C;
	double *R = rnd(NC, 1.0);
	struct run x, y;

	for (size_t i = 0; i < NC; i++)
		r.h[i] = 0.2 + 0.5 * fabs(r.h[i]);
	for (int c = 0; c < r.C; c++)
		r.router[3 * r.C + c] = -3.0;
	run_block(&r, &x, R, 0.0f);
	cr_assert_eq(x.offsets_h[4] - x.offsets_h[3], 0, "expert 3 got a token");
	cr_assert_eq(x.offsets_h[4], r.N * r.K);
	for (size_t i = 3 * (size_t)2 * r.I * r.C; i < n_gu(&r); i++)
		cr_assert_eq(x.g_gu[i], 0.0f);
	for (size_t i = 3 * (size_t)r.C * r.I; i < n_down(&r); i++)
		cr_assert_eq(x.g_down[i], 0.0f);
	check_grad(&r, r.router, x.g_router, n_router(&r), R, 0.0, "router");
	check_grad(&r, r.gu, x.g_gu, n_gu(&r), R, 0.0, "gate_up");
	run_block(&r, &y, R, 0.0f);
	cr_assert(!memcmp(x.out, y.out, NC * sizeof(float)));
	cr_assert(!memcmp(x.dh, y.dh, NC * sizeof(float)));
	cr_assert(!memcmp(x.g_router, y.g_router, n_router(&r) * sizeof(float)));
	run_free(&x);
	run_free(&y);
	free(R);
	ref_free(&r);
}

/* The grouping: slots sorted by expert, stable in slot order; pos its inverse. */
Test(moe, dispatch_is_a_stable_counting_sort)
{
	int sel[12] = { 2, 0, 1, 2, 0, 2, 1, 1, 3, 0, 2, 1 }, perm[12], pos[12], off[5];

	zn_kernels_cpu.moe_dispatch(NULL, perm, pos, off, sel, 6, 4, 2);
	cr_assert_eq(off[0], 0);
	cr_assert_eq(off[1], 3);
	cr_assert_eq(off[2], 7);
	cr_assert_eq(off[3], 11);
	cr_assert_eq(off[4], 12);
	for (int i = 0; i < 12; i++) {
		cr_assert_eq(perm[pos[i]], i);
		if (i > 0 && sel[perm[i]] == sel[perm[i - 1]])
			cr_assert_lt(perm[i - 1], perm[i], "not stable at %d", i);
		if (i > 0)
			cr_assert_leq(sel[perm[i - 1]], sel[perm[i]]);
	}
}
