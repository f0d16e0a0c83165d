/* Shared by tests/test_engine.c and tests/mpi/engine_*.c: a tiny GPT, a seeded token
 * stream, and a runner that trains an engine for a few steps and keeps its losses and
 * final weights, so any two configurations can be compared.
 *
 * Data layout (llm.c's): the global batch of step s, micro-batch k is N x B consecutive
 * sequences of T tokens starting at token (s x gas + k) x N x B x T; rank r takes
 * sequences r x B .. r x B + B - 1; targets are the inputs shifted by one token. So N ranks
 * of micro-batch B see exactly the data of one rank of micro-batch N x B.
 */
#ifndef ZN_TESTS_ENGINE_COMMON_H
#define ZN_TESTS_ENGINE_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "model/gpt2/gpt2.h"
#include "zinc.h"

#define ET_STEPS 5
#define ET_T 8
#define ET_B 2

/* the engine's view of a GPT-2 configuration (src/model/model.h) */
#define et_gpt2(mc) (&(const struct zn_model){ &zn_gpt2_ops, (mc) })

struct et_run {
	float loss[16];
	int steps;
	int layer_count;
	float **w;           /* final master weights per layer */
	uint64_t *numel;
	uint64_t peak_bytes; /* device peak */
	uint64_t plan_bytes;
	uint64_t nvme_read[16], plan_nvme_read; /* per step; the plan's figure */
	uint64_t nvme_write[16], plan_nvme_write;
};

static inline void et_model(struct zn_gpt2_config *mc)
{
	*mc = (struct zn_gpt2_config){ .layers = 2, .heads = 4, .d_model = 32, .seq = 16,
				       .vocab = 96, .padded_vocab = 0 };
	zn_gpt2_config_validate(mc);
}

/* fp32, deterministic, lr large enough that 5 steps move the weights visibly */
static inline void et_config(struct zn_config *c, int stage, enum zn_offload_device off,
			     int micro, int gas)
{
	zn_config_defaults(c);
	c->zero.stage = stage;
	c->zero.offload_optimizer.device = stage >= 1 ? off : ZN_OFFLOAD_NONE;
	c->zero.offload_param.device = stage == 3 ? off : ZN_OFFLOAD_NONE;
	c->zero.offload_optimizer.pin_memory = false;
	c->zero.offload_param.pin_memory = false;
	c->train_micro_batch_size_per_gpu = micro;
	c->gradient_accumulation_steps = gas;
	c->train_batch_size = 0;
	c->optimizer.lr = 3e-3f;
	c->optimizer.eps = 1e-6f; /* see docs/engine.md: zero-gradient parameters */
	c->optimizer.weight_decay = 0.1f;
	c->runtime.deterministic = true;
	c->runtime.seed = 42;
	c->runtime.device = ZN_DEVICE_HOST;
	c->runtime.device_mem_bytes = 256ull << 20;
	c->runtime.pinned_mem_bytes = 64ull << 20;
}

/* tokens[0 .. n) from a fixed LCG: never all the same, always < vocab */
static inline int *et_tokens(uint64_t n, int vocab, uint64_t seed)
{
	int *t = malloc(n * sizeof(int));
	uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;

	for (uint64_t i = 0; t && i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		t[i] = (int)((x >> 33) % (uint64_t)vocab);
	}
	return t;
}

static inline void et_run_free(struct et_run *r)
{
	for (int l = 0; r->w && l < r->layer_count; l++)
		free(r->w[l]);
	free(r->w);
	free(r->numel);
	memset(r, 0, sizeof(*r));
}

/* Loss masks: when set, the target at stream position p is a label only when et_label(p)
 * (else ZN_IGNORE_INDEX); the same positions for any rank count. */
static bool (*et_label)(uint64_t pos);

/* Trains `steps` steps with cfg on the stream (world ranks of this launch, or one rank
 * under comm_kind single); returns 0 or the first error. */
