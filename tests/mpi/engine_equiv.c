/* engine_equiv: ZeRO stages 0-3 x offload none/cpu across the ranks of one launch give the
 * losses and final weights of one rank at stage 0 with an N times larger micro-batch.
 *
 *     mpirun -np 4 --oversubscribe ./mpi_engine_equiv
 *     ./mpi_engine_equiv                      # no mpirun: one rank, the same checks
 *
 * Every rank computes the reference itself, in-process, on a process-local single comm
 * (micro-batch N x B over the same token stream), then trains each distributed
 * configuration with micro-batch B (rank r takes sequences r x B .. r x B + B - 1) and
 * compares: losses within 1e-5 relative, weights within 1e-5 + 1e-5 |w|. Also with
 * global-norm clipping (the norm is all-reduced) and in bf16 (within 1e-2: a master weight
 * that differs by rounding can round to the neighbouring bf16 value, 2^-8 relative), those
 * with fp32 compute (--compute-dtype fp32: the ranks' reductions, not the GEMM roundings,
 * under test). bf16 compute (bf16 GEMM inputs: an activation whose fp32 value differs in
 * the last bit between a 4B-row and a B-row GEMM can round to the neighbouring bf16 value)
 * at stage 1 and 3: losses within 1e-2 relative, weights within 2 x lr x steps (AdamW
 * moves an element by about lr a step however small its gradient). With activation
 * checkpointing, each plain variant gives the same bits as without (checkpoints on the
 * device, host or nvme by turns), its device peak within the plan and lower by what the
 * plan says. With
 * offload nvme (optimizer state and, at stage 3, parameters on nvme) each rank keeps its
 * swap files in its own directory under $ZN_TEST_NVME_DIR or the current directory (skipped
 * with a line when that has no O_DIRECT). int8 optimizer state: at stages 1-3 the cpu and
 * nvme tiers give the device tier's bits. Exit status 1 on any mismatch.
 * A plain program (Criterion forks, which MPI does not survive).
 */
#include <omp.h>
#include <unistd.h>

#include "../engine_common.h"
#include "nvme/aio.h"
#include "nvme_dir.h"

struct variant {
	int stage;
	enum zn_offload_device off;
	float clip;
	bool bf16;
	bool compute16; /* bf16 compute (bf16 only) */
};

static const struct variant variants[] = {
	{ 0, ZN_OFFLOAD_NONE, 0, false, false },     { 1, ZN_OFFLOAD_NONE, 0, false, false },
	{ 2, ZN_OFFLOAD_NONE, 0, false, false },     { 3, ZN_OFFLOAD_NONE, 0, false, false },
	{ 1, ZN_OFFLOAD_CPU, 0, false, false },      { 2, ZN_OFFLOAD_CPU, 0, false, false },
	{ 3, ZN_OFFLOAD_CPU, 0, false, false },      { 2, ZN_OFFLOAD_NONE, 0.05f, false, false },
	{ 3, ZN_OFFLOAD_CPU, 0.05f, false, false },  { 3, ZN_OFFLOAD_CPU, 0, true, false },
	{ 1, ZN_OFFLOAD_NONE, 0, true, false },      { 2, ZN_OFFLOAD_NVME, 0, false, false },
	{ 3, ZN_OFFLOAD_NVME, 0, false, false },     { 3, ZN_OFFLOAD_NVME, 0.05f, false, false },
	{ 1, ZN_OFFLOAD_NONE, 0, true, true }, { 3, ZN_OFFLOAD_CPU, 0, true, true },
};

static const char *off_name(enum zn_offload_device d)
{
	return d == ZN_OFFLOAD_NVME ? "nvme" : d == ZN_OFFLOAD_CPU ? "cpu" : "none";
}

static void set_nvme_paths(struct zn_config *c, const char *dir)
{
	c->zero.offload_optimizer.nvme_path_count = 1;
	c->zero.offload_param.nvme_path_count = 1;
	snprintf(c->zero.offload_optimizer.nvme_path[0], ZN_PATH_MAX, "%s", dir);
	snprintf(c->zero.offload_param.nvme_path[0], ZN_PATH_MAX, "%s", dir);
}

/* reference index: 0 plain, 1 clipped, 2 bf16 (fp32 compute), 3 bf16 compute */
#define REFS 4
static int ref_of(const struct variant *v)
{
	return v->compute16 ? 3 : v->bf16 ? 2 : v->clip > 0;
}

