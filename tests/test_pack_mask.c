/* --packing documents on masked (SFT) token files (docs/packing.md "Masked files").
 *
 * A file of nine conversations (each starting with the delimiter, labels in an "answer"
 * span with holes, one conversation without any label, one of two tokens) packed into
 * rows of 16:
 *
 * - the packer's targets: the next token when it is a label of the same conversation,
 *   ZN_IGNORE_INDEX (-100) when it is no label, ZN_TARGET_IGNORE (-1) across a boundary;
 *   every label of the file is a target exactly once per epoch, and no more;
 * - the model (GPT-2 and Llama, CPU table): the packed rows give the summed loss and the
 *   gradients of each conversation run alone with its masked targets (1e-5);
 * - the engine: a step on the packed rows (4 rows) gives the loss and, after three steps,
 *   the weights of the same conversations one per row (9 rows, padded), 1e-5: the loss is
 *   the mean over the global label count either way; it equals the model's loss sum over
 *   the label count; zn_engine_eval_pos of the rows equals the step's loss bit for bit
 *   (validation packed as training);
 * - refusal: a masked file whose delimiter is also a label (chatml with a tokenizer whose
 *   EOS is <|im_end|>: the delimiter ends turns inside conversations).
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
#include "kernels_check.h"
#include "model/data.h"
#include "model/llama/llama.h"
#include "pack_net.h"

#define DELIM 50
#define TM 16
#define NCONV 9
#define NROWS 4
#define VOCAB 96
/* first fit into rows of 16: {7, 9} {5, 11} {16} {3, 6, 4, 2} + 1 padding */
static const int clen[NCONV] = { 7, 9, 5, 11, 16, 3, 6, 4, 2 };

static int conv_tok(int c, int i)
{
	int v = (int)((unsigned)(c * 131 + i * 17 + 5) % VOCAB);

	return i == 0 ? DELIM : v == DELIM ? DELIM + 1 : v;
}

/* the answer: the second half, with holes; conversation 2 has no label */
static bool conv_label(int c, int i)
{
	return i > 0 && i >= clen[c] / 2 && c != 2 && i % 5 != 3;
}

static int total_tokens(void)
{
	int n = 0;

	for (int c = 0; c < NCONV; c++)
		n += clen[c];
	return n;
}

/* the conversations as a masked file; label_delim: conversation 3's token 4 is the
 * delimiter and a label */
