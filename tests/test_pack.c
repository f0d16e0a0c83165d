/* --packing documents (docs/packing.md).
 *
 * Models: documents packed into rows (positions restarting, attention inside each
 * document, the token before a boundary not predicted, padding) give the same summed loss
 * and the same gradients as each document run as its own sequence, GPT-2 (learned
 * positions) and Llama (RoPE, GQA), fp32 on the CPU table, to 1e-5; the same rows without
 * positions (attention across documents) do not. Engine: a step's loss is the mean over
 * the predicted targets. Packer (src/data/pack.c): rows of a token file cut by hand (long
 * documents, first fit, padding, targets, positions), the same rows for 1 rank x B 4 and
 * 2 or 4 ranks x smaller B, a resumed loader continuing where it was, the delimiter
 * zinc tokenize records in the header, and refusals.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/pack.h"
#include "data/tokfile.h"
#include "engine_common.h"
#include "kernels.h"
#include "kernels_check.h"
#include "model/data.h"
#include "model/gpt2/gpt2.h"
#include "model/llama/llama.h"
#include "model/model.h"
#include "pack_docs.h"
#include "pack_net.h"

/* ---- packed rows vs each document on its own ----------------------------------------- */

static void check_fp32(const struct zn_model *m, int vocab)
{
	struct net net;
	struct pack_rows rw;

	net_init(&net, m, 7);
	check_packed(&net, m, vocab, 1e-4, &rw);
	net_free(&net);
}

Test(pack, gpt2_packed_equals_documents_alone)
{
	struct zn_gpt2_config mc = { .layers = 2, .heads = 4, .d_model = 32, .seq = T_ROW,
				     .vocab = 96, .padded_vocab = 0 };

	cr_assert_eq(zn_gpt2_config_validate(&mc), 0);
	struct zn_model m = zn_gpt2_model(&mc);

	check_fp32(&m, mc.vocab);
}

Test(pack, llama_packed_equals_documents_alone)
{
	struct zn_llama_config c;

	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &c), 0);
	c.layers = 2, c.hidden = 16, c.intermediate = 24, c.heads = 4, c.kv_heads = 2;
	c.head_dim = 6, c.vocab = 32, c.seq = T_ROW;
	c.qkv_bias = c.o_bias = true;
	cr_assert_eq(zn_llama_config_validate(&c), 0);
	struct zn_model m = zn_llama_model(&c);

	check_fp32(&m, c.vocab);
}

/* ---- the engine: the loss is the mean over the predicted targets --------------------- */

Test(pack, engine_loss_is_mean_over_predicted)
{
	struct zn_gpt2_config mc;
	struct zn_config cfg;
	struct zn_engine *e;
	struct zn_engine_options o = { .seq_len = ET_T, .comm_kind = ZN_COMM_SINGLE };
	struct zn_step_stats st;
	enum { B = 2 };
	int tok[B * ET_T], tgt[B * ET_T], pos[B * ET_T], count = 0;
	int *r = et_tokens(B * ET_T + 1, 96, 5);

	et_model(&mc);
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, B, 1);
	/* row 0: documents of 5, 6 and the rest; row 1: one document */
	for (int i = 0; i < B * ET_T; i++) {
		int t = i % ET_T;

		tok[i] = r[i];
		pos[i] = i < ET_T ? (t < 5 ? t : t < 11 ? t - 5 : t - 11) : t;
		tgt[i] = (t == 4 || t == 10) && i < ET_T ? ZN_TARGET_IGNORE : r[i + 1];
		if (t == ET_T - 1)
			tgt[i] = ZN_TARGET_IGNORE;
		count += tgt[i] >= 0;
	}
	struct zn_model m = zn_gpt2_model(&mc);
	struct net net;

	/* without zinc.packing documents, positions are refused */
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	cr_assert_eq(zn_engine_step_pos(e, tok, tgt, pos, &st), -EINVAL);
	zn_engine_destroy(e);
	cfg.runtime.packing = ZN_PACKING_DOCUMENTS;
	cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
	cr_assert_eq(zn_engine_step_pos(e, tok, tgt, pos, &st), 0);
	zn_engine_destroy(e);
	/* validation reads windows: after a packed step its forward uses no positions (a
	 * stale pos_d from the step would restart them), so at lr 0 it equals a fresh
	 * engine's validation of the same windows, bit for bit */
	{
		float fresh, after;

		cfg.optimizer.lr = 0.0f;
		cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
		cr_assert_eq(zn_engine_eval(e, tok, r + 1, &fresh), 0);
		zn_engine_destroy(e);
		cr_assert_eq(zn_engine_create(&e, &cfg, &m, &o), 0);
		cr_assert_eq(zn_engine_step_pos(e, tok, tgt, pos, &st), 0);
		cr_assert_eq(zn_engine_eval(e, tok, r + 1, &after), 0);
		zn_engine_destroy(e);
		cr_assert(fresh == after, "validation after a packed step %.9g, fresh %.9g", after,
			  fresh);
		cfg.optimizer.lr = 3e-3f;
	}
	net_init(&net, &m, 7);
	for (int l = 0; l < net.n; l++)
		m.ops->init(m.config, &net.ld[l], 0, net.ld[l].numel, net.p[l], cfg.runtime.seed);
	double want = net_run(&net, &m, tok, tgt, pos, B, ET_T) / count;

	cr_assert(fabs(st.loss - want) <= 1e-5 * want, "engine loss %.9g, want %.9g (%d predicted)",
		  st.loss, want, count);
	net_free(&net);
	free(r);
}

