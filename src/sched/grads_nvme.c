/* Gradient homes: held gradients in a gradient extent on nvme (grads.h, ZN_GRAD_NVME_HELD).
 * All transfers are whole extents of this rank's shard (rounded to 4 KiB, as the buffers
 * are), so each is checksummed. The backward's writes and read-backs run on the calling
 * thread while the device computes the next layers; the update reads one layer ahead. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "sched/engine_impl.h"
#include "sched/grads.h"

static bool nvme_on(const struct zn_engine *e)
{
	return e->plan.grad_home == ZN_GRAD_NVME_HELD && e->plan.grad_ring > 0;
}

static struct zn_swap_key key_of(const struct zn_engine *e, int l)
{
	return (struct zn_swap_key){ .kind = ZN_SWAP_GRAD, .layer = l, .rank = e->rt.rank };
}

static uint64_t ext_bytes(const struct zn_engine *e, int l)
{
	return zn_plan_host_alloc_bytes(e->L[l].sh.shard_numel * 4);
}

int zn_grads_nvme_create(struct zn_engine *e)
{
	struct zn_grads *g = &e->gr;
	struct zn_swap_extent *ext;
	struct zn_swap_config sc = { .rank = e->rt.rank, .extent_count = (size_t)(e->n - 1),
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };
	static atomic_int seq; /* engines of one process (tests) keep apart */
	char run_id[ZN_RUN_ID_MAX + 40];
	int rc;

	if (!nvme_on(e))
		return 0;
	g->sumsq_done = calloc((size_t)e->n, sizeof(*g->sumsq_done));
	ext = calloc((size_t)e->n, sizeof(*ext));
	if (!g->sumsq_done || !ext) {
		free(ext);
		return -ENOMEM;
	}
	for (int l = 1; l < e->n; l++)
		ext[l - 1] = (struct zn_swap_extent){ key_of(e, l), ext_bytes(e, l) };
	/* zinc.run_id (default p<pid>): runs sharing a path keep apart */
	if (e->cfg.runtime.run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-g%d-grad", e->cfg.runtime.run_id,
			 atomic_fetch_add(&seq, 1));
	else
		snprintf(run_id, sizeof(run_id), "p%ld-g%d-grad", (long)getpid(),
			 atomic_fetch_add(&seq, 1));
	sc.run_id = run_id;
	sc.extents = ext;
	zn_swap_config_set_paths(&sc, &e->cfg.zero.offload_optimizer);
	rc = zn_swap_create(&g->swap, e->sw.aio, &sc);
	free(ext);
	return rc;
}

static int io_done(struct zn_engine *e, struct zn_swap_req *r, const char *what, int l)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_swap_wait(r);

	e->rt.wait_ms += zn_runtime_now_ms() - t0;
	if (rc)
		zn_error("nvme: %s of layer %d's gradient (rank %d) failed: %s", what, l,
			 e->rt.rank, zn_strerror(rc));
	return rc;
}

static int transfer(struct zn_engine *e, bool write, int l, float *buf)
{
	struct zn_swap_req r;
	int rc = write ? zn_swap_write(e->gr.swap, key_of(e, l), 0, ext_bytes(e, l), buf, &r) :
			 zn_swap_read(e->gr.swap, key_of(e, l), 0, ext_bytes(e, l), buf, &r);

	if (rc) {
		zn_error("nvme: %s of layer %d's gradient (rank %d) failed: %s",
			 write ? "write" : "read", l, e->rt.rank, zn_strerror(rc));
		return rc;
	}
	return io_done(e, &r, write ? "write" : "read", l);
}

static int wait_read_ahead(struct zn_engine *e)
{
	struct zn_grads *g = &e->gr;
	int l = g->rd_layer;

	if (l < 0)
		return 0;
	g->rd_layer = -1;
	return io_done(e, &g->rd, "read", l);
}

