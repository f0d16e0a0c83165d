/* Pointer -> bytes map for device allocations: open addressing, linear probing, deletion
 * by backward shift (no tombstones). zn_device_free takes only a pointer, so the bytes to
 * give back to the budget are looked up here; the same map catches double frees. The
 * caller locks. */
#include <errno.h>
#include <stdlib.h>

#include "core/hash.h"
#include "gpu/device_impl.h"

struct zn_ptr_slot {
	void *key; /* NULL = empty */
	uint64_t bytes;
};

static uint64_t slot_of(const struct zn_ptr_map *m, const void *key)
{
	/* Allocations are 256-byte aligned: drop the zero bits, then Fibonacci hashing. */
	uint64_t h = ((uint64_t)(uintptr_t)key >> 8) * ZN_HASH_GOLDEN;

	return (h >> 17) & (m->cap - 1);
}

static void insert_slot(struct zn_ptr_map *m, void *key, uint64_t bytes)
{
	uint64_t i = slot_of(m, key);

	while (m->slots[i].key)
		i = (i + 1) & (m->cap - 1);
	m->slots[i].key = key;
	m->slots[i].bytes = bytes;
	m->count++;
}

static int grow(struct zn_ptr_map *m)
{
	uint64_t new_cap = m->cap ? m->cap * 2 : 64;
	struct zn_ptr_slot *old = m->slots;
	uint64_t old_cap = m->cap;

	m->slots = calloc(new_cap, sizeof(*m->slots));
	if (!m->slots) {
		m->slots = old;
		return -ENOMEM;
	}
	m->cap = new_cap;
	m->count = 0;
	for (uint64_t i = 0; i < old_cap; i++)
		if (old[i].key)
			insert_slot(m, old[i].key, old[i].bytes);
	free(old);
	return 0;
}

int zn_ptr_map_put(struct zn_ptr_map *m, void *key, uint64_t bytes)
{
	/* Keep the load under one half so probes stay short. */
	if ((m->count + 1) * 2 > m->cap) {
		int rc = grow(m);

		if (rc)
			return rc;
	}
	insert_slot(m, key, bytes);
	return 0;
}

static void remove_at(struct zn_ptr_map *m, uint64_t i)
{
	uint64_t j = i;

	m->slots[i].key = NULL;
	m->count--;
	/* Shift later members of the probe run back so lookups never stop at the hole. */
	for (;;) {
		j = (j + 1) & (m->cap - 1);
		if (!m->slots[j].key)
			return;
		uint64_t home = slot_of(m, m->slots[j].key);
		/* Slot j may move to i when its home is not cyclically within (i, j]. */
		bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);

		if (stays)
			continue;
		m->slots[i] = m->slots[j];
		m->slots[j].key = NULL;
		i = j;
	}
}

bool zn_ptr_map_take(struct zn_ptr_map *m, void *key, uint64_t *bytes)
{
	if (!m->cap)
		return false;
	for (uint64_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].key)
			return false;
		if (m->slots[i].key == key) {
			*bytes = m->slots[i].bytes;
			remove_at(m, i);
			return true;
		}
	}
}

bool zn_ptr_map_pop(struct zn_ptr_map *m, void **key, uint64_t *bytes)
{
	for (uint64_t i = 0; i < m->cap && m->count; i++) {
		if (m->slots[i].key) {
			*key = m->slots[i].key;
			*bytes = m->slots[i].bytes;
			remove_at(m, i);
			return true;
		}
	}
	return false;
}

void zn_ptr_map_fini(struct zn_ptr_map *m)
{
	free(m->slots);
	m->slots = NULL;
	m->cap = 0;
	m->count = 0;
}
