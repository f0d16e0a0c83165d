/* BPE merging of one word, as tokenizers' BPE::merge_word does it: a min-heap of
 * candidate pairs ordered by (rank, position); a popped pair whose symbols changed since
 * it was pushed is skipped. Symbols are a doubly linked list over s->sym. */
#include <errno.h>
#include <stdlib.h>

#include "data/tok_impl.h"

int zn_scratch_reserve(struct zn_tok_scratch *s, size_t nsym, size_t nbuf)
{
	if (nsym > s->sym_cap) {
		size_t cap = nsym < 64 ? 64 : nsym * 2;
		int32_t *a = realloc(s->sym, cap * sizeof(int32_t));

		if (!a)
			return -ENOMEM;
		s->sym = a;
		if (!(a = realloc(s->prev, cap * sizeof(int32_t))))
			return -ENOMEM;
		s->prev = a;
		if (!(a = realloc(s->next, cap * sizeof(int32_t))))
			return -ENOMEM;
		s->next = a;
		s->sym_cap = cap;
	}
	if (nbuf > s->buf_cap) {
		size_t cap = nbuf < 256 ? 256 : nbuf * 2;
		char *b = realloc(s->buf, cap);

		if (!b)
			return -ENOMEM;
		s->buf = b;
		s->buf_cap = cap;
	}
	return 0;
}

static int heap_push(struct zn_tok_scratch *s, int32_t rank, int32_t pos, int32_t merged)
{
	if (s->heap_n == s->heap_cap) {
		size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
		uint64_t *h = realloc(s->heap, cap * sizeof(*h));
		int32_t *m;

		if (!h)
			return -ENOMEM;
		s->heap = h;
		if (!(m = realloc(s->heap_new, cap * sizeof(*m))))
			return -ENOMEM;
		s->heap_new = m;
		s->heap_cap = cap;
	}
	size_t i = s->heap_n++;
	uint64_t key = (uint64_t)(uint32_t)rank << 32 | (uint32_t)pos;

	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (s->heap[p] <= key)
			break;
		s->heap[i] = s->heap[p];
		s->heap_new[i] = s->heap_new[p];
		i = p;
	}
	s->heap[i] = key;
	s->heap_new[i] = merged;
	return 0;
}

static void heap_pop(struct zn_tok_scratch *s, uint64_t *key, int32_t *merged)
{
	*key = s->heap[0];
	*merged = s->heap_new[0];
	uint64_t last = s->heap[--s->heap_n];
	int32_t last_new = s->heap_new[s->heap_n];
	size_t i = 0, n = s->heap_n;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && s->heap[c + 1] < s->heap[c])
			c++;
		if (last <= s->heap[c])
			break;
		s->heap[i] = s->heap[c];
		s->heap_new[i] = s->heap_new[c];
		i = c;
	}
	if (n) {
		s->heap[i] = last;
		s->heap_new[i] = last_new;
	}
}

static int push_pair(const struct zn_tok *tok, struct zn_tok_scratch *s, int32_t pos)
{
	int32_t nx = s->next[pos], merged = -1, rank;

	if (nx < 0)
		return 0;
	rank = zn_pairmap_get(&tok->merges, s->sym[pos], s->sym[nx], &merged);
	if (rank < 0)
		return 0;
	return heap_push(s, rank, pos, merged);
}

int zn_bpe_merge(const struct zn_tok *tok, struct zn_tok_scratch *s, size_t n,
		 struct zn_ids *ids)
{
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		s->prev[i] = (int32_t)i - 1;
		s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	s->heap_n = 0;
	for (size_t i = 0; i + 1 < n && !rc; i++)
		rc = push_pair(tok, s, (int32_t)i);
	while (!rc && s->heap_n) {
		uint64_t key;
		int32_t merged, cur = -1;

		heap_pop(s, &key, &merged);
		int32_t pos = (int32_t)(key & 0xffffffffu), nx = s->next[pos];

		/* stale: the left symbol was absorbed, or either side changed */
		if (s->sym[pos] < 0 || nx < 0 ||
		    zn_pairmap_get(&tok->merges, s->sym[pos], s->sym[nx], &cur) < 0 ||
		    cur != merged)
			continue;
		s->sym[pos] = merged;
		s->sym[nx] = -1;
		s->next[pos] = s->next[nx];
		if (s->next[nx] >= 0)
			s->prev[s->next[nx]] = pos;
		if (s->prev[pos] >= 0)
			rc = push_pair(tok, s, s->prev[pos]);
		if (!rc)
			rc = push_pair(tok, s, pos);
	}
	for (int32_t i = n ? 0 : -1; i >= 0 && !rc; i = s->next[i])
		rc = zn_ids_push(ids, s->sym[i]);
	return rc;
}
