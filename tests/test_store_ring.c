/* The prefetch ring (store/ring.h) on the host device: the order of its fills and stagings,
 * its depth, the held slot, early fills only of staged items, the release ahead, staging
 * past the window (never filled early), a fill's
 * error stopping the sequence, and begin ending what was staged and never filled. Each op
 * logs its call; the tests compare the logs with the expected ones. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/device.h"
#include "store/ring.h"

#define LOG_MAX 64

/* one op's call: its kind ('f'ill, 's'tage, 'u'nstage), item, layer and slot */
struct call {
	char op;
	int item, layer, slot;
};

struct user {
	struct zn_ring *r;
	struct zn_stream *copy;
	const int *layers;   /* the sequence's layers */
	bool done[16];       /* item's staging is done */
	int fail_item;       /* the fill of this item fails (-EIO); -2: none */
	int polls;
	struct call log[LOG_MAX];
	int n;
};

static void add(struct user *u, char op, int item, int layer, int slot)
{
	cr_assert_lt(u->n, LOG_MAX);
	u->log[u->n++] = (struct call){ op, item, layer, slot };
}

static int layer_of(void *ctx, int item)
{
	return ((struct user *)ctx)->layers[item];
}

/* as the users' fills: wait for the slot's release, (move), record its ready */
static int fill(void *ctx, int item, int layer, int slot)
{
	struct user *u = ctx;
	int rc;

	add(u, 'f', item, layer, slot);
	if (item == u->fail_item)
		return -EIO;
	rc = zn_stream_wait_event(u->copy, zn_ring_free_event(u->r, slot));
	return rc ? rc : zn_event_record(zn_ring_ready_event(u->r, slot), u->copy);
}

static int stage(void *ctx, int item, int layer, int slot)
{
	add(ctx, 's', item, layer, slot);
	return 0;
}

static int unstage(void *ctx, int item, int slot)
{
	add(ctx, 'u', item, -1, slot);
	return 0;
}

static bool staged(void *ctx, int item, int slot)
{
	(void)slot;
	return ((struct user *)ctx)->done[item];
}

static int user_poll(void *ctx)
{
	((struct user *)ctx)->polls++;
	return 0;
}

static struct zn_device *dev;
static struct zn_stream *compute, *copy;

static void setup(void)
{
	struct zn_device_config cfg = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 20 };

	cr_assert_eq(zn_device_create(&dev, &cfg), 0);
	cr_assert_eq(zn_stream_create(dev, &compute), 0);
	cr_assert_eq(zn_stream_create(dev, &copy), 0);
}

static void teardown(void)
{
	zn_stream_destroy(copy);
	zn_stream_destroy(compute);
	zn_device_destroy(dev);
}

static const int seq[] = { 1, 2, 3, 3, 2, 1 }; /* forward 1 .. 3, backward 3 .. 1 */

static void make_staging(struct zn_ring *r, struct user *u, const struct zn_ring_ops *ops,
			 int slots, int depth, bool in_order, int ahead, int stage_ahead)
{
	struct zn_ring_config c = {
		.dev = dev, .compute = compute, .slots = slots, .depth = depth,
		.in_order = in_order, .release_ahead = ahead, .stage_ahead = stage_ahead,
		.ops = ops, .ctx = u,
	};

	*u = (struct user){ .r = r, .copy = copy, .layers = seq, .fail_item = -2 };
	cr_assert_eq(zn_ring_create(r, &c), 0);
	cr_assert_eq(zn_ring_begin(r, 6), 0);
}

static void make(struct zn_ring *r, struct user *u, const struct zn_ring_ops *ops, int slots,
		 int depth, bool in_order, int ahead)
{
	make_staging(r, u, ops, slots, depth, in_order, ahead, 0);
}

/* the log from entry `from` is exactly want[0 .. n) */
static void expect(const struct user *u, int from, const struct call *want, int n)
{
	cr_assert_eq(u->n - from, n, "%d calls logged, %d expected", u->n - from, n);
	for (int i = 0; i < n; i++) {
		const struct call *g = &u->log[from + i], *w = &want[i];

		cr_assert(g->op == w->op && g->item == w->item && g->layer == w->layer &&
			  g->slot == w->slot, "call %d: %c(%d, %d, %d), expected %c(%d, %d, %d)",
			  i, g->op, g->item, g->layer, g->slot, w->op, w->item, w->layer, w->slot);
	}
}

