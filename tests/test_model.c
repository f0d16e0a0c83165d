/* src/model GPT-2: presets and parameter counts (Hugging Face's), the layer layout, the
 * counter-based init (statistics, shard independence, determinism), loss at init close to
 * ln(V), and the whole model's gradient against central finite differences on a tiny
 * config, plus the per-layer contract (accumulating grads, overwritten dx_in, buffers
 * within their stated sizes).
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt2/gpt2.h"

/* the tiny config of the issue: 2 layers, d 32, 4 heads, V 60 padded to 64, T 8 */
static const struct zn_gpt2_config tiny = { 2, 4, 32, 8, 60, 64 };
enum { TB = 2, TT = 8 };

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s, float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next(s) >> 40) * (1.0 / 16777216.0));
}

static void random_tokens(int *x, int n, int vocab, uint64_t seed)
{
	for (int i = 0; i < n; i++)
		x[i] = (int)(rng_next(&seed) % (uint64_t)vocab);
}

static struct zn_gpt2_host *make_model(const struct zn_gpt2_config *cfg, uint64_t seed)
{
	struct zn_gpt2_host *m;

	cr_assert_eq(zn_gpt2_host_create(&m, cfg, true), 0);
	zn_gpt2_host_init(m, seed);
	return m;
}

/* ---- config and layout ------------------------------------------------------------- */

Test(model, preset_param_counts_match_hugging_face)
{
	static const struct {
		const char *name;
		uint64_t params; /* GPT2LMHeadModel num_parameters() (tied lm_head counted once) */
	} want[] = {
		{ "gpt2", 124439808ull },
		{ "gpt2-medium", 354823168ull },
		{ "gpt2-large", 774030080ull },
		{ "gpt2-xl", 1557611200ull },
	};

	for (int i = 0; i < 4; i++) {
		struct zn_gpt2_config cfg;
		struct zn_layer_desc *ld;
		uint64_t sum = 0;

		cr_assert_eq(zn_gpt2_config_from_preset(want[i].name, &cfg), 0);
		cr_assert_eq(zn_gpt2_config_validate(&cfg), 0);
		cr_expect_eq(zn_gpt2_param_count(&cfg), want[i].params, "%s: %llu params",
			     want[i].name, (unsigned long long)zn_gpt2_param_count(&cfg));
		ld = calloc((size_t)zn_gpt2_layer_count(&cfg), sizeof(*ld));
		cr_assert_eq(zn_gpt2_layers(&cfg, ld), 0);
		for (int l = 0; l < zn_gpt2_layer_count(&cfg); l++)
			sum += ld[l].numel;
		cr_expect_eq(sum, zn_gpt2_param_numel(&cfg));
		zn_layer_descs_free(ld, zn_gpt2_layer_count(&cfg));
	}
}

Test(model, validate_rejects_bad_configs_and_pads_vocab)
{
	struct zn_gpt2_config c = { 2, 3, 32, 8, 60, 0 };

	cr_expect_neq(zn_gpt2_config_validate(&c), 0, "32 %% 3 != 0 must fail");
	c.heads = 4;
	cr_assert_eq(zn_gpt2_config_validate(&c), 0);
	cr_expect_eq(c.padded_vocab, 128);
	c.padded_vocab = 50;
	cr_expect_neq(zn_gpt2_config_validate(&c), 0, "padded < vocab must fail");
	c.padded_vocab = 64;
	c.layers = 0;
	cr_expect_neq(zn_gpt2_config_validate(&c), 0);
	cr_expect_neq(zn_gpt2_config_from_preset("gpt3", &c), 0);
}