static void set_precision(struct zn_config *c, bool bf16, bool compute16)
{
	c->precision.bf16 = bf16;
	c->runtime.compute_dtype = compute16 ? ZN_COMPUTE_BF16 : ZN_COMPUTE_FP32;
}

/* bf16 compute: losses within 1e-2 relative, weights within 2 x lr x steps; 0 if so */
static int near_bf16(const char *what, const struct et_run *a, const struct et_run *b,
		     double lr)
{
	double worst = 0;

	for (int s = 0; s < a->steps; s++)
		if (!(fabs((double)a->loss[s] - b->loss[s]) <= 1e-2 * fabs((double)a->loss[s]))) {
			fprintf(stderr, "%s: step %d loss %.9g vs reference %.9g\n", what, s + 1,
				b->loss[s], a->loss[s]);
			return 1;
		}
	for (int l = 0; l < a->layer_count; l++)
		for (uint64_t i = 0; i < a->numel[l]; i++) {
			double d = fabs((double)a->w[l][i] - b->w[l][i]);

			if (!(d <= worst))
				worst = isnan(d) ? INFINITY : d;
		}
	if (worst > 2.0 * lr * a->steps) {
		fprintf(stderr, "%s: weights differ by %g (bound %g)\n", what, worst,
			2.0 * lr * a->steps);
		return 1;
	}
	return 0;
}

/* The same distributed run with activation checkpointing (every 1 or 2 layers, checkpoints
 * on the device, in host memory or on nvme by turns) gives the same bits. */
static int check_recompute(const struct zn_config *base, const struct et_run *want,
			   const int *tok, int i, int rank, const char *what)
{
	static const enum zn_offload_device homes[] = { ZN_OFFLOAD_NONE, ZN_OFFLOAD_CPU,
							ZN_OFFLOAD_NVME };
	struct zn_config cfg = *base;
	struct et_run r;
	int bad = 0;

	cfg.act_ckpt.enabled = true;
	cfg.act_ckpt.every = 1 + i % 2;
	cfg.act_ckpt.home.device = homes[i % 3];
	if (homes[i % 3] == ZN_OFFLOAD_NVME) {
		if (!mpi_nvme_dir("engine_equiv", rank))
			cfg.act_ckpt.home.device = ZN_OFFLOAD_CPU;
		else
			set_nvme_paths(&cfg, mpi_nvme_dir("engine_equiv", rank));
		cfg.act_ckpt.home.nvme_path_count = cfg.zero.offload_optimizer.nvme_path_count;
		memcpy(cfg.act_ckpt.home.nvme_path, cfg.zero.offload_optimizer.nvme_path,
		       sizeof(cfg.act_ckpt.home.nvme_path));
	}
	if (et_train(&r, &cfg, ZN_COMM_AUTO, tok, ET_STEPS)) {
		fprintf(stderr, "%s: with activation checkpointing: failed\n", what);
		return 1;
	}
	bad = memcmp(want->loss, r.loss, sizeof(r.loss)) != 0 || r.peak_bytes > r.plan_bytes ||
	      want->peak_bytes - r.peak_bytes != want->plan_bytes - r.plan_bytes;
	for (int l = 0; l < r.layer_count; l++)
		bad |= memcmp(want->w[l], r.w[l], r.numel[l] * sizeof(float)) != 0;
	if (bad)
		fprintf(stderr, "%s: activation checkpointing (every %d, home %d) changed the "
			"results or went over the plan\n", what, cfg.act_ckpt.every, (int)cfg.act_ckpt.home.device);
	else if (rank == 0)
		printf("ok  %s: bit-identical with activation checkpointing every %d on %s "
		       "(peak %llu <= plan %llu)\n", what, cfg.act_ckpt.every,
		       cfg.act_ckpt.home.device == ZN_OFFLOAD_NONE ? "the device" :
		       off_name(cfg.act_ckpt.home.device), (unsigned long long)r.peak_bytes,
		       (unsigned long long)r.plan_bytes);
	et_run_free(&r);
	return bad;
}

/* int8 optimizer state (zinc.optimizer_states) across the ranks: at each stage the offload
 * tiers give the bits of the same stage on the device (the same reductions; m and v in the
 * same blocks on every tier). Against the one-rank reference the ranks' reduction order
 * can flip a code, so that comparison stays with the fp32 variants above. */