static void write_masked(char *path, size_t cap, bool label_delim)
{
	struct zn_tokfile w;
	char dir[] = "/tmp/zn_test_pack_mask_XXXXXX";

	cr_assert(mkdtemp(dir));
	snprintf(path, cap, "%s/sft.bin", dir);
	cr_assert_eq(zn_tokfile_begin_masked(&w, path), 0);
	w.doc_token = DELIM;
	for (int c = 0; c < NCONV; c++)
		for (int i = 0; i < clen[c]; i++) {
			bool bad = label_delim && c == 3 && i == 4;
			int32_t id = bad ? DELIM : conv_tok(c, i), m = bad || conv_label(c, i);

			cr_assert_eq(zn_tokfile_append_masked(&w, &id, &m, 1), 0);
		}
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

static struct zn_data *open_data(const char *path, int B)
{
	struct zn_data *d;

	cr_assert_eq(zn_data_open(&d, path, B, TM, 0, 1, 0, false), 0);
	cr_assert(zn_data_masked(d));
	cr_assert_eq(zn_data_limit_vocab(d, VOCAB, &(uint64_t){ 0 }, &(int64_t){ 0 }), 0);
	return d;
}

/* all NROWS packed rows (one step of B = NROWS) */
static void packed_rows(const char *path, int *tok, int *tgt, int *pos)
{
	struct zn_data *d = open_data(path, 1); /* the packer has its own B */
	struct zn_pack *p;

	cr_assert_eq(zn_pack_open(&p, d, NROWS, TM, 0, 1), 0);
	cr_assert_eq(zn_pack_rows(p), NROWS);
	cr_assert_eq(zn_pack_documents(p), NCONV);
	cr_assert_eq(zn_pack_next(p, tok, tgt, pos), 0);
	zn_pack_close(p);
	zn_data_close(d);
}

/* conversation c alone: inputs its first n - 1 tokens, targets the next token when it is
 * a label, else -100 */
static void conv_alone(int c, int *tok, int *tgt)
{
	for (int i = 0; i + 1 < clen[c]; i++) {
		tok[i] = conv_tok(c, i);
		tgt[i] = conv_label(c, i + 1) ? conv_tok(c, i + 1) : ZN_IGNORE_INDEX;
	}
}

static int label_count(void)
{
	int n = 0;

	for (int c = 0; c < NCONV; c++)
		for (int i = 0; i < clen[c]; i++)
			n += conv_label(c, i);
	return n;
}

Test(pack_mask, rows_keep_the_masks_inside_each_conversation)
{
	char path[256];
	int tok[NROWS * TM], tgt[NROWS * TM], pos[NROWS * TM];
	int k = 0, labels = 0, masked = 0, boundary = 0, want_masked = 0;

	write_masked(path, sizeof(path), false);
	packed_rows(path, tok, tgt, pos);
	/* walk the conversations through the rows as first fit placed them */
	for (int c = 0, r = 0, fill = 0; c < NCONV; c++) {
		if (fill + clen[c] > TM)
			r++, fill = 0;
		for (int i = 0; i < clen[c]; i++) {
			int at = r * TM + fill + i;
			int want = i + 1 == clen[c]	     ? ZN_TARGET_IGNORE :
				   conv_label(c, i + 1) ? conv_tok(c, i + 1) :
							  ZN_IGNORE_INDEX;

			cr_assert_eq(tok[at], conv_tok(c, i), "conversation %d token %d", c, i);
			cr_assert_eq(pos[at], i, "conversation %d position %d", c, i);
			cr_assert_eq(tgt[at], want, "conversation %d target %d: %d", c, i, tgt[at]);
			want_masked += i + 1 < clen[c] && !conv_label(c, i + 1);
			k++;
		}
		fill += clen[c];
	}
	cr_assert_eq(k, total_tokens());
	for (int i = 0; i < NROWS * TM; i++) {
		labels += tgt[i] >= 0;
		masked += tgt[i] == ZN_IGNORE_INDEX;
		boundary += tgt[i] == ZN_TARGET_IGNORE;
	}
	/* every label a target once; -1 only at the 9 conversation ends and 1 padding token */
	cr_assert_eq(labels, label_count());
	cr_assert_eq(masked, want_masked);
	cr_assert_eq(boundary, NCONV + (NROWS * TM - total_tokens()));
	remove_file(path);
}

static void check_model(const struct zn_model *m, const char *path)
{
	int tok[NROWS * TM], tgt[NROWS * TM], pos[NROWS * TM], at[TM], ag[TM];
	struct net net;
	double packed, alone = 0;
	float **gp;

	packed_rows(path, tok, tgt, pos);
	net_init(&net, m, 11);
	packed = net_run(&net, m, tok, tgt, pos, NROWS, TM);
	gp = calloc((size_t)net.n, sizeof(float *));
	for (int l = 0; l < net.n; l++) {
		gp[l] = net.g[l];
		net.g[l] = calloc(net.ld[l].numel + 1, sizeof(float));
	}
	for (int c = 0; c < NCONV; c++) {
		conv_alone(c, at, ag);
		alone += net_run(&net, m, at, ag, NULL, 1, clen[c] - 1);
	}
	cr_assert(fabs(packed - alone) <= 1e-5 * fabs(alone), "%s: packed loss %.9g, alone %.9g",
		  m->ops->family, packed, alone);
	for (int l = 0; l < net.n; l++) {
		double *want = calloc(net.ld[l].numel + 1, sizeof(double));
		char what[64];

		for (uint64_t i = 0; i < net.ld[l].numel; i++)
			want[i] = net.g[l][i];
		snprintf(what, sizeof(what), "%s masked layer %d gradient", m->ops->family, l);
		cr_assert(kc_close(what, gp[l], want, net.ld[l].numel, 1e-5), "%s", what);
		free(want);
		free(gp[l]);
	}
	free(gp);
	net_free(&net);
}

Test(pack_mask, model_packed_equals_conversations_alone)
{
	char path[256];
	struct zn_gpt2_config gc = { .layers = 2, .heads = 4, .d_model = 32, .seq = TM,
				     .vocab = VOCAB, .padded_vocab = 0 };
	struct zn_llama_config lc;

	write_masked(path, sizeof(path), false);
	cr_assert_eq(zn_gpt2_config_validate(&gc), 0);
	struct zn_model g = zn_gpt2_model(&gc);

	check_model(&g, path);
	cr_assert_eq(zn_llama_config_from_preset("llama-tiny", &lc), 0);
	lc.layers = 2, lc.hidden = 16, lc.intermediate = 24, lc.heads = 4, lc.kv_heads = 2;
	lc.head_dim = 6, lc.vocab = VOCAB, lc.seq = TM;
	lc.qkv_bias = true;
	cr_assert_eq(zn_llama_config_validate(&lc), 0);
	struct zn_model l = zn_llama_model(&lc);

	check_model(&l, path);
	remove_file(path);
}

/* three steps of the same rows; the losses and final weights in r */
static void train(struct et_run *r, const struct zn_model *m, int B, const int *tok,
		  const int *tgt, const int *pos, float *eval_loss)
{
	struct zn_engine_options o = { .seq_len = TM, .comm_kind = ZN_COMM_SINGLE };
	struct zn_config cfg;
	struct zn_engine *e;

	memset(r, 0, sizeof(*r));
	et_config(&cfg, 0, ZN_OFFLOAD_NONE, B, 1);
	cfg.runtime.packing = ZN_PACKING_DOCUMENTS;
	cr_assert_eq(zn_engine_create(&e, &cfg, m, &o), 0);
	if (eval_loss)
		cr_assert_eq(zn_engine_eval_pos(e, tok, tgt, pos, eval_loss), 0);
	for (int s = 0; s < 3; s++) {
		struct zn_step_stats st;

		cr_assert_eq(zn_engine_step_pos(e, tok, tgt, pos, &st), 0);
		r->loss[s] = st.loss;
	}
	r->steps = 3;
	r->layer_count = zn_engine_layer_count(e);
	r->w = calloc(r->layer_count, sizeof(*r->w));
	r->numel = calloc(r->layer_count, sizeof(*r->numel));
	for (int l = 0; l < r->layer_count; l++) {
		r->numel[l] = zn_engine_layer_numel(e, l);
		r->w[l] = malloc(r->numel[l] * sizeof(float));
		cr_assert_eq(zn_engine_read_layer(e, l, r->w[l]), 0);
	}
	zn_engine_destroy(e);
}

Test(pack_mask, engine_packed_equals_one_conversation_per_row)
{
	char path[256];
	int tok[NROWS * TM], tgt[NROWS * TM], pos[NROWS * TM];
	int stok[NCONV * TM], stgt[NCONV * TM], spos[NCONV * TM];
	struct zn_gpt2_config gc;
	struct et_run a, b;
	struct net net;
	float eval_loss;

	write_masked(path, sizeof(path), false);
	packed_rows(path, tok, tgt, pos);
	/* each conversation a row of its own: padding as the packer's (delimiter, -1,
	 * positions of a segment of its own) */
	for (int c = 0; c < NCONV; c++) {
		int *t = stok + c * TM, *g = stgt + c * TM, *p = spos + c * TM;

		conv_alone(c, t, g);
		t[clen[c] - 1] = conv_tok(c, clen[c] - 1);
		g[clen[c] - 1] = ZN_TARGET_IGNORE;
		for (int i = 0; i < TM; i++) {
			p[i] = i < clen[c] ? i : i - clen[c];
			if (i >= clen[c])
				t[i] = DELIM, g[i] = ZN_TARGET_IGNORE;
		}
	}
	et_model(&gc);
	struct zn_model m = zn_gpt2_model(&gc);

	train(&a, &m, NROWS, tok, tgt, pos, &eval_loss);
	train(&b, &m, NCONV, stok, stgt, spos, NULL);
	cr_assert_eq(et_compare("packed vs one conversation per row", &b, &a, 1e-5), 0);
	/* validation of the packed rows = the step's loss before its update, bit for bit */
	cr_assert(eval_loss == a.loss[0], "eval %.9g, step %.9g", eval_loss, a.loss[0]);
	/* the loss is the model's loss sum over the label count */
	{
		struct zn_config cfg;

		et_config(&cfg, 0, ZN_OFFLOAD_NONE, NROWS, 1);
		net_init(&net, &m, cfg.runtime.seed);
		/* the engine's fp32 parameters are not rounded to bf16: reinitialize */
		for (int l = 0; l < net.n; l++)
			m.ops->init(m.config, &net.ld[l], 0, net.ld[l].numel, net.p[l],
				    cfg.runtime.seed);
		double want = net_run(&net, &m, tok, tgt, pos, NROWS, TM) / label_count();

		cr_assert(fabs(a.loss[0] - want) <= 1e-5 * want, "engine loss %.9g, want %.9g",
			  a.loss[0], want);
		net_free(&net);
	}
	et_run_free(&a);
	et_run_free(&b);
	remove_file(path);
}

Test(pack_mask, refuses_a_delimiter_that_is_a_label)
{
	char path[256];
	struct zn_pack *p;

	write_masked(path, sizeof(path), true);
	struct zn_data *d = open_data(path, 1);

	cr_assert_eq(zn_pack_open(&p, d, 1, TM, 0, 1), -EINVAL);
	cr_assert_null(p);
	zn_data_close(d);
	remove_file(path);
}
