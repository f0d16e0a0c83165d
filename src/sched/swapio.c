/* The engine's nvme tier: optimizer state (offload_optimizer nvme) and parameter shards
 * (offload_param nvme) homed in swap-store extents, moved through pinned staging views of
 * the host arena, which is registered with the aio engine as fixed buffers.
 *
 * Extents (per layer, this rank's shard): master, m, v in the optimizer's store (the master
 * is the parameter extent when fp32 parameters are on nvme too; m and v as
 * zinc.optimizer_states stores them, each rounded to 4 KiB), the parameter shard in the
 * parameters' store. Each store has its own paths (offload_*.nvme_path) and reserves its
 * files at create, so a full disk stops the run before training.
 *
 * Optimizer step (swapio_opt.c: the staging buffers are a tiered home, store/home.h, whose
 * items are AdamW's positions): AdamW visits layers n-1 .. 0, each layer's shard in chunks
 * of plan.swap_chunk_numel elements (plan.h: the staging holds no more than the state), and
 * position p (the chunks in that order: sw.pos_first, sw.pos_layer) uses staging buffer
 * p mod K (K = plan.swap_buffers >= 2). Position p's read is issued once its buffer's
 * previous write (position p-K) is done: with pipeline_read, as far ahead as K-1 positions
 * without blocking (zn_swapio_opt_begin at the step's start issues positions 0 .. K-1 whose
 * buffers the previous step's write-behind has freed; every acquisition of a layer's
 * parameters (prefetch.c) tries again, and each acquire and release), else only when
 * acquired. These reads are background work in the I/O engine's queue
 * (ZN_AIO_PRIO_BACKGROUND): they fill the read stream's gaps during the forward and
 * backward, and a parameter read that the compute waits for overtakes them; the read AdamW
 * waits for is promoted to normal. After AdamW the state is written back (and the new
 * parameter shard, parameters on nvme): behind, with pipeline_write, waited for before the
 * buffer is reused, before a fetch reads the same layer's extent, and before anything else
 * reads the extents (zn_swapio_quiesce: checkpoints, read-back, eval's end,
 * zn_engine_flush, destroy), so it runs on into the next step's forward; else at once.
 *
 * Parameter fetch (prefetch.c; swapio_fetch.c): the shard of the layer going into working
 * slot i is read into fetch buffer i (after that buffer's previous copy up has completed),
 * then copied up as a host shard would be. The fetch buffers are a tiered home
 * (store/home.h) on the parameter store's extents. The reads of one prefetch batch are all
 * submitted before the first is waited for.
 *
 * Hot layers (plan.h: layer 0 and 1 .. H, the forward's first fetches at the step's and
 * each micro-batch's start): their current shard stays in pinned memory (layer 0's in its
 * own fetch buffer, the others in the home's buffers after it), written there when the
 * extent is (the initial state; AdamW's release, the same bytes it writes), so their
 * fetches copy it up at once instead of waiting for the previous step's write-behind and a
 * read. The extent stays the home (checkpoints, AdamW's aliased master read it).
 *
 * Errors: the aio engine logs the failed transfer with its file and offset; one more line
 * (the home's, or here) says which state and layer, the operation and the swap file; the
 * step returns the error.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/size.h"
#include "sched/swapio.h"

#include "cpu/arena.h"
#include "sched/runtime.h"
#include "sched/swapio_impl.h"
#include "sched/tiers.h"
#include "sched/trace_dev.h"

struct zn_aio *zn_swapio_aio(const struct zn_swapio *sw)
{
	return sw->aio;
}

void zn_swapio_io_stats(const struct zn_swapio *sw, struct zn_aio_stats *out)
{
	*out = (struct zn_aio_stats){ 0 };
	if (sw->aio)
		zn_aio_get_stats(sw->aio, out);
}

/* ---- create and destroy ------------------------------------------------------------------ */

static int make_store(struct zn_swapio *sw, struct zn_swap **out, const char *what,
		      const struct zn_offload_config *off, const struct zn_swap_extent *ext,
		      size_t count)
{
	static atomic_int seq;
	char run_id[ZN_RUN_ID_MAX + 40];
	struct zn_swap_config sc = { .rank = sw->c.rt->rank, .extents = ext, .extent_count = count,
				     .stripe_bytes = ZN_PLAN_SWAP_STRIPE, .checksum = true };

	/* zinc.run_id (default p<pid>): runs sharing a path keep apart */
	if (sw->c.cfg->runtime.run_id[0])
		snprintf(run_id, sizeof(run_id), "%s-e%d-%s", sw->c.cfg->runtime.run_id,
			 atomic_fetch_add(&seq, 1), what);
	else
		snprintf(run_id, sizeof(run_id), "p%ld-e%d-%s", (long)getpid(),
			 atomic_fetch_add(&seq, 1), what);
	sc.run_id = run_id;
	zn_swap_config_set_paths(&sc, off);
	return zn_swap_create(out, sw->aio, &sc);
}

/* A layer moved in chunks is checksummed per chunk (elem: bytes per element), so every
 * chunk read is verified; a layer of one chunk as one block. */
