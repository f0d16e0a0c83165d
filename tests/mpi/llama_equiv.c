/* llama_equiv: a tiny Llama (GQA, untied lm_head; a tied one with q/k/v/o biases; a Qwen3
 * with q_norm/k_norm and head_dim 12 apart from hidden / heads; a Qwen3-MoE whose layer 0
 * routes each token to 1 of 32 experts, so on every rank some experts get no token in a
 * step, and whose layer 1 is dense) at
 * ZeRO stages 0-3 x offload none/cpu/nvme across the ranks of one launch gives the losses
 * and final weights of one rank at stage 0 with an N times larger micro-batch, within 1e-5
 * (relative; weights 1e-5 + 1e-5 |w|), as tests/mpi/engine_equiv.c checks GPT-2.
 *
 *     mpirun -np 4 --oversubscribe ./mpi_llama_equiv
 *     ./mpi_llama_equiv                       # no mpirun: one rank, the same checks
 *
 * One distributed run per stage and model again with activation checkpointing (every 1 or
 * 2 layers, the checkpoints on the device, in host memory or on nvme by turns, the
 * offload by turns) gives the same bits, its
 * device peak within the plan and lower than without by what the plan says.
 * With offload nvme (optimizer state and, at stage 3, parameters on nvme) each rank keeps
 * its swap files in its own directory under $ZN_TEST_NVME_DIR or the current directory
 * (skipped with a line when that has no O_DIRECT). Exit status 1 on any mismatch. A plain
 * program (Criterion forks, which MPI does not survive).
 */
#include <omp.h>
#include <string.h>
#include <unistd.h>

#include "../engine_common.h"
#include "model/llama/llama.h"
#include "nvme/aio.h"
#include "nvme_dir.h"

static const char *off_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

/* llama-tiny narrowed: 2 layers, hidden 32, 4 heads of 8, 2 kv heads, vocab 96 */
static int model(struct zn_llama_config *c, bool tied_bias)
{
	if (zn_llama_config_from_preset("llama-tiny", c))
		return -1;
	c->hidden = 32, c->intermediate = 48, c->head_dim = 8, c->vocab = 96, c->seq = 16;
	c->tied = c->qkv_bias = c->o_bias = tied_bias;
	return zn_llama_config_validate(c);
}

/* the same as Qwen3: q/k norms, head_dim 12 (hidden / heads is 8), untied */
static int qwen3(struct zn_llama_config *c)
{
	if (model(c, false))
		return -1;
	c->qk_norm = true;
	c->head_dim = 12;
	return zn_llama_config_validate(c);
}

/* The same distributed run with activation checkpointing gives the same bits; its device
 * peak stays within the plan and falls by what the plan says (docs/activations.md). */
