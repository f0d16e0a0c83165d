/* zinc estimate --micro-batch B: the activations of a GPT shape at micro-batch B and
 * sequence --seq, per layer and in total, without and with activation checkpointing
 * (checkpoints on the device, in host memory, on nvme), from the same function the engine
 * plans its buffers with (src/sched/recompute.h zn_act_bytes_of). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/estimate_acts.h"
#include "cli/util.h"
#include "core/log.h"
#include "model/gpt2/gpt2.h"
#include "sched/recompute.h"

struct acts_model {
	struct zn_gpt2_config mc;
	struct zn_layer_desc *ld;
	int n;
};

static int model_of(const struct zn_est_acts *a, struct acts_model *m)
{
	int heads = a->heads;

	if (!heads)
		heads = a->hidden % 64 == 0 ? a->hidden / 64 : 1;
	m->mc = (struct zn_gpt2_config){ .layers = a->layers, .heads = heads,
					 .d_model = a->hidden, .seq = a->seq,
					 .vocab = a->vocab };
	if (zn_gpt2_config_validate(&m->mc))
		return ZN_EUSAGE;
	m->n = zn_gpt2_layer_count(&m->mc);
	m->ld = calloc((size_t)m->n, sizeof(*m->ld));
	if (!m->ld)
		return -1;
	return zn_gpt2_layers(&m->mc, m->ld);
}

static void bytes_for(const struct acts_model *m, const struct zn_est_acts *a, bool on,
		      enum zn_tier home, struct zn_act_bytes *out)
{
	struct zn_act_shape s = { .model = zn_gpt2_model(&m->mc), .ld = m->ld, .n = m->n,
				  .B = a->micro, .T = a->seq, .on = on, .every = a->every,
				  .home = home };

	zn_act_bytes_of(&s, out);
}

int zn_estimate_acts(const struct zn_est_acts *a, uint64_t *device_bytes)
{
	static const enum zn_tier homes[] = { ZN_TIER_DEVICE, ZN_TIER_HOST, ZN_TIER_NVME };
	struct acts_model m = { 0 };
	struct zn_act_bytes off, on;
	char b[4][32];
	int rc = model_of(a, &m);

	if (rc) {
		free(m.ld);
		return rc;
	}
	bytes_for(&m, a, false, ZN_TIER_DEVICE, &off);
	bytes_for(&m, a, true, ZN_TIER_DEVICE, &on);
	*device_bytes = a->checkpointing ? on.device : off.device;
	if (a->quiet) {
		free(m.ld);
		return 0;
	}
	printf("# activations (fp32) at micro-batch %d x seq %d, per rank:\n", a->micro, a->seq);
	{
		struct zn_act_shape s = { .model = zn_gpt2_model(&m.mc), .ld = m.ld, .n = m.n,
					  .B = a->micro, .T = a->seq };

		/* layers with the same activations in one line */
		for (int l = 0; l < m.n;) {
			uint64_t x = zn_act_layer_bytes(&s, l);
			int last = l;

			while (last + 1 < m.n && zn_act_layer_bytes(&s, last + 1) == x)
				last++;
			printf("#   layer%s %d%s%.0d: activations %s%s, output %s%s\n",
			       last > l ? "s" : "", l, last > l ? "-" : "", last > l ? last : 0,
			       zn_cli_fmt_bytes(x, b[0], 32), last > l ? " each" : "",
			       zn_cli_fmt_bytes(last == m.n - 1 ? 0 : off.x, b[1], 32),
			       last > l ? " each" : "");
			l = last + 1;
		}
	}
	printf("#   without checkpointing: device %s (every layer's activations and output; "
	       "+ %s gradients, scratch, tokens)\n", zn_cli_fmt_bytes(off.device_acts, b[0], 32),
	       zn_cli_fmt_bytes(off.device_fixed, b[1], 32));
	for (int i = 0; i < 3; i++) {
		bytes_for(&m, a, true, homes[i], &on);
		printf("#   --gradient-checkpointing --checkpoint-every %d, checkpoints on %-6s: "
		       "device %s, pinned host %s, nvme %s (%d runs)\n", on.every,
		       zn_tier_name(homes[i]), zn_cli_fmt_bytes(on.device_acts, b[0], 32),
		       zn_cli_fmt_bytes(on.host, b[1], 32), zn_cli_fmt_bytes(on.nvme, b[2], 32),
		       on.runs);
	}
	free(m.ld);
	return 0;
}
