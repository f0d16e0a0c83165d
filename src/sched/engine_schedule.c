/* The choice of a step's order (zinc.schedule; lmajor.h): layer-major where it is asked
 * for, or (auto) where it reads fewer bytes and its boundaries fit a home; the plan for the
 * order chosen, and the line that says which and why (the run's header, zinc estimate). */
#include <errno.h>
#include <stdio.h>

#include "core/log.h"
#include "sched/engine_impl.h"

/* what layer-major saves: parameters (or a frozen base) read from off the device, or
 * gathered from the other ranks, once per use */
static bool lm_moves_fewer(const struct zn_engine *e)
{
	bool frozen = false;

	for (int l = 0; l < e->n; l++)
		frozen = frozen || e->frozen_numel[l] > 0;
	return e->plan.pl.params != ZN_TIER_DEVICE ||
	       (e->cfg.zero.stage == 3 && e->rt.world > 1) ||
	       (frozen && e->plan.frozen_home != ZN_TIER_DEVICE);
}

static int lm_home_count(const struct zn_engine *e, enum zn_tier *homes)
{
	enum zn_offload_device d = e->cfg.act_ckpt.home.device;

	if (e->cfg.act_ckpt.enabled) {
		homes[0] = d == ZN_OFFLOAD_NVME ? ZN_TIER_NVME :
			   d == ZN_OFFLOAD_CPU ? ZN_TIER_HOST : ZN_TIER_DEVICE;
		return 1;
	}
	homes[0] = ZN_TIER_DEVICE;
	homes[1] = ZN_TIER_HOST;
	/* nvme last: where neither memory holds them and a path is configured */
	if (!zn_lmajor_nvme_paths(e))
		return 2;
	homes[2] = ZN_TIER_NVME;
	return 3;
}

static const char *tier_word(enum zn_tier t)
{
	return t == ZN_TIER_HOST ? "in pinned host memory" : t == ZN_TIER_NVME ? "on nvme" :
								    "on the device";
}

/* micro-batch order and its plan; the line says why */
static int micro_batch(struct zn_engine *e, const char *why, uint64_t dev_budget, char *msg,
		       size_t msg_size)
{
	e->act.lm.on = false;
	snprintf(e->sched_line, sizeof(e->sched_line), "micro-batch (%.380s)", why);
	return zn_engine_plan_once(e, dev_budget, msg, msg_size);
}

/* layer-major in the first home whose plan fits: 0, or the last plan's error (-ENOMEM:
 * why says that home's shortfall) */
static int layer_major(struct zn_engine *e, uint64_t dev_budget, char *why, size_t why_size)
{
	struct zn_lmajor *lm = &e->act.lm;
	enum zn_tier homes[3];
	int nh = lm_home_count(e, homes), rc = -ENOMEM;

	for (int i = 0; i < nh && rc == -ENOMEM; i++) {
		lm->on = true;
		lm->home = homes[i];
		rc = zn_engine_plan_once(e, dev_budget, why, why_size);
	}
	return rc;
}

/* the nvme bytes a step writes and reads as planned (micro-batch order's activation
 * checkpoints on nvme added: the plan does not count them) */
static uint64_t step_io_bytes(const struct zn_engine *e)
{
	uint64_t b = e->plan.nvme_step_read_bytes + e->plan.nvme_step_write_bytes;
	struct zn_acts_config ac;

	if (!e->act.lm.on && e->cfg.act_ckpt.enabled &&
	    e->cfg.act_ckpt.home.device == ZN_OFFLOAD_NVME) {
		zn_engine_acts_config((struct zn_engine *)e, &ac);
		b += 2 * (uint64_t)e->gas * zn_acts_nvme_bytes(&ac, &e->act.lm);
	}
	return b;
}

/* auto with the boundaries on nvme: layer-major where its step moves fewer nvme bytes
 * (the boundaries' writes and reads included) than micro-batch order's, else micro-batch
 * order (its plan made; the line says why) */
