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

/* item id fits buffer b (its arena view, rounded to 4 KiB) */
static int check_fits(const struct zn_home *h, const struct zn_home_buf *b, int id)
{
	if (id < 0 || id >= h->c.count || item_bytes(h, id) > zn_plan_host_alloc_bytes(b->bytes)) {
		zn_error("home %s: item %d does not fit a buffer of %llu bytes", h->c.what ?
			 h->c.what : "", id, (unsigned long long)b->bytes);
		return -EINVAL;
	}
	return 0;
}

static int io_fail(struct zn_home *h, struct zn_home_buf *b, const char *what, int rc)
{
	uint64_t off = 0;
	int path = 0;
	char name[128];

	if (h->c.name)
		h->c.name(h->c.ctx, b->id, name, sizeof(name));
	else
		snprintf(name, sizeof(name), "item %d", b->id);
	zn_swap_locate(h->swap, key_of(h, b->id), 0, &path, &off);
	zn_error("%s: nvme %s of %s failed: %s", name, what, zn_swap_file(h->swap, path),
		 zn_strerror(rc));
	return rc;
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
	rc = check_fits(h, b, b->id);
	if (rc)
		return rc;
	rc = zn_event_synchronize(b->down);
	if (!rc)
		rc = zn_swap_write(h->swap, key_of(h, b->id), 0, item_bytes(h, b->id), b->h,
				   &b->req);
	if (rc)
		return io_fail(h, b, "write", rc);
	b->state = ZN_HOME_WRITING;
	return 0;
}

int zn_home_settle(struct zn_home *h, struct zn_home_buf *b)
{
	int rc = 0;

	if (b->state == ZN_HOME_DOWN)
		rc = on_nvme(h) ? zn_home_put(h, b) : zn_event_synchronize(b->down);
	if (!rc && (b->state == ZN_HOME_WRITING || b->state == ZN_HOME_READING)) {
		rc = zn_swap_wait(&b->req);
		if (rc)
			rc = io_fail(h, b, b->state == ZN_HOME_WRITING ? "write" : "read", rc);
	}
	if (!rc && b->state == ZN_HOME_UP)
		rc = zn_event_synchronize(b->up);
	b->state = ZN_HOME_FREE;
	return rc;
}

int zn_home_read_ahead(struct zn_home *h, struct zn_home_buf *b, int id)
{
	int rc;

	if (!on_nvme(h) || (b->id == id && b->state == ZN_HOME_READING))
		return 0;
	rc = check_fits(h, b, id);
	if (!rc)
		rc = zn_home_settle(h, b);
	if (rc)
		return rc;
	b->id = id;
	b->t0 = zn_trace_now_ns();
	rc = zn_swap_read(h->swap, key_of(h, id), 0, item_bytes(h, id), b->h, &b->req);
	if (rc)
		return io_fail(h, b, "read", rc);
	b->state = ZN_HOME_READING;
	return 0;
}

int zn_home_wait(struct zn_home *h, struct zn_home_buf *b)
{
	int rc;

	if (!on_nvme(h))
		return 0;
	rc = zn_swap_wait(&b->req);
	b->state = ZN_HOME_FREE;
	return rc ? io_fail(h, b, "read", rc) : 0;
}

bool zn_home_ready(const struct zn_home *h, struct zn_home_buf *b)
{
	return !on_nvme(h) || b->state != ZN_HOME_READING || zn_swap_poll(&b->req) != -EINPROGRESS;
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
		zn_error("home %s: a given swap store needs its aio engine too", c->what ?
			 c->what : "");
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
