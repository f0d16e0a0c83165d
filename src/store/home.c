/* The store's tiered home (home.h): pinned buffers, and on nvme their swap extents written
 * behind and read ahead. The device copies into and out of the buffers are the caller's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/trace.h"
#include "core/size.h"
#include "cpu/arena.h"
#include "store/home.h"

static bool on_nvme(const struct zn_home *h)
{
	return h->c.tier == ZN_TIER_NVME;
}

static struct zn_swap_key key_of(const struct zn_home *h, int id)
{
	return (struct zn_swap_key){ (int)h->c.kind, id, h->c.rank };
}

/* item id's bytes: item_size[id] as given, else item_bytes rounded as the arena rounds its
 * buffer (4 KiB multiples) */
static uint64_t item_bytes(const struct zn_home *h, int id)
{
	return h->c.item_size ? h->c.item_size[id] : zn_plan_host_alloc_bytes(h->c.item_bytes);
}

static uint64_t buf_bytes(const struct zn_home *h, int i)
{
	return h->c.buf_bytes ? h->c.buf_bytes[i] : h->c.item_bytes;
}

static const char *what_of(const struct zn_home *h)
{
	return h->c.what ? h->c.what : "";
}

/* item id's read or write as b->seg[0 .. n-1], each fitting b (its arena view, rounded to
 * 4 KiB); n or a negative code */
static int plan_segs(struct zn_home *h, struct zn_home_buf *b, int id, bool write)
{
	uint64_t room = zn_plan_host_alloc_bytes(b->bytes);
	int n = 1;

	if (id < 0 || id >= h->c.count) {
		zn_error("home %s: no item %d (items 0 .. %d)", what_of(h), id, h->c.count - 1);
		return -EINVAL;
	}
	if (h->c.segs)
		n = h->c.segs(h->c.ctx, id, write, b->seg);
	else
		b->seg[0] = (struct zn_home_seg){ h->swap, key_of(h, id), 0, item_bytes(h, id), 0 };
	if (n < 0 || n > ZN_HOME_SEGS) {
		zn_error("home %s: item %d as %d segments (at most %d)", what_of(h), id, n,
			 ZN_HOME_SEGS);
		return n < 0 ? n : -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		if (!b->seg[i].store)
			b->seg[i].store = h->swap;
		if (b->seg[i].buf_off > room || b->seg[i].bytes > room - b->seg[i].buf_off) {
			zn_error("home %s: item %d does not fit a buffer of %llu bytes",
				 what_of(h), id, (unsigned long long)b->bytes);
			return -EINVAL;
		}
	}
	return n;
}

/* one line naming item b->id, the operation and the file of segment i (-1: none) */
static int io_fail(struct zn_home *h, struct zn_home_buf *b, int i, const char *what, int rc)
{
	uint64_t off = 0;
	int path = 0;
	char name[128];

	if (h->c.name)
		h->c.name(h->c.ctx, b->id, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "item %d", b->id);
	if (i < 0) {
		zn_error("%s: nvme %s failed: %s", name, what, zn_strerror(rc));
		return rc;
	}
	zn_swap_locate(b->seg[i].store, b->seg[i].key, b->seg[i].off, &path, &off);
	zn_error("%s: nvme %s of %s failed: %s", name, what,
		 zn_swap_file(b->seg[i].store, path), zn_strerror(rc));
	return rc;
}

/* every request of b's transfer waited; the first error logged */
static int wait_reqs(struct zn_home *h, struct zn_home_buf *b)
{
	const char *what = b->state == ZN_HOME_WRITING ? "write" : "read";
	int rc = 0, bad = -1;

	for (int i = 0; i < b->nreq; i++) {
		int x = zn_swap_wait(&b->req[i]);

		if (x && !rc) {
			rc = x;
			bad = i;
		}
	}
	b->state = ZN_HOME_FREE;
	return rc ? io_fail(h, b, bad, what, rc) : 0;
}

/* item id's read or write of b->h submitted (b FREE); a failed submission waits the
 * requests it made and leaves b FREE */
static int submit(struct zn_home *h, struct zn_home_buf *b, int id, bool write,
		  enum zn_aio_prio prio)
{
	int n = plan_segs(h, b, id, write), rc = 0;