/* The layer in buffer s (if any) to its extent: its shard down, the sum so far added,
 * its squared sum taken in its last micro-batch, then written. */
static int flush(struct zn_engine *e, int s)
{
	struct zn_grads *g = &e->gr;
	int l = g->slot_layer[s], rc;
	struct zn_layer *ly;

	if (l < 0)
		return 0;
	g->slot_layer[s] = -1;
	ly = &e->L[l];
	rc = zn_runtime_wait(&e->rt, ly->grad_ev);
	ly->recv_pending = false; /* the receive shard is this buffer: added here */
	if (!rc && g->slot_add[s]) {
		float *x = ly->grad_h;

		rc = transfer(e, false, l, g->back);
		/* the held home's grad_h += recv: sum so far + this micro-batch's */
		for (uint64_t i = 0; !rc && i < ly->sh.shard_numel; i++)
			x[i] = g->back[i] + x[i];
	}
	if (!rc && g->slot_last[s]) {
		rc = zn_optim_layer_sumsq(e, l);
		g->sumsq_done[l] = !rc;
	}
	return rc ? rc : transfer(e, true, l, ly->grad_h);
}

int zn_grads_nvme_step_begin(struct zn_engine *e)
{
	struct zn_grads *g = &e->gr;
	int rc = wait_read_ahead(e); /* a failed step's */

	for (int s = 0; s < ZN_PLAN_GRAD_RING; s++)
		g->slot_layer[s] = -1;
	for (int l = 0; l < e->n; l++)
		g->sumsq_done[l] = false;
	return rc;
}

int zn_grads_nvme_land(struct zn_engine *e, int l, int micro)
{
	struct zn_grads *g = &e->gr;
	int s = (e->n - 1 - l) % e->plan.grad_ring, rc;

	/* layer 0 keeps its own shards; stage 0-1 bring a shard down in the last one only */
	if (l < 1 || (e->cfg.zero.stage < 2 && micro != e->gas - 1))
		return 0;
	rc = flush(e, s);
	g->slot_layer[s] = l;
	g->slot_add[s] = e->cfg.zero.stage >= 2 && micro > 0;
	g->slot_last[s] = micro == e->gas - 1;
	return rc;
}

int zn_grads_micro_end(struct zn_engine *e)
{
	int rc = 0;

	for (int s = 0; nvme_on(e) && !rc && s < e->plan.grad_ring; s++)
		rc = flush(e, s);
	return rc;
}

int zn_grads_before_update(struct zn_engine *e, int l)
{
	struct zn_grads *g = &e->gr;
	int rc;

	if (!nvme_on(e) || l < 1)
		return 0;
	if (g->rd_layer == l)
		rc = wait_read_ahead(e);
	else if (!(rc = wait_read_ahead(e)))
		rc = transfer(e, false, l, e->L[l].grad_h);
	/* the next layer's shard into the other buffer while AdamW runs on this one */
	if (!rc && l - 1 >= 1 && e->L[l - 1].grad_h != e->L[l].grad_h) {
		rc = zn_swap_read(g->swap, key_of(e, l - 1), 0, ext_bytes(e, l - 1),
				  e->L[l - 1].grad_h, &g->rd);
		if (rc)
			zn_error("nvme: read of layer %d's gradient (rank %d) failed: %s", l - 1,
				 e->rt.rank, zn_strerror(rc));
		else
			g->rd_layer = l - 1;
	}
	return rc;
}

bool zn_grads_sumsq_done(const struct zn_engine *e, int l)
{
	return nvme_on(e) && e->gr.sumsq_done && e->gr.sumsq_done[l];
}

void zn_grads_destroy(struct zn_engine *e)
{
	if (e->gr.swap)
		wait_read_ahead(e);
	zn_swap_destroy(e->gr.swap);
	free(e->gr.sumsq_done);
	e->gr.swap = NULL;
	e->gr.sumsq_done = NULL;
}