static int nvme_home_pays(struct zn_engine *e, uint64_t dev_budget, char *msg,
			  size_t msg_size, bool *pays)
{
	uint64_t lm_io = step_io_bytes(e), mb_io;
	char line[400];
	int rc;

	*pays = true;
	rc = micro_batch(e, "", dev_budget, msg, msg_size);
	mb_io = step_io_bytes(e);
	if (!rc && mb_io <= lm_io) {
		*pays = false;
		snprintf(line, sizeof(line), "micro-batch (auto: with the boundary activations of "
			 "%d micro-batches on nvme, layer-major would move %.2f MiB of nvme a step, "
			 "micro-batch order %.2f MiB)", e->gas, (double)lm_io / 1048576.0,
			 (double)mb_io / 1048576.0);
		snprintf(e->sched_line, sizeof(e->sched_line), "%s", line);
		return 0;
	}
	e->act.lm.on = true;
	e->act.lm.home = ZN_TIER_NVME;
	return zn_engine_plan_once(e, dev_budget, msg, msg_size);
}

/* why layer-major cannot run at all, or NULL */
static const char *refusal(const struct zn_engine *e)
{
	if (e->act.lm.tie_other)
		return "a layer other than the last ties to layer 0";
	return NULL;
}

int zn_lmajor_plan(struct zn_engine *e, uint64_t dev_budget, char *msg, size_t msg_size)
{
	enum zn_schedule want = e->cfg.runtime.schedule;
	const char *no = refusal(e);
	char why[512] = "", line[400];
	int rc;

	e->act.lm.k = e->gas;
	if (want == ZN_SCHEDULE_MICRO_BATCH)
		return micro_batch(e, "--schedule", dev_budget, msg, msg_size);
	if (want == ZN_SCHEDULE_AUTO && e->gas < 2)
		return micro_batch(e, "auto: one micro-batch per step", dev_budget, msg, msg_size);
	if (no && want == ZN_SCHEDULE_LAYER_MAJOR) {
		zn_error("--schedule layer-major (zinc.schedule): %s: use --schedule micro-batch",
			 no);
		return ZN_EUSAGE;
	}
	if (no) {
		snprintf(line, sizeof(line), "auto: %s", no);
		return micro_batch(e, line, dev_budget, msg, msg_size);
	}
	rc = layer_major(e, dev_budget, why, sizeof(why));
	if (rc == -ENOMEM && want == ZN_SCHEDULE_LAYER_MAJOR) {
		snprintf(msg, msg_size, "--schedule layer-major (zinc.schedule): the boundary "
			 "activations of %d micro-batches fit no home: %s; use --schedule "
			 "micro-batch or a smaller --micro-batch", e->gas, why);
		return rc;
	}
	if (rc == -ENOMEM) {
		snprintf(line, sizeof(line), "auto: the boundary activations of %d micro-batches "
			 "fit no home: %.300s", e->gas, why);
		return micro_batch(e, line, dev_budget, msg, msg_size);
	}
	if (rc) {
		snprintf(msg, msg_size, "%s", why);
		return rc;
	}
	if (want == ZN_SCHEDULE_AUTO && !lm_moves_fewer(e))
		return micro_batch(e, "auto: every parameter stays on the device, layer-major "
				   "would move no fewer bytes", dev_budget, msg, msg_size);
	if (want == ZN_SCHEDULE_AUTO && e->act.lm.home == ZN_TIER_NVME) {
		bool pays;

		rc = nvme_home_pays(e, dev_budget, msg, msg_size, &pays);
		if (rc || !pays)
			return rc;
	}
	snprintf(e->sched_line, sizeof(e->sched_line), "layer-major (%s; the boundary "
		 "activations of %d micro-batches %s%s)",
		 want == ZN_SCHEDULE_AUTO ? "auto: fewer parameter reads" : "--schedule", e->gas,
		 tier_word(e->act.lm.home),
		 e->act.lm.tied ? "; the tied head's backward runs again" : "");
	return 0;
}