	if (n < 0) /* refused: b as it was */
		return n;
	b->id = id;
	b->t0 = zn_trace_now_ns();
	b->nreq = 0;
	for (int i = 0; !rc && i < n; i++) {
		struct zn_home_seg *s = &b->seg[i];
		char *p = (char *)b->h + s->buf_off;

		rc = write ? zn_swap_write(s->store, s->key, s->off, s->bytes, p, &b->req[i]) :
			     zn_swap_read_prio(s->store, s->key, s->off, s->bytes, p, prio,
					       &b->req[i]);
		if (!rc)
			b->nreq = i + 1;
	}
	b->state = write ? ZN_HOME_WRITING : ZN_HOME_READING;
	if (rc) {
		int i = b->nreq;

		(void)wait_reqs(h, b);
		return io_fail(h, b, i, write ? "write" : "read", rc);
	}
	return 0;
}

struct zn_home_buf *zn_home_buf(struct zn_home *h, int i)
{
	return &h->buf[i];
}

void zn_home_filled(struct zn_home_buf *b, int id)
{
	b->id = id;
	b->state = ZN_HOME_DOWN;
}

void zn_home_emptying(struct zn_home *h, struct zn_home_buf *b)
{
	if (on_nvme(h))
		b->state = ZN_HOME_UP;
}

int zn_home_put(struct zn_home *h, struct zn_home_buf *b)
{
	int rc;

	if (!on_nvme(h))
		return 0;
	/* the write reads b->h: the copy down into it must be complete */
	rc = zn_event_synchronize(b->down);
	if (rc)
		return io_fail(h, b, -1, "write", rc);
	return submit(h, b, b->id, true, ZN_AIO_PRIO_NORMAL);
}

int zn_home_write(struct zn_home *h, struct zn_home_buf *b, int id)
{
	int rc;

	if (!on_nvme(h))
		return 0;
	rc = zn_home_settle(h, b);
	return rc ? rc : submit(h, b, id, true, ZN_AIO_PRIO_NORMAL);
}

int zn_home_settle(struct zn_home *h, struct zn_home_buf *b)
{
	int rc = 0;

	if (b->state == ZN_HOME_DOWN)
		rc = on_nvme(h) ? zn_home_put(h, b) : zn_event_synchronize(b->down);
	if (!rc && (b->state == ZN_HOME_WRITING || b->state == ZN_HOME_READING))
		rc = wait_reqs(h, b);
	if (!rc && b->state == ZN_HOME_UP)
		rc = zn_event_synchronize(b->up);
	b->state = ZN_HOME_FREE;
	return rc;
}

int zn_home_read_ahead_prio(struct zn_home *h, struct zn_home_buf *b, int id,
			    enum zn_aio_prio prio)
{
	int rc;

	if (!on_nvme(h) || (b->id == id && b->state == ZN_HOME_READING))
		return 0;
	rc = zn_home_settle(h, b);
	return rc ? rc : submit(h, b, id, false, prio);
}

int zn_home_read_ahead(struct zn_home *h, struct zn_home_buf *b, int id)
{
	return zn_home_read_ahead_prio(h, b, id, ZN_AIO_PRIO_NORMAL);
}

void zn_home_promote(struct zn_home_buf *b)
{
	for (int i = 0; b->state == ZN_HOME_READING && i < b->nreq; i++)
		zn_swap_promote(&b->req[i]);
}

int zn_home_wait(struct zn_home *h, struct zn_home_buf *b)
{
	if (!on_nvme(h) || (b->state != ZN_HOME_READING && b->state != ZN_HOME_WRITING))
		return 0;
	return wait_reqs(h, b);
}

static bool reqs_done(struct zn_home_buf *b)
{
	for (int i = 0; i < b->nreq; i++)
		if (zn_swap_poll(&b->req[i]) == -EINPROGRESS)
			return false;
	return true;
}

bool zn_home_ready(const struct zn_home *h, struct zn_home_buf *b)
{
	return !on_nvme(h) || b->state != ZN_HOME_READING || reqs_done(b);
}

