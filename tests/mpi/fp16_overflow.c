/* fp16_overflow: an overflow on one rank skips the step on every rank (issue 15 item 4).
 *
 *     mpirun -np 2 --oversubscribe ./mpi_fp16_overflow
 *     ./mpi_fp16_overflow                     # no mpirun: one rank, the same checks
 *
 * fp16 with dynamic loss scaling at stages 0-3 (device, cpu offload). Run A trains 4 steps
 * whose step 3 has ZINC_TEST_OVERFLOW=3@LAST (the last rank alone sees a non-finite local
 * gradient norm; the norm is all-reduced, so every rank sees the overflow); its step 3 is
 * fed a copy of step 4's data. Run B trains 3 steps on the data of A's steps 1, 2, 4 with no
 * overflow. Every rank must end with B's losses and weights bit for bit: had any rank
 * updated (or advanced AdamW's step) at the overflow, the weights would differ.
 * A plain program (Criterion forks, which MPI does not survive). Exit status 1 on mismatch.
 */
#include <omp.h>

#include "../engine_common.h"

struct variant {
	int stage;
	enum zn_offload_device off;
	float clip;
};

static const struct variant variants[] = {
	{ 0, ZN_OFFLOAD_NONE, 0 },  { 2, ZN_OFFLOAD_NONE, 0 }, { 3, ZN_OFFLOAD_NONE, 0.05f },
	{ 2, ZN_OFFLOAD_CPU, 0 },   { 3, ZN_OFFLOAD_CPU, 0 },
};

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	int rank = 0, world = 1, failed = 0;
	char inject[32];

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	et_model(&mc);
	snprintf(inject, sizeof(inject), "3@%d", world - 1);
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const struct variant *v = &variants[i];
		uint64_t blk = (uint64_t)world * ET_B * ET_T;
		int *b3 = et_tokens(3 * blk + 1, mc.vocab, 13);
		int *a4 = malloc((4 * blk + 1) * sizeof(int));
		struct et_run a, b;
		struct zn_config cfg;
		bool same = true;
		int rc;

		memcpy(a4, b3, 2 * blk * sizeof(int));
		memcpy(a4 + 2 * blk, b3 + 2 * blk, blk * sizeof(int));
		memcpy(a4 + 3 * blk, b3 + 2 * blk, (blk + 1) * sizeof(int));
		et_config(&cfg, v->stage, v->off, ET_B, 1);
		cfg.gradient_clipping = v->clip;
		cfg.precision.fp16 = true;
		cfg.precision.hysteresis = 1;
		rc = et_train(&b, &cfg, ZN_COMM_AUTO, b3, 3);
		setenv("ZINC_TEST_OVERFLOW", inject, 1);
		if (!rc)
			rc = et_train(&a, &cfg, ZN_COMM_AUTO, a4, 4);
		unsetenv("ZINC_TEST_OVERFLOW");
		if (rc) {
			fprintf(stderr, "fp16_overflow: rank %d: stage %d: failed: %d\n", rank,
				v->stage, rc);
			return 1;
		}
		same = a.loss[0] == b.loss[0] && a.loss[1] == b.loss[1] && a.loss[3] == b.loss[2];
		for (int l = 0; same && l < a.layer_count; l++)
			same = !memcmp(a.w[l], b.w[l], a.numel[l] * sizeof(float));
		if (!same) {
			fprintf(stderr, "fp16_overflow: rank %d/%d: stage %d offload %s clip %g: the "
				"overflow on rank %d did not skip the step here\n", rank, world,
				v->stage, v->off == ZN_OFFLOAD_CPU ? "cpu" : "none", (double)v->clip,
				world - 1);
			failed++;
		} else if (rank == 0) {
			printf("ok  %d ranks: stage %d offload %s clip %g: overflow on rank %d "
			       "skipped everywhere\n", world, v->stage,
			       v->off == ZN_OFFLOAD_CPU ? "cpu" : "none", (double)v->clip, world - 1);
		}
		et_run_free(&a);
		et_run_free(&b);
		free(a4);
		free(b3);
	}
	zn_comm_destroy(anchor);
	return failed ? 1 : 0;
}
