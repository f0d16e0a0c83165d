/* fp16 training with DeepSpeed's loss scaling (issue 15 item 4; docs/engine.md, "fp16").
 *
 * - fp16 (parameters stored and gathered as fp16, fp32 master, m, v; dynamic scale from
 *   2^16) tracks the fp32 run of the same data on every optimizer tier (device stage 0-3,
 *   cpu offload stage 2-3), with clipping and with accumulation: losses within 2e-3
 *   relative, final master weights within 2e-3 relative RMS and 2 x lr x steps per element
 *   (see near_fp32); and it equals the static scale 1 run bit for bit (scaling by a power
 *   of two and unscaling are exact), so the scale is undone on every path.
 * - An overflow injected at step 3 (ZINC_TEST_OVERFLOW, the optimizer's test hook, makes
 *   that step's norm infinite) skips the step: the run of 4 steps whose step 3 overflows
 *   ends bit for bit where the run of 3 steps on the data of steps 1, 2, 4 ends (weights,
 *   m and v untouched; AdamW's step and the lr schedule not advanced), on each tier.
 * - The scale the step reports follows DeepSpeed's schedule: hysteresis 1 halves it at the
 *   overflow, hysteresis 2 (DeepSpeed's default) first tolerates one; a static scale never
 *   moves; the weights read around the overflowed step are equal bit for bit.
 * - Outside fp16 the injected non-finite norm still stops the run (-ERANGE).
 */
#include <criterion/criterion.h>
#include <errno.h>

#include "engine_common.h"

struct tier {
	int stage;
	enum zn_offload_device off;
	float clip;
	int gas;
};

static const struct tier tiers[] = {
	{ 0, ZN_OFFLOAD_NONE, 0, 1 },     { 2, ZN_OFFLOAD_NONE, 0, 1 },
	{ 3, ZN_OFFLOAD_NONE, 0, 1 },     { 2, ZN_OFFLOAD_CPU, 0, 1 },
	{ 3, ZN_OFFLOAD_CPU, 0, 1 },      { 1, ZN_OFFLOAD_NONE, 0.05f, 1 },
	{ 3, ZN_OFFLOAD_CPU, 0.05f, 2 },  { 0, ZN_OFFLOAD_NONE, 0, 2 },
};

static void config(struct zn_config *c, const struct tier *t, bool fp16)
{
	et_config(c, t->stage, t->off, ET_B, t->gas);
	c->gradient_clipping = t->clip;
	c->precision.fp16 = fp16;
	/* a schedule that moves every step: a skipped step must not advance it */
	c->scheduler.type = ZN_LR_WARMUP;
	c->scheduler.warmup_min_lr = 1e-3f;
	c->scheduler.warmup_max_lr = 3e-3f;
	c->scheduler.warmup_num_steps = 8;
	cr_assert_eq(zn_config_validate(c, 1), 0);
}

static const char *off_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

static bool same_bits(const struct et_run *a, const struct et_run *b);

/* fp16 against fp32: losses within 2e-3 relative; weights: the relative RMS of the
 * difference within 2e-3 (measured: 4.6e-4), and no element further than 2 x lr x steps
 * (measured: 0.0045 of 0.03; AdamW moves an element by about lr a step whatever its
 * gradient's size, so an element whose gradient is mostly rounding noise may move
 * differently: that bound, not a relative one). */
static void near_fp32(const char *what, const struct et_run *a, const struct et_run *b,
		      double lr)
{
	double d2 = 0, w2 = 0, worst = 0;

	for (int s = 0; s < a->steps; s++)
		cr_assert(fabs((double)a->loss[s] - b->loss[s]) <= 2e-3 * fabs((double)a->loss[s]),
			  "%s: step %d loss %.7g vs fp32 %.7g", what, s + 1, b->loss[s],
			  a->loss[s]);
	for (int l = 0; l < a->layer_count; l++) {
		for (uint64_t i = 0; i < a->numel[l]; i++) {
			double d = fabs((double)a->w[l][i] - b->w[l][i]);

			cr_assert(isfinite(b->w[l][i]), "%s: layer %d element %llu not finite",
				  what, l, (unsigned long long)i);
			d2 += d * d;
			w2 += (double)a->w[l][i] * a->w[l][i];
			if (d > worst)
				worst = d;
		}
	}
	cr_assert(sqrt(d2 / w2) <= 2e-3 && worst <= 2 * lr * a->steps,
		  "%s: relative RMS difference %.3g, worst element %.3g", what, sqrt(d2 / w2),
		  worst);
	cr_log_info("%s: relative RMS difference from fp32 %.3g, worst element %.3g", what,
		    sqrt(d2 / w2), worst);
}

