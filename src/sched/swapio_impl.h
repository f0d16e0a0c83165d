/* swapio's internals, shared by its files (swapio.c: stores, staging, fetch, the optimizer
 * step; swapio_state.c: a layer's state chunk by chunk, the initial state, read-back).
 * Internal to src/sched. */
#ifndef ZN_SCHED_SWAPIO_IMPL_H
#define ZN_SCHED_SWAPIO_IMPL_H

#include <stdint.h>

#include "nvme/swap.h"

struct zn_swapio;
struct zn_sbuf;

/* One of the three optimizer-state extents of a layer and its staging section. A part
 * of elem bytes per element moves a chunk's elements [off, off + len) as bytes
 * [off * elem, (off + len) * elem); compact m and v (elem 0, zinc.optimizer_states bf16 or
 * int8) move whole: whole_bytes, the extent as stored (their layer is one chunk: plan.c). */
struct zn_swapio_part {
	struct zn_swap *store;
	struct zn_swap_key key;
	void *buf_h;
	uint64_t elem;
	uint64_t whole_bytes;
};

static inline uint64_t zn_swapio_part_at(const struct zn_swapio_part *p, uint64_t off)
{
	return p->elem ? off * p->elem : 0;
}

static inline uint64_t zn_swapio_part_bytes(const struct zn_swapio_part *p, uint64_t len)
{
	return p->elem ? len * p->elem : p->whole_bytes;
}

struct zn_swap_key zn_swapio_key(const struct zn_swapio *sw, int kind, int l);
uint64_t zn_swapio_param_shard_bytes(const struct zn_swapio *sw, int l);
/* compact m (or v) of layer l as stored (plan.states), a 4 KiB multiple: its extent's size
 * and every transfer of it; 0 with fp32 states */
uint64_t zn_swapio_moment_bytes(const struct zn_swapio *sw, int l);
/* master (the parameter extent when aliased), m, v of layer l into sb's sections; 3 */
int zn_swapio_opt_parts(const struct zn_swapio *sw, int l, const struct zn_sbuf *sb,
			struct zn_swapio_part p[3]);
/* waits for r[0 .. *n) (*n := 0); a failure is logged with what and layer l (-1: none) */
int zn_swapio_wait_reqs(struct zn_swapio *sw, struct zn_swap_req *r, int *n, const char *what,
			int l);
/* hot layer l's pinned shard at byte off := src (a no-op for a layer that is not hot) */
int zn_swapio_hot_put(struct zn_swapio *sw, int l, uint64_t off, const void *src,
		      uint64_t bytes);

#endif
