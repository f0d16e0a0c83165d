/* Packing whole documents into rows (pack.h, docs/packing.md). */
#include "data/pack.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/size.h"
#include "kernels.h"
#include "model/data.h"

#define PACK_CHUNK ((uint64_t)1 << 20) /* tokens per read while scanning */

struct zn_pack {
	struct zn_data *d;
	int B, T, rank, world;
	int64_t delim;
	uint64_t tokens;    /* in the file */
	uint64_t *start;    /* rows + 1 offsets: row i is [start[i], start[i + 1]) */
	uint64_t rows, cap, docs;
	uint64_t steps_per_epoch;
	int *buf;           /* T + 1 tokens */
	bool *lab;          /* and whether each is a label (masked files; else all true) */
	uint64_t row_start; /* the open row while scanning */
	uint64_t fill;
	int pad;            /* padding token: the delimiter when the file has one, else 0 */
	uint64_t found;     /* delimiters in the file */
	uint64_t delim_at;  /* masked files: a delimiter that is a label (+ 1; 0: none) */
};

void zn_pack_close(struct zn_pack *p)
{
	if (!p)
		return;
	free(p->start);
	free(p->buf);
	free(p->lab);
	free(p);
}

static int push_row(struct zn_pack *p, uint64_t at)
{
	if (p->rows + 2 > p->cap) {
		uint64_t cap = p->cap ? 2 * p->cap : 1024;
		uint64_t *s = realloc(p->start, cap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		p->start = s;
		p->cap = cap;
	}
	p->start[p->rows++] = at;
	return 0;
}

/* a row ends at `end`: record its start, the next row starts there */
static int close_row(struct zn_pack *p, uint64_t end)
{
	int rc = push_row(p, p->row_start);

	p->row_start = end;
	p->fill = 0;
	return rc;
}

/* the document [ds, de) into the rows (pack.h: pieces, first fit) */
static int add_document(struct zn_pack *p, uint64_t ds, uint64_t de)
{
	uint64_t T = (uint64_t)p->T;
	int rc = 0;

	p->docs++;
	while (!rc && de - ds > T) { /* a long document: whole rows of T */
		if (p->fill)
			rc = close_row(p, ds);
		if (!rc) {
			p->fill = T;
			rc = close_row(p, ds + T);
		}
		ds += T;
	}
	if (!rc && p->fill + (de - ds) > T)
		rc = close_row(p, ds);
	p->fill += de - ds;
	return rc;
}

static int scan(struct zn_pack *p)
{
	int *chunk = malloc(PACK_CHUNK * sizeof(int));
	bool *lab = malloc(PACK_CHUNK * sizeof(bool));
	uint64_t ds = 0;
	int rc = 0;

	if (!chunk || !lab) {
		free(chunk);
		free(lab);
		return -ENOMEM;
	}
	for (uint64_t off = 0; !rc && off < p->tokens; off += PACK_CHUNK) {
		uint64_t n = p->tokens - off < PACK_CHUNK ? p->tokens - off : PACK_CHUNK;

		rc = zn_data_read_labels(p->d, off, n, chunk, lab);
		for (uint64_t i = 0; !rc && i < n; i++) {
			if (chunk[i] != p->delim)
				continue;
			/* a masked file's delimiter is no label (it starts a conversation) */
			if (zn_data_masked(p->d) && lab[i] && !p->delim_at)
				p->delim_at = off + i + 1;
			p->found++;
			if (off + i > ds) {
				rc = add_document(p, ds, off + i);
				ds = off + i;
			}
		}
	}
	if (!rc && p->tokens > ds)
		rc = add_document(p, ds, p->tokens);
	if (!rc && p->fill)
		rc = close_row(p, p->tokens);
	if (!rc)
		p->start[p->rows] = p->tokens; /* push_row left room for it */
	/* the delimiter is below the vocabulary when the file holds it */
	p->pad = p->found ? (int)p->delim : 0;
	if (!rc && !p->found)
		zn_warn("--packing documents: %s holds no document delimiter (token %lld): it is "
			"one document, cut into pieces of %d tokens", zn_data_path(p->d),
			(long long)p->delim, p->T);
	free(chunk);
	free(lab);
	return rc;
}

int zn_pack_open(struct zn_pack **out, struct zn_data *d, int B, int T, int rank, int world)
{
	struct zn_pack *p;
	uint64_t per_step = (uint64_t)world * (uint64_t)(B > 0 ? B : 0);
	int rc;

	*out = NULL;
	if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world) {
		zn_error("--packing documents: bad arguments B %d, T %d, rank %d of %d", B, T, rank,
			 world);
		return -EINVAL;
	}
	if (zn_data_doc_token(d) < 0) {
		zn_error("--packing documents: %s has no document delimiter: use a token file "
			 "(zinc tokenize records its delimiter; llm.c's GPT-2 and Llama 3 files "
			 "start documents with 50256 and 128000), or --packing windows",
			 zn_data_path(d));
		return -EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = (struct zn_pack){ .d = d, .B = B, .T = T, .rank = rank, .world = world,
			       .delim = zn_data_doc_token(d), .tokens = zn_data_token_count(d) };
	p->buf = zn_size_calloc((uint64_t)T + 1, sizeof(int), "a packed row");
	p->lab = zn_size_calloc((uint64_t)T + 1, sizeof(bool), "a packed row's labels");
	rc = p->buf && p->lab ? push_row(p, 0) : -ENOMEM; /* room for the end offset */
	p->rows = 0;
	if (!rc)
		rc = scan(p);
	if (!rc && p->delim_at) {
		/* chatml with a tokenizer whose EOS is <|im_end|> (Qwen2-Instruct): the
		 * delimiter also ends every turn, so conversations cannot be told apart */
		zn_error("--packing documents: %s is a masked file whose document delimiter "
			 "(token %lld) is also a label (token %llu): it ends turns inside the "
			 "conversations, so they cannot be packed; re-tokenize with a tokenizer "
			 "whose BOS or EOS is not the end-of-turn token (docs/packing.md), or use "
			 "--packing windows", zn_data_path(d), (long long)p->delim,
			 (unsigned long long)(p->delim_at - 1));
		rc = -EINVAL;
	}
	if (!rc && p->rows < per_step) {
		zn_error("--packing documents: %s packs into %llu rows of %d tokens (%llu "
			 "documents), fewer than one step's world x B = %llu: use more data or a "
			 "smaller B or T", zn_data_path(d), (unsigned long long)p->rows, T,
			 (unsigned long long)p->docs, (unsigned long long)per_step);
		rc = -EINVAL;
	}
	if (rc) {
		zn_pack_close(p);
		return rc;
	}
	p->steps_per_epoch = p->rows / per_step;
	*out = p;
	return 0;
}

/* row r into tokens, targets, pos [T] (pack.h: the row's layout) */
static int fill_row(struct zn_pack *p, uint64_t r, int *tok, int *tgt, int *pos)
{
	uint64_t a = p->start[r], e = p->start[r + 1];
	int n = (int)(e - a), more = e < p->tokens; /* the token after the row, if any */
	int rc = zn_data_read_labels(p->d, a, (uint64_t)(n + more), p->buf, p->lab);

	if (rc)
		return rc;
	for (int t = 0; t < n; t++) {
		int next = t + 1 < n + more ? p->buf[t + 1] : -1;

		tok[t] = p->buf[t];
		pos[t] = t == 0 || p->buf[t] == p->delim ? 0 : pos[t - 1] + 1;
		/* across a boundary: not predicted; a masked file's non-label: -100 */
		tgt[t] = next < 0 || next == p->delim ? ZN_TARGET_IGNORE :
			 p->lab[t + 1] ? next : ZN_IGNORE_INDEX;
	}
	for (int t = n; t < p->T; t++) { /* padding: a segment of its own, not predicted */
		tok[t] = p->pad;
		pos[t] = t - n;
		tgt[t] = ZN_TARGET_IGNORE;
	}
	return 0;
}

int zn_pack_next(struct zn_pack *p, int *tokens, int *targets, int *pos)
{
	uint64_t step = zn_data_step(p->d);
	uint64_t first = (step % p->steps_per_epoch) * (uint64_t)p->world * (uint64_t)p->B +
			 (uint64_t)p->rank * (uint64_t)p->B;

	for (int b = 0; b < p->B; b++) {
		long o = (long)b * p->T;
		int rc = fill_row(p, first + (uint64_t)b, tokens + o, targets + o, pos + o);

		if (rc)
			return rc;
	}
	zn_data_seek(p->d, step + 1);
	return 0;
}

uint64_t zn_pack_rows(const struct zn_pack *p)
{
	return p->rows;
}

uint64_t zn_pack_documents(const struct zn_pack *p)
{
	return p->docs;
}

uint64_t zn_pack_steps_per_epoch(const struct zn_pack *p)
{
	return p->steps_per_epoch;
}
