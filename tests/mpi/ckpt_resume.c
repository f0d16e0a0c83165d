/* ckpt_resume: checkpoints across the ranks of one launch (src/sched/ckpt.h).
 *
 *     mpirun -np 2 --oversubscribe ./mpi_ckpt_resume
 *     ./mpi_ckpt_resume                       # no mpirun: one rank, the same checks
 *
 * For stages 1-3 (offload none and cpu, accumulation 2, WarmupDecayLR): N steps straight on
 * the launch's ranks vs k steps, a checkpoint (every rank writes its file, the ranks agree
 * over the host comm), a resume on the same ranks and N - k more steps: losses and weights
 * bit for bit. Then re-sharding: the same checkpoint resumed at another stage on the same
 * ranks, and on one rank alone (micro-batch N x B, a process-local comm) by every rank:
 * within the equivalence tests' tolerance (1e-5 relative, weights 1e-5 + 1e-5 |w|) of the
 * straight run. Exit status 1 on any mismatch. A plain program (Criterion forks, which MPI
 * does not survive).
 */
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

#define CK_NO_CRITERION
#include "../ckpt_common.h"

static int near(const char *what, const struct ck_run *a, const struct ck_run *b, int from)
{
	for (int s = from; s < CK_STEPS; s++)
		if (!(fabs((double)a->loss[s] - b->loss[s]) <= 1e-5 * fabs((double)a->loss[s]))) {
			fprintf(stderr, "%s: step %d loss %.9g vs %.9g\n", what, s + 1, b->loss[s],
				a->loss[s]);
			return 1;
		}
	for (int l = 0; l < a->layers; l++)
		for (uint64_t i = 0; i < a->numel[l]; i++)
			if (!(fabs((double)a->w[l][i] - b->w[l][i]) <=
			      1e-5 + 1e-5 * fabs((double)a->w[l][i]))) {
				fprintf(stderr, "%s: layer %d element %llu %.9g vs %.9g\n", what, l,
					(unsigned long long)i, b->w[l][i], a->w[l][i]);
				return 1;
			}
	return 0;
}

static int exact(const char *what, const struct ck_run *a, const struct ck_run *b, int k)
{
	for (int s = k; s < CK_STEPS; s++)
		if (memcmp(&a->loss[s], &b->loss[s], 4)) {
			fprintf(stderr, "%s: step %d loss %.9g, straight %.9g\n", what, s + 1,
				b->loss[s], a->loss[s]);
			return 1;
		}
	for (int l = 0; l < a->layers; l++)
		if (memcmp(a->w[l], b->w[l], a->numel[l] * 4)) {
			fprintf(stderr, "%s: layer %d weights differ\n", what, l);
			return 1;
		}
	return 0;
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	int rank = 0, world = 1, failed = 0, k = 3;
	char dir[64] = "/tmp/zn-mpi-ckpt-XXXXXX";
	int *tok;

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	/* one directory for all ranks (one node: /tmp is shared) */
	if (rank == 0 && !mkdtemp(dir))
		return 1;
	if (anchor && zn_comm_broadcast(anchor, NULL, dir, sizeof(dir), 0))
		return 1;
	ck_comm = anchor;
	ck_world = world;
	et_model(&mc);
	tok = et_tokens(et_stream_len(CK_STEPS, 2, world, ET_B), mc.vocab, 11);
	for (int stage = 1; stage <= 3; stage++) {
		for (int off = 0; off < 2; off++) {
			struct zn_config c, c2, c1;
			struct ck_run a = { 0 }, b = { 0 }, r = { 0 }, s2 = { 0 }, one = { 0 };
			char what[96], sd[128];
			int rc;

			snprintf(what, sizeof(what), "rank %d/%d: stage %d offload %s", rank, world,
				 stage, off ? "cpu" : "none");
			snprintf(sd, sizeof(sd), "%s/s%d%d", dir, stage, off);
			ck_config(&c, stage, off ? ZN_OFFLOAD_CPU : ZN_OFFLOAD_NONE);
			ck_comm_kind = ZN_COMM_AUTO;
			ck_world = world;
			rc = ck_train(&a, &c, tok, 0, CK_STEPS, NULL, NULL);
			if (!rc)
				rc = ck_train(&b, &c, tok, 0, k, NULL, sd);
			if (!rc)
				rc = ck_train(&r, &c, tok, k, CK_STEPS, sd, NULL);
			if (rc) {
				fprintf(stderr, "%s: failed: %d\n", what, rc);
				return 1;
			}
			failed += exact(what, &a, &r, k);
			/* another stage on the same ranks */
			ck_config(&c2, stage == 3 ? 1 : 3, ZN_OFFLOAD_CPU);
			rc = ck_train(&s2, &c2, tok, k, CK_STEPS, sd, NULL);
			failed += rc ? 1 : near("another stage", &a, &s2, k);
			/* one rank with the whole micro batch */
			ck_config(&c1, 2, ZN_OFFLOAD_NONE);
			c1.train_micro_batch_size_per_gpu = world * ET_B;
			ck_comm_kind = ZN_COMM_SINGLE;
			ck_world = 1;
			rc = ck_train(&one, &c1, tok, k, CK_STEPS, sd, NULL);
			failed += rc ? 1 : near("one rank", &a, &one, k);
			if (!failed && rank == 0)
				printf("ok  %s: exact resume, re-sharded to stage %d and to one rank\n",
				       what, c2.zero.stage);
			ck_run_free(&a);
			ck_run_free(&b);
			ck_run_free(&r);
			ck_run_free(&s2);
			ck_run_free(&one);
			if (anchor)
				zn_comm_barrier(anchor);
			if (rank == 0)
				ck_rmtree(sd);
		}
	}
	if (anchor)
		zn_comm_barrier(anchor);
	if (rank == 0)
		ck_rmtree(dir);
	free(tok);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "ckpt_resume: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