Test(engine_fp16, tracks_fp32_on_every_tier)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const struct tier *t = &tiers[i];
		int *tok = et_tokens(et_stream_len(ET_STEPS, t->gas, 1, ET_B), mc.vocab, 5);
		struct et_run a, b, u;
		struct zn_config c;
		char what[96];

		snprintf(what, sizeof(what), "fp16 stage %d offload %s clip %g gas %d", t->stage,
			 off_name(t->off), (double)t->clip, t->gas);
		config(&c, t, false);
		cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0);
		config(&c, t, true);
		cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0, "%s", what);
		near_fp32(what, &a, &b, c.scheduler.warmup_max_lr);
		/* scaling by 2^16 and unscaling are exact in fp32 (powers of two): the dynamic
		 * run is the static scale 1 run bit for bit, so the scale is undone everywhere */
		c.precision.loss_scale = 1.0f;
		cr_assert_eq(et_train(&u, &c, ZN_COMM_SINGLE, tok, ET_STEPS), 0, "%s", what);
		cr_assert(same_bits(&b, &u) && !memcmp(b.loss, u.loss, sizeof(b.loss)),
			  "%s: scale 2^16 is not scale 1 bit for bit", what);
		et_run_free(&a);
		et_run_free(&b);
		et_run_free(&u);
		free(tok);
	}
}

static bool same_bits(const struct et_run *a, const struct et_run *b)
{
	for (int l = 0; l < a->layer_count; l++)
		if (memcmp(a->w[l], b->w[l], a->numel[l] * sizeof(float)))
			return false;
	return true;
}

Test(engine_fp16, overflow_skips_the_step_bit_for_bit)
{
	struct zn_gpt2_config mc;

	et_model(&mc);
	for (size_t i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const struct tier *t = &tiers[i];
		uint64_t blk = (uint64_t)t->gas * ET_B * ET_T; /* one step's tokens */
		int *b3 = et_tokens(3 * blk + 1, mc.vocab, 9);
		int *a4 = malloc((4 * blk + 1) * sizeof(int));
		struct et_run a, b;
		struct zn_config c;

		/* a4: blocks 1, 2, 3 (a copy of 4, skipped), 4 = b3's 1, 2, 3 */
		memcpy(a4, b3, 2 * blk * sizeof(int));
		memcpy(a4 + 2 * blk, b3 + 2 * blk, blk * sizeof(int));
		memcpy(a4 + 3 * blk, b3 + 2 * blk, (blk + 1) * sizeof(int));
		config(&c, t, true);
		cr_assert_eq(et_train(&b, &c, ZN_COMM_SINGLE, b3, 3), 0);
		setenv("ZINC_TEST_OVERFLOW", "3", 1);
		cr_assert_eq(et_train(&a, &c, ZN_COMM_SINGLE, a4, 4), 0);
		unsetenv("ZINC_TEST_OVERFLOW");
		cr_assert(a.loss[0] == b.loss[0] && a.loss[1] == b.loss[1] &&
			  a.loss[3] == b.loss[2], "stage %d %s gas %d: losses %g %g %g vs %g %g %g",
			  t->stage, off_name(t->off), t->gas, a.loss[0], a.loss[1], a.loss[3],
			  b.loss[0], b.loss[1], b.loss[2]);
		cr_assert(same_bits(&a, &b), "stage %d offload %s clip %g gas %d: the skipped "
			  "step changed the training", t->stage, off_name(t->off), (double)t->clip,
			  t->gas);
		et_run_free(&a);
		et_run_free(&b);
		free(a4);
		free(b3);
	}
}

/* Steps 1 .. steps with ZINC_TEST_OVERFLOW=inject; stats of each step into st[]; the
 * weights before and after step `watch` into before / after (layer 1). */