Test(model, flags_apply_preset_first_then_fields)
{
	struct zn_gpt2_config c = { 0 };
	char *argv[] = { "--layers", "3", "--steps", "5", "--model=gpt2", "--d-model=64",
			 "--heads", "2" };
	char *rest[8];
	int rest_count;

	cr_assert_eq(zn_gpt2_config_apply_flags(&c, 8, argv, rest, &rest_count), 0);
	cr_expect_eq(c.layers, 3);
	cr_expect_eq(c.d_model, 64);
	cr_expect_eq(c.heads, 2);
	cr_expect_eq(c.seq, 1024);
	cr_expect_eq(c.vocab, 50257);
	cr_assert_eq(rest_count, 2);
	cr_expect_str_eq(rest[0], "--steps");
	cr_expect_str_eq(rest[1], "5");
	char *bad[] = { "--layers", "x" };
	cr_expect_neq(zn_gpt2_config_apply_flags(&c, 2, bad, rest, &rest_count), 0);
	char *missing[] = { "--heads" };
	cr_expect_neq(zn_gpt2_config_apply_flags(&c, 1, missing, rest, &rest_count), 0);
}

Test(model, layers_have_hf_names_shapes_and_flags)
{
	struct zn_layer_desc ld[4];
	const struct zn_tensor_desc *t;

	cr_assert_eq(zn_gpt2_layers(&tiny, ld), 0);
	cr_expect_eq(ld[0].kind, ZN_GPT2_LAYER_EMBED);
	cr_expect_eq(ld[1].kind, ZN_GPT2_LAYER_BLOCK);
	cr_expect_eq(ld[3].kind, ZN_GPT2_LAYER_FINAL);
	cr_expect_eq(ld[3].tied_layer, 0);
	cr_expect_eq(ld[1].tied_layer, -1);
	t = &ld[0].tensors[ZN_GPT2_WTE];
	cr_expect_str_eq(t->name, "transformer.wte.weight");
	cr_expect(t->shape[0] == 64 && t->shape[1] == 32 && t->file_shape[0] == 60);
	cr_expect(t->decay && !t->transpose && t->offset == 0);
	t = &ld[2].tensors[ZN_GPT2_QKV_W];
	cr_expect_str_eq(t->name, "transformer.h.1.attn.c_attn.weight");
	cr_expect(t->shape[0] == 96 && t->shape[1] == 32, "memory [3C, C]");
	cr_expect(t->file_shape[0] == 32 && t->file_shape[1] == 96, "file [C, 3C] (Conv1D)");
	cr_expect(t->transpose && t->decay);
	t = &ld[1].tensors[ZN_GPT2_FCPROJ_W];
	cr_expect_str_eq(t->name, "transformer.h.0.mlp.c_proj.weight");
	cr_expect(t->shape[0] == 32 && t->shape[1] == 128);
	t = &ld[1].tensors[ZN_GPT2_LN1_B];
	cr_expect(!t->decay && t->ndim == 1);
	t = &ld[1].tensors[ZN_GPT2_FC_B];
	cr_expect(!t->decay && !t->transpose);
	cr_expect_str_eq(ld[3].tensors[ZN_GPT2_LNF_W].name, "transformer.ln_f.weight");
	for (int l = 0; l < 4; l++) {
		uint64_t at = 0;

		for (int i = 0; i < ld[l].tensor_count; i++) {
			cr_expect_eq(ld[l].tensors[i].offset, at, "layer %d tensor %d", l, i);
			at += ld[l].tensors[i].numel;
		}
		cr_expect_eq(at, ld[l].numel);
		zn_layer_desc_release(&ld[l]);
	}
}

/* ---- init ------------------------------------------------------------------------------ */

static void moments(const float *x, uint64_t n, double *mean, double *std)
{
	double s = 0, s2 = 0;

	for (uint64_t i = 0; i < n; i++) {
		s += x[i];
		s2 += (double)x[i] * x[i];
	}
	*mean = s / (double)n;
	*std = sqrt(s2 / (double)n - *mean * *mean);
}

