/* skewed_reads: at stage 3 with the parameters on nvme every fetch ends in an all-gather on
 * the comm stream, and every rank must enqueue its collectives (these all-gathers and the
 * backward's reduce-scatters) in the same order. Here rank 0's NVMe reads are slowed by a
 * bandwidth cap while the other ranks' are not, so the reads land at different times on
 * each rank; a fetch enqueued "as soon as its read is in" would put the ranks' collectives
 * in different orders and hang (the alarm below ends a hang as a failure). The losses and
 * weights must equal cpu offload's bit for bit.
 *
 *     mpirun -np 2 --oversubscribe ./mpi_skewed_reads
 */
#include <omp.h>
#include <unistd.h>

#include "../engine_common.h"
#include "nvme/aio.h"
#include "nvme_dir.h"

static void config_of(struct zn_config *c, bool nvme, const char *d, int rank, int depth)
{
	et_config(c, 3, ZN_OFFLOAD_CPU, ET_B, 2);
	c->runtime.prefetch_depth = depth;
	c->runtime.hot_layers = 0; /* every layer above 0 is read from nvme */
	if (!nvme)
		return;
	c->zero.offload_optimizer.device = ZN_OFFLOAD_NVME;
	c->zero.offload_param.device = ZN_OFFLOAD_NVME;
	c->zero.offload_optimizer.nvme_path_count = 1;
	c->zero.offload_param.nvme_path_count = 1;
	snprintf(c->zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", d);
	snprintf(c->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", d);
	/* rank 0 reads at 2 MB/s, the others uncapped */
	c->aio.bandwidth_cap_bytes_per_s = rank == 0 ? 2000000 : 0;
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	int rank = 0, world = 1, failed = 0;
	const char *d;

	alarm(60); /* a hang (ranks' collectives out of order) fails before ctest's timeout */
	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	d = mpi_nvme_dir("skewed_reads", rank);
	et_model(&mc);
	mc.layers = 6;
	zn_gpt2_config_validate(&mc);
	for (int depth = 1; d && depth <= 3; depth += 2) {
		int *tok = et_tokens(et_stream_len(ET_STEPS, 2, world, ET_B), mc.vocab, 9);
		struct zn_config cpu, nv;
		struct et_run a, b;
		char what[64];

		config_of(&cpu, false, d, rank, depth);
		config_of(&nv, true, d, rank, depth);
		if (et_train_model(&a, &cpu, &mc, ZN_COMM_AUTO, tok, ET_STEPS) ||
		    et_train_model(&b, &nv, &mc, ZN_COMM_AUTO, tok, ET_STEPS)) {
			fprintf(stderr, "skewed_reads: rank %d/%d depth %d: failed\n", rank, world,
				depth);
			return 1;
		}
		snprintf(what, sizeof(what), "skewed_reads: rank %d depth %d", rank, depth);
		failed += et_identical(what, &a, &b);
		if (!failed && rank == 0)
			printf("ok  %d ranks, prefetch depth %d, rank 0's reads capped: bit-identical "
			       "to cpu offload (loss %.6f -> %.6f)\n", world, depth, b.loss[0],
			       b.loss[ET_STEPS - 1]);
		et_run_free(&a);
		et_run_free(&b);
		free(tok);
	}
	if (d)
		rmdir(d);
	zn_comm_destroy(anchor);
	return failed ? 1 : 0;
}