static int check_recompute(const struct zn_config *base, const struct zn_model *m,
			   const struct et_run *want, const int *tok, int turn, int rank,
			   const char *what)
{
	static const enum zn_offload_device homes[] = { ZN_OFFLOAD_NONE, ZN_OFFLOAD_CPU,
							ZN_OFFLOAD_NVME };
	enum zn_offload_device home = homes[turn % 3];
	struct zn_config cfg = *base;
	struct et_run r;
	bool bad;

	if (home == ZN_OFFLOAD_NVME && !mpi_nvme_dir("llama_equiv", rank))
		home = ZN_OFFLOAD_CPU;
	cfg.act_ckpt.enabled = true;
	cfg.act_ckpt.every = 1 + turn % 2;
	cfg.act_ckpt.home.device = home;
	if (home == ZN_OFFLOAD_NVME) {
		cfg.act_ckpt.home.nvme_path_count = 1;
		snprintf(cfg.act_ckpt.home.nvme_path[0], ZN_PATH_MAX, "%s",
			 mpi_nvme_dir("llama_equiv", rank));
	}
	if (et_train_any(&r, &cfg, m, ZN_COMM_AUTO, tok, ET_STEPS)) {
		fprintf(stderr, "%s: with activation checkpointing: failed\n", what);
		return 1;
	}
	bad = memcmp(want->loss, r.loss, sizeof(r.loss)) != 0 || r.peak_bytes > r.plan_bytes ||
	      want->peak_bytes - r.peak_bytes != want->plan_bytes - r.plan_bytes;
	for (int l = 0; l < r.layer_count; l++)
		bad |= memcmp(want->w[l], r.w[l], r.numel[l] * sizeof(float)) != 0;
	if (bad)
		fprintf(stderr, "%s: activation checkpointing every %d on %s changed the results "
			"or the peak (%llu, plan %llu; without %llu, plan %llu)\n", what,
			cfg.act_ckpt.every, off_name(home), (unsigned long long)r.peak_bytes,
			(unsigned long long)r.plan_bytes, (unsigned long long)want->peak_bytes,
			(unsigned long long)want->plan_bytes);
	else if (rank == 0)
		printf("ok  %s: bit-identical with activation checkpointing every %d on %s "
		       "(peak %llu <= plan %llu, %llu lower than without)\n", what,
		       cfg.act_ckpt.every, home == ZN_OFFLOAD_NONE ? "the device" : off_name(home),
		       (unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes,
		       (unsigned long long)(want->peak_bytes - r.peak_bytes));
	et_run_free(&r);
	return bad;
}

/* Qwen3-MoE: layer 0 sparse, 32 experts of intermediate 16, 1 per token (32 tokens per rank
 * and micro-batch: about a third of the experts get none), layer 1 dense (mlp_only_layers).
 * No load-balancing loss: it is a per-micro-batch statistic (as in transformers under
 * DDP), so N ranks of B rows are not one rank of N B rows for it. */
static int qwen3_moe(struct zn_llama_config *c)
{
	if (qwen3(c))
		return -1;
	c->experts = 32, c->experts_per_tok = 1, c->moe_intermediate = 16, c->sparse_step = 1;
	c->norm_topk = false, c->aux = false;
	memset(c->mlp_only, 0, sizeof(c->mlp_only));
	c->mlp_only[0] = 2; /* layer 1 */
	return zn_llama_config_validate(c);
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	static const char *const names[] = { "untied, GQA", "tied, biases", "qwen3, q/k norms",
					     "qwen3_moe, idle experts" };
	struct zn_llama_config mc[4];
	int rank = 0, world = 1, failed = 0, rc = 0;
	int *tok;

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	if (model(&mc[0], false) || model(&mc[1], true) || qwen3(&mc[2]) || qwen3_moe(&mc[3]))
		return 1;
	tok = et_tokens(et_stream_len(ET_STEPS, 1, world, ET_B), mc[0].vocab, 13);
	for (int v = 0; v < 4; v++) {
		struct zn_model m = zn_llama_model(&mc[v]);
		struct zn_config cfg;
		struct et_run ref, r;

		et_config(&cfg, 0, ZN_OFFLOAD_NONE, world * ET_B, 1);
		rc = et_train_any(&ref, &cfg, &m, ZN_COMM_SINGLE, tok, ET_STEPS);
		if (rc) {
			fprintf(stderr, "llama_equiv: rank %d: reference failed: %d\n", rank, rc);
			return 1;
		}
		for (int stage = 0; stage <= 3; stage++) {
			for (int off = ZN_OFFLOAD_NONE; off <= ZN_OFFLOAD_NVME; off++) {
				char what[128];

				if (stage == 0 && off != ZN_OFFLOAD_NONE)
					continue;
				et_config(&cfg, stage, off, ET_B, 1);
				if (off == ZN_OFFLOAD_NVME) {
					const char *dir = mpi_nvme_dir("llama_equiv", rank);

					if (!dir)
						continue;
					cfg.zero.offload_optimizer.nvme_path_count = 1;
					cfg.zero.offload_param.nvme_path_count = 1;
					snprintf(cfg.zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX,
						 "%s", dir);
					snprintf(cfg.zero.offload_param.nvme_path[0], ZN_PATH_MAX,
						 "%s", dir);
				}
				snprintf(what, sizeof(what), "rank %d/%d: llama %s: stage %d offload %s",
					 rank, world, names[v], stage, off_name(off));
				rc = et_train_any(&r, &cfg, &m, ZN_COMM_AUTO, tok, ET_STEPS);
				if (rc) {
					fprintf(stderr, "%s: failed: %d\n", what, rc);
					return 1;
				}
				if (et_compare(what, &ref, &r, 1e-5))
					failed++;
				else if (rank == 0)
					printf("ok  %s (loss %.6f -> %.6f)\n", what, r.loss[0],
					       r.loss[ET_STEPS - 1]);
				if (off == (stage + v) % 3 || stage == 0)
					failed += check_recompute(&cfg, &m, &r, tok, stage + v, rank,
								  what);
				et_run_free(&r);
			}
		}
		et_run_free(&ref);
	}
	if (mpi_nvme_dir("llama_equiv", rank))
		rmdir(mpi_nvme_dir("llama_equiv", rank));
	free(tok);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "llama_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
