/* grads_homes: each gradient home the plan chooses (docs/memory.md) gives the losses and
 * final weights of today's cpu offload bit for bit, on 1, 2 and 4 ranks of one launch:
 *   - pinned ring (optimizer on nvme, one micro-batch, no clipping): a six-block model, so
 *     the two ring buffers are reused several times a step;
 *   - pinned, held for the step: the same with gradient accumulation, with clipping, and
 *     with both.
 * Each case first checks which home the plan chose (zn_engine_memory). Each rank keeps its
 * swap files in its own directory under $ZN_TEST_NVME_DIR or the current directory (the
 * program says so and passes when that has no O_DIRECT). Exit status 1 on any mismatch.
 *
 *     mpirun -np 2 --oversubscribe ./mpi_grads_homes
 *     ./mpi_grads_homes                       # one rank
 */
#include <omp.h>
#include <unistd.h>

#include "../engine_common.h"
#include "nvme/aio.h"
#include "nvme_dir.h"

struct gcase {
	int stage;
	bool params_nvme; /* stage 3: parameters on nvme too (cpu in the reference) */
	int gas;
	float clip;
	const char *home; /* what the plan must choose */
};

static const struct gcase cases[] = {
	{ 3, true, 1, 0.0f, "pinned ring" },
	{ 2, false, 1, 0.0f, "pinned ring" },
	{ 3, false, 1, 0.0f, "pinned ring" },
	{ 3, true, 2, 0.0f, "pinned, held for the step" },
	{ 3, true, 1, 0.05f, "pinned, held for the step" },
	{ 2, false, 2, 0.05f, "pinned, held for the step" },
};

static void config_of(struct zn_config *c, const struct gcase *k, bool nvme, const char *d)
{
	et_config(c, k->stage, ZN_OFFLOAD_CPU, ET_B, k->gas);
	c->gradient_clipping = k->clip;
	if (k->stage < 3 || !k->params_nvme)
		c->zero.offload_param.device = ZN_OFFLOAD_NONE;
	if (!nvme)
		return;
	c->zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	if (k->params_nvme)
		c->zero.offload_param.device = ZN_OFFLOAD_NVME;
	c->zero.offload_optimizer.nvme_path_count = 1;
	c->zero.offload_param.nvme_path_count = 1;
	snprintf(c->zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", d);
	snprintf(c->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", d);
}

/* The plan's gradient home for cfg (an engine made and destroyed; collective). */
static int home_of(const struct zn_config *cfg, const struct zn_gpt2_config *mc,
		   char *home, size_t size, uint64_t *grad_bytes)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_AUTO };
	struct zn_engine_memory m;
	struct zn_engine *e;
	int rc = zn_engine_create(&e, cfg, et_gpt2(mc), &o);

	if (rc)
		return rc;
	zn_engine_memory(e, &m);
	snprintf(home, size, "%s", m.grad_home);
	*grad_bytes = m.grad_pinned_bytes;
	zn_engine_destroy(e);
	return 0;
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	int rank = 0, world = 1, failed = 0;
	const char *d;

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	d = mpi_nvme_dir("grads_homes", rank);
	et_model(&mc);
	mc.layers = 6; /* 8 engine layers: the ring of 2 turns over three times a step */
	zn_gpt2_config_validate(&mc);
	for (size_t i = 0; d && i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct gcase *k = &cases[i];
		int *tok = et_tokens(et_stream_len(ET_STEPS, k->gas, world, ET_B), mc.vocab, 5);
		struct zn_config cpu, nv;
		struct et_run a, b;
		char what[160], home[64];
		uint64_t gbytes = 0;

		snprintf(what, sizeof(what), "rank %d/%d: stage %d params %s gas %d clip %g", rank,
			 world, k->stage, k->params_nvme ? "nvme" : "device", k->gas, k->clip);
		config_of(&cpu, k, false, d);
		config_of(&nv, k, true, d);
		if (home_of(&nv, &mc, home, sizeof(home), &gbytes) ||
		    et_train_model(&a, &cpu, &mc, ZN_COMM_AUTO, tok, ET_STEPS) ||
		    et_train_model(&b, &nv, &mc, ZN_COMM_AUTO, tok, ET_STEPS)) {
			fprintf(stderr, "%s: failed\n", what);
			return 1;
		}
		if (strcmp(home, k->home)) {
			fprintf(stderr, "%s: the plan chose '%s', not '%s'\n", what, home, k->home);
			failed++;
		} else if (et_identical(what, &a, &b)) {
			failed++;
		} else if (a.loss[ET_STEPS - 1] == a.loss[0]) {
			fprintf(stderr, "%s: the weights did not move\n", what);
			failed++;
		} else if (rank == 0) {
			printf("ok  %s: %s (%llu pinned gradient bytes), bit-identical to cpu "
			       "offload (loss %.6f -> %.6f)\n", what, home,
			       (unsigned long long)gbytes, b.loss[0], b.loss[ET_STEPS - 1]);
		}
		et_run_free(&a);
		et_run_free(&b);
		free(tok);
	}
	if (d)
		rmdir(d); /* the engines removed their swap directories */
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "grads_homes: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