Test(model, init_statistics_are_gpt2s)
{
	struct zn_gpt2_config cfg = { 4, 4, 128, 64, 1000, 0 };
	struct zn_gpt2_host *m;
	double mean, std;
	const struct zn_layer_desc *b;
	const float *p;

	cr_assert_eq(zn_gpt2_config_validate(&cfg), 0);
	m = make_model(&cfg, 1234);
	p = m->params[0];
	moments(p, 1000 * 128, &mean, &std);
	cr_expect(fabs(mean) < 1e-3 && fabs(std - 0.02) < 5e-4, "wte mean %g std %g", mean, std);
	for (uint64_t i = 1000 * 128; i < 1024 * 128; i++)
		cr_assert_eq(p[i], 0.0f, "wte padded row element %llu", (unsigned long long)i);
	moments(p + m->layers[0].tensors[ZN_GPT2_WPE].offset, 64 * 128, &mean, &std);
	cr_expect(fabs(std - 0.02) < 1e-3, "wpe std %g", std);
	b = &m->layers[2];
	p = m->params[2];
	moments(p + b->tensors[ZN_GPT2_QKV_W].offset, b->tensors[ZN_GPT2_QKV_W].numel, &mean,
		&std);
	cr_expect(fabs(std - 0.02) < 5e-4, "c_attn std %g", std);
	moments(p + b->tensors[ZN_GPT2_FCPROJ_W].offset, b->tensors[ZN_GPT2_FCPROJ_W].numel,
		&mean, &std);
	cr_expect(fabs(std - 0.02 / sqrt(8.0)) < 3e-4, "mlp.c_proj std %g, want %g", std,
		  0.02 / sqrt(8.0));
	moments(p + b->tensors[ZN_GPT2_ATTPROJ_W].offset, b->tensors[ZN_GPT2_ATTPROJ_W].numel,
		&mean, &std);
	cr_expect(fabs(std - 0.02 / sqrt(8.0)) < 3e-4, "attn.c_proj std %g", std);
	for (int i = 0; i < 128; i++) {
		cr_assert_eq(p[b->tensors[ZN_GPT2_LN1_W].offset + i], 1.0f);
		cr_assert_eq(p[b->tensors[ZN_GPT2_LN2_B].offset + i], 0.0f);
		cr_assert_eq(p[b->tensors[ZN_GPT2_FCPROJ_B].offset + i], 0.0f);
		cr_assert_eq(m->params[5][i], 1.0f, "ln_f.weight");
	}
	zn_gpt2_host_destroy(m);
}

Test(model, init_is_seeded_and_independent_of_sharding)
{
	struct zn_layer_desc ld[4];
	const struct zn_layer_desc *L = &ld[1];
	float *whole, *again, *other, *part;
	uint64_t s = 99, at = 0, diff = 0;

	cr_assert_eq(zn_gpt2_layers(&tiny, ld), 0);
	whole = calloc(L->numel, sizeof(float));
	again = calloc(L->numel, sizeof(float));
	other = calloc(L->numel, sizeof(float));
	part = calloc(L->numel + 100, sizeof(float));
	zn_gpt2_init_layer(&tiny, L, whole, 42);
	zn_gpt2_init_layer(&tiny, L, again, 42);
	zn_gpt2_init_layer(&tiny, L, other, 43);
	cr_expect_eq(memcmp(whole, again, L->numel * sizeof(float)), 0, "same seed, same bits");
	for (uint64_t i = 0; i < L->numel; i++)
		diff += whole[i] != other[i];
	cr_expect_gt(diff, L->numel / 2, "another seed changes the weights (%llu differ)",
		     (unsigned long long)diff);
	/* random shard sizes, the last one running past numel into padding */
	while (at < L->numel + 100) {
		uint64_t n = 1 + rng_next(&s) % 3000;

		if (at + n > L->numel + 100)
			n = L->numel + 100 - at;
		zn_gpt2_init_range(&tiny, L, at, n, part + at, 42);
		at += n;
	}
	cr_expect_eq(memcmp(whole, part, L->numel * sizeof(float)), 0, "shards == whole");
	for (uint64_t i = L->numel; i < L->numel + 100; i++)
		cr_expect_eq(part[i], 0.0f, "padding past numel is zero");
	/* the same tensor in another layer draws other values */
	zn_gpt2_init_layer(&tiny, &ld[2], other, 42);
	cr_expect_neq(memcmp(whole + L->tensors[ZN_GPT2_QKV_W].offset,
			     other + L->tensors[ZN_GPT2_QKV_W].offset, 64), 0);
	free(whole);
	free(again);
	free(other);
	free(part);
	for (int l = 0; l < 4; l++)
		zn_layer_desc_release(&ld[l]);
}

