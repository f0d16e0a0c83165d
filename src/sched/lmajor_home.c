/* Layer-major's boundary homes (lmajor.h): where a boundary activation and a boundary
 * gradient are on the device when the step (step_lm.c) needs them, and the copies down
 * and up of the pinned and nvme homes (nvme: the store's tiered home, store/home.h, written
 * behind and read ahead). The order of the calls is the step's. */
#include <errno.h>

#include "core/log.h"
#include "sched/acts.h"
#include "sched/runtime.h"

/* host home: the pinned buffer of layer l's input for micro-batch m */
static float *bnd_h(struct zn_lmajor *lm, int l, int m)
{
	return zn_home_buf(&lm->st, (l - 1) * lm->k + m)->h;
}

static float *dx_of(struct zn_lmajor *lm, int m)
{
	return lm->dx_d[lm->dx_of[m]];
}

/* The device buffer micro-batch m's boundary gradient is read from (a backward's dx_out):
 * the device home's, or a read slot (*slot, released by dx_read_done) it is copied up
 * into once its last copy down is in. */
int zn_lmajor_dx_read(struct zn_lmajor *lm, int m, float **dx, int *slot)
{
	int j = lm->rd_next, rc;

	*slot = -1;
	if (lm->home == ZN_TIER_DEVICE) {
		*dx = dx_of(lm, m);
		return 0;
	}
	lm->rd_next ^= 1;
	/* the slot's previous reader done, and this gradient's last copy down */
	rc = zn_stream_wait_event(lm->rt->copy_in, lm->rd_free[j]);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->copy_in, lm->dx_down[m]);
	if (!rc)
		rc = zn_memcpy_async(lm->rt->copy_in, lm->dx_d[j], lm->dxh[m], lm->x_bytes,
				     ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(lm->rd_ready[j], lm->rt->copy_in);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->compute, lm->rd_ready[j]);
	*dx = lm->dx_d[j];
	*slot = j;
	return rc;
}

int zn_lmajor_dx_read_done(struct zn_lmajor *lm, int slot)
{
	return slot < 0 ? 0 : zn_event_record(lm->rd_free[slot], lm->rt->compute);
}

/* where a backward writes a micro-batch's new boundary gradient (dx_in): the device
 * home's spare, or a write slot (*slot) whose previous copy down is done */
int zn_lmajor_dx_write(struct zn_lmajor *lm, float **dx, int *slot)
{
	int j = lm->wr_next;

	*slot = -1;
	if (lm->home == ZN_TIER_DEVICE) {
		*dx = dx_of(lm, lm->k);
		return 0;
	}
	lm->wr_next ^= 1;
	*dx = lm->dx_d[2 + j];
	*slot = j;
	return zn_stream_wait_event(lm->rt->compute, lm->wr_free[j]);
}

/* the backward that wrote it enqueued: that buffer is micro-batch m's gradient now (the
 * device home's spare swapped in; host: copied down on the copy-out stream) */
