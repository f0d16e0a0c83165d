/* The engine's optimizer as configured, against an independent float64 loop: the host GPT-2
 * (zn_gpt2_host, the same model and data the engine sees) gives each step's gradients, and
 * a textbook Adam in double written here (L2: g += wd * p before the moments, as
 * torch.optim.Adam; AdamW: p *= 1 - lr * wd) updates the weights, with the lr and betas each
 * step's schedule gives (zn_lr_for_step / zn_betas_for_step, themselves checked against
 * DeepSpeed's formulas in test_lr). Checked: Adam with adam_w_mode false at stage 0 (the
 * kernel table's adamw op) and stage 2 with CPU offload (the CPU tier), that it differs from
 * AdamW as the references say, and that OneCycle's cycled beta1 reaches the optimizer.
 */
#include <criterion/criterion.h>

#include "engine_common.h"
#include "sched/lr.h"

#define EA_STEPS 3

static const double ea_tol_abs = 1e-5, ea_tol_rel = 1e-4;

/* weights after `steps` steps of cfg's optimizer in double; fixed_betas ignores OneCycle's
 * momentum (to show the difference it makes). Returns per-layer float copies. */
static float **ea_reference(const struct zn_config *c, const int *tok, int steps, bool fixed_betas)
{
	struct zn_gpt2_config mc;
	struct zn_gpt2_host *h;
	const struct zn_optimizer_config *o = &c->optimizer;
	bool l2 = o->type == ZN_OPTIM_ADAM && !o->adam_w_mode;
	uint64_t bt = (uint64_t)ET_B * ET_T;
	float loss;

	et_model(&mc);
	cr_assert_eq(zn_gpt2_host_create(&h, &mc, true), 0);
	zn_gpt2_host_init(h, (uint64_t)c->runtime.seed);
	int n = h->layer_count;
	double **p = calloc(n, sizeof(*p)), **m = calloc(n, sizeof(*m));
	double **v = calloc(n, sizeof(*v));
	float **out = calloc(n, sizeof(*out));

	cr_assert(p && m && v && out);
	for (int l = 0; l < n; l++) {
		uint64_t k = h->layers[l].numel;

		p[l] = malloc(k * 8);
		m[l] = calloc(k, 8);
		v[l] = calloc(k, 8);
		cr_assert(p[l] && m[l] && v[l]);
		for (uint64_t i = 0; i < k; i++)
			p[l][i] = h->params[l][i];
	}
	for (int t = 1; t <= steps; t++) {
		float lr = zn_lr_for_step(&c->scheduler, o->lr, t), b1f = o->beta1, b2f = o->beta2;

		if (!fixed_betas)
			zn_betas_for_step(&c->scheduler, o->beta1, o->beta2, t, &b1f, &b2f);
		double b1 = b1f, b2 = b2f, bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);

		zn_gpt2_host_zero_grads(h);
		cr_assert_eq(zn_gpt2_host_forward_backward(h, tok + (t - 1) * bt,
							   tok + (t - 1) * bt + 1, ET_B, ET_T,
							   true, &loss), 0);
		for (int l = 0; l < n; l++) {
			const struct zn_layer_desc *L = &h->layers[l];

			for (int s = 0; s < L->tensor_count; s++) {
				const struct zn_tensor_desc *td = &L->tensors[s];
				double wd = td->decay ? o->weight_decay : 0.0;

				for (uint64_t i = td->offset; i < td->offset + td->numel; i++) {
					double g = h->grads[l][i];

					if (l2)
						g += wd * p[l][i];
					else
						p[l][i] *= 1 - (double)lr * wd;
					m[l][i] = b1 * m[l][i] + (1 - b1) * g;
					v[l][i] = b2 * v[l][i] + (1 - b2) * g * g;
					p[l][i] -= lr * (m[l][i] / bc1) / (sqrt(v[l][i] / bc2) + o->eps);
				}
			}
			for (uint64_t i = 0; i < L->numel; i++)
				h->params[l][i] = (float)p[l][i];
		}
	}
	for (int l = 0; l < n; l++) {
		out[l] = malloc(h->layers[l].numel * 4);
		cr_assert(out[l]);
		memcpy(out[l], h->params[l], h->layers[l].numel * 4);
		free(p[l]);
		free(m[l]);
		free(v[l]);
	}
	free(p);
	free(m);
	free(v);
	zn_gpt2_host_destroy(h);
	return out;
}

static void ea_free(float **w, int n)
{
	for (int l = 0; l < n; l++)
		free(w[l]);
	free(w);
}

/* largest |a - b| - (abs + rel |b|) over every weight: <= 0 means within tolerance */
static double ea_excess(const struct et_run *r, float **ref, double *worst_diff)
{
	double ex = -INFINITY;

	*worst_diff = 0;
	for (int l = 0; l < r->layer_count; l++)
		for (uint64_t i = 0; i < r->numel[l]; i++) {
			double d = fabs((double)r->w[l][i] - ref[l][i]);
			double e = d - (ea_tol_abs + ea_tol_rel * fabs((double)ref[l][i]));

			if (isnan(e))
				e = INFINITY;
			ex = fmax(ex, e);
			*worst_diff = fmax(*worst_diff, d);
		}
	return ex;
}

