/* The Llama family in bf16 compute (src/model/llama/llama_layer_bf16.c) and its chunked
 * lm_head + cross-entropy (docs/kernels.md):
 *
 * - one forward/backward of the tiny Llama (GQA, biases, tied and untied, Qwen3's q/k
 *   norms) in bf16 compute
 *   against the fp32 layers on the same bf16-rounded parameters: loss within 1e-2
 *   relative, every tensor's gradient within 5e-2 normalized error (GEMM inputs rounded to
 *   8 significant bits); bit-identical when called twice.
 * - the engine: bf16 compute tracks fp32 compute of the same bf16 parameters on stages
 *   0-3 and cpu offload (losses 1e-2 relative, weights within 2 x lr x steps), reruns
 *   and stages 0 / 3 bit-identical, the plan without fp32 working slots (lower device peak
 *   and plan than --compute-dtype fp32, measured peak within the plan).
 * - the final layer (chunked: V 65536, 264 rows = chunks of 256 and 8) against the
 *   unchunked rmsnorm + matmul + crossentropy ops (fp32, 1e-5); the whole model against
 *   finite differences is test_engine_llama's.
 * - device peak: vocab 8192, B x T = 4096 rows (logits + probs 256 MiB unchunked): the
 *   measured peak stays under 3/4 of that, fp32 and bf16 compute; the plan's figures at Llama
 *   3's vocab 128,256 and B x T = 32,768 (over 2^31 logits elements) stay small.
 */
#include <criterion/criterion.h>

#include "core/dtype.h"
#include "engine_common.h"
#include "lmhead_ce.h"
#include "model/llama/llama.h"

static struct zn_llama_config tiny(bool bias, bool tied)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 2, c.hidden = 16, c.intermediate = 24, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 6, c.vocab = 32, c.seq = 16;
	c.qkv_bias = c.o_bias = bias;
	c.tied = tied;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	return c;
}

/* ---- the layers on the host: fp32 and bf16 compute on the same parameters ------------ */

struct lhost {
	int n;
	struct zn_layer_desc *ld;
	float **p, **g, **acts, *scratch, **x, *dxa, *dxb, *losses;
	uint16_t **p16;
	uint64_t scratch_n;
};