/* ---- whole model ---------------------------------------------------------------------- */

Test(model, loss_at_init_is_close_to_ln_vocab)
{
	const struct zn_gpt2_config cfgs[] = { tiny, { 2, 4, 64, 64, 256, 256 } };

	for (int c = 0; c < 2; c++) {
		struct zn_gpt2_host *m = make_model(&cfgs[c], 7);
		int B = 16, T = cfgs[c].seq, n = B * T;
		int *tok = calloc((size_t)n, sizeof(int)), *tgt = calloc((size_t)n, sizeof(int));
		double C = cfgs[c].d_model, tol;
		float loss;

		random_tokens(tok, n, cfgs[c].vocab, 1);
		random_tokens(tgt, n, cfgs[c].vocab, 2);
		cr_assert_eq(zn_gpt2_host_forward_backward(m, tok, tgt, B, T, false, &loss), 0);
		/* logit = ln_f(x) . wte[v]: ln_f's output has unit variance, wte std 0.02, so
		 * the logits have variance C * 0.02^2 and loss ~ ln V + var/2 - z_target,
		 * with z_target averaged over n tokens: allow var/2 + 5 of its sigmas */
		tol = C * 4e-4 / 2 + 5 * sqrt(C * 4e-4 / n);
		cr_expect(fabs(loss - log((double)cfgs[c].vocab)) < tol,
			  "V %d: loss %.5f, ln V %.5f, tolerance %.3g", cfgs[c].vocab, loss,
			  log((double)cfgs[c].vocab), tol);
		fprintf(stderr, "V %d: loss %.5f ln V %.5f tol %.3g\n", cfgs[c].vocab, loss,
			log((double)cfgs[c].vocab), tol);
		free(tok);
		free(tgt);
		zn_gpt2_host_destroy(m);
	}
}

/* Moves the model away from init so every gradient is nontrivial: layernorm weights and
 * all biases random, matrices scaled up. */
static void perturb(struct zn_gpt2_host *m, uint64_t seed)
{
	for (int l = 0; l < m->layer_count; l++) {
		const struct zn_layer_desc *L = &m->layers[l];

		for (int i = 0; i < L->tensor_count; i++) {
			const struct zn_tensor_desc *t = &L->tensors[i];
			float *p = m->params[l] + t->offset;
			bool padded = l == 0 && i == ZN_GPT2_WTE;
			uint64_t real = padded ? (uint64_t)m->cfg.vocab * t->shape[1] : t->numel;

			for (uint64_t j = 0; j < real; j++) {
				if (t->ndim == 2)
					p[j] *= 5.0f;
				else
					p[j] += rng_uniform(&seed, -0.3f, 0.3f);
			}
		}
	}
}

static double loss_at(struct zn_gpt2_host *m, const int *tok, const int *tgt)
{
	float loss;

	cr_assert_eq(zn_gpt2_host_forward_backward(m, tok, tgt, TB, TT, false, &loss), 0);
	return loss;
}

struct probe_stats {
	double err2, ref2, worst;
	int count;
	char where[160];
};

