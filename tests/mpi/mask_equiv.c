/* mask_equiv: loss masks (ZN_IGNORE_INDEX targets) across ranks and micro-batches. The
 * loss and the gradient are normalized by the global count of labels in the step, so N
 * ranks of micro-batch B with grad_accum 2 give the losses and weights of one rank of
 * micro-batch N x B, although the ranks and micro-batches hold very different numbers of
 * labels (whole sequences without any, others with every target): per-rank or
 * per-micro-batch means would weight them differently. Stages 0, 2 and 3 (offloaded).
 *
 *     mpirun -np 4 --oversubscribe ./mpi_mask_equiv
 *     ./mpi_mask_equiv                      # no mpirun: one rank, the same checks
 *
 * Losses within 1e-5 relative, weights within 1e-5 + 1e-5 |w| (engine_common.h).
 * A plain program (Criterion forks, which MPI does not survive).
 */
#include <omp.h>

#include "../engine_common.h"

/* sequence s = pos / ET_T: s % 3 == 1 has no label, s % 3 == 2 every one, the rest one
 * in four */
static bool label(uint64_t pos)
{
	uint64_t s = (pos - 1) / ET_T;

	if (s % 3 == 1)
		return false;
	if (s % 3 == 2)
		return true;
	return pos % 4 == 0;
}

int main(void)
{
	static const struct {
		int stage;
		enum zn_offload_device off;
	} v[] = { { 0, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE }, { 3, ZN_OFFLOAD_CPU } };
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct et_run ref, r;
	struct zn_config cfg;
	int rank = 0, world = 1, failed = 0, rc;
	int *tok;

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	/* keeps MPI initialized across the engines' own comms (MPI cannot start twice) */
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	et_label = label;
	tok = et_tokens(et_stream_len(ET_STEPS, 2, world, ET_B), 96, 3);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, world * ET_B, 2);
	rc = et_train(&ref, &cfg, ZN_COMM_SINGLE, tok, ET_STEPS);
	if (rc) {
		fprintf(stderr, "mask_equiv: rank %d: reference failed: %d\n", rank, rc);
		return 1;
	}
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char what[96];

		et_config(&cfg, v[i].stage, v[i].off, ET_B, 2);
		snprintf(what, sizeof(what), "rank %d/%d: masked, stage %d offload %d", rank, world,
			 v[i].stage, (int)v[i].off);
		rc = et_train(&r, &cfg, ZN_COMM_AUTO, tok, ET_STEPS);
		if (rc) {
			fprintf(stderr, "%s: failed: %d\n", what, rc);
			return 1;
		}
		if (et_compare(what, &ref, &r, 1e-5))
			failed++;
		else if (rank == 0)
			printf("ok  %s (loss %.6f -> %.6f)\n", what, r.loss[0], r.loss[ET_STEPS - 1]);
		et_run_free(&r);
	}
	et_run_free(&ref);
	free(tok);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "mask_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
