/* Packed rows against each document on its own, for test_pack.c (fp32 compute) and
 * test_pack_bf16.c (bf16 compute): seven documents of random tokens packed by hand into
 * three rows of T_ROW (positions restarting, the token before a boundary not predicted,
 * padding) give the summed loss and the gradients of each document run as its own
 * sequence, to 1e-5; the same rows without positions (attention across documents) give a
 * loss more than cross_tol away. Static: one includer per test, after pack_net.h. */
#ifndef ZN_TESTS_PACK_DOCS_H
#define ZN_TESTS_PACK_DOCS_H

#include <math.h>
#include <stdio.h>

#include "engine_common.h"
#include "kernels_check.h"
#include "pack_net.h"

#define T_ROW 24
#define NDOC 7
#define NROW 3

/* the packed rows, for the caller's further checks */
struct pack_rows {
	int tok[NROW * T_ROW], tgt[NROW * T_ROW], pos[NROW * T_ROW];
};

/* returns the packed rows' summed loss; net's gradients are those of the rows without
 * positions on return */
static inline double check_packed(struct net *net, const struct zn_model *m, int vocab,
				  double cross_tol, struct pack_rows *rw)
{
	/* documents by length; rows: {7, 9, 5} + 3 padding, {24}, {1, 12, 10} + 1 padding */
	static const int doc_len[NDOC] = { 7, 9, 5, 24, 1, 12, 10 };
	static const int row_of[NDOC] = { 0, 0, 0, 1, 2, 2, 2 };
	const char *dt = net->bf16 ? "bf16" : "fp32";
	int fill[NROW] = { 0 }, *doc[NDOC];
	uint64_t seed = 3;

	/* padding: token 0, not predicted */
	for (int i = 0; i < NROW * T_ROW; i++)
		rw->tok[i] = 0, rw->tgt[i] = ZN_TARGET_IGNORE, rw->pos[i] = 0;
	for (int d = 0; d < NDOC; d++) {
		int r = row_of[d], at = r * T_ROW + fill[r];

		doc[d] = et_tokens((uint64_t)doc_len[d], vocab, seed++);
		for (int i = 0; i < doc_len[d]; i++) {
			rw->tok[at + i] = doc[d][i];
			rw->pos[at + i] = i;
			if (i + 1 < doc_len[d])
				rw->tgt[at + i] = doc[d][i + 1];
		}
		fill[r] += doc_len[d];
	}
	for (int r = 0; r < NROW; r++)
		for (int i = fill[r]; i < T_ROW; i++)
			rw->pos[r * T_ROW + i] = i - fill[r];
	double packed = net_run(net, m, rw->tok, rw->tgt, rw->pos, NROW, T_ROW);
	float **gp = calloc((size_t)net->n, sizeof(float *));

	for (int l = 0; l < net->n; l++) {
		gp[l] = net->g[l];
		net->g[l] = calloc(net->ld[l].numel + 1, sizeof(float));
	}
	/* each document alone: inputs its first n - 1 tokens, targets its last n - 1 */
	double alone = 0;

	for (int d = 0; d < NDOC; d++)
		if (doc_len[d] > 1)
			alone += net_run(net, m, doc[d], doc[d] + 1, NULL, 1, doc_len[d] - 1);
	cr_assert(fabs(packed - alone) <= 1e-5 * fabs(alone), "%s %s: packed loss %.9g, alone %.9g",
		  m->ops->family, dt, packed, alone);
	for (int l = 0; l < net->n; l++) {
		double *want = calloc(net->ld[l].numel + 1, sizeof(double));
		char what[64];

		for (uint64_t i = 0; i < net->ld[l].numel; i++)
			want[i] = net->g[l][i];
		snprintf(what, sizeof(what), "%s %s layer %d gradient", m->ops->family, dt, l);
		cr_assert(kc_close(what, gp[l], want, net->ld[l].numel, 1e-5), "%s", what);
		free(want);
		free(gp[l]);
	}
	free(gp);
	/* the same rows without positions attend across documents: another loss */
	net_zero_grads(net);
	double crossed = net_run(net, m, rw->tok, rw->tgt, NULL, NROW, T_ROW);

	cr_assert(fabs(crossed - alone) > cross_tol * fabs(alone),
		  "%s %s: documents made no difference", m->ops->family, dt);
	for (int d = 0; d < NDOC; d++)
		free(doc[d]);
	return packed;
}

#endif
