/* Activation checkpoints' homes (recompute.h): which run a layer is in and where checkpoint
 * c lives on the device; on the host or nvme (the store's tiered home, store/home.h),
 * copies down during the forward, nvme writes behind and reads ahead, copies up one run
 * ahead of each recompute. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/acts.h"
#include "sched/runtime.h"

/* ---- runs and checkpoint slots (recompute.h) ---------------------------------------- */

int zn_recompute_run_of(const struct zn_recompute *ck, int l)
{
	return (l - 1) / ck->every;
}

int zn_recompute_run_first(const struct zn_recompute *ck, int r)
{
	return 1 + r * ck->every;
}

int zn_recompute_run_last(const struct zn_recompute *ck, int r)
{
	int l = (r + 1) * ck->every;

	return l > ck->n - 1 ? ck->n - 1 : l;
}

float *zn_recompute_x(struct zn_recompute *ck, int c)
{
	return ck->home == ZN_TIER_DEVICE ? ck->x_d[c] : ck->x_d[c % 2];
}

/* ---- homes: copies down and up, nvme writes and reads ---------------------------------- */

static int ckbuf_of(const struct zn_recompute *ck, int c)
{
	return ck->home == ZN_TIER_HOST ? c : c % ck->buf_n;
}

/* ---- activation checkpoints' homes ---------------------------------------------------- */

static struct zn_home_buf *ckbuf(struct zn_recompute *ck, int c)
{
	return zn_home_buf(&ck->st, ckbuf_of(ck, c));
}

/* the checkpoint layer l makes in its forward, or -1 */
static int made_by(const struct zn_recompute *ck, int l)
{
	if (l == 0)
		return 0;
	if (l == ck->n - 1 || l != zn_recompute_run_last(ck, zn_recompute_run_of(ck, l)))
		return -1;
	return zn_recompute_run_of(ck, l) + 1;
}

int zn_recompute_fwd_before(struct zn_recompute *ck, int l)
{
	int c;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	/* the slot's previous checkpoint must be down before the layer overwrites it */
	c = made_by(ck, l);
	if (c < 2)
		return 0;
	return zn_stream_wait_event(ck->rt->compute, ckbuf(ck, c - 2)->down);
}

int zn_recompute_fwd_after(struct zn_recompute *ck, int l)
{
	struct zn_home_buf *b;
	int c, rc;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	c = made_by(ck, l);
	if (c < 0 || c >= ck->runs - 1)
		return 0;
	b = ckbuf(ck, c);
	rc = zn_home_settle(&ck->st, b);
	if (!rc)
		rc = zn_event_record(ck->made[c % 2], ck->rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(ck->rt->copy_out, ck->made[c % 2]);
	if (!rc)
		rc = zn_memcpy_async(ck->rt->copy_out, b->h, zn_recompute_x(ck, c), ck->x_bytes,
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(b->down, ck->rt->copy_out);
	if (rc)
		return rc;
	zn_home_filled(b, c);
	/* nvme: checkpoint c - 2 is written behind (its copy down is done by now or soon) */
	if (ck->home == ZN_TIER_NVME && c >= 2) {
		struct zn_home_buf *p = ckbuf(ck, c - 2);

		if (p->id == c - 2 && p->state == ZN_HOME_DOWN)
			rc = zn_home_put(&ck->st, p);
	}
	return rc;
}

int zn_recompute_fwd_end(struct zn_recompute *ck)
{
	int rc = 0;

	if (!ck->on || ck->home == ZN_TIER_DEVICE)
		return 0;
	for (int i = 0; !rc && i < 2; i++)
		rc = zn_event_record(ck->slot_free[i], ck->rt->compute);
	for (int i = 0; !rc && ck->home == ZN_TIER_NVME && i < ck->buf_n; i++)
		if (zn_home_buf(&ck->st, i)->state == ZN_HOME_DOWN)
			rc = zn_home_put(&ck->st, zn_home_buf(&ck->st, i));
	return rc;
}

/* nvme: starts reading checkpoint c into its staging buffer (unless it is already there) */
static int read_ahead(struct zn_recompute *ck, int c)
{
	if (ck->home != ZN_TIER_NVME || c < 0)
		return 0;
	return zn_home_read_ahead(&ck->st, ckbuf(ck, c), c);
}

/* checkpoint c up into its slot on copy_in, once the slot's last reader is done */
static int bring_up(struct zn_recompute *ck, int c)
{
	struct zn_home_buf *b = ckbuf(ck, c);
	int rc = read_ahead(ck, c);

	if (!rc && ck->home == ZN_TIER_NVME)
		rc = zn_home_wait(&ck->st, b);
	if (!rc)
		rc = zn_stream_wait_event(ck->rt->copy_in, ck->slot_free[c % 2]);
	if (!rc)
		rc = zn_stream_wait_event(ck->rt->copy_in, b->down);
	if (!rc)
		rc = zn_memcpy_async(ck->rt->copy_in, zn_recompute_x(ck, c), b->h, ck->x_bytes,
				     ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(b->up, ck->rt->copy_in);
	if (!rc)
		zn_home_emptying(&ck->st, b);
	return rc;
}

int zn_recompute_use_before(struct zn_recompute *ck, int k)
{
	struct zn_use u;
	int r, first, rc = 0;

	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < ck->n - 1)
		return 0;
	u = ck->use[k];
	r = zn_recompute_run_of(ck, u.layer);
	first = r == ck->runs - 1 ? zn_recompute_run_last(ck, r) : zn_recompute_run_first(ck, r);
	if (u.layer != first || (r < ck->runs - 1 && !u.fwd) || (r == ck->runs - 1 && !u.bwd))
		return 0;
	/* run r starts: its checkpoint (brought up one run ago) must be in its slot; the
	 * previous run's comes up now, the one before that is read ahead from nvme */
	if (r < ck->runs - 1)
		rc = zn_stream_wait_event(ck->rt->compute, ckbuf(ck, r)->up);
	if (!rc && r >= 1)
		rc = bring_up(ck, r - 1);
	if (!rc && r >= 2)
		rc = read_ahead(ck, r - 2);
	return rc;
}

int zn_recompute_use_after(struct zn_recompute *ck, int k)
{
	struct zn_use u;

	if (!ck->on || ck->home == ZN_TIER_DEVICE || k < ck->n - 1)
		return 0;
	u = ck->use[k];
	if (!u.bwd || u.layer != zn_recompute_run_first(ck, zn_recompute_run_of(ck, u.layer)))
		return 0;
	return zn_event_record(ck->slot_free[zn_recompute_run_of(ck, u.layer) % 2],
			       ck->rt->compute);
}

int zn_recompute_quiesce(struct zn_recompute *ck)
{
	return zn_home_quiesce(&ck->st);
}
