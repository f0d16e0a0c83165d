/* swapio's internals, shared by its files (swapio.c: stores, staging, the optimizer step;
 * swapio_opt.c: the optimizer staging on a home, positions and parts; swapio_fetch.c: the
 * parameter fetch on a home; swapio_state.c: a layer's state chunk by
 * chunk, the initial state, read-back).
 * Internal to src/sched. */
#ifndef ZN_SCHED_SWAPIO_IMPL_H
#define ZN_SCHED_SWAPIO_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/trace.h"
#include "nvme/swap.h"
#include "sched/swapio.h"
#include "sched/trace_dev.h"

struct zn_swapio;
struct zn_sbuf;

/* One of the three optimizer-state extents of a layer (section i of a staging buffer for
 * part i: swapio_opt.c). A part of elem bytes per element moves a chunk's elements
 * [off, off + len) as bytes [off * elem, (off + len) * elem); compact m and v (elem 0,
 * zinc.optimizer_states bf16 or int8) move whole: whole_bytes, the extent as stored (their
 * layer is one chunk: plan.c). */
struct zn_swapio_part {
	struct zn_swap *store;
	struct zn_swap_key key;
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
/* swapio_fetch.c: layer l's parameter shard, bytes as stored */
uint64_t zn_swapio_param_shard_bytes(const struct zn_swapio *sw, int l);
/* compact m (or v) of layer l as stored (plan.states), a 4 KiB multiple: its extent's size
 * and every transfer of it; 0 with fp32 states */
uint64_t zn_swapio_moment_bytes(const struct zn_swapio *sw, int l);
/* master (the parameter extent when aliased), m, v of layer l; 3 */
int zn_swapio_opt_parts(const struct zn_swapio *sw, int l, struct zn_swapio_part p[3]);
/* swapio_opt.c (it calls nothing of swapio.c's: sched_deps.py): the optimizer staging
 * home opened on the swap stores (its positions, then its buffers: after the stores) and
 * closed (after quiesce); position of chunk c of layer l; layer l's write-behind waited
 * (before a fetch reads its extent); every staging read, and the writes too if `writes`,
 * waited (the step's end, quiesce). opt_io: outside the step, position pos's parts
 * (ZN_SWAPIO_* bits) read into staging buffer 0 or written from it, and waited. */
#define ZN_SWAPIO_PARAM 8u /* a write's new parameter shard (not aliased) */
int zn_swapio_opt_open(struct zn_swapio *sw);
void zn_swapio_opt_close(struct zn_swapio *sw);
int zn_swapio_opt_pos(const struct zn_swapio *sw, int l, int c);
int zn_swapio_opt_wait_layer(struct zn_swapio *sw, int l);
int zn_swapio_opt_wait_all(struct zn_swapio *sw, bool writes);
int zn_swapio_opt_io(struct zn_swapio *sw, int pos, unsigned parts, bool write);
/* --trace: finished requests r[0 .. n-1]: their bytes, and when the last completed */
static inline uint64_t zn_swapio_reqs_end(struct zn_swap_req *r, int n, uint64_t *bytes)
{
	uint64_t t1 = 0;

	*bytes = 0;
	for (int i = 0; i < n; i++) {
		uint64_t d = zn_swap_done_ns(&r[i]);

		*bytes += r[i].bytes;
		if (d > t1)
			t1 = d;
	}
	return t1 ? t1 : zn_trace_now_ns();
}

/* --trace: requests r[0 .. n-1], finished, as one span from t0 to the last completion */
static inline void zn_swapio_trace_reqs(struct zn_swapio *sw, int track, const char *what,
					int l, struct zn_swap_req *r, int n, uint64_t t0)
{
	uint64_t bytes, t1 = zn_swapio_reqs_end(r, n, &bytes);

	if (n)
		zn_tracer_add_host(sw->c.tr, track, 0, what, l, t0, t1, bytes);
}

/* swapio_fetch.c (it calls nothing of swapio.c's: sched_deps.py): the fetch home opened
 * on swap_param (after the optimizer staging: the arena's order) and closed (after
 * quiesce); a fetch buffer layer l's shard fits (layer 0's own, a ring one for the
 * others); the fetch reads of layer l, and all of them, waited. A fetch into buffer i:
 * prepare (1: layer l is hot, nothing to read; else the buffer's previous copy up
 * settled), then, after the caller's wait for the extent's write-behind (rc its result),
 * read (submitted unless rc). */
int zn_swapio_fetch_open(struct zn_swapio *sw);
void zn_swapio_fetch_close(struct zn_swapio *sw);
void *zn_swapio_fetch_scratch(struct zn_swapio *sw, int l);
int zn_swapio_fetch_wait_layer(struct zn_swapio *sw, int l);
int zn_swapio_fetch_wait_all(struct zn_swapio *sw);
int zn_swapio_fetch_prepare(struct zn_swapio *sw, int i, int l);
int zn_swapio_fetch_read(struct zn_swapio *sw, int i, int l, int rc);
/* hot layer l's pinned shard at byte off := src (a no-op for a layer that is not hot) */
int zn_swapio_hot_put(struct zn_swapio *sw, int l, uint64_t off, const void *src,
		      uint64_t bytes);

#endif
