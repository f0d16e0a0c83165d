/* pack_equiv: --packing documents (docs/packing.md) across the ranks of one launch: each
 * rank's rows of packed documents (positions restarting, targets not predicted at the
 * boundaries and in padding, so the ranks' predicted counts differ) at ZeRO stages 0-3 x
 * offload none/cpu give the losses and final weights of one rank at stage 0 with all the
 * rows (N times the micro-batch), within 1e-5: the loss's denominator is the count of
 * predicted targets over every rank, not each rank's own. GPT-2 and Llama; GPT-2 with
 * loss masks too (a masked SFT file packed: some targets -100, rows without any label,
 * so the ranks' label counts differ further), and GPT-2 in bf16 compute (bf16
 * parameters; within 1e-2 as engine_equiv's bf16 variants: a last-bit difference between
 * a 4-row and a 1-row GEMM can round an activation to the neighbouring bf16 value).
 *
 *     mpirun -np 4 --oversubscribe ./mpi_pack_equiv
 *     ./mpi_pack_equiv                        # no mpirun: one rank, the same checks
 *
 * Exit status 1 on any mismatch. A plain program (Criterion forks, which MPI does not
 * survive).
 */
#include <omp.h>

#include "../engine_common.h"
#include "model/llama/llama.h"

#define ROWS 4 /* global rows per step: 1, 2 or 4 ranks */

/* the global stream of rows: tokens, targets and positions, documents of 1..6 tokens */
static void make_rows(int *tok, int *tgt, int *pos, int vocab)
{
	int n = ET_STEPS * ROWS * ET_T;
	int *r = et_tokens((uint64_t)n, vocab, 17);
	uint64_t x = 99;

	for (int i = 0, left = 0; i < n; i++) {
		if (i % ET_T == 0 || left == 0) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			left = 1 + (int)((x >> 33) % 6);
			pos[i] = 0;
		} else {
			pos[i] = pos[i - 1] + 1;
		}
		left--;
		tok[i] = r[i];
	}
	for (int i = 0; i < n; i++) /* next token of the same document, if any */
		tgt[i] = i + 1 < n && (i + 1) % ET_T && pos[i + 1] ? tok[i + 1] : ZN_TARGET_IGNORE;
	free(r);
}

/* loss masks on the rows: row r % 3 == 1 without any label, else one target in three */
static void mask_rows(int *tgt)
{
	for (int i = 0; i < ET_STEPS * ROWS * ET_T; i++)
		if (tgt[i] >= 0 && ((i / ET_T) % 3 == 1 || i % 3 == 0))
			tgt[i] = ZN_IGNORE_INDEX;
}

static int train(struct et_run *r, const struct zn_config *cfg, const struct zn_model *m,
		 int comm_kind, const int *tok, const int *tgt, const int *pos)
{
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = comm_kind };
	struct zn_engine *e;
	int rc, n;

	memset(r, 0, sizeof(*r));
	rc = zn_engine_create(&e, cfg, m, &o);
	if (rc)
		return rc;
	uint64_t bt = (uint64_t)zn_engine_micro_batch(e) * ET_T;

	for (int s = 0; !rc && s < ET_STEPS; s++) {
		struct zn_step_stats st;
		uint64_t at = (uint64_t)s * ROWS * ET_T + (uint64_t)zn_engine_rank(e) * bt;

		rc = zn_engine_step_pos(e, tok + at, tgt + at, pos + at, &st);
		r->loss[s] = st.loss;
		r->peak_bytes = st.device_peak_bytes;
		r->plan_bytes = st.plan_device_bytes;
	}
	r->steps = ET_STEPS;
	n = zn_engine_layer_count(e);
	r->layer_count = n;
	r->w = calloc(n, sizeof(*r->w));
	r->numel = calloc(n, sizeof(*r->numel));
	for (int l = 0; !rc && l < n; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc(r->numel[l] * sizeof(float));
		rc = zn_engine_read_layer(e, l, r->w[l]);
	}
	zn_engine_destroy(e);
	return rc;
}