/* Central difference at one parameter; h relative to the loss's fp32 resolution. */
static void probe(struct zn_gpt2_host *m, int l, int ti, uint64_t j, const int *tok,
		  const int *tgt, struct probe_stats *st)
{
	const struct zn_tensor_desc *t = &m->layers[l].tensors[ti];
	float *p = m->params[l] + t->offset + j;
	const float h = 1e-2f, p0 = *p;
	double fd, g = m->grads[l][t->offset + j], err, tol;

	*p = p0 + h;
	fd = loss_at(m, tok, tgt);
	*p = p0 - h;
	fd -= loss_at(m, tok, tgt);
	*p = p0;
	fd /= 2.0 * h;
	err = fabs(fd - g);
	/* fp32 loss noise / 2h ~ 3e-5, O(h^2) truncation: 1e-4 absolute + 3% relative */
	tol = 1e-4 + 0.03 * fabs(fd);
	cr_expect(!isnan(g) && !isnan(fd), "NaN at %s[%llu]", t->name, (unsigned long long)j);
	st->err2 += err * err;
	st->ref2 += fd * fd;
	st->count++;
	if (err / tol > st->worst || isnan(err)) {
		st->worst = isnan(err) ? INFINITY : err / tol;
		snprintf(st->where, sizeof(st->where), "%s[%llu]: grad %.6g, fd %.6g", t->name,
			 (unsigned long long)j, g, fd);
	}
}

Test(model, whole_model_gradient_matches_finite_differences)
{
	struct zn_gpt2_host *m = make_model(&tiny, 11);
	int tok[TB * TT], tgt[TB * TT];
	struct probe_stats st = { 0 };
	uint64_t s = 5;
	float loss;

	perturb(m, 3);
	random_tokens(tok, TB * TT, tiny.vocab, 21);
	random_tokens(tgt, TB * TT, tiny.vocab, 22);
	cr_assert_eq(zn_gpt2_host_forward_backward(m, tok, tgt, TB, TT, true, &loss), 0);
	for (int l = 0; l < m->layer_count; l++) {
		for (int ti = 0; ti < m->layers[l].tensor_count; ti++) {
			const struct zn_tensor_desc *t = &m->layers[l].tensors[ti];
			const float *g = m->grads[l] + t->offset;
			uint64_t real = (l == 0 && ti == ZN_GPT2_WTE) ?
						(uint64_t)tiny.vocab * t->shape[1] : t->numel;
			uint64_t big = 0;

			for (uint64_t j = 1; j < real; j++)
				if (fabsf(g[j]) > fabsf(g[big]))
					big = j;
			probe(m, l, ti, big, tok, tgt, &st);
			for (int r = 0; r < 4; r++)
				probe(m, l, ti, rng_next(&s) % real, tok, tgt, &st);
			for (uint64_t j = real; j < t->numel; j++)
				cr_assert_eq(g[j], 0.0f, "wte padded row gradient must stay 0");
		}
	}
	fprintf(stderr, "FD: %d probes, worst %.3g x tol at %s, normalized error %.3g\n", st.count, st.worst, st.where, sqrt(st.err2 / st.ref2));
	cr_expect(st.worst <= 1.0, "%d probes: worst %.3g x tolerance at %s", st.count, st.worst,
		  st.where);
	cr_expect(sqrt(st.err2 / st.ref2) < 2e-3, "normalized error %.3g over %d probes",
		  sqrt(st.err2 / st.ref2), st.count);
	zn_gpt2_host_destroy(m);
}

Test(model, backward_accumulates_and_is_deterministic)
{
	struct zn_gpt2_host *a = make_model(&tiny, 3), *b = make_model(&tiny, 3);
	int tok[TB * TT], tgt[TB * TT];
	float la, lb;

	random_tokens(tok, TB * TT, tiny.vocab, 1);
	random_tokens(tgt, TB * TT, tiny.vocab, 2);
	cr_assert_eq(zn_gpt2_host_forward_backward(a, tok, tgt, TB, TT, true, &la), 0);
	cr_assert_eq(zn_gpt2_host_forward_backward(b, tok, tgt, TB, TT, true, &lb), 0);
	cr_expect_eq(la, lb);
	for (int l = 0; l < a->layer_count; l++)
		cr_expect_eq(memcmp(a->grads[l], b->grads[l], a->layers[l].numel * 4), 0,
			     "layer %d: same inputs, same bits", l);
	cr_assert_eq(zn_gpt2_host_forward_backward(b, tok, tgt, TB, TT, true, &lb), 0);
	for (int l = 0; l < a->layer_count; l++)
		for (uint64_t i = 0; i < a->layers[l].numel; i++)
			cr_assert_float_eq(b->grads[l][i], 2.0f * a->grads[l][i],
					   1e-6f * (1.0f + fabsf(a->grads[l][i])),
					   "layer %d [%llu]: second backward adds", l,
					   (unsigned long long)i);
	zn_gpt2_host_destroy(a);
	zn_gpt2_host_destroy(b);
}