static uint64_t crc_block(const struct zn_swapio *sw, int l, uint64_t elem)
{
	return zn_swapio_chunks(sw, l) > 1 ? sw->c.plan.swap_chunk_numel * elem : 0;
}

static int make_stores(struct zn_swapio *sw)
{
	struct zn_swap_extent *ext = calloc((size_t)(3 * sw->c.n), sizeof(*ext));
	size_t k = 0;
	int rc = 0;

	if (!ext)
		return -ENOMEM;
	if (zn_swapio_optim(sw)) {
		for (int l = 0; l < sw->c.n; l++) {
			uint64_t b = sw->c.L[l].sh.shard_numel * 4, cb = crc_block(sw, l, 4);
			uint64_t mb = sw->c.plan.states == ZN_STATES_FP32 ? b : zn_swapio_moment_bytes(sw, l);

			if (!sw->c.plan.master_aliases_params)
				ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_MASTER, l),
								    b, cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_EXP_AVG, l), mb,
							    cb };
			ext[k++] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_EXP_AVG_SQ, l), mb,
							    cb };
		}
		rc = make_store(sw, &sw->swap_opt, "optim", &sw->c.cfg->zero.offload_optimizer, ext, k);
	}
	if (!rc && zn_swapio_params(sw)) {
		for (int l = 0; l < sw->c.n; l++)
			ext[l] = (struct zn_swap_extent){ zn_swapio_key(sw, ZN_SWAP_PARAM, l),
							  zn_swapio_param_shard_bytes(sw, l),
							  crc_block(sw, l, sw->c.plan.param_bytes) };
		rc = make_store(sw, &sw->swap_param, "param", &sw->c.cfg->zero.offload_param, ext,
				(size_t)sw->c.n);
	}
	free(ext);
	return rc;
}

int zn_swapio_create(struct zn_swapio *sw, const struct zn_swapio_config *c)
{
	int rc;

	*sw = (struct zn_swapio){ .c = *c };
	if (!zn_swapio_optim(sw) && !zn_swapio_params(sw))
		return 0;
	rc = zn_aio_create(&sw->aio, &sw->c.cfg->aio);
	if (rc)
		return rc;
	/* the whole arena: staging views and every other pinned buffer are fixed buffers */
	rc = zn_aio_register_buffer(sw->aio, zn_arena_base(sw->c.arena),
				    zn_arena_size(sw->c.arena) / ZN_AIO_ALIGN * ZN_AIO_ALIGN);
	if (rc)
		return rc;
	sw->arena_registered = true;
	rc = make_stores(sw);
	if (!rc)
		rc = zn_swapio_opt_open(sw);
	/* the parameter fetch buffers and hot layers (swapio_fetch.c), after the staging */
	if (!rc)
		rc = zn_swapio_fetch_open(sw);
	if (!rc)
		zn_debug("nvme: %s%s%s through %s", zn_swapio_optim(sw) ? "optimizer state" : "",
			zn_swapio_optim(sw) && zn_swapio_params(sw) ? " and " : "",
			zn_swapio_params(sw) ? "parameter shards" : "", zn_aio_describe(sw->aio));
	return rc;
}

void zn_swapio_destroy(struct zn_swapio *sw)
{
	if (!sw->c.rt)
		return; /* never created */
	zn_swapio_quiesce(sw);
	zn_swapio_fetch_close(sw);
	zn_swapio_opt_close(sw);
	zn_swap_destroy(sw->swap_opt);
	zn_swap_destroy(sw->swap_param);
	sw->swap_opt = sw->swap_param = NULL;
	if (sw->arena_registered)
		zn_aio_unregister_buffer(sw->aio, zn_arena_base(sw->c.arena));
	sw->arena_registered = false;
	zn_aio_destroy(sw->aio);
	sw->aio = NULL;
}


static int wait_all(struct zn_swapio *sw, bool writes)
{
	int rc = zn_swapio_opt_wait_all(sw, writes), x = zn_swapio_fetch_wait_all(sw);

	return rc ? rc : x;
}

int zn_swapio_quiesce(struct zn_swapio *sw)
{
	sw->in_step = false;
	return wait_all(sw, true);
}

int zn_swapio_step_end(struct zn_swapio *sw)
{
	sw->in_step = false;
	return wait_all(sw, !sw->c.cfg->zero.offload_optimizer.pipeline_write);
}

/* ---- the step --------------------------------------------------------------------------- */

int zn_swapio_step_begin(struct zn_swapio *sw, int64_t step)
{
	sw->step = step;
	sw->opt_next_read = 0;
	sw->in_step = true;
	return zn_swapio_opt_begin(sw);
}

/* fetch buffer i gets layer l's shard (swapio_fetch.c): a hot layer's pinned copy, or a
 * read after the buffer's previous copy up and the previous step's write-behind of this
 * extent */
int zn_swapio_fetch_begin(struct zn_swapio *sw, int i, int l)
{
	int rc = zn_swapio_fetch_prepare(sw, i, l);

	if (rc > 0) /* its pinned shard is current: nothing to read */
		return 0;
	if (!rc)
		rc = zn_swapio_opt_wait_layer(sw, l);
	return zn_swapio_fetch_read(sw, i, l, rc);
}