/* ---- the packer ------------------------------------------------------------------------ */

#define DELIM 50
#define TP 10
/* document lengths (each starts with DELIM); with T 10: rows [A B] [C 0..9] [C 10..11 D E]
 * [F G] [H]: starts 0, 8, 18, 26, 36, end 42 */
static const int plen[] = { 5, 3, 12, 4, 2, 9, 1, 6 };
static const uint64_t row_start[] = { 0, 8, 18, 26, 36, 42 };
#define PROWS 5
#define PTOK 42

static int file_tok(int i)
{
	int at = 0;

	for (int d = 0; d < 8; d++) {
		if (i == at)
			return DELIM;
		at += plen[d];
	}
	return 1 + i % 49;
}

static void write_file(char *path, size_t cap, int64_t doc_token)
{
	struct zn_tokfile w;
	int32_t ids[PTOK];
	char dir[] = "/tmp/zn_test_pack_XXXXXX";

	cr_assert(mkdtemp(dir));
	snprintf(path, cap, "%s/docs.bin", dir);
	for (int i = 0; i < PTOK; i++)
		ids[i] = file_tok(i);
	cr_assert_eq(zn_tokfile_begin(&w, path, 100), 0);
	w.doc_token = doc_token;
	cr_assert_eq(zn_tokfile_append(&w, ids, PTOK), 0);
	cr_assert_eq(zn_tokfile_commit(&w), 0);
}

static void remove_file(const char *path)
{
	char dir[256];

	unlink(path);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = 0;
	rmdir(dir);
}

static struct zn_data *open_data(const char *path)
{
	struct zn_data *d;

	cr_assert_eq(zn_data_open(&d, path, 1, TP, 0, 1, 0, false), 0);
	cr_assert_eq(zn_data_limit_vocab(d, 100, &(uint64_t){ 0 }, &(int64_t){ 0 }), 0);
	return d;
}

/* row r as the layout says (pack.h) */
static void want_row(int r, int *tok, int *tgt, int *pos)
{
	int a = (int)row_start[r], n = (int)row_start[r + 1] - a;

	for (int t = 0; t < TP; t++) {
		if (t >= n) {
			tok[t] = DELIM, tgt[t] = ZN_TARGET_IGNORE, pos[t] = t - n;
			continue;
		}
		int i = a + t, next = i + 1 < PTOK ? file_tok(i + 1) : DELIM;

		tok[t] = file_tok(i);
		pos[t] = t == 0 || tok[t] == DELIM ? 0 : pos[t - 1] + 1;
		tgt[t] = next == DELIM ? ZN_TARGET_IGNORE : next;
	}
}

Test(pack, rows_targets_positions)
{
	char path[256];
	struct zn_pack *p;
	int tok[TP], tgt[TP], pos[TP], wt[TP], wg[TP], wp[TP];

	write_file(path, sizeof(path), DELIM);
	struct zn_data *d = open_data(path);

	cr_assert_eq(zn_data_doc_token(d), DELIM, "the header's delimiter");
	cr_assert_eq(zn_pack_open(&p, d, 1, TP, 0, 1), 0);
	cr_assert_eq(zn_pack_rows(p), PROWS);
	cr_assert_eq(zn_pack_documents(p), 8);
	cr_assert_eq(zn_pack_steps_per_epoch(p), PROWS);
	for (int s = 0; s < PROWS + 1; s++) {
		cr_assert_eq(zn_pack_next(p, tok, tgt, pos), 0);
		want_row(s % PROWS, wt, wg, wp);
		cr_assert(!memcmp(tok, wt, sizeof(tok)), "row %d tokens", s);
		cr_assert(!memcmp(tgt, wg, sizeof(tgt)), "row %d targets", s);
		cr_assert(!memcmp(pos, wp, sizeof(pos)), "row %d positions", s);
		if (s == 0) /* B's last token: the boundary is not predicted; 2 of padding */
			cr_assert(tgt[7] == ZN_TARGET_IGNORE && tgt[6] >= 0 && pos[8] == 0 &&
				  pos[9] == 1 && tok[5] == DELIM && pos[5] == 0);
		if (s == 1) /* a cut inside C keeps its target: C's next token */
			cr_assert(tgt[TP - 1] == file_tok(18) && tgt[TP - 1] != DELIM);
		if (s == 4) /* the file's last token */
			cr_assert(tgt[5] == ZN_TARGET_IGNORE && pos[5] == 5);
	}
	zn_pack_close(p);
	zn_data_close(d);
	remove_file(path);
}