static const struct zn_ring_ops plain_ops = {
	.layer = layer_of, .fill = fill, .poll = user_poll,
};
static const struct zn_ring_ops staged_ops = {
	.layer = layer_of, .fill = fill, .stage = stage, .unstage = unstage, .staged = staged,
};

TestSuite(store_ring, .init = setup, .fini = teardown);

/* depth 2 over 3 slots: the first acquire fills 0 .. 2, each later one the item 2 ahead,
 * into slot item mod 3; the held slot is slot 3 */
Test(store_ring, order_depth_and_held_slot)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make(&r, &u, &plain_ops, 3, 2, false, 0);
	cr_assert_eq(zn_ring_held(&r), 3);
	cr_assert_eq(zn_ring_hold(&r, 0), 0);
	cr_assert_eq(zn_ring_held_wait(&r), 0);
	expect(&u, 0, (struct call[]){ { 'f', -1, 0, 3 } }, 1);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	cr_assert_eq(slot, 0);
	expect(&u, 1, (struct call[]){ { 'f', 0, 1, 0 }, { 'f', 1, 2, 1 }, { 'f', 2, 3, 2 } }, 3);
	cr_assert_eq(u.polls, 2); /* before and after the fills */
	cr_assert_eq(zn_ring_release(&r, 0), 0);
	cr_assert_eq(u.n, 4); /* nothing past the window (item 2) */
	for (int k = 1; k < 6; k++) {
		cr_assert_eq(zn_ring_acquire(&r, k, &slot), 0);
		cr_assert_eq(slot, k % 3);
		cr_assert_eq(zn_ring_release(&r, k), 0);
	}
	expect(&u, 4, (struct call[]){ { 'f', 3, 3, 0 }, { 'f', 4, 2, 1 }, { 'f', 5, 1, 2 } }, 3);
	cr_assert_eq(zn_ring_issued(&r), 6);
	cr_assert_eq(zn_ring_held_release(&r), 0);
	cr_assert_eq(zn_stream_synchronize(compute), 0);
	cr_assert_eq(zn_stream_synchronize(copy), 0);
	zn_ring_destroy(&r);
}

/* An item ahead is filled early only when its staging is done, and never before an item
 * ahead of it whose staging is not: the window is staged at each acquire. */
Test(store_ring, early_fill_only_when_staged)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make(&r, &u, &staged_ops, 3, 2, false, 0);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 's', 2, 3, 2 },
				       { 'f', 0, 1, 0 } }, 4);
	u.done[2] = true; /* item 2's read landed, item 1's not */
	cr_assert_eq(zn_ring_release(&r, 0), 0);
	cr_assert_eq(u.n, 4);
	u.done[1] = true;
	cr_assert_eq(zn_ring_acquire(&r, 1, &slot), 0);
	cr_assert_eq(slot, 1);
	/* item 3 staged into slot 0, then 1 (the one acquired) and 2 (staged) filled; 3's
	 * read is not in */
	expect(&u, 4, (struct call[]){ { 's', 3, 3, 0 }, { 'f', 1, 2, 1 }, { 'f', 2, 3, 2 } }, 3);
	u.done[3] = true;
	cr_assert_eq(zn_ring_release(&r, 1), 0); /* 3's read landed meanwhile: filled now */
	expect(&u, 7, (struct call[]){ { 'f', 3, 3, 0 } }, 1);
	zn_ring_destroy(&r);
}

/* in order (several ranks): an acquire fills its whole window whatever has landed */
Test(store_ring, in_order_fills_the_window)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make(&r, &u, &staged_ops, 2, 1, true, 0);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 'f', 0, 1, 0 },
				       { 'f', 1, 2, 1 } }, 4);
	zn_ring_destroy(&r);
}

/* Staging one item past the window (the checkpoints' nvme reads two runs ahead of two
 * slots): staged at the acquire, but filled only once an acquire's window reaches it, even
 * when its staging is done (its slot is the acquired item's, still in use). */
