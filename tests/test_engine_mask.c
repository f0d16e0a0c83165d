/* Loss masks in the engine (targets of ZN_IGNORE_INDEX, Hugging Face's -100): the loss is
 * the sum over the labels of every micro-batch (and rank: tests/mpi/mask_equiv.c) divided
 * by their global count.
 * - a masked token changes nothing: changing input tokens whose own and later targets are
 *   masked (causal attention: they reach no label) leaves losses and weights bit-identical;
 * - the loss equals a hand-computed one: the mean of per-token losses (each measured alone,
 *   one label in the batch) over the labels, with micro-batches holding 3 and 11 labels
 *   (not the mean of the micro-batches' means);
 * - the gradient is normalized the same way: grad_accum 2 x micro-batch B gives the step
 *   of one micro-batch of 2B on the same tokens and masks (per-micro-batch means would
 *   weight the 3-label micro-batch's tokens 11/3 times more);
 * - a step without any label has loss 0 and moves nothing but by momentum (no NaN);
 * - the gradient is the mean over labels (its norm, below). */
#include <criterion/criterion.h>

#include "engine_common.h"

#define MB 2
#define BT (MB * ET_T)

static struct zn_gpt2_config mc; /* the engines borrow it */

static struct zn_engine *engine(int micro, int gas)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config c;
	struct zn_engine *e = NULL;

	et_model(&mc);
	et_config(&c, 0, ZN_OFFLOAD_NONE, micro, gas);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	return e;
}

static void weights(struct zn_engine *e, float **w, uint64_t *n)
{
	*n = 0;
	for (int l = 0; l < zn_engine_layer_count(e); l++)
		*n += zn_engine_layer_numel(e, l);
	*w = malloc(*n * sizeof(float));
	for (int l = 0, off = 0; l < zn_engine_layer_count(e); l++) {
		cr_assert_eq(zn_engine_read_layer(e, l, *w + off), 0);
		off += (int)zn_engine_layer_numel(e, l);
	}
}

Test(engine_mask, a_masked_token_changes_nothing)
{
	int *tok = et_tokens(3 * BT + 1, 96, 11);
	int in_a[BT], in_b[BT], tg[BT];
	struct zn_engine *a = engine(MB, 1), *b = engine(MB, 1);
	float *wa, *wb;
	uint64_t na, nb;

	for (int s = 0; s < 3; s++) {
		struct zn_step_stats sa, sb;

		memcpy(in_a, tok + s * BT, sizeof(in_a));
		memcpy(tg, tok + s * BT + 1, sizeof(tg));
		memcpy(in_b, in_a, sizeof(in_b));
		/* sequence 0 from position 5 on: targets masked, inputs changed in b */
		for (int t = 5; t < ET_T; t++) {
			tg[t] = ZN_IGNORE_INDEX;
			in_b[t] = (in_a[t] + 17 + t) % 96;
		}
		tg[ET_T + 2] = ZN_IGNORE_INDEX; /* and one in sequence 1 */
		cr_assert_eq(zn_engine_step(a, in_a, tg, &sa), 0);
		cr_assert_eq(zn_engine_step(b, in_b, tg, &sb), 0);
		cr_expect_eq(sa.loss, sb.loss, "step %d: %.9g vs %.9g", s + 1, sa.loss, sb.loss);
		cr_expect(isfinite(sa.loss) && sa.loss > 0);
	}
	weights(a, &wa, &na);
	weights(b, &wb, &nb);
	cr_assert_eq(na, nb);
	cr_expect_eq(memcmp(wa, wb, na * sizeof(float)), 0, "the weights differ");
	free(wa);
	free(wb);
	zn_engine_destroy(a);
	zn_engine_destroy(b);
	free(tok);
}

/* labels: micro-batch 0 keeps 3 targets, micro-batch 1 keeps 11 */
static bool kept(int i)
{
	static const int m0[] = { 1, 6, 13 };

	if (i < BT) {
		for (int k = 0; k < 3; k++)
			if (i == m0[k])
				return true;
		return false;
	}
	return (i - BT) % 3 != 2 && i - BT < 16; /* 11 of 16 */
}