/* world ranks x B rows each = one rank x world B rows; a resumed loader continues */
Test(pack, ranks_agree_and_resume)
{
	char path[256];
	int want[3][4 * TP], got[3][4 * TP];

	write_file(path, sizeof(path), DELIM);
	for (int step = 0; step < 2; step++) {
		struct zn_data *d = open_data(path);
		struct zn_pack *p;

		cr_assert_eq(zn_pack_open(&p, d, 4, TP, 0, 1), 0);
		zn_data_seek(d, (uint64_t)step);
		cr_assert_eq(zn_pack_next(p, want[0], want[1], want[2]), 0);
		zn_pack_close(p);
		zn_data_close(d);
		for (int world = 2; world <= 4; world *= 2)
			for (int rank = 0; rank < world; rank++) {
				int B = 4 / world;
				long o = (long)rank * B * TP;

				d = open_data(path);
				cr_assert_eq(zn_pack_open(&p, d, B, TP, rank, world), 0);
				cr_assert_eq(zn_pack_steps_per_epoch(p), 1);
				zn_data_seek(d, (uint64_t)step);
				cr_assert_eq(zn_pack_next(p, got[0] + o, got[1] + o, got[2] + o), 0);
				cr_assert_eq(zn_data_step(d), (uint64_t)step + 1);
				zn_pack_close(p);
				zn_data_close(d);
				if (rank == world - 1)
					for (int k = 0; k < 3; k++)
						cr_assert(!memcmp(got[k], want[k], sizeof(want[k])),
							  "world %d step %d: array %d differs", world,
							  step, k);
			}
	}
	remove_file(path);
}

Test(pack, refusals_and_default_delimiter)
{
	char path[256];
	struct zn_pack *p;

	/* llm.c's GPT-2 file (no record): <|endoftext|> */
	write_file(path, sizeof(path), -1);
	struct zn_data *d = open_data(path);

	cr_assert_eq(zn_data_doc_token(d), 50256);
	/* which this file does not hold: one document in pieces of T, padded with 0 */
	int tok[TP], tgt[TP], pos[TP];

	cr_assert_eq(zn_pack_open(&p, d, 1, TP, 0, 1), 0);
	cr_assert_eq(zn_pack_documents(p), 1);
	cr_assert_eq(zn_pack_rows(p), (PTOK + TP - 1) / TP);
	zn_data_seek(d, zn_pack_rows(p) - 1);
	cr_assert_eq(zn_pack_next(p, tok, tgt, pos), 0);
	for (int t = 0; t < TP; t++)
		cr_assert(t < PTOK % TP ? tok[t] == file_tok(PTOK - PTOK % TP + t) && pos[t] == t :
					  tok[t] == 0 && tgt[t] == ZN_TARGET_IGNORE,
			  "last row, token %d: %d", t, tok[t]);
	zn_pack_close(p);
	zn_data_close(d);
	remove_file(path);
	write_file(path, sizeof(path), DELIM);
	d = open_data(path);
	/* 5 rows: fewer than 2 ranks x 3 */
	cr_assert_eq(zn_pack_open(&p, d, 3, TP, 0, 2), -EINVAL);
	cr_assert_eq(zn_pack_open(&p, d, 1, TP, 2, 2), -EINVAL);
	zn_data_close(d);
	/* text has no delimiter */
	cr_assert_eq(zn_data_open_as(&d, path, ZN_DATA_FORMAT_TEXT, 1, TP, 0, 1, 0, false), 0);
	cr_assert_eq(zn_data_doc_token(d), -1);
	cr_assert_eq(zn_pack_open(&p, d, 1, TP, 0, 1), -EINVAL);
	zn_data_close(d);
	remove_file(path);
}