static void ea_config(struct zn_config *c, int stage, enum zn_offload_device off, bool l2)
{
	et_config(c, stage, off, ET_B, 1);
	c->gradient_clipping = 0;
	c->optimizer.lr = 1e-2f;
	c->optimizer.weight_decay = 0.5f; /* large: L2 and AdamW must part visibly */
	c->optimizer.type = ZN_OPTIM_ADAM;
	c->optimizer.adam_w_mode = !l2;
}

static int *ea_tokens(void)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	return et_tokens(et_stream_len(EA_STEPS, 1, 1, ET_B), mc.vocab, 11);
}

static void check_mode(int stage, enum zn_offload_device off, bool l2)
{
	struct zn_config c;
	struct et_run r;
	int *tok = ea_tokens();
	double d;

	ea_config(&c, stage, off, l2);
	cr_assert_eq(zn_config_validate(&c, 1), 0);
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, EA_STEPS), 0);
	float **ref = ea_reference(&c, tok, EA_STEPS, false);
	double ex = ea_excess(&r, ref, &d);

	cr_assert(ex <= 0, "stage %d %s: engine vs float64 reference: worst |diff| %.3g "
		  "(excess %.3g over %g + %g |w|)", stage, l2 ? "L2 Adam" : "AdamW", d, ex,
		  ea_tol_abs, ea_tol_rel);
	ea_free(ref, r.layer_count);
	et_run_free(&r);
	free(tok);
}

Test(engine_adam, l2_adam_stage0_matches_float64) { check_mode(0, ZN_OFFLOAD_NONE, true); }
Test(engine_adam, l2_adam_stage2_cpu_offload_matches_float64)
{
	check_mode(2, ZN_OFFLOAD_CPU, true);
}
Test(engine_adam, adamw_stage0_matches_float64) { check_mode(0, ZN_OFFLOAD_NONE, false); }

/* the two modes part, and each engine run is nearer its own reference than the other's */
Test(engine_adam, l2_adam_differs_from_adamw)
{
	struct zn_config c;
	struct et_run r;
	int *tok = ea_tokens();
	double d_own, d_other;

	ea_config(&c, 0, ZN_OFFLOAD_NONE, true);
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, EA_STEPS), 0);
	float **own = ea_reference(&c, tok, EA_STEPS, false);
	c.optimizer.adam_w_mode = true;
	float **other = ea_reference(&c, tok, EA_STEPS, false);

	cr_assert(ea_excess(&r, own, &d_own) <= 0, "L2 run vs L2 reference: %.3g", d_own);
	cr_assert(ea_excess(&r, other, &d_other) > 0 && d_other > 100 * d_own,
		  "L2 run is as near AdamW's reference (%.3g) as its own (%.3g)", d_other, d_own);
	ea_free(own, r.layer_count);
	ea_free(other, r.layer_count);
	et_run_free(&r);
	free(tok);
}

/* OneCycle with cycle_momentum: beta1 changes every step and the engine follows it */
Test(engine_adam, onecycle_cycled_beta1_reaches_the_optimizer)
{
	struct zn_config c;
	struct et_run r;
	int *tok = ea_tokens();
	double d_cyc, d_fixed;
	float b1[EA_STEPS + 1], b2;

	ea_config(&c, 0, ZN_OFFLOAD_NONE, false);
	c.scheduler.type = ZN_LR_ONE_CYCLE;
	c.scheduler.cycle_min_lr = 5e-3f;
	c.scheduler.cycle_max_lr = 2e-2f;
	c.scheduler.cycle_first_step_size = 2;
	c.scheduler.cycle_momentum = true;
	c.scheduler.cycle_min_mom = 0.5f;
	c.scheduler.cycle_max_mom = 0.9f;
	cr_assert_eq(zn_config_validate(&c, 1), 0);
	for (int t = 1; t <= EA_STEPS; t++)
		zn_betas_for_step(&c.scheduler, c.optimizer.beta1, c.optimizer.beta2, t, &b1[t], &b2);
	cr_assert(b1[1] != b1[2] && b1[2] != b1[3] && b1[1] != c.optimizer.beta1,
		  "the schedule must move beta1: %g %g %g", b1[1], b1[2], b1[3]);
	cr_assert_eq(et_train(&r, &c, ZN_COMM_SINGLE, tok, EA_STEPS), 0);
	float **cyc = ea_reference(&c, tok, EA_STEPS, false);
	float **fixed = ea_reference(&c, tok, EA_STEPS, true);

	cr_assert(ea_excess(&r, cyc, &d_cyc) <= 0, "engine vs reference with beta1 %g %g %g: "
		  "worst |diff| %.3g", b1[1], b1[2], b1[3], d_cyc);
	cr_assert(ea_excess(&r, fixed, &d_fixed) > 0 && d_fixed > 100 * d_cyc,
		  "engine as near fixed betas (%.3g) as cycled (%.3g): cycling is not used",
		  d_fixed, d_cyc);
	ea_free(cyc, r.layer_count);
	ea_free(fixed, r.layer_count);
	et_run_free(&r);
	free(tok);
}
