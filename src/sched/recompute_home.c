/* Activation checkpoints' homes (recompute.h): which run a layer is in and where checkpoint
 * c lives on the device; on the host or nvme, copies down during the forward, nvme writes
 * behind and reads ahead, copies up one run ahead of each recompute. The nvme store
 * (staging buffers written to and read from swap extents) is layer-major's too (lmajor.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/engine_impl.h"

/* ---- runs and checkpoint slots (recompute.h) ---------------------------------------- */

int zn_recompute_run_of(const struct zn_engine *e, int l)
{
	return (l - 1) / e->act.rec.every;
}

int zn_recompute_run_first(const struct zn_engine *e, int r)
{
	return 1 + r * e->act.rec.every;
}

int zn_recompute_run_last(const struct zn_engine *e, int r)
{
	int l = (r + 1) * e->act.rec.every;

	return l > e->n - 1 ? e->n - 1 : l;
}

float *zn_recompute_x(struct zn_engine *e, int c)
{
	struct zn_recompute *ck = &e->act.rec;

	return ck->home == ZN_TIER_DEVICE ? ck->x_d[c] : ck->x_d[c % 2];
}

/* ---- homes: copies down and up, nvme writes and reads ---------------------------------- */

static int ckbuf_of(const struct zn_engine *e, int c)
{
	return e->act.rec.home == ZN_TIER_HOST ? c : c % e->act.rec.buf_n;
}

/* ---- the store: staging buffers and their swap extents ------------------------------- */

static int io_fail(struct zn_recompute_store *st, struct zn_recompute_buf *b, const char *what,
		   int rc)
{
	struct zn_swap_key key = { ZN_SWAP_ACTIVATION, b->ck, st->e->rt.rank };
	uint64_t off = 0;
	int path = 0;
	char name[128];

	st->name(st->e, b->ck, name, sizeof(name));
	zn_swap_locate(st->swap, key, 0, &path, &off);
	zn_error("%s: nvme %s of %s failed: %s", name, what, zn_swap_file(st->swap, path),
		 zn_strerror(rc));
	return rc;
}

int zn_recompute_store_write(struct zn_recompute_store *st, struct zn_recompute_buf *b)
{
	struct zn_swap_key key = { ZN_SWAP_ACTIVATION, b->ck, st->e->rt.rank };
	int rc = zn_event_synchronize(b->down);

	if (!rc)
		rc = zn_swap_write(st->swap, key, 0, zn_plan_host_alloc_bytes(st->x_bytes), b->h,
				   &b->req);
	if (rc)
		return io_fail(st, b, "write", rc);
	b->state = ZN_RECOMPUTE_BUF_WRITING;
	return 0;
}

int zn_recompute_store_settle(struct zn_recompute_store *st, struct zn_recompute_buf *b)
{
	int rc = 0;

	if (b->state == ZN_RECOMPUTE_BUF_DOWN)
		rc = st->nvme ? zn_recompute_store_write(st, b) : zn_event_synchronize(b->down);
	if (!rc && (b->state == ZN_RECOMPUTE_BUF_WRITING || b->state == ZN_RECOMPUTE_BUF_READING)) {
		rc = zn_swap_wait(&b->req);
		if (rc)
			rc = io_fail(st, b, b->state == ZN_RECOMPUTE_BUF_WRITING ? "write" : "read", rc);
	}
	if (!rc && b->state == ZN_RECOMPUTE_BUF_UP)
		rc = zn_event_synchronize(b->up);
	b->state = ZN_RECOMPUTE_BUF_FREE;
	return rc;
}

int zn_recompute_store_read(struct zn_recompute_store *st, struct zn_recompute_buf *b, int id)
{
	struct zn_swap_key key = { ZN_SWAP_ACTIVATION, id, st->e->rt.rank };
	int rc;

	if (b->ck == id && b->state == ZN_RECOMPUTE_BUF_READING)
		return 0;
	rc = zn_recompute_store_settle(st, b);
	if (rc)
		return rc;
	b->ck = id;
	rc = zn_swap_read(st->swap, key, 0, zn_plan_host_alloc_bytes(st->x_bytes), b->h, &b->req);
	if (rc)
		return io_fail(st, b, "read", rc);
	b->state = ZN_RECOMPUTE_BUF_READING;
	return 0;
}

