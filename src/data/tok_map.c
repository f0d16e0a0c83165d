/* The tokenizer's hash maps (open addressing, linear probing) and id vectors. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/tok_impl.h"

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static int strmap_grow(struct zn_strmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 1024;
	struct zn_strmap n = { calloc(cap, sizeof(char *)), calloc(cap, sizeof(uint32_t)),
			       calloc(cap, sizeof(int32_t)), cap, 0 };

	if (!n.key || !n.klen || !n.val) {
		zn_strmap_free(&n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->key[i])
			zn_strmap_put(&n, m->key[i], m->klen[i], m->val[i]);
	zn_strmap_free(m);
	*m = n;
	return 0;
}

int zn_strmap_put(struct zn_strmap *m, const char *k, uint32_t klen, int32_t v)
{
	if ((m->n + 1) * 2 > m->cap && strmap_grow(m))
		return -ENOMEM;
	size_t i = hash_bytes(k, klen) & (m->cap - 1);

	while (m->key[i]) {
		if (m->klen[i] == klen && !memcmp(m->key[i], k, klen)) {
			m->val[i] = v;
			return 0;
		}
		i = (i + 1) & (m->cap - 1);
	}
	m->key[i] = k;
	m->klen[i] = klen;
	m->val[i] = v;
	m->n++;
	return 0;
}

int32_t zn_strmap_get(const struct zn_strmap *m, const char *k, size_t klen)
{
	if (!m->cap)
		return -1;
	size_t i = hash_bytes(k, klen) & (m->cap - 1);

	while (m->key[i]) {
		if (m->klen[i] == klen && !memcmp(m->key[i], k, klen))
			return m->val[i];
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}

void zn_strmap_free(struct zn_strmap *m)
{
	free(m->key);
	free(m->klen);
	free(m->val);
	memset(m, 0, sizeof(*m));
}

static int pairmap_grow(struct zn_pairmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 1024;
	struct zn_pairmap n = { calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(int32_t)),
				calloc(cap, sizeof(int32_t)), cap, 0 };

	if (!n.key || !n.rank || !n.merged) {
		zn_pairmap_free(&n);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->key[i]) {
			uint64_t k = m->key[i] - 1;

			zn_pairmap_put(&n, (int32_t)(k >> 32), (int32_t)(k & 0xffffffffu),
				       m->rank[i], m->merged[i]);
		}
	zn_pairmap_free(m);
	*m = n;
	return 0;
}

int zn_pairmap_put(struct zn_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
	if ((m->n + 1) * 2 > m->cap && pairmap_grow(m))
		return -ENOMEM;
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	size_t i = mix64(k) & (m->cap - 1);

	while (m->key[i]) {
		if (m->key[i] == k) {
			/* a repeated pair takes its last rank, as tokenizers (collecting the
			 * merges into a HashMap) and transformers (a dict of bpe_ranks) do */
			m->rank[i] = rank;
			m->merged[i] = merged;
			return 0;
		}
		i = (i + 1) & (m->cap - 1);
	}
	m->key[i] = k;
	m->rank[i] = rank;
	m->merged[i] = merged;
	m->n++;
	return 0;
}

int32_t zn_pairmap_get(const struct zn_pairmap *m, int32_t a, int32_t b, int32_t *merged)
{
	if (!m->cap)
		return -1;
	uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	size_t i = mix64(k) & (m->cap - 1);

	while (m->key[i]) {
		if (m->key[i] == k) {
			*merged = m->merged[i];
			return m->rank[i];
		}
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}

void zn_pairmap_free(struct zn_pairmap *m)
{
	free(m->key);
	free(m->rank);
	free(m->merged);
	memset(m, 0, sizeof(*m));
}

int zn_ids_push(struct zn_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 256;
		int32_t *v = realloc(ids->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

void zn_ids_free(struct zn_ids *ids)
{
	free(ids->v);
	memset(ids, 0, sizeof(*ids));
}