Test(model, host_rejects_bad_inputs)
{
	struct zn_gpt2_host *m = make_model(&tiny, 1), *ng;
	int tok[TB * TT] = { 0 }, tgt[TB * TT] = { 0 };
	float loss;

	cr_expect_neq(zn_gpt2_host_forward_backward(m, tok, tgt, TB, tiny.seq + 1, false, &loss),
		      0, "T > seq");
	tgt[3] = tiny.vocab;
	cr_expect_neq(zn_gpt2_host_forward_backward(m, tok, tgt, TB, TT, false, &loss), 0,
		      "target >= vocab");
	cr_assert_eq(zn_gpt2_host_create(&ng, &tiny, false), 0);
	tgt[3] = 0;
	cr_expect_neq(zn_gpt2_host_forward_backward(ng, tok, tgt, TB, TT, true, &loss), 0,
		      "backward without grads");
	zn_gpt2_host_destroy(ng);
	zn_gpt2_host_destroy(m);
	zn_gpt2_host_destroy(NULL);
}

/* ---- the per-layer contract ------------------------------------------------------------ */

#define GUARD 64
#define CANARY 12345.5f

static float *guarded(uint64_t n, uint64_t *seed)
{
	float *p = malloc((n + GUARD) * sizeof(float));

	for (uint64_t i = 0; i < n; i++)
		p[i] = rng_uniform(seed, -1.0f, 1.0f);
	for (uint64_t i = n; i < n + GUARD; i++)
		p[i] = CANARY;
	return p;
}

static void check_guard(const float *p, uint64_t n, const char *what)
{
	for (uint64_t i = n; i < n + GUARD; i++)
		cr_assert_eq(p[i], CANARY, "%s written past its %llu floats", what,
			     (unsigned long long)n);
}

/* Block and final layer with every buffer sized as the API says plus canaries: nothing is
 * written past a buffer; dx_in is overwritten (random garbage in it does not matter). */
