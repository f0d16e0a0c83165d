/* lora_equiv: LoRA (docs/lora.md) on ZeRO stages 0-3 x offload none/cpu/nvme across the
 * ranks of one launch gives the losses and adapters of one rank at stage 0 with an N times
 * larger micro-batch (the frozen base's bits after training: tests/test_lora.c).
 *
 *     mpirun -np 2 --oversubscribe ./mpi_lora_equiv
 *     ./mpi_lora_equiv                        # no mpirun: one rank, the same checks
 *
 * Every rank computes the reference in-process on a process-local single comm. The nvme
 * variants (adapters' optimizer and parameter shards, and the frozen base, on nvme) use
 * a directory per rank under $ZN_TEST_NVME_DIR or the current directory, skipped with a
 * line when that has no O_DIRECT. Exit status 1 on any mismatch. A plain program
 * (Criterion forks, which MPI does not survive).
 */
#include <omp.h>
#include <unistd.h>

#include "../engine_common.h"
#include "model/lora/lora.h"
#include "nvme/aio.h"
#include "nvme_dir.h"

static const struct {
	int stage;
	enum zn_offload_device off;
} variants[] = {
	{ 0, ZN_OFFLOAD_NONE }, { 1, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE },
	{ 3, ZN_OFFLOAD_NONE }, { 1, ZN_OFFLOAD_CPU },  { 2, ZN_OFFLOAD_CPU },
	{ 3, ZN_OFFLOAD_CPU },  { 3, ZN_OFFLOAD_NVME },
};

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	struct zn_lora_config lc = { .r = 4, .alpha = 8 };
	struct et_run ref, r;
	struct zn_config cfg;
	struct zn_model lm;
	int rank = 0, world = 1, failed = 0, rc;
	int *tok;

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	et_model(&mc);
	lc.base = zn_gpt2_model(&mc);
	if (zn_lora_add_targets(&lc, "c_attn,c_proj,c_fc") || zn_lora_prepare(&lc))
		return 1;
	lm = zn_lora_model(&lc);
	tok = et_tokens(et_stream_len(ET_STEPS, 1, world, ET_B), mc.vocab, 11);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, world * ET_B, 1);
	rc = et_train_any(&ref, &cfg, &lm, ZN_COMM_SINGLE, tok, ET_STEPS);
	if (rc) {
		fprintf(stderr, "lora_equiv: rank %d: reference failed: %d\n", rank, rc);
		return 1;
	}
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		char what[96];

		et_config(&cfg, variants[i].stage, variants[i].off, ET_B, 1);
		if (variants[i].off == ZN_OFFLOAD_NVME) {
			const char *dir = mpi_nvme_dir("lora_equiv", rank);
			struct zn_offload_config *o[] = { &cfg.zero.offload_optimizer,
							  &cfg.zero.offload_param };

			if (!dir)
				continue;
			for (int k = 0; k < 2; k++) {
				o[k]->nvme_path_count = 1;
				snprintf(o[k]->nvme_path[0], ZN_PATH_MAX, "%s", dir);
			}
		}
		snprintf(what, sizeof(what), "rank %d/%d: LoRA stage %d offload %d", rank, world,
			 variants[i].stage, (int)variants[i].off);
		rc = et_train_any(&r, &cfg, &lm, ZN_COMM_AUTO, tok, ET_STEPS);
		if (rc) {
			fprintf(stderr, "%s: failed: %d\n", what, rc);
			return 1;
		}
		if (et_compare(what, &ref, &r, 1e-5))
			failed++;
		else if (rank == 0)
			printf("ok  %s (loss %.6f -> %.6f)\n", what, r.loss[0], r.loss[ET_STEPS - 1]);
		if (r.peak_bytes > r.plan_bytes) {
			fprintf(stderr, "%s: device peak %llu over the plan's %llu\n", what,
				(unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
			failed++;
		}
		et_run_free(&r);
	}
	et_run_free(&ref);
	if (mpi_nvme_dir("lora_equiv", rank))
		rmdir(mpi_nvme_dir("lora_equiv", rank));
	free(tok);
	zn_lora_release(&lc);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "lora_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
