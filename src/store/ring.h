/* The prefetch ring (docs/store.md, "The prefetch ring"): device slots filled ahead of use
 * in the order of a sequence of uses. Item j of the sequence goes to slot j mod slots; while
 * the compute uses item k, items k+1 .. k+depth are being filled; a fill into a slot waits,
 * on the device, for the release of the item that used the slot before, so the slots bound
 * the working set. One more slot, the held one (index slots), keeps layer 0 for a whole
 * step: it starts the forward and ends the backward.
 *
 * The ring owns the slot indices, their ready and free events and the order of the fills;
 * its user owns what a slot's buffers are and what a fill moves into them (the ops below).
 * The trainable parameters' prefetcher (sched/prefetch.c), the frozen base
 * (sched/frozen_seq.c, which zinc generate uses) and the activation checkpoints' copies up
 * (sched/recompute_home.c) are its users.
 *
 * Order (what the users' results and traces depend on, kept exactly):
 *   acquire(k): the window's end becomes k + depth (the sequence's last item at most); with
 *     a stage op, items not yet staged up to it (and stage_ahead items past it) are staged
 *     in order; poll; fills are
 *     enqueued in item order: every item up to k (in_order: up to the window's end), then
 *     the items after it up to the window's end while staged() says their staging is done
 *     (a staging not done never holds up the fill of an item before it; an item staged
 *     past the window is never filled before its window); poll; the compute stream waits
 *     for k's slot's ready event.
 *   release(k): k's slot's free event recorded on the compute stream; poll; fills as at an
 *     acquire up to k + release_ahead (that one waiting for its staging if need be).
 *   begin(n): a new sequence of n items; staged items never filled are unstaged first.
 *
 * Threading: one thread (the one enqueueing the step). Errors: the first op's negative code
 * is returned and nothing later in that call is enqueued; the item whose fill failed counts
 * as issued (the next begin starts afresh, as the users' step-level retry expects).
 *
 *     struct zn_ring_config c = { dev, compute, slots, depth, ..., &ops, ctx };
 *     rc = zn_ring_create(&r, &c);
 *     rc = zn_ring_hold(&r, 0);                 // layer 0 into the held slot
 *     rc = zn_ring_held_wait(&r);
 *     rc = zn_ring_begin(&r, use_n);
 *     rc = zn_ring_acquire(&r, k, &slot);       // the compute waits for item k
 *     ... compute reads the user's buffers of slot ...
 *     rc = zn_ring_release(&r, k);
 *     rc = zn_ring_held_release(&r);
 *     zn_ring_destroy(&r);
 */
#ifndef ZN_STORE_RING_H
#define ZN_STORE_RING_H

#include <stdbool.h>

#include "gpu/device.h"

/* What a ring's user does; layer and fill are required, the rest optional (NULL). Item -1
 * is the held slot's fill (zn_ring_hold). */
struct zn_ring_ops {
	int (*layer)(void *ctx, int item); /* item's layer in the user's sequence of uses */
	/* Enqueues item's fill of layer into slot: the user waits for the slot's free event
	 * (zn_ring_free_event) on the stream its copy runs on, moves the bytes, and records
	 * the slot's ready event (zn_ring_ready_event) where the compute may read them. */
	int (*fill)(void *ctx, int item, int layer, int slot);
	/* Starts item's staging (an nvme read into a pinned buffer) as it enters the window. */
	int (*stage)(void *ctx, int item, int layer, int slot);
	/* Ends the staging of an item staged and never filled (a sequence cut short). */
	int (*unstage)(void *ctx, int item, int slot);
	/* Whether item's staging is done (its fill would not block the host); never blocks.
	 * NULL: every item is ready. */
	bool (*staged)(void *ctx, int item, int slot);
	/* Called at each acquire and release (see the order above): the user moves its own
	 * reads ahead, never blocking. */
	int (*poll)(void *ctx);
};

struct zn_ring_config {
	struct zn_device *dev;      /* the events' */
	struct zn_stream *compute;  /* waits for ready at acquire, records free at release */
	int slots;                  /* the ring's slots (>= 1); the held slot is one more */
	int depth;                  /* items filled ahead of the one acquired (<= slots - 1) */
	/* an acquire enqueues every fill of its window, in order, never by when a staging
	 * landed: several ranks whose fills end in collectives (the same order on each), or
	 * a fill that must run a whole item ahead (the checkpoints' copy up) */
	bool in_order;
	int release_ahead;          /* release(k) fills up to k + release_ahead (0 or 1) */
	/* items staged past the window (>= 0): a user whose staging buffers outnumber its
	 * slots starts its reads earlier (the checkpoints' nvme reads, two runs ahead); its
	 * stage op must not touch the item's slot, which may still be in use */
	int stage_ahead;
	const struct zn_ring_ops *ops;
	void *ctx;                  /* the ops' */
};

struct zn_ring {
	struct zn_ring_config c;
	struct zn_event **ready;    /* per slot, the held one last: its fill is complete */
	struct zn_event **free;     /* per slot: the compute is done with its previous item */
	int len;                    /* the sequence's items (zn_ring_begin) */
	int staged;                 /* items staged (with a stage op), or the window's end + 1 */
	int issued;                 /* items whose fill is enqueued (<= staged) */
	int window;                 /* the last acquire's window end: no fill past it early */
};

/* 0, -EINVAL (logged) for a config out of range, or an event's failure; destroy accepts a
 * half-built or zeroed ring */
int zn_ring_create(struct zn_ring *r, const struct zn_ring_config *c);
void zn_ring_destroy(struct zn_ring *r);

/* the slot item goes to, and the held slot's index */
int zn_ring_slot(const struct zn_ring *r, int item);
int zn_ring_held(const struct zn_ring *r);
struct zn_event *zn_ring_ready_event(const struct zn_ring *r, int slot);
struct zn_event *zn_ring_free_event(const struct zn_ring *r, int slot);
int zn_ring_issued(const struct zn_ring *r); /* items whose fill is enqueued */

/* layer's fill into the held slot (staged first with a stage op); the compute waits for it
 * (held_wait) and releases it at the step's end (held_release) */
int zn_ring_hold(struct zn_ring *r, int layer);
int zn_ring_held_wait(struct zn_ring *r);
int zn_ring_held_release(struct zn_ring *r);

/* A new sequence of len items (kept until the next begin; ops->layer names their layers):
 * the first unstage error, else 0 */
int zn_ring_begin(struct zn_ring *r, int len);
/* item's fill enqueued (and those ahead), the compute waiting for it; *slot its slot */
int zn_ring_acquire(struct zn_ring *r, int item, int *slot);
int zn_ring_release(struct zn_ring *r, int item);

#endif
