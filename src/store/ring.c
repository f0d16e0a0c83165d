/* The prefetch ring (ring.h, docs/store.md): slot indices, their events and the order of
 * the fills; what a fill moves is the user's (ops). */
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "store/ring.h"

int zn_ring_create(struct zn_ring *r, const struct zn_ring_config *c)
{
	int rc = 0;

	*r = (struct zn_ring){ .c = *c };
	if (c->slots < 1 || c->depth < 0 || c->depth > c->slots - 1 || c->release_ahead < 0 ||
	    c->release_ahead > 1 || c->stage_ahead < 0 || !c->ops || !c->ops->fill ||
	    !c->ops->layer) {
		zn_error("zn_ring_create: %d slots, depth %d, release_ahead %d, stage_ahead %d: a "
			 "ring needs a slot, a depth below its slots, a layer and a fill op "
			 "(internal)", c->slots, c->depth, c->release_ahead, c->stage_ahead);
		return -EINVAL;
	}
	r->ready = calloc((size_t)c->slots + 1, sizeof(*r->ready));
	r->free = calloc((size_t)c->slots + 1, sizeof(*r->free));
	if (!r->ready || !r->free)
		rc = -ENOMEM;
	for (int i = 0; !rc && i <= c->slots; i++) {
		rc = zn_event_create(c->dev, &r->ready[i]);
		if (!rc)
			rc = zn_event_create(c->dev, &r->free[i]);
	}
	return rc;
}

void zn_ring_destroy(struct zn_ring *r)
{
	for (int i = 0; r->ready && i <= r->c.slots; i++)
		zn_event_destroy(r->ready[i]);
	for (int i = 0; r->free && i <= r->c.slots; i++)
		zn_event_destroy(r->free[i]);
	free(r->ready);
	free(r->free);
	*r = (struct zn_ring){ 0 };
}

int zn_ring_slot(const struct zn_ring *r, int item)
{
	return item < 0 ? r->c.slots : item % r->c.slots;
}

int zn_ring_held(const struct zn_ring *r)
{
	return r->c.slots;
}

struct zn_event *zn_ring_ready_event(const struct zn_ring *r, int slot)
{
	return r->ready[slot];
}

struct zn_event *zn_ring_free_event(const struct zn_ring *r, int slot)
{
	return r->free[slot];
}

int zn_ring_issued(const struct zn_ring *r)
{
	return r->issued;
}

static int layer(const struct zn_ring *r, int item)
{
	return item < 0 ? -1 : r->c.ops->layer(r->c.ctx, item);
}

static int stage(struct zn_ring *r, int item)
{
	const struct zn_ring_ops *o = r->c.ops;

	return o->stage ? o->stage(r->c.ctx, item, layer(r, item), zn_ring_slot(r, item)) : 0;
}

static int poll_user(struct zn_ring *r)
{
	return r->c.ops->poll ? r->c.ops->poll(r->c.ctx) : 0;
}

/* item's staging is done (its fill would not block the host) */
static bool staged(struct zn_ring *r, int item)
{
	const struct zn_ring_ops *o = r->c.ops;

	return !o->staged || o->staged(r->c.ctx, item, zn_ring_slot(r, item));
}

int zn_ring_hold(struct zn_ring *r, int l)
{
	int rc = r->c.ops->stage ? r->c.ops->stage(r->c.ctx, -1, l, zn_ring_held(r)) : 0;

	return rc ? rc : r->c.ops->fill(r->c.ctx, -1, l, zn_ring_held(r));
}

int zn_ring_held_wait(struct zn_ring *r)
{
	return zn_stream_wait_event(r->c.compute, r->ready[zn_ring_held(r)]);
}

int zn_ring_held_release(struct zn_ring *r)
{
	return zn_event_record(r->free[zn_ring_held(r)], r->c.compute);
}

int zn_ring_begin(struct zn_ring *r, int len)
{
	int rc = 0;

	/* a sequence cut short (an error): stagings never filled end here */
	for (int j = r->issued; r->c.ops->unstage && j < r->staged && j < r->len; j++) {
		int x = r->c.ops->unstage(r->c.ctx, j, zn_ring_slot(r, j));

		if (!rc)
			rc = x;
	}
	r->len = len;
	r->staged = 0;
	r->issued = 0;
	r->window = -1;
	return rc;
}

/* Fills in item order: every item up to upto (staged first if it is not: a release ahead),
 * then those after it within the window while their staging is done (an item staged
 * past the window, stage_ahead, waits for its own: its slot may still be in use). */
static int issue(struct zn_ring *r, int upto)
{
	int last = r->staged - 1 < r->window ? r->staged - 1 : r->window, rc = 0;

	if (last < upto)
		last = upto;
	if (last >= r->len)
		last = r->len - 1;
	while (!rc && r->issued <= last) {
		int j = r->issued;

		if (j > upto && (r->c.in_order || !staged(r, j)))
			break;
		if (j >= r->staged) {
			rc = stage(r, j);
			r->staged = j + 1;
		}
		if (!rc)
			rc = r->c.ops->fill(r->c.ctx, j, layer(r, j), zn_ring_slot(r, j));
		r->issued++;
	}
	return rc;
}

int zn_ring_acquire(struct zn_ring *r, int item, int *slot)
{
	int last = item + r->c.depth, stage_last = last + r->c.stage_ahead, rc = 0;

	*slot = zn_ring_slot(r, item);
	if (last >= r->len)
		last = r->len - 1;
	if (stage_last >= r->len)
		stage_last = r->len - 1;
	r->window = last;
	/* the window (and stage_ahead past it): with a stage op its reads submitted in order
	 * (a slot's previous fill, of item j - slots <= item - 1, is enqueued by then; a
	 * staging past the window goes to the user's buffers, not to a slot) */
	while (!rc && r->staged <= stage_last) {
		rc = stage(r, r->staged);
		r->staged++;
	}
	if (!rc)
		rc = poll_user(r);
	/* in order: the whole window, as its order is the same on every rank */
	if (!rc)
		rc = issue(r, r->c.in_order ? last : item);
	if (!rc)
		rc = poll_user(r);
	/* the compute reads the slot once its fill is complete */
	return rc ? rc : zn_stream_wait_event(r->c.compute, r->ready[*slot]);
}

int zn_ring_release(struct zn_ring *r, int item)
{
	/* the slot's next fill waits for this on the device */
	int rc = zn_event_record(r->free[zn_ring_slot(r, item)], r->c.compute);

	if (!rc)
		rc = poll_user(r);
	/* item + 1's fill now (release_ahead), its staging waited for if need be: item's
	 * compute is enqueued and item + 1 is the next it needs, so its copy runs during
	 * item's compute; and fills ahead whose staging landed meanwhile */
	return rc ? rc : issue(r, item + r->c.release_ahead);
}