static inline int et_train_any(struct et_run *r, const struct zn_config *cfg,
			       const struct zn_model *model, int comm_kind, const int *stream,
			       int steps)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = comm_kind };
	struct zn_engine *e;
	int rc, B, gas, N, rank, n;
	uint64_t bt;
	int *in = NULL, *tg = NULL;

	memset(r, 0, sizeof(*r));
	rc = zn_engine_create(&e, cfg, model, &o);
	if (rc)
		return rc;
	B = zn_engine_micro_batch(e);
	gas = zn_engine_grad_accum(e);
	N = zn_engine_world(e);
	rank = zn_engine_rank(e);
	bt = (uint64_t)B * ET_T;
	in = malloc(gas * bt * sizeof(int));
	tg = malloc(gas * bt * sizeof(int));
	for (int s = 0; !rc && s < steps; s++) {
		struct zn_step_stats st;

		for (int k = 0; k < gas; k++) {
			uint64_t base = ((uint64_t)s * gas + k) * N * bt + (uint64_t)rank * bt;

			memcpy(in + k * bt, stream + base, bt * sizeof(int));
			memcpy(tg + k * bt, stream + base + 1, bt * sizeof(int));
			for (uint64_t i = 0; et_label && i < bt; i++)
				if (!et_label(base + 1 + i))
					tg[k * bt + i] = ZN_IGNORE_INDEX;
		}
		rc = zn_engine_step(e, in, tg, &st);
		r->loss[s] = st.loss;
		r->peak_bytes = st.device_peak_bytes;
		r->plan_bytes = st.plan_device_bytes;
		r->nvme_read[s] = st.nvme_read_bytes;
		r->plan_nvme_read = st.plan_nvme_read_bytes;
		r->nvme_write[s] = st.nvme_write_bytes;
		r->plan_nvme_write = st.plan_nvme_write_bytes;
	}
	r->steps = steps;
	n = zn_engine_layer_count(e);
	r->layer_count = n;
	r->w = calloc(n, sizeof(*r->w));
	r->numel = calloc(n, sizeof(*r->numel));
	for (int l = 0; !rc && l < n; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc(r->numel[l] * sizeof(float));
		rc = zn_engine_read_layer(e, l, r->w[l]);
	}
	free(in);
	free(tg);
	zn_engine_destroy(e);
	return rc;
}

static inline int et_train_model(struct et_run *r, const struct zn_config *cfg,
				 const struct zn_gpt2_config *model, int comm_kind,
				 const int *stream, int steps)
{
	struct zn_gpt2_config mc;

	if (model)
		mc = *model;
	else
		et_model(&mc);
	return et_train_any(r, cfg, et_gpt2(&mc), comm_kind, stream, steps);
}

static inline int et_train(struct et_run *r, const struct zn_config *cfg, int comm_kind,
			   const int *stream, int steps)
{
	return et_train_model(r, cfg, NULL, comm_kind, stream, steps);
}

/* Token count a run of `steps` needs: steps x gas x N x B x T + 1. */
static inline uint64_t et_stream_len(int steps, int gas, int world, int micro)
{
	return (uint64_t)steps * gas * world * micro * ET_T + 1;
}

/* b equals the reference a bit for bit: every step's loss and every weight. Prints the
 * first difference. Returns 0 if identical, 1 if not. */
static inline int et_identical(const char *what, const struct et_run *a, const struct et_run *b)
{
	if (memcmp(a->loss, b->loss, sizeof(a->loss))) {
		fprintf(stderr, "%s: losses differ from the reference (last %.9g vs %.9g)\n", what,
			b->loss[a->steps - 1], a->loss[a->steps - 1]);
		return 1;
	}
	for (int l = 0; l < a->layer_count; l++)
		if (memcmp(a->w[l], b->w[l], a->numel[l] * sizeof(float))) {
			fprintf(stderr, "%s: layer %d's weights differ from the reference\n", what, l);
			return 1;
		}
	return 0;
}

/* Compares b with the reference a: losses within rel (relative), weights within
 * atol + rel x |w|. Prints the worst element. Returns 0 if equal enough, 1 if not. */
static inline int et_compare(const char *what, const struct et_run *a, const struct et_run *b,
			     double rel)
{
	double worst = -INFINITY, wa = 0, wb = 0;
	int bad = 0, wl = -1;
	uint64_t wi = 0;

	for (int s = 0; s < a->steps; s++) {
		double d = fabs((double)a->loss[s] - b->loss[s]);

		if (!(d <= rel * fabs((double)a->loss[s]))) {
			fprintf(stderr, "%s: step %d loss %.9g vs reference %.9g\n", what, s + 1,
				b->loss[s], a->loss[s]);
			bad = 1;
		}
	}
	/* excess over the tolerance 1e-5 + rel |w|; NaN counts as infinitely far */
	for (int l = 0; l < a->layer_count; l++) {
		for (uint64_t i = 0; i < a->numel[l]; i++) {
			double x = a->w[l][i], y = b->w[l][i];
			double ex = fabs(x - y) - (1e-5 + rel * fabs(x));

			if (isnan(ex))
				ex = INFINITY;
			if (ex > worst) {
				worst = ex;
				wl = l, wi = i, wa = x, wb = y;
			}
		}
	}
	if (worst > 0) {
		fprintf(stderr, "%s: weights differ: layer %d element %llu: %.9g vs reference "
			"%.9g\n", what, wl, (unsigned long long)wi, wb, wa);
		bad = 1;
	}
	return bad;
}

#endif
