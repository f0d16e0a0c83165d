/* schedule_equiv: on the ranks of one launch, layer-major accumulation (zinc.schedule,
 * src/sched/step_lm.c) gives the losses and final weights of micro-batch order bit for
 * bit, at ZeRO stages 0-3 with offload none, cpu and nvme, grad-accum 2 and 4, with
 * clipping, and its device peak stays within the plan.
 *
 *     mpirun -np 2 --oversubscribe ./mpi_schedule_equiv
 *     ./mpi_schedule_equiv                    # no mpirun: one rank, the same checks
 *
 * Exit status 1 on any mismatch. A plain program (Criterion forks, which MPI does not
 * survive).
 */
#include <omp.h>
#include <unistd.h>

#include "../engine_common.h"
#include "nvme_dir.h"

struct variant {
	int stage;
	enum zn_offload_device off;
	int gas;
	float clip;
};

static const struct variant variants[] = {
	{ 0, ZN_OFFLOAD_NONE, 2, 0 }, { 1, ZN_OFFLOAD_NONE, 4, 0 }, { 2, ZN_OFFLOAD_CPU, 4, 0 },
	{ 3, ZN_OFFLOAD_NONE, 2, 0 }, { 3, ZN_OFFLOAD_CPU, 4, 0 },  { 3, ZN_OFFLOAD_CPU, 2, 0.05f },
	{ 2, ZN_OFFLOAD_NVME, 2, 0 }, { 3, ZN_OFFLOAD_NVME, 4, 0 },
};

static const char *off_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

static int run(struct et_run *r, const struct variant *v, enum zn_schedule s, const int *tok,
	       const char *dir)
{
	struct zn_config cfg;

	et_config(&cfg, v->stage, v->off, ET_B, v->gas);
	cfg.gradient_clipping = v->clip;
	cfg.runtime.schedule = s;
	if (dir) {
		cfg.zero.offload_optimizer.nvme_path_count = 1;
		cfg.zero.offload_param.nvme_path_count = 1;
		snprintf(cfg.zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", dir);
		snprintf(cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	}
	return et_train(r, &cfg, ZN_COMM_AUTO, tok, ET_STEPS);
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	int rank = 0, world = 1, failed = 0;
	int *tok;

	/* ranks oversubscribe the cores: one OpenMP thread each */
	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	/* keeps MPI initialized across the engines' own comms (MPI cannot start twice) */
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	tok = et_tokens(et_stream_len(ET_STEPS, 4, world, ET_B), 96, 13);
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const struct variant *v = &variants[i];
		const char *dir = NULL;
		struct et_run mb, lm;
		char what[96];

		if (v->off == ZN_OFFLOAD_NVME && !(dir = mpi_nvme_dir("schedule_equiv", rank)))
			continue;
		snprintf(what, sizeof(what), "rank %d/%d: stage %d offload %s grad-accum %d "
			 "clip %g", rank, world, v->stage, off_name(v->off), v->gas, v->clip);
		if (run(&mb, v, ZN_SCHEDULE_MICRO_BATCH, tok, dir) ||
		    run(&lm, v, ZN_SCHEDULE_LAYER_MAJOR, tok, dir)) {
			fprintf(stderr, "%s: failed\n", what);
			return 1;
		}
		if (et_identical(what, &mb, &lm)) {
			failed++;
		} else if (lm.peak_bytes > lm.plan_bytes) {
			fprintf(stderr, "%s: device peak %llu over the plan's %llu\n", what,
				(unsigned long long)lm.peak_bytes,
				(unsigned long long)lm.plan_bytes);
			failed++;
		} else if (rank == 0) {
			printf("ok  %s (loss %.6f -> %.6f)\n", what, lm.loss[0],
			       lm.loss[ET_STEPS - 1]);
		}
		et_run_free(&mb);
		et_run_free(&lm);
	}
	if (mpi_nvme_dir("schedule_equiv", rank))
		rmdir(mpi_nvme_dir("schedule_equiv", rank)); /* the engines removed their files */
	free(tok);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "schedule_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