int zn_lmajor_dx_written(struct zn_lmajor *lm, int m, int slot)
{
	int t = lm->dx_of[m], rc;

	if (lm->home == ZN_TIER_DEVICE) {
		lm->dx_of[m] = lm->dx_of[lm->k];
		lm->dx_of[lm->k] = t;
		return 0;
	}
	rc = zn_event_record(lm->dx_made, lm->rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->copy_out, lm->dx_made);
	if (!rc)
		rc = zn_memcpy_async(lm->rt->copy_out, lm->dxh[m], lm->dx_d[2 + slot], lm->x_bytes,
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(lm->wr_free[slot], lm->rt->copy_out);
	if (!rc)
		rc = zn_event_record(lm->dx_down[m], lm->rt->copy_out);
	return rc;
}

/* host home: forward slot (l, m) free to overwrite once its previous boundary is down */
int zn_lmajor_slot_before(struct zn_lmajor *lm, int l, int m)
{
	if (lm->home == ZN_TIER_DEVICE)
		return 0;
	return zn_stream_wait_event(lm->rt->compute, lm->down[(l % 2) * lm->k + m]);
}

/* nvme home: boundary (l, m) just made goes down into the next staging buffer (settled
 * first) and the one that went down two boundaries ago is written behind; a boundary not
 * read again only frees its slot */
static int slot_after_nvme(struct zn_lmajor *lm, int l, int m)
{
	struct zn_home_buf *b = zn_home_buf(&lm->st, lm->down_n % lm->stage_n), *p;
	int slot = (l % 2) * lm->k + m, rc;

	if (!zn_lmajor_stored(lm->n, lm->k, lm->tied && lm->k > 1, l, m))
		return zn_event_record(lm->down[slot], lm->rt->compute);
	rc = zn_home_settle(&lm->st, b);
	if (!rc)
		rc = zn_event_record(lm->made, lm->rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->copy_out, lm->made);
	if (!rc)
		rc = zn_memcpy_async(lm->rt->copy_out, b->h, zn_lmajor_fwd_x(lm, l, m), lm->x_bytes,
				     ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(b->down, lm->rt->copy_out);
	if (!rc)
		rc = zn_event_record(lm->down[slot], lm->rt->copy_out);
	if (rc)
		return rc;
	zn_home_filled(b, (l - 1) * lm->k + m);
	/* its copy down is done by now or soon: the compute has made two boundaries since */
	if (lm->down_n >= 2) {
		p = zn_home_buf(&lm->st, (lm->down_n - 2) % lm->stage_n);
		if (p->state == ZN_HOME_DOWN)
			rc = zn_home_put(&lm->st, p);
	}
	lm->down_n++;
	return rc;
}

/* nvme home: the forward's boundaries still in staging written; called once the turn is
 * enqueued, every write waited (a read of a boundary must follow its write) and the
 * backward's first two boundaries read ahead */
int zn_lmajor_reads_begin(struct zn_lmajor *lm)
{
	int count = zn_lmajor_stored_count(lm->n, lm->k, lm->tied && lm->k > 1), rc = 0;

	if (lm->home != ZN_TIER_NVME)
		return 0;
	rc = zn_lmajor_quiesce(lm);
	for (int p = 0; !rc && p < 2 && p < count; p++)
		rc = zn_home_read_ahead(&lm->st, zn_home_buf(&lm->st, p % lm->stage_n),
					zn_lmajor_read_id(lm->n, lm->k, p));
	return rc;
}

/* nvme home: boundary (l, m), the backward's next, from its staging buffer into copy-up
 * slot j (the slot's previous reader done); the two after it read ahead */
static int up_from_nvme(struct zn_lmajor *lm, int l, int m, int j)
{
	int p = lm->read_n++, id = zn_lmajor_read_id(lm->n, lm->k, p), rc;
	int count = zn_lmajor_stored_count(lm->n, lm->k, lm->tied && lm->k > 1);
	struct zn_home_buf *b = zn_home_buf(&lm->st, p % lm->stage_n);

	if (id != (l - 1) * lm->k + m) {
		zn_error("layer-major: boundary (layer %d, micro-batch %d) read out of order "
			 "(expected extent %d)", l, m, id);
		return -EINVAL;
	}
	rc = zn_home_read_ahead(&lm->st, b, id);
	if (!rc)
		rc = zn_home_wait(&lm->st, b);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->copy_in, lm->up_free[j]);
	if (!rc)
		rc = zn_memcpy_async(lm->rt->copy_in, lm->up_d[j], b->h, lm->x_bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_event_record(b->up, lm->rt->copy_in);
	if (rc)
		return rc;
	zn_home_emptying(&lm->st, b);
	/* the staging buffers of p + 1 and p + 2 held p - 3 and p - 2, gone up by now */
	for (int q = p + 1; !rc && q <= p + 2 && q < count; q++)
		rc = zn_home_read_ahead(&lm->st, zn_home_buf(&lm->st, q % lm->stage_n),
					zn_lmajor_read_id(lm->n, lm->k, q));
	return rc;
}

/* host home: boundary (l, m) just made in its slot goes down to pinned memory */
int zn_lmajor_slot_after(struct zn_lmajor *lm, int l, int m)
{
	int rc;

	if (lm->home == ZN_TIER_DEVICE)
		return 0;
	if (lm->home == ZN_TIER_NVME)
		return slot_after_nvme(lm, l, m);
	rc = zn_event_record(lm->made, lm->rt->compute);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->copy_out, lm->made);
	if (!rc)
		rc = zn_memcpy_async(lm->rt->copy_out, bnd_h(lm, l, m),
				     zn_lmajor_fwd_x(lm, l, m), lm->x_bytes, ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(lm->down[(l % 2) * lm->k + m], lm->rt->copy_out);
	return rc;
}

/* The input of layer l for micro-batch m on the device for its backward: the device home's
 * buffer, or a copy-up slot (*slot, released by up_done) filled from pinned memory. */
int zn_lmajor_boundary(struct zn_lmajor *lm, int l, int m, float **x, int *slot)
{
	int j = lm->up_next, rc;

	*slot = -1;
	if (lm->home == ZN_TIER_DEVICE) {
		*x = zn_lmajor_fwd_x(lm, l, m);
		return 0;
	}
	lm->up_next ^= 1;
	/* the slot's previous reader is done before the copy overwrites it */
	if (lm->home == ZN_TIER_NVME) {
		rc = up_from_nvme(lm, l, m, j);
	} else {
		rc = zn_stream_wait_event(lm->rt->copy_in, lm->up_free[j]);
		if (!rc)
			rc = zn_memcpy_async(lm->rt->copy_in, lm->up_d[j],
					     bnd_h(lm, l, m), lm->x_bytes,
					     ZN_COPY_H2D);
	}
	if (!rc)
		rc = zn_event_record(lm->up_ready[j], lm->rt->copy_in);
	if (!rc)
		rc = zn_stream_wait_event(lm->rt->compute, lm->up_ready[j]);
	*x = lm->up_d[j];
	*slot = j;
	return rc;
}

int zn_lmajor_up_done(struct zn_lmajor *lm, int slot)
{
	return slot < 0 ? 0 : zn_event_record(lm->up_free[slot], lm->rt->compute);
}