static uint64_t maxu(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static void lhost_create(struct lhost *h, const struct zn_llama_config *c, int B, int T)
{
	uint64_t bth = (uint64_t)B * T * c->hidden;

	h->n = zn_llama_layer_count(c);
	h->ld = calloc(h->n, sizeof(*h->ld));
	cr_assert_eq(zn_llama_layers(c, h->ld), 0);
	h->p = calloc(h->n, sizeof(float *)), h->g = calloc(h->n, sizeof(float *));
	h->p16 = calloc(h->n, sizeof(uint16_t *));
	h->acts = calloc(h->n, sizeof(float *)), h->x = calloc(h->n, sizeof(float *));
	h->scratch_n = 0;
	for (int l = 0; l < h->n; l++) {
		const struct zn_layer_desc *L = &h->ld[l];
		uint64_t a = maxu(zn_llama_act_numel(c, L, B, T),
				  zn_llama_act_numel_bf16(c, L, B, T));

		h->p[l] = malloc(L->numel * sizeof(float));
		h->p16[l] = malloc(L->numel * sizeof(uint16_t));
		zn_llama_init_range(c, L, 0, L->numel, h->p[l], 7);
		/* std 0.08 (norms, biases off 1, 0), rounded to bf16: both paths read the same */
		for (uint64_t i = 0; i < L->numel; i++) {
			float v = h->p[l][i] * 4.0f + 0.02f * (float)((i * 37) % 11) - 0.1f;

			h->p16[l][i] = zn_f32_to_bf16(v);
			h->p[l][i] = zn_bf16_to_f32(h->p16[l][i]);
		}
		h->g[l] = calloc(L->numel, sizeof(float));
		h->acts[l] = calloc(a + 1, sizeof(float));
		h->x[l] = calloc(bth, sizeof(float));
		h->scratch_n = maxu(h->scratch_n, zn_llama_scratch_numel(c, L, B, T));
		h->scratch_n = maxu(h->scratch_n, zn_llama_scratch_numel_bf16(c, L, B, T));
	}
	h->scratch = calloc(h->scratch_n, sizeof(float));
	h->dxa = calloc(bth, sizeof(float)), h->dxb = calloc(bth, sizeof(float));
	h->losses = calloc((size_t)B * T, sizeof(float));
}

static void lhost_destroy(struct lhost *h)
{
	for (int l = 0; l < h->n; l++)
		free(h->p[l]), free(h->p16[l]), free(h->g[l]), free(h->acts[l]), free(h->x[l]);
	free(h->p), free(h->p16), free(h->g), free(h->acts), free(h->x), zn_layer_descs_free(h->ld, h->n);
	free(h->scratch), free(h->dxa), free(h->dxb), free(h->losses);
}

/* forward + backward (gradients zeroed first); returns the mean loss */
static double lhost_run(struct lhost *h, const struct zn_llama_config *c, const int *tok,
			const int *tgt, int B, int T, bool bf16)
{
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	double sum = 0;
	int n = h->n;

	for (int l = 0; l < n; l++) {
		struct zn_layer_io io = { .L = &h->ld[l], .acts = h->acts[l],
					  .scratch = h->scratch, .B = B, .T = T, .tokens = tok,
					  .targets = tgt };
		bool tied = h->ld[l].tied_layer >= 0;

		io.params = bf16 ? NULL : h->p[l];
		io.tied_params = !bf16 && tied ? h->p[0] : NULL;
		io.params16 = bf16 ? h->p16[l] : NULL;
		io.tied_params16 = bf16 && tied ? h->p16[0] : NULL;
		io.x_in = l ? h->x[l - 1] : NULL;
		io.x_out = l < n - 1 ? h->x[l] : NULL;
		io.losses = l == n - 1 ? h->losses : NULL;
		(bf16 ? zn_llama_layer_forward_bf16 : zn_llama_layer_forward)(k, NULL, c, &io);
	}
	for (int i = 0; i < B * T; i++)
		sum += h->losses[i];
	for (int l = 0; l < n; l++)
		memset(h->g[l], 0, h->ld[l].numel * sizeof(float));
	for (int l = n - 1; l >= 0; l--) {
		struct zn_layer_io io = { .L = &h->ld[l], .grads = h->g[l], .acts = h->acts[l],
					  .scratch = h->scratch, .B = B, .T = T, .tokens = tok,
					  .targets = tgt, .dloss_scale = 1.0f / (float)(B * T) };
		bool tied = h->ld[l].tied_layer >= 0;
		float *t;

		io.params = bf16 ? NULL : h->p[l];
		io.tied_params = !bf16 && tied ? h->p[0] : NULL;
		io.params16 = bf16 ? h->p16[l] : NULL;
		io.tied_params16 = bf16 && tied ? h->p16[0] : NULL;
		io.tied_grads = tied ? h->g[0] : NULL;
		io.x_in = l ? h->x[l - 1] : NULL;
		io.dx_out = l < n - 1 ? h->dxa : NULL;
		io.dx_in = l ? h->dxb : NULL;
		memset(h->scratch, 0, h->scratch_n * sizeof(float));
		(bf16 ? zn_llama_layer_backward_bf16 : zn_llama_layer_backward)(k, NULL, c, &io);
		t = h->dxa, h->dxa = h->dxb, h->dxb = t;
	}
	return sum / (B * T);
}

static float **grads_copy(const struct lhost *h)
{
	float **g = calloc(h->n, sizeof(float *));

	for (int l = 0; l < h->n; l++) {
		g[l] = malloc(h->ld[l].numel * sizeof(float));
		memcpy(g[l], h->g[l], h->ld[l].numel * sizeof(float));
	}
	return g;
}

static void grads_free(float **g, int n)
{
	for (int l = 0; l < n; l++)
		free(g[l]);
	free(g);
}

static void check_layers(bool bias, bool tied, int window, bool qk_norm)
{
	enum { B = 2, T = 12 };
	struct zn_llama_config c = tiny(bias, tied);
	struct lhost h;
	int *tok = et_tokens(B * T + 1, c.vocab, 3);
	double l32, l16, l16b;
	float **g32, **g16;

	c.window = window;
	c.qk_norm = qk_norm;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	lhost_create(&h, &c, B, T);
	/* q_norm / k_norm weights near 0.4, not lhost_create's 4 x 1: with norms of 4 every
	 * attention row is one-hot (logits ~ 16 x sqrt(head_dim)) and bf16's rounding of the
	 * GEMM inputs decides which key wins */
	for (int l = 0; l < h.n; l++)
		for (int t = 0; t < h.ld[l].tensor_count; t++) {
			const struct zn_tensor_desc *d = &h.ld[l].tensors[t];

			for (uint64_t i = 0; strstr(d->name, "_norm.weight") &&
					     strstr(d->name, "self_attn") && i < d->numel; i++) {
				uint64_t at = d->offset + i;

				h.p16[l][at] = zn_f32_to_bf16(
					0.3f + 0.02f * (float)((i * 37 + (uint64_t)t * 5) % 11));
				h.p[l][at] = zn_bf16_to_f32(h.p16[l][at]);
			}
		}
	l32 = lhost_run(&h, &c, tok, tok + 1, B, T, false);
	g32 = grads_copy(&h);
	l16 = lhost_run(&h, &c, tok, tok + 1, B, T, true);
	g16 = grads_copy(&h);
	cr_assert(isfinite(l16) && fabs(l16 - l32) <= 1e-2 * fabs(l32),
		  "loss %.7g (bf16 compute) vs %.7g (fp32)", l16, l32);
	cr_assert(l16 != l32, "bf16 compute gave the fp32 loss bit for bit: not bf16");
	for (int l = 0; l < h.n; l++)
		for (int t = 0; t < h.ld[l].tensor_count; t++) {
			const struct zn_tensor_desc *d = &h.ld[l].tensors[t];
			double num = 0, den = 0;

			for (uint64_t i = d->offset; i < d->offset + d->numel; i++) {
				double e = (double)g16[l][i] - g32[l][i];

				cr_assert(isfinite(g16[l][i]), "%s not finite", d->name);
				num += e * e, den += (double)g32[l][i] * g32[l][i];
			}
			cr_expect(den == 0 ? num == 0 : sqrt(num / den) <= 5e-2,
				  "%s: gradient normalized error %.3g (bound 5e-2)", d->name,
				  den == 0 ? sqrt(num) : sqrt(num / den));
		}
	/* a second call: the same bits */
	l16b = lhost_run(&h, &c, tok, tok + 1, B, T, true);
	cr_assert(l16b == l16);
	for (int l = 0; l < h.n; l++)
		cr_assert(!memcmp(g16[l], h.g[l], h.ld[l].numel * sizeof(float)),
			  "layer %d: bf16 gradients differ on a second call", l);
	grads_free(g32, h.n), grads_free(g16, h.n);
	lhost_destroy(&h);
	free(tok);
}

Test(llama_bf16, layers_track_fp32_gqa_untied) { check_layers(false, false, 0, false); }
Test(llama_bf16, layers_track_fp32_bias_tied) { check_layers(true, true, 0, false); }
Test(llama_bf16, layers_track_fp32_window) { check_layers(true, false, 5, false); }
/* Qwen3: q_norm / k_norm (fp32, their weights cast from bf16), head_dim 6 apart from 16 / 4 */
Test(llama_bf16, layers_track_fp32_qwen3) { check_layers(false, true, 0, true); }

/* ---- the engine ----------------------------------------------------------------------- */

static int train(struct et_run *r, const struct zn_llama_config *mc, int stage,
		 enum zn_offload_device off, enum zn_compute_dtype cd, const int *tok, int steps)
{
	struct zn_model m = zn_llama_model(mc);
	struct zn_config c;

	et_config(&c, stage, off, ET_B, 1);
	c.precision.bf16 = true;
	c.runtime.compute_dtype = cd;
	cr_assert_eq(zn_config_validate(&c, 1), 0);
	return et_train_any(r, &c, &m, ZN_COMM_SINGLE, tok, steps);
}

static bool same_bits(const struct et_run *a, const struct et_run *b)
{
	if (memcmp(a->loss, b->loss, sizeof(a->loss)))
		return false;
	for (int l = 0; l < a->layer_count; l++)
		if (memcmp(a->w[l], b->w[l], a->numel[l] * sizeof(float)))
			return false;
	return true;
}

Test(llama_bf16, engine_tracks_fp32_compute_on_every_tier)
{
	static const struct {
		int stage;
		enum zn_offload_device off;
	} tiers[] = { { 0, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE }, { 3, ZN_OFFLOAD_NONE },
		      { 2, ZN_OFFLOAD_CPU }, { 3, ZN_OFFLOAD_CPU } };
	struct zn_llama_config mc = tiny(true, true);
	int *tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 5);

	for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		struct et_run a, b;
		double bound = 2.0 * 3e-3 * ET_STEPS, worst = 0;

		cr_assert_eq(train(&a, &mc, tiers[i].stage, tiers[i].off, ZN_COMPUTE_FP32, tok,
				   ET_STEPS), 0);
		cr_assert_eq(train(&b, &mc, tiers[i].stage, tiers[i].off, ZN_COMPUTE_BF16, tok,
				   ET_STEPS), 0);
		for (int s = 0; s < ET_STEPS; s++)
			cr_assert(fabs((double)a.loss[s] - b.loss[s]) <= 1e-2 * fabs((double)a.loss[s]),
				  "stage %d: step %d loss %.7g (bf16) vs %.7g (fp32 compute)",
				  tiers[i].stage, s + 1, b.loss[s], a.loss[s]);
		for (int l = 0; l < a.layer_count; l++)
			for (uint64_t j = 0; j < a.numel[l]; j++) {
				cr_assert(isfinite(b.w[l][j]));
				worst = fmax(worst, fabs((double)a.w[l][j] - b.w[l][j]));
			}
		cr_assert(worst <= bound, "stage %d: weights differ by %g (bound %g)",
			  tiers[i].stage, worst, bound);
		cr_assert(!same_bits(&a, &b), "stage %d: bf16 compute ran the fp32 path",
			  tiers[i].stage);
		cr_assert(b.peak_bytes <= b.plan_bytes, "peak %llu over the plan %llu",
			  (unsigned long long)b.peak_bytes, (unsigned long long)b.plan_bytes);
		et_run_free(&a), et_run_free(&b);
	}
	free(tok);
}