/* bf16 parameters and bf16 compute, or fp32 */
static void set_bf16(struct zn_config *cfg, bool on)
{
	cfg->precision.bf16 = on;
	cfg->runtime.compute_dtype = on ? ZN_COMPUTE_BF16 : ZN_COMPUTE_AUTO;
}

static const struct {
	int stage;
	enum zn_offload_device off;
} variants[] = {
	{ 0, ZN_OFFLOAD_NONE }, { 2, ZN_OFFLOAD_NONE }, { 3, ZN_OFFLOAD_NONE },
	{ 1, ZN_OFFLOAD_CPU },  { 3, ZN_OFFLOAD_CPU },
};

int main(void)
{
	struct zn_comm_config acfg = { .kind = ZN_COMM_AUTO };
	struct zn_comm *anchor = NULL;
	struct zn_gpt2_config gc;
	struct zn_llama_config lc;
	int rank = 0, world = 1, failed = 0;
	int n = ET_STEPS * ROWS * ET_T;
	int *tok = malloc(n * sizeof(int)), *tgt = malloc(n * sizeof(int));
	int *pos = malloc(n * sizeof(int)), *mtgt = malloc(n * sizeof(int));

	omp_set_num_threads(1);
	if (zn_comm_world_hint(&rank, &world, NULL))
		return 1;
	if (ROWS % world) {
		fprintf(stderr, "pack_equiv: %d ranks do not divide %d rows\n", world, ROWS);
		return 1;
	}
	if (world > 1 && zn_comm_create(&anchor, &acfg))
		return 1;
	et_model(&gc);
	if (zn_llama_config_from_preset("llama-tiny", &lc))
		return 1;
	lc.hidden = 32, lc.intermediate = 48, lc.head_dim = 8, lc.vocab = 96, lc.seq = 16;
	if (zn_llama_config_validate(&lc))
		return 1;
	make_rows(tok, tgt, pos, 96);
	memcpy(mtgt, tgt, n * sizeof(int));
	mask_rows(mtgt);
	/* 0 GPT-2, 1 Llama, 2 GPT-2 masked, 3 GPT-2 bf16 compute */
	for (int v = 0; v < 4; v++) {
		struct zn_model m = v == 1 ? zn_llama_model(&lc) : zn_gpt2_model(&gc);
		const char *kind = v == 2 ? " masked" : v == 3 ? " bf16 compute" : "";
		const int *tg = v == 2 ? mtgt : tgt;
		struct zn_config cfg;
		struct et_run ref, r;

		et_config(&cfg, 0, ZN_OFFLOAD_NONE, ROWS, 1);
		cfg.runtime.packing = ZN_PACKING_DOCUMENTS;
		set_bf16(&cfg, v == 3);
		if (train(&ref, &cfg, &m, ZN_COMM_SINGLE, tok, tg, pos)) {
			fprintf(stderr, "pack_equiv: rank %d: reference failed\n", rank);
			return 1;
		}
		for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
			char what[96];

			et_config(&cfg, variants[i].stage, variants[i].off, ROWS / world, 1);
			cfg.runtime.packing = ZN_PACKING_DOCUMENTS;
			set_bf16(&cfg, v == 3);
			snprintf(what, sizeof(what), "rank %d/%d: %s%s packed, stage %d offload %d",
				 rank, world, m.ops->family, kind, variants[i].stage,
				 (int)variants[i].off);
			if (train(&r, &cfg, &m, ZN_COMM_AUTO, tok, tg, pos)) {
				fprintf(stderr, "%s: failed\n", what);
				return 1;
			}
			if (et_compare(what, &ref, &r, v == 3 ? 1e-2 : 1e-5))
				failed++;
			else if (rank == 0)
				printf("ok  %s (loss %.6f -> %.6f)\n", what, r.loss[0],
				       r.loss[ET_STEPS - 1]);
			et_run_free(&r);
		}
		et_run_free(&ref);
	}
	free(tok), free(tgt), free(pos), free(mtgt);
	zn_comm_destroy(anchor);
	if (failed)
		fprintf(stderr, "pack_equiv: rank %d: %d checks failed\n", rank, failed);
	return failed ? 1 : 0;
}