static void run_scaled(struct zn_config *c, const char *inject, int steps,
		       struct zn_step_stats *st, int watch, float **before, float **after)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_gpt2_config mc;
	struct zn_engine *e;
	uint64_t bt = ET_B * ET_T, numel;
	int *tok;

	et_model(&mc);
	tok = et_tokens((uint64_t)steps * bt + 1, mc.vocab, 3);
	setenv("ZINC_TEST_OVERFLOW", inject, 1);
	cr_assert_eq(zn_engine_create(&e, c, et_gpt2(&mc), &o), 0);
	unsetenv("ZINC_TEST_OVERFLOW");
	numel = zn_engine_layer_numel(e, 1);
	*before = malloc(numel * sizeof(float));
	*after = malloc(numel * sizeof(float));
	for (int s = 0; s < steps; s++) {
		if (s + 1 == watch)
			cr_assert_eq(zn_engine_read_layer(e, 1, *before), 0);
		cr_assert_eq(zn_engine_step(e, tok + s * bt, tok + s * bt + 1, &st[s]), 0);
		if (s + 1 == watch)
			cr_assert_eq(zn_engine_read_layer(e, 1, *after), 0);
	}
	cr_assert_eq(memcmp(*before, *after, numel * sizeof(float)) == 0,
		     st[watch - 1].overflow, "weights around step %d", watch);
	zn_engine_destroy(e);
	free(tok);
}

Test(engine_fp16, overflow_lowers_the_scale)
{
	struct tier t = { 2, ZN_OFFLOAD_NONE, 0, 1 };
	struct zn_step_stats st[4];
	struct zn_config c;
	float *w0, *w1;

	config(&c, &t, true);
	c.precision.hysteresis = 1;
	run_scaled(&c, "2", 4, st, 2, &w0, &w1);
	cr_assert(!st[0].overflow && st[0].loss_scale == 65536.0f);
	cr_assert(st[1].overflow && st[1].loss_scale == 65536.0f &&
		  st[1].next_loss_scale == 32768.0f, "step 2: overflow %d scale %g next %g",
		  st[1].overflow, st[1].loss_scale, st[1].next_loss_scale);
	cr_assert(!st[2].overflow && st[2].loss_scale == 32768.0f && isfinite(st[2].grad_norm));
	cr_assert(st[2].lr == st[1].lr && st[3].lr > st[2].lr,
		  "lr %g %g %g: the skipped step advanced the schedule", st[1].lr, st[2].lr,
		  st[3].lr);
	free(w0);
	free(w1);
	/* DeepSpeed's default hysteresis 2: the first overflow is tolerated, the second halves */
	config(&c, &t, true);
	run_scaled(&c, "2", 3, st, 2, &w0, &w1);
	cr_assert(st[1].overflow && st[1].next_loss_scale == 65536.0f);
	free(w0);
	free(w1);
	/* static scale: skipped, never moved; a step without overflow changes the weights */
	config(&c, &t, true);
	c.precision.loss_scale = 1024.0f;
	run_scaled(&c, "3", 3, st, 1, &w0, &w1);
	cr_assert(!st[0].overflow && st[0].loss_scale == 1024.0f);
	cr_assert(st[2].overflow && st[2].loss_scale == 1024.0f && st[2].next_loss_scale == 1024.0f);
	free(w0);
	free(w1);
}

Test(engine_fp16, nonfinite_outside_fp16_still_stops)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct tier t = { 0, ZN_OFFLOAD_NONE, 1.0f, 1 };
	struct zn_gpt2_config mc;
	struct zn_step_stats st;
	struct zn_config c;
	struct zn_engine *e;
	int *tok;

	et_model(&mc);
	tok = et_tokens(ET_B * ET_T + 1, mc.vocab, 3);
	config(&c, &t, false);
	setenv("ZINC_TEST_OVERFLOW", "1", 1);
	cr_assert_eq(zn_engine_create(&e, &c, et_gpt2(&mc), &o), 0);
	unsetenv("ZINC_TEST_OVERFLOW");
	cr_assert_eq(zn_engine_step(e, tok, tok + 1, &st), -ERANGE);
	zn_engine_destroy(e);
	free(tok);
}

/* zinc train --fp16: the step line carries the scale and says when a step overflowed. */
Test(engine_fp16, step_line_says_overflow_skipped)
{
	char cmd[1024], out[16384];
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "cd %s && ZINC_TEST_OVERFLOW=2 %s train --device host "
		 "--model tiny --vocab 256 --seq 16 --micro-batch 2 --steps 3 --steps-per-print 10 "
		 "--fp16 --hysteresis 1 --data data/demo.txt 2>&1", ZN_TEST_SRC_DIR, ZN_ZINC_EXE);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "%s", out);
	cr_assert(strstr(out, "step 1/3 | loss ") && strstr(out, "| scale 65536\n"), "%s", out);
	cr_assert(strstr(out, "step 2/3 | loss "), "an overflow is always printed: %s", out);
	cr_assert(strstr(out, "| overflow, skipped, scale 65536, next 32768\n"), "%s", out);
	cr_assert(strstr(out, "| scale 32768\n"), "%s", out);
}