Test(llama_bf16, engine_reruns_stages_and_plan)
{
	struct zn_llama_config mc = tiny(false, false);
	int *tok = et_tokens(et_stream_len(ET_STEPS, 1, 1, ET_B), mc.vocab, 11);
	struct et_run a, b, d, e, f;

	cr_assert_eq(train(&a, &mc, 0, ZN_OFFLOAD_NONE, ZN_COMPUTE_BF16, tok, ET_STEPS), 0);
	cr_assert_eq(train(&b, &mc, 0, ZN_OFFLOAD_NONE, ZN_COMPUTE_BF16, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &b), "bf16 compute rerun differs");
	cr_assert_eq(train(&d, &mc, 0, ZN_OFFLOAD_NONE, ZN_COMPUTE_AUTO, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &d), "compute_dtype auto is not bf16 with bf16 parameters");
	cr_assert_eq(train(&e, &mc, 3, ZN_OFFLOAD_NONE, ZN_COMPUTE_BF16, tok, ET_STEPS), 0);
	cr_assert(same_bits(&a, &e), "stage 3 differs from stage 0 under bf16 compute");
	cr_assert(a.loss[ET_STEPS - 1] < a.loss[0], "bf16 compute trains: %g then %g",
		  a.loss[0], a.loss[ET_STEPS - 1]);
	/* the plan: no fp32 working copies, bf16 activations */
	for (int stage = 0; stage <= 3; stage += 3) {
		struct et_run *bf = stage ? &e : &a;

		cr_assert_eq(train(&f, &mc, stage, ZN_OFFLOAD_NONE, ZN_COMPUTE_FP32, tok, 2), 0);
		cr_assert(bf->plan_bytes < f.plan_bytes, "stage %d: plan %llu vs fp32 %llu", stage,
			  (unsigned long long)bf->plan_bytes, (unsigned long long)f.plan_bytes);
		cr_assert(bf->peak_bytes < f.peak_bytes, "stage %d: peak %llu vs fp32 %llu", stage,
			  (unsigned long long)bf->peak_bytes, (unsigned long long)f.peak_bytes);
		cr_assert(bf->peak_bytes <= bf->plan_bytes);
		et_run_free(&f);
	}
	et_run_free(&a), et_run_free(&b), et_run_free(&d), et_run_free(&e);
	free(tok);
}