Test(store_ring, stage_ahead_stages_past_the_window_fills_within_it)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make_staging(&r, &u, &staged_ops, 2, 1, false, 0, 1);
	for (int j = 0; j < 6; j++)
		u.done[j] = true;
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 's', 2, 3, 0 },
				       { 'f', 0, 1, 0 }, { 'f', 1, 2, 1 } }, 5);
	cr_assert_eq(zn_ring_release(&r, 0), 0);
	cr_assert_eq(u.n, 5); /* item 2 is staged and ready, but its slot's item 0 window ended */
	cr_assert_eq(zn_ring_acquire(&r, 1, &slot), 0);
	expect(&u, 5, (struct call[]){ { 's', 3, 3, 1 }, { 'f', 2, 3, 0 } }, 2);
	for (int k = 2; k < 6; k++) {
		cr_assert_eq(zn_ring_release(&r, k - 1), 0);
		cr_assert_eq(zn_ring_acquire(&r, k, &slot), 0);
	}
	/* the stagings end at the sequence's last item */
	expect(&u, 7, (struct call[]){ { 's', 4, 2, 0 }, { 'f', 3, 3, 1 }, { 's', 5, 1, 1 },
				       { 'f', 4, 2, 0 }, { 'f', 5, 1, 1 } }, 5);
	zn_ring_destroy(&r);
}

/* in order with stage_ahead (the checkpoints' copy up): the window's fills at each
 * acquire, whatever landed, after the stagings up to one past it */
Test(store_ring, in_order_stage_ahead)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make_staging(&r, &u, &staged_ops, 2, 1, true, 0, 1);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	cr_assert_eq(zn_ring_release(&r, 0), 0);
	cr_assert_eq(zn_ring_acquire(&r, 1, &slot), 0);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 's', 2, 3, 0 },
				       { 'f', 0, 1, 0 }, { 'f', 1, 2, 1 }, { 's', 3, 3, 1 },
				       { 'f', 2, 3, 0 } }, 7);
	zn_ring_destroy(&r);
}

/* release ahead over one slot (depth 0): a release fills the next item at once, staged
 * first though its read is not in */
Test(store_ring, release_ahead_one_slot)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make(&r, &u, &staged_ops, 1, 0, false, 1);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	cr_assert_eq(zn_ring_release(&r, 0), 0);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 'f', 0, 1, 0 }, { 's', 1, 2, 0 },
				       { 'f', 1, 2, 0 } }, 4);
	cr_assert_eq(zn_ring_acquire(&r, 1, &slot), 0); /* already filled: nothing more */
	cr_assert_eq(u.n, 4);
	zn_ring_destroy(&r);
}

/* A fill's error is returned and stops the sequence there: nothing after it is filled; the
 * next begin ends the stagings never filled (item 2), and the sequence starts afresh. */
Test(store_ring, fill_error_stops_the_sequence)
{
	struct zn_ring r;
	struct user u;
	int slot;

	make(&r, &u, &staged_ops, 3, 2, true, 0);
	u.fail_item = 1;
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), -EIO);
	expect(&u, 0, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 's', 2, 3, 2 },
				       { 'f', 0, 1, 0 }, { 'f', 1, 2, 1 } }, 5);
	cr_assert_eq(zn_ring_issued(&r), 2);
	u.fail_item = -2;
	cr_assert_eq(zn_ring_begin(&r, 6), 0);
	expect(&u, 5, (struct call[]){ { 'u', 2, -1, 2 } }, 1);
	cr_assert_eq(zn_ring_acquire(&r, 0, &slot), 0);
	expect(&u, 6, (struct call[]){ { 's', 0, 1, 0 }, { 's', 1, 2, 1 }, { 's', 2, 3, 2 },
				       { 'f', 0, 1, 0 }, { 'f', 1, 2, 1 }, { 'f', 2, 3, 2 } }, 6);
	zn_ring_destroy(&r);
}

/* a depth reaching the slot in use, no slot or no fill: refused */
Test(store_ring, bad_config)
{
	struct zn_ring r;
	struct zn_ring_config c = { .dev = dev, .compute = compute, .slots = 2, .depth = 2,
				    .ops = &plain_ops };

	cr_assert_eq(zn_ring_create(&r, &c), -EINVAL);
	zn_ring_destroy(&r);
	c.depth = 1;
	c.slots = 0;
	cr_assert_eq(zn_ring_create(&r, &c), -EINVAL);
	zn_ring_destroy(&r);
	c.slots = 2;
	c.stage_ahead = -1;
	cr_assert_eq(zn_ring_create(&r, &c), -EINVAL);
	zn_ring_destroy(&r);
	c.stage_ahead = 0;
	c.ops = &(struct zn_ring_ops){ .layer = layer_of };
	cr_assert_eq(zn_ring_create(&r, &c), -EINVAL);
	zn_ring_destroy(&r);
}