Test(engine_mask, loss_is_the_mean_over_the_steps_labels)
{
	int *tok = et_tokens(2 * BT + 1, 96, 5);
	struct zn_engine *e = engine(MB, 2);
	int tg[2 * BT], one[2 * BT];
	float l[2 * BT], got = 0;
	double sum = 0, m0 = 0, m1 = 0;
	int n = 0, n0 = 0, n1 = 0;
	struct zn_step_stats st;

	memcpy(tg, tok + 1, sizeof(tg));
	/* each token's loss alone: one label in the whole batch */
	for (int j = 0; j < 2 * BT; j++) {
		for (int i = 0; i < 2 * BT; i++)
			one[i] = i == j ? tg[i] : ZN_IGNORE_INDEX;
		cr_assert_eq(zn_engine_eval(e, tok, one, &l[j]), 0);
		cr_assert(isfinite(l[j]) && l[j] > 0);
	}
	for (int i = 0; i < 2 * BT; i++) {
		if (!kept(i)) {
			tg[i] = ZN_IGNORE_INDEX;
			continue;
		}
		sum += l[i];
		n++;
		if (i < BT)
			m0 += l[i], n0++;
		else
			m1 += l[i], n1++;
	}
	cr_assert_eq(n0, 3);
	cr_assert_eq(n1, 11);
	cr_assert_eq(zn_engine_eval(e, tok, tg, &got), 0);
	cr_expect(fabs(got - sum / n) <= 1e-6 * sum / n, "eval %.9g, hand %.9g", got, sum / n);
	/* not the mean of the micro-batches' means */
	cr_expect(fabs((m0 / n0 + m1 / n1) / 2 - sum / n) > 1e-4,
		  "the test's masks do not tell the two means apart");
	cr_assert_eq(zn_engine_step(e, tok, tg, &st), 0);
	cr_expect_eq(st.loss, got, "the step reports %.9g, eval %.9g", st.loss, got);
	/* no label at all: loss 0, finite weights */
	for (int i = 0; i < 2 * BT; i++)
		one[i] = ZN_IGNORE_INDEX;
	cr_assert_eq(zn_engine_eval(e, tok, one, &got), 0);
	cr_expect_eq(got, 0.0f);
	cr_assert_eq(zn_engine_step(e, tok, one, &st), 0);
	cr_expect_eq(st.loss, 0.0f);
	cr_expect(isfinite(st.grad_norm) && st.grad_norm == 0.0f, "grad norm %g", st.grad_norm);
	zn_engine_destroy(e);
	free(tok);
}

Test(engine_mask, grad_accum_normalizes_over_the_steps_labels)
{
	int *tok = et_tokens(2 * BT + 1, 96, 9);
	struct zn_engine *acc = engine(MB, 2), *one = engine(2 * MB, 1);
	int tg[2 * BT];
	struct zn_step_stats sa, so;
	float *wa, *wo;
	uint64_t na, no;
	double worst = 0;

	memcpy(tg, tok + 1, sizeof(tg));
	for (int i = 0; i < 2 * BT; i++)
		if (!kept(i))
			tg[i] = ZN_IGNORE_INDEX;
	/* the same 4 sequences: micro-batches 0, 1 of acc are rows 0-1, 2-3 of one */
	for (int s = 0; s < 2; s++) {
		cr_assert_eq(zn_engine_step(acc, tok, tg, &sa), 0);
		cr_assert_eq(zn_engine_step(one, tok, tg, &so), 0);
		cr_expect(fabs(sa.loss - so.loss) <= 1e-6 * so.loss, "step %d loss %.9g vs %.9g",
			  s + 1, sa.loss, so.loss);
		cr_expect(fabs(sa.grad_norm - so.grad_norm) <= 1e-5 * so.grad_norm,
			  "step %d grad norm %.9g vs %.9g", s + 1, sa.grad_norm, so.grad_norm);
	}
	weights(acc, &wa, &na);
	weights(one, &wo, &no);
	cr_assert_eq(na, no);
	for (uint64_t i = 0; i < na; i++) {
		double d = fabs((double)wa[i] - wo[i]) - 1e-6 * fabs((double)wo[i]);

		worst = d > worst ? d : worst;
	}
	cr_expect(worst <= 1e-6, "weights differ by %g", worst);
	free(wa);
	free(wo);
	zn_engine_destroy(acc);
	zn_engine_destroy(one);
	free(tok);
}

/* The gradient is the mean over the labels: a batch whose second sequence is fully masked
 * and one whose second sequence repeats the first (tokens and labels) have the same mean,
 * so the same loss and gradient norm. (Dividing by every target, 2T, would halve the first
 * batch's gradient; AdamW hides a constant factor in the weights, not in the norm.) */
Test(engine_mask, the_gradient_is_the_mean_over_labels)
{
	int *tok = et_tokens(BT + 1, 96, 21);
	struct zn_engine *a = engine(MB, 1), *b = engine(MB, 1);
	int in_a[BT], in_b[BT], tg_a[BT], tg_b[BT];
	struct zn_step_stats sa, sb;

	for (int t = 0; t < ET_T; t++) {
		in_a[t] = in_b[t] = in_b[ET_T + t] = tok[t];
		in_a[ET_T + t] = tok[ET_T + t];
		tg_a[t] = tg_b[t] = tg_b[ET_T + t] = t % 2 ? ZN_IGNORE_INDEX : tok[t + 1];
		tg_a[ET_T + t] = ZN_IGNORE_INDEX;
	}
	cr_assert_eq(zn_engine_step(a, in_a, tg_a, &sa), 0);
	cr_assert_eq(zn_engine_step(b, in_b, tg_b, &sb), 0);
	cr_expect(fabsf(sa.loss - sb.loss) <= 1e-6f * sb.loss, "loss %.9g vs %.9g", sa.loss,
		  sb.loss);
	cr_expect(fabsf(sa.grad_norm - sb.grad_norm) <= 1e-5f * sb.grad_norm,
		  "grad norm %.9g vs %.9g", sa.grad_norm, sb.grad_norm);
	cr_expect_gt(sa.grad_norm, 0.0f);
	zn_engine_destroy(a);
	zn_engine_destroy(b);
	free(tok);
}