/* ---- chunked lm_head + cross-entropy ------------------------------------------------- */

/* max |a - b| / max |b| */
static double max_err(const float *a, const float *b, uint64_t n)
{
	double e = 0, m = 0;

	for (uint64_t i = 0; i < n; i++) {
		e = fmax(e, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? e / m : e;
}

/* the final layer (fp32) against rmsnorm + one [BT, V] matmul + crossentropy */
Test(llama_bf16, final_layer_chunked_equals_unchunked)
{
	enum { B = 2, T = 132 };
	const struct zn_kernel_table *k = &zn_kernels_cpu;
	struct zn_llama_config c = tiny(false, false);
	struct zn_layer_desc L;
	const int H = 16, V = 65536, BT = B * T;
	float *p, *g, *acts, *scr, *x, *dx, *losses, *hn, *rstd, *logits, *probs, *dhn, *rg,
		*rdx, *rloss, *zero;
	int *tok;
	uint64_t sn;

	c.vocab = V, c.seq = T;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	cr_assert_eq(zn_llama_ce_chunk(V, BT, 0), 256, "the test wants chunks of 256 and 8");
	cr_assert_eq(zn_llama_layer(&c, zn_llama_layer_count(&c) - 1, &L), 0);
	tok = et_tokens(BT, V, 9);
	p = malloc(L.numel * sizeof(float)), g = calloc(L.numel, sizeof(float));
	rg = calloc(L.numel, sizeof(float));
	zn_llama_init_range(&c, &L, 0, L.numel, p, 3);
	for (int i = 0; i < H; i++)
		p[i] = 1.0f + 0.05f * (float)(i % 5);
	sn = zn_llama_scratch_numel(&c, &L, B, T);
	acts = calloc(zn_llama_act_numel(&c, &L, B, T), sizeof(float));
	scr = calloc(sn, sizeof(float));
	x = malloc((size_t)BT * H * sizeof(float)), dx = malloc((size_t)BT * H * sizeof(float));
	rdx = calloc((size_t)BT * H, sizeof(float)), zero = calloc((size_t)BT * H, sizeof(float));
	for (int i = 0; i < BT * H; i++)
		x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
	losses = malloc(BT * sizeof(float)), rloss = malloc(BT * sizeof(float));
	{
		struct zn_layer_io io = { .L = &L, .params = p, .acts = acts, .scratch = scr,
					  .x_in = x, .tokens = tok, .targets = tok,
					  .losses = losses, .B = B, .T = T };

		zn_llama_layer_forward(k, NULL, &c, &io);
		memset(scr, 0, sn * sizeof(float));
		io.grads = g, io.dx_in = dx, io.dloss_scale = 1.0f / BT, io.losses = NULL;
		zn_llama_layer_backward(k, NULL, &c, &io);
	}
	/* the unchunked reference */
	hn = malloc((size_t)BT * H * sizeof(float)), rstd = malloc(BT * sizeof(float));
	dhn = calloc((size_t)BT * H, sizeof(float));
	logits = malloc((size_t)BT * V * sizeof(float)), probs = malloc((size_t)BT * V * sizeof(float));
	k->rmsnorm_forward(NULL, hn, rstd, x, p, c.eps, B, T, H);
	k->matmul_forward(NULL, logits, hn, p + L.tensors[1].offset, NULL, B, T, H, V);
	k->crossentropy_forward(NULL, rloss, probs, logits, tok, B, T, V, V);
	k->crossentropy_backward(NULL, logits, probs, tok, 1.0f / BT, B, T, V, V);
	k->matmul_backward(NULL, dhn, rg + L.tensors[1].offset, NULL, logits, hn,
			   p + L.tensors[1].offset, B, T, H, V);
	k->rmsnorm_backward(NULL, rdx, rg, dhn, x, p, rstd, B, T, H);
	for (int i = 0; i < BT; i++)
		cr_assert(fabs((double)losses[i] - rloss[i]) <= 1e-5 * fabs((double)rloss[i]),
			  "loss %d: %.8g vs %.8g", i, losses[i], rloss[i]);
	cr_assert_leq(max_err(dx, rdx, (uint64_t)BT * H), 1e-5, "dx");
	cr_assert_leq(max_err(g, rg, H), 1e-5, "norm weight gradient");
	cr_assert_leq(max_err(g + H, rg + H, L.numel - H), 1e-5, "lm_head gradient");
	free(p), free(g), free(rg), free(acts), free(scr), free(x), free(dx), free(rdx);
	free(zero), free(losses), free(rloss), free(hn), free(rstd), free(dhn), free(logits);
	free(probs), free(tok);
	zn_layer_desc_release(&L);
}

/* the engine's measured device peak stays under the [BT, V] logits alone */
Test(llama_bf16, device_peak_without_the_logits)
{
	struct zn_llama_config mc = tiny(false, false);
	const int B = 512; /* BT 4096 rows, chunks of 2048: logits + probs 256 MiB unchunked */
	uint64_t logits_bytes = 2 * (uint64_t)B * ET_T * 8192 * sizeof(float);
	int *tok;

	mc.layers = 1, mc.vocab = 8192;
	cr_assert_eq(zn_llama_config_validate(&mc), 0);
	tok = et_tokens((uint64_t)B * ET_T + 1, mc.vocab, 5);
	for (int bf = 0; bf < 2; bf++) {
		struct zn_model m = zn_llama_model(&mc);
		struct zn_config c;
		struct et_run r;

		et_config(&c, 0, ZN_OFFLOAD_NONE, B, 1);
		c.runtime.device_mem_bytes = 2ull << 30;
		c.precision.bf16 = bf;
		cr_assert_eq(zn_config_validate(&c, 1), 0);
		cr_assert_eq(et_train_any(&r, &c, &m, ZN_COMM_SINGLE, tok, 1), 0);
		cr_assert(isfinite(r.loss[0]) && fabs(r.loss[0] - log(8192.0)) < 0.5,
			  "loss %g (about log V at init)", r.loss[0]);
		cr_assert_lt(r.peak_bytes, logits_bytes * 3 / 4,
			     "%s: device peak %llu is not under the logits and probs' %llu bytes",
			     bf ? "bf16" : "fp32", (unsigned long long)r.peak_bytes,
			     (unsigned long long)logits_bytes);
		cr_assert(r.peak_bytes <= r.plan_bytes);
		et_run_free(&r);
	}
	free(tok);
}

/* Llama 3's vocab at B x T = 32,768 rows: 4.2e9 logits, over 2^31; each chunk under it */
Test(llama_bf16, plan_figures_at_llama3_vocab)
{
	struct zn_llama_config c;
	struct zn_layer_desc L;
	const int B = 8, T = 4096;
	uint64_t bt = (uint64_t)B * T, logits = bt * 128256, fin;
	int chunk;

	cr_assert_eq(zn_llama_config_from_preset("llama-3-8b", &c), 0);
	c.seq = T;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	cr_assert_eq(c.vocab, 128256);
	cr_assert_eq(zn_llama_layer(&c, zn_llama_layer_count(&c) - 1, &L), 0);
	chunk = zn_llama_ce_chunk(c.vocab, bt, 0);
	/* the default 128 MiB holds 130 rows: rounded down to the 128-row quantum */
	cr_assert_eq(chunk, 128);
	cr_assert_leq((int64_t)chunk * c.vocab, INT32_MAX);
	cr_assert_gt(logits, (uint64_t)INT32_MAX);
	for (int bf = 0; bf < 2; bf++) {
		fin = bf ? zn_llama_act_numel_bf16(&c, &L, B, T) +
				   zn_llama_scratch_numel_bf16(&c, &L, B, T) :
			   zn_llama_act_numel(&c, &L, B, T) + zn_llama_scratch_numel(&c, &L, B, T);
		/* the chunks' work (2^25 floats) and a few [BT, H] buffers */
		cr_assert_leq(fin, zn_lmhead_ce_work_count(chunk, c.vocab) + 4 * bt * c.hidden + bt,
			      "%s: final layer %llu floats", bf ? "bf16" : "fp32",
			      (unsigned long long)fin);
		cr_assert_lt(fin * 4, logits);
	}
	zn_layer_desc_release(&L);
}