static int check_int8_tiers(const int *tok, int rank, int world)
{
	static const enum zn_offload_device offs[] = { ZN_OFFLOAD_CPU, ZN_OFFLOAD_NVME };
	int bad = 0;

	for (int stage = 1; stage <= 3; stage++) {
		struct zn_config cfg;
		struct et_run dev, r;
		char what[96];

		et_config(&cfg, stage, ZN_OFFLOAD_NONE, ET_B, 1);
		cfg.optimizer.states = ZN_STATES_INT8;
		if (et_train(&dev, &cfg, ZN_COMM_AUTO, tok, ET_STEPS))
			return bad + 1;
		for (int k = 0; k < 2; k++) {
			et_config(&cfg, stage, offs[k], ET_B, 1);
			cfg.optimizer.states = ZN_STATES_INT8;
			if (offs[k] == ZN_OFFLOAD_NVME) {
				if (!mpi_nvme_dir("engine_equiv", rank))
					continue;
				set_nvme_paths(&cfg, mpi_nvme_dir("engine_equiv", rank));
			}
			snprintf(what, sizeof(what), "rank %d/%d: int8 states stage %d offload %s",
				 rank, world, stage, off_name(offs[k]));
			if (et_train(&r, &cfg, ZN_COMM_AUTO, tok, ET_STEPS)) {
				fprintf(stderr, "%s: failed\n", what);
				bad++;
				continue;
			}
			if (et_identical(what, &dev, &r))
				bad++;
			else if (rank == 0)
				printf("ok  %s: bit-identical with the device tier\n", what);
			et_run_free(&r);
		}
		et_run_free(&dev);
	}
	return bad;
}

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config mc;
	struct et_run ref[REFS], r;
	int rank = 0, world = 1, failed = 0, rc;
	int *tok;

	/* ranks oversubscribe the cores: one OpenMP thread each */
	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	/* keeps MPI initialized across the engines' own comms (MPI cannot start twice) */
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	et_model(&mc);
	tok = et_tokens(et_stream_len(ET_STEPS, 1, world, ET_B), mc.vocab, 11);
	for (int c = 0; c < REFS; c++) {
		struct zn_config cfg;

		et_config(&cfg, 0, ZN_OFFLOAD_NONE, world * ET_B, 1);
		cfg.gradient_clipping = c == 1 ? 0.05f : 0.0f;
		set_precision(&cfg, c >= 2, c == 3);
		rc = et_train(&ref[c], &cfg, ZN_COMM_SINGLE, tok, ET_STEPS);
		if (rc) {
			fprintf(stderr, "engine_equiv: rank %d: reference failed: %d\n", rank, rc);
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const struct variant *v = &variants[i];
		struct zn_config cfg;
		char what[96];

		et_config(&cfg, v->stage, v->off, ET_B, 1);
		cfg.gradient_clipping = v->clip;
		set_precision(&cfg, v->bf16, v->compute16);
		if (v->off == ZN_OFFLOAD_NVME) {
			const char *dir = mpi_nvme_dir("engine_equiv", rank);

			if (!dir)
				continue;
			set_nvme_paths(&cfg, dir);
		}
		snprintf(what, sizeof(what), "rank %d/%d: stage %d offload %s clip %g%s", rank,
			 world, v->stage, off_name(v->off), v->clip,
			 v->compute16 ? " bf16 compute" : v->bf16 ? " bf16" : "");
		rc = et_train(&r, &cfg, ZN_COMM_AUTO, tok, ET_STEPS);
		if (rc) {
			fprintf(stderr, "%s: failed: %d\n", what, rc);
			return 1;
		}
		if (v->compute16 ? near_bf16(what, &ref[3], &r, cfg.optimizer.lr) :
				   et_compare(what, &ref[ref_of(v)], &r, v->bf16 ? 1e-2 : 1e-5)) {
			failed++;
		} else if (rank == 0) {
			printf("ok  %s (loss %.6f -> %.6f, peak %llu <= plan %llu)\n", what,
			       r.loss[0], r.loss[ET_STEPS - 1],
			       (unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
		}
		if (!v->clip)
			failed += check_recompute(&cfg, &r, tok, (int)i, rank, what);
		if (r.peak_bytes > r.plan_bytes) {
			fprintf(stderr, "%s: device peak %llu over the plan's %llu\n", what,
				(unsigned long long)r.peak_bytes, (unsigned long long)r.plan_bytes);
			failed++;
		}
		et_run_free(&r);
	}
	failed += check_int8_tiers(tok, rank, world);
	for (int c = 0; c < REFS; c++)
		et_run_free(&ref[c]);
	if (mpi_nvme_dir("engine_equiv", rank))
		rmdir(mpi_nvme_dir("engine_equiv", rank)); /* the engines removed their files */
	free(tok);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "engine_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