bool zn_home_idle(const struct zn_home *h, struct zn_home_buf *b)
{
	switch (b->state) {
	case ZN_HOME_FREE:
		return true;
	case ZN_HOME_DOWN:
		return !on_nvme(h) && zn_event_query(b->down);
	case ZN_HOME_UP:
		return zn_event_query(b->up);
	default:
		return reqs_done(b);
	}
}

uint64_t zn_home_done_ns(const struct zn_home_buf *b)
{
	uint64_t t = 0;

	for (int i = 0; i < b->nreq; i++) {
		uint64_t x = zn_swap_done_ns(&b->req[i]);

		if (x > t)
			t = x;
	}
	return t;
}

int zn_home_quiesce(struct zn_home *h)
{
	int rc = 0;

	for (int i = 0; h->buf && i < h->c.buf_n; i++) {
		int x = zn_home_settle(h, &h->buf[i]);

		if (!rc)
			rc = x;
	}
	return rc;
}

/* nvme: the aio engine and a swap store of one extent per item */
static int open_store(struct zn_home *h)
{
	const struct zn_home_config *c = &h->c;
	struct zn_swap_extent *ext = zn_size_calloc((uint64_t)c->count, sizeof(*ext),
						    "the home's extents");
	struct zn_swap_config sc = { .rank = c->rank, .extents = ext,
				     .extent_count = (size_t)c->count,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };
	char run_id[ZN_RUN_ID_MAX + 40];
	int rc;

	if (!ext)
		return -ENOMEM;
	for (int i = 0; i < c->count; i++)
		ext[i] = (struct zn_swap_extent){ key_of(h, i), item_bytes(h, i), 0 };
	if (c->run_id && c->run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-%s", c->run_id, c->what);
	else
		snprintf(run_id, sizeof(run_id), "p%ld-%s", (long)getpid(), c->what);
	sc.run_id = run_id;
	zn_swap_config_set_paths(&sc, c->paths);
	h->owns_store = true;
	rc = zn_aio_create(&h->aio, c->aio);
	if (!rc)
		rc = zn_swap_create(&h->swap, h->aio, &sc);
	free(ext);
	return rc;
}

int zn_home_open(struct zn_home *h, const struct zn_home_config *c)
{
	int rc = 0;

	*h = (struct zn_home){ .c = *c };
	h->buf = zn_size_calloc((uint64_t)c->buf_n + 1, sizeof(*h->buf), "the home's buffers");
	if (!h->buf)
		return -ENOMEM;
	if (on_nvme(h) && !c->store != !c->engine) {
		zn_error("home %s: a given swap store needs its aio engine too", what_of(h));
		return -EINVAL;
	}
	for (int i = 0; i < c->buf_n; i++) {
		h->buf[i].id = -1;
		h->buf[i].bytes = buf_bytes(h, i);
	}
	for (int i = 0; !rc && i < c->buf_n; i++) {
		uint64_t bb = h->buf[i].bytes;

		rc = bb ? zn_arena_alloc(c->arena, zn_plan_host_alloc_bytes(bb), 0,
					 (void **)&h->buf[i].h) : 0;
		if (!rc && !c->bare)
			rc = zn_event_create(c->dev, &h->buf[i].down);
		if (!rc && !c->bare)
			rc = zn_event_create(c->dev, &h->buf[i].up);
	}
	if (!rc && on_nvme(h) && c->store) {
		h->swap = c->store;
		h->aio = c->engine;
	} else if (!rc && on_nvme(h) && c->count > 0) {
		rc = open_store(h);
	}
	return rc;
}

void zn_home_close(struct zn_home *h)
{
	zn_home_quiesce(h);
	for (int i = 0; h->buf && i < h->c.buf_n; i++) {
		zn_event_destroy(h->buf[i].down);
		zn_event_destroy(h->buf[i].up);
	}
	free(h->buf); /* the buffers are views of the arena */
	if (h->owns_store) {
		zn_swap_destroy(h->swap);
		zn_aio_destroy(h->aio);
	}
	*h = (struct zn_home){ 0 };
}

struct zn_aio *zn_home_aio(const struct zn_home *h)
{
	return h->aio;
}
