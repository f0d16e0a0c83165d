/* zinc estimate's activation lines: the activations of the model (any family zinc train
 * takes) at the run's micro-batch and sequence length, per layer and in total, without and
 * with activation checkpointing (checkpoints on the device, in host memory, on nvme), from
 * the same function the engine plans its buffers with (src/sched/recompute.h
 * zn_act_bytes_of). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/estimate_acts.h"
#include "core/args.h"
#include "core/log.h"
#include "lmhead_ce.h"
#include "sched/recompute.h"

/* The layers are described one at a time (zn_act_shape.ld NULL), so a model of a
 * million layers costs time, not memory; the sums over them are taken once. */
struct acts_model {
	struct zn_model model;
	struct zn_act_sums sums;
	uint64_t work_bytes; /* the lm_head chunks' budget, as the engine sizes it */
	int n;
};

static void model_of(const struct zn_train_model *tm, const struct zn_est_acts *a, int T,
		     struct acts_model *m)
{
	struct zn_act_shape s;

	m->model = zn_train_model_get(tm);
	m->work_bytes = zn_lmhead_ce_work_bytes(a->device_mem);
	m->n = m->model.ops->layer_count(m->model.config);
	s = (struct zn_act_shape){ .model = m->model, .n = m->n, .B = a->micro, .T = T,
				   .work_bytes = m->work_bytes };
	zn_act_sums_of(&s, &m->sums);
}

static void bytes_for(const struct acts_model *m, const struct zn_est_acts *a, int T, bool on,
		      enum zn_tier home, struct zn_act_bytes *out)
{
	struct zn_act_shape s = { .model = m->model, .sums = &m->sums, .n = m->n,
				  .B = a->micro, .T = T, .on = on, .every = a->every,
				  .home = home };

	zn_act_bytes_of(&s, out);
}

/* layers with the same activations in one line */
static void per_layer(const struct acts_model *m, const struct zn_est_acts *a, int T,
		      uint64_t x)
{
	struct zn_act_shape s = { .model = m->model, .n = m->n, .B = a->micro, .T = T,
				  .work_bytes = m->work_bytes };
	char b[2][32];

	for (int l = 0; l < m->n;) {
		uint64_t bytes = zn_act_layer_bytes(&s, l);
		int last = l;

		while (last + 1 < m->n && zn_act_layer_bytes(&s, last + 1) == bytes)
			last++;
		printf("#   layer%s %d%s%.0d: activations %s%s, output %s%s\n",
		       last > l ? "s" : "", l, last > l ? "-" : "", last > l ? last : 0,
		       zn_arg_fmt_bytes(bytes, b[0], 32), last > l ? " each" : "",
		       zn_arg_fmt_bytes(last == m->n - 1 ? 0 : x, b[1], 32),
		       last > l ? " each" : "");
		l = last + 1;
	}
}

int zn_estimate_acts(const struct zn_est_acts *a, const struct zn_train_model *tm,
		     uint64_t *device_bytes)
{
	static const enum zn_tier homes[] = { ZN_TIER_DEVICE, ZN_TIER_HOST, ZN_TIER_NVME };
	int T = a->T > 0 ? a->T : zn_train_model_seq(tm);
	struct acts_model m = { 0 };
	struct zn_act_bytes off, on;
	char b[4][32];

	model_of(tm, a, T, &m);
	bytes_for(&m, a, T, false, ZN_TIER_DEVICE, &off);
	bytes_for(&m, a, T, true, ZN_TIER_DEVICE, &on);
	*device_bytes = a->checkpointing ? on.device : off.device;
	if (a->quiet)
		return 0;
	printf("# activations (fp32) at micro-batch %d x seq %d, per rank (layer 0: the "
	       "embedding, layer %d: the final norm, lm_head and loss):\n", a->micro, T,
	       m.n - 1);
	per_layer(&m, a, T, off.x);
	printf("#   without checkpointing: device %s (every layer's activations and output; "
	       "+ %s gradients, scratch, tokens)\n", zn_arg_fmt_bytes(off.device_acts, b[0], 32),
	       zn_arg_fmt_bytes(off.device_fixed, b[1], 32));
	for (int i = 0; i < 3; i++) {
		bytes_for(&m, a, T, true, homes[i], &on);
		printf("#   --gradient-checkpointing --checkpoint-every %d, checkpoints on %-6s: "
		       "device %s, pinned host %s, nvme %s (%d runs)\n", on.every,
		       zn_tier_name(homes[i]), zn_arg_fmt_bytes(on.device_acts, b[0], 32),
		       zn_arg_fmt_bytes(on.host, b[1], 32), zn_arg_fmt_bytes(on.nvme, b[2], 32),
		       on.runs);
	}
	return 0;
}