int zn_recompute_store_wait_read(struct zn_recompute_store *st, struct zn_recompute_buf *b)
{
	int rc = zn_swap_wait(&b->req);

	b->state = ZN_RECOMPUTE_BUF_FREE;
	return rc ? io_fail(st, b, "read", rc) : 0;
}

int zn_recompute_store_open(struct zn_recompute_store *st, struct zn_engine *e, int count,
			    const struct zn_offload_config *off, const char *what)
{
	struct zn_swap_extent *ext = calloc((size_t)count, sizeof(*ext));
	struct zn_swap_config sc = { .rank = e->rt.rank, .extents = ext,
				     .extent_count = (size_t)count,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };
	char run_id[ZN_RUN_ID_MAX + 40];
	int rc;

	if (!ext)
		return -ENOMEM;
	for (int c = 0; c < count; c++)
		ext[c] = (struct zn_swap_extent){ { ZN_SWAP_ACTIVATION, c, e->rt.rank },
						  zn_plan_host_alloc_bytes(st->x_bytes), 0 };
	if (e->cfg.runtime.run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-%s", e->cfg.runtime.run_id, what);
	else
		snprintf(run_id, sizeof(run_id), "p%ld-%s", (long)getpid(), what);
	sc.run_id = run_id;
	zn_swap_config_set_paths(&sc, off);
	rc = zn_aio_create(&st->aio, &e->cfg.aio);
	if (!rc)
		rc = zn_swap_create(&st->swap, st->aio, &sc);
	free(ext);
	return rc;
}

void zn_recompute_store_close(struct zn_recompute_store *st)
{
	zn_swap_destroy(st->swap);
	zn_aio_destroy(st->aio);
	st->swap = NULL;
	st->aio = NULL;
}

/* ---- activation checkpoints' homes ---------------------------------------------------- */

static int ckbuf_write(struct zn_engine *e, struct zn_recompute_buf *b)
{
	return zn_recompute_store_write(&e->act.rec.st, b);
}

static int ckbuf_settle(struct zn_engine *e, struct zn_recompute_buf *b)
{
	return zn_recompute_store_settle(&e->act.rec.st, b);
}

/* the checkpoint layer l makes in its forward, or -1 */
static int made_by(const struct zn_engine *e, int l)
{
	if (l == 0)
		return 0;
	if (l == e->n - 1 || l != zn_recompute_run_last(e, zn_recompute_run_of(e, l)))
		return -1;
	return zn_recompute_run_of(e, l) + 1;
}

int zn_recompute_fwd_before(struct zn_engine *e, int l)
{
	int c;

	if (!e->act.rec.on || e->act.rec.home == ZN_TIER_DEVICE)
		return 0;
	/* the slot's previous checkpoint must be down before the layer overwrites it */
	c = made_by(e, l);
	if (c < 2)
		return 0;
	return zn_stream_wait_event(e->rt.compute, e->act.rec.buf[ckbuf_of(e, c - 2)].down);
}

int zn_recompute_fwd_after(struct zn_engine *e, int l)
{
	struct zn_recompute *ck = &e->act.rec;
	struct zn_recompute_buf *b;
	int c, rc;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	c = made_by(e, l);
	if (c < 0 || c >= ck->runs - 1)
		return 0;
	b = &ck->buf[ckbuf_of(e, c)];
	rc = ckbuf_settle(e, b);
	if (!rc)
		rc = zn_event_record(ck->made[c % 2], e->rt.compute);
	if (!rc)
		rc = zn_stream_wait_event(e->rt.copy_out, ck->made[c % 2]);
	if (!rc)
		rc = zn_memcpy_async(e->rt.copy_out, b->h, zn_recompute_x(e, c), ck->x_bytes, ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(b->down, e->rt.copy_out);
	if (rc)
		return rc;
	b->ck = c;
	b->state = ZN_RECOMPUTE_BUF_DOWN;
	/* nvme: checkpoint c - 2 is written behind (its copy down is done by now or soon) */
	if (ck->home == ZN_TIER_NVME && c >= 2) {
		struct zn_recompute_buf *p = &ck->buf[ckbuf_of(e, c - 2)];

		if (p->ck == c - 2 && p->state == ZN_RECOMPUTE_BUF_DOWN)
			rc = ckbuf_write(e, p);
	}
	return rc;
}

int zn_recompute_fwd_end(struct zn_engine *e)
{
	struct zn_recompute *ck = &e->act.rec;
	int rc = 0;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	for (int i = 0; !rc && i < 2; i++)
		rc = zn_event_record(ck->slot_free[i], e->rt.compute);
	for (int i = 0; !rc && ck->home == ZN_TIER_NVME && i < ck->buf_n; i++)
		if (ck->buf[i].state == ZN_RECOMPUTE_BUF_DOWN)
			rc = ckbuf_write(e, &ck->buf[i]);
	return rc;
}

/* nvme: starts reading checkpoint c into its staging buffer (unless it is already there) */
static int read_ahead(struct zn_engine *e, int c)
{
	struct zn_recompute *ck = &e->act.rec;

	if (ck->home != ZN_TIER_NVME || c < 0)
		return 0;
	return zn_recompute_store_read(&ck->st, &ck->buf[ckbuf_of(e, c)], c);
}

/* checkpoint c up into its slot on copy_in, once the slot's last reader is done */
static int bring_up(struct zn_engine *e, int c)
{
	struct zn_recompute *ck = &e->act.rec;
	struct zn_recompute_buf *b = &ck->buf[ckbuf_of(e, c)];
	int rc = read_ahead(e, c);

	if (!rc && ck->home == ZN_TIER_NVME)
		rc = zn_recompute_store_wait_read(&ck->st, b);
	if (!rc)
		rc = zn_stream_wait_event(e->rt.copy_in, ck->slot_free[c % 2]);
	if (!rc)
		rc = zn_stream_wait_event(e->rt.copy_in, b->down);
	if (!rc)
		rc = zn_memcpy_async(e->rt.copy_in, zn_recompute_x(e, c), b->h, ck->x_bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(b->up, e->rt.copy_in);
	if (!rc && ck->home == ZN_TIER_NVME)
		b->state = ZN_RECOMPUTE_BUF_UP;
	return rc;
}

int zn_recompute_use_before(struct zn_engine *e, int k)
{
	struct zn_recompute *ck = &e->act.rec;
	struct zn_use u = e->act.use[k];
	int r, first, rc = 0;

	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < e->n - 1)
		return 0;
	r = zn_recompute_run_of(e, u.layer);
	first = r == ck->runs - 1 ? zn_recompute_run_last(e, r) : zn_recompute_run_first(e, r);
	if (u.layer != first || (r < ck->runs - 1 && !u.fwd) || (r == ck->runs - 1 && !u.bwd))
		return 0;
	/* run r starts: its checkpoint (brought up one run ago) must be in its slot; the
	 * previous run's comes up now, the one before that is read ahead from nvme */
	if (r < ck->runs - 1)
		rc = zn_stream_wait_event(e->rt.compute, ck->buf[ckbuf_of(e, r)].up);
	if (!rc && r >= 1)
		rc = bring_up(e, r - 1);
	if (!rc && r >= 2)
		rc = read_ahead(e, r - 2);
	return rc;
}

int zn_recompute_use_after(struct zn_engine *e, int k)
{
	struct zn_recompute *ck = &e->act.rec;
	struct zn_use u = e->act.use[k];

	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < e->n - 1 || !u.bwd ||
	    u.layer != zn_recompute_run_first(e, zn_recompute_run_of(e, u.layer)))
		return 0;
	return zn_event_record(ck->slot_free[zn_recompute_run_of(e, u.layer) % 2], e->rt.compute);
}

int zn_recompute_quiesce(struct zn_engine *e)
{
	struct zn_recompute *ck = &e->act.rec;
	int rc = 0;

	for (int i = 0; ck->buf && i < ck->buf_n; i++) {
		int x = ckbuf_settle(e, &ck->buf[i]);

		if (!rc)
			rc = x;
	}
	return rc;
}