Test(model, layers_stay_within_stated_sizes_and_overwrite_dx_in)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	struct zn_gpt2_host *m = make_model(&tiny, 5);
	const struct zn_layer_desc *L = &m->layers[1], *F = &m->layers[3];
	const uint64_t btc = TB * TT * tiny.d_model;
	uint64_t s = 77;
	int tok[TB * TT], tgt[TB * TT];
	float *dx_ref = NULL;

	random_tokens(tok, TB * TT, tiny.vocab, 1);
	random_tokens(tgt, TB * TT, tiny.vocab, 2);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t an = zn_gpt2_act_numel(&tiny, L, TB, TT);
		uint64_t sn = zn_gpt2_scratch_numel(&tiny, L, TB, TT);
		uint64_t fan = zn_gpt2_act_numel(&tiny, F, TB, TT);
		uint64_t fsn = zn_gpt2_scratch_numel(&tiny, F, TB, TT);
		float *acts = guarded(an, &s), *scratch = guarded(sn, &s);
		float *facts = guarded(fan, &s), *fscratch = guarded(fsn, &s);
		float *x_in = guarded(btc, &s), *x_out = guarded(btc, &s);
		float *dx = guarded(btc, &s), *dx_in = guarded(btc, &s);
		float *losses = guarded(TB * TT, &s);
		float *g = guarded(L->numel, &s), *fg = guarded(F->numel, &s);
		float *g0 = guarded(m->layers[0].numel, &s);

		/* same x_in both passes; dx_in and scratch garbage differs */
		uint64_t xs = 1000;
		for (uint64_t i = 0; i < btc; i++)
			x_in[i] = rng_uniform(&xs, -1.0f, 1.0f);
		zn_gpt2_layer_forward(k, NULL, &tiny, L, m->params[1], NULL, acts, scratch, x_in,
				      x_out, tok, NULL, NULL, TB, TT);
		zn_gpt2_layer_forward(k, NULL, &tiny, F, m->params[3], m->params[0], facts,
				      fscratch, x_out, NULL, tok, tgt, losses, TB, TT);
		memset(fscratch, 0, fsn * sizeof(float));
		zn_gpt2_layer_backward(k, NULL, &tiny, F, m->params[3], m->params[0], fg, g0,
				       facts, fscratch, x_out, NULL, dx, tok, tgt, 0.1f, TB, TT);
		memset(scratch, 0, sn * sizeof(float));
		zn_gpt2_layer_backward(k, NULL, &tiny, L, m->params[1], NULL, g, NULL, acts,
				       scratch, x_in, dx, dx_in, tok, tgt, 0.1f, TB, TT);
		check_guard(acts, an, "block acts");
		check_guard(scratch, sn, "block scratch");
		check_guard(facts, fan, "final acts");
		check_guard(fscratch, fsn, "final scratch");
		check_guard(x_out, btc, "x_out");
		check_guard(dx, btc, "final dx_in");
		check_guard(dx_in, btc, "block dx_in");
		check_guard(losses, TB * TT, "losses");
		check_guard(g, L->numel, "grads");
		check_guard(fg, F->numel, "final grads");
		check_guard(g0, m->layers[0].numel, "tied grads");
		if (!pass) {
			dx_ref = malloc(btc * sizeof(float));
			memcpy(dx_ref, dx_in, btc * sizeof(float));
		} else {
			cr_expect_eq(memcmp(dx_ref, dx_in, btc * sizeof(float)), 0,
				     "dx_in must not depend on its old contents");
		}
		free(acts);
		free(scratch);
		free(facts);
		free(fscratch);
		free(x_in);
		free(x_out);
		free(dx);
		free(dx_in);
		free(losses);
		free(g);
		free(fg);
		free(g0);
	}
	cr_expect_eq(zn_gpt2_act_numel(&tiny, &m->layers[0], TB, TT), 0);
	cr_expect_eq(zn_gpt2_scratch_numel(&tiny, &m->layers[0], TB, TT), 0);
	free(dx_ref);
	zn_gpt2_host_destroy(m);
}

/* ---- learning ------------------------------------------------------------------------- */

#include "model/data.h"

/* Plain SGD on data/demo.txt through the whole model: the loss must go well down from
 * ln 256 within a few dozen steps (the demo the README promises). */
Test(model, sgd_on_demo_text_lowers_the_loss)
{
	const struct zn_gpt2_config cfg = { 2, 4, 64, 32, 256, 256 };
	enum { B = 8, T = 32, STEPS = 40 };
	struct zn_gpt2_host *m = make_model(&cfg, 1);
	struct zn_data *d;
	int x[B * T], y[B * T];
	float first = 0, last = 0, loss;

	cr_assert_eq(zn_data_open(&d, ZN_TEST_SRC_DIR "/data/demo.txt", B, T, 0, 1, 1, true), 0);
	for (int s = 0; s < STEPS; s++) {
		zn_data_next(d, x, y);
		zn_gpt2_host_zero_grads(m);
		cr_assert_eq(zn_gpt2_host_forward_backward(m, x, y, B, T, true, &loss), 0);
		for (int l = 0; l < m->layer_count; l++)
			for (uint64_t i = 0; i < m->layers[l].numel; i++)
				m->params[l][i] -= 0.5f * m->grads[l][i];
		if (s < 4)
			first += loss / 4;
		if (s >= STEPS - 4)
			last += loss / 4;
	}
	fprintf(stderr, "SGD on demo.txt: loss %.3f -> %.3f\n", first, last);
	cr_expect(first > 4.8f && last < first - 1.2f, "loss %.3f -> %.3f", first, last);
	zn_data_close(d);
	zn_gpt2_host_destroy(m);
}
