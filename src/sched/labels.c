/* The step's labels (engine_impl.h): how many targets of the global batch are predicted
 * (masked ones, ZN_IGNORE_INDEX and packing's ZN_TARGET_IGNORE, are not), and the mean
 * loss over them; zn_engine_step and zn_engine_eval both count and average so. */
#include "sched/engine_impl.h"

int zn_engine_count_labels(struct zn_engine *e, const int *targets_h)
{
	uint64_t n = (uint64_t)e->gas * (uint64_t)e->B * (uint64_t)e->T, c = 0;
	float g[2];
	int rc = 0;

	for (uint64_t i = 0; i < n; i++)
		c += targets_h[i] >= 0; /* ZN_IGNORE_INDEX and packing's ZN_TARGET_IGNORE */
	/* the count, and the ranks with a masked target (exact in fp32: at most world) */
	g[0] = (float)c;
	g[1] = c == n ? 0.0f : 1.0f;
	if (e->rt.world > 1)
		rc = zn_comm_all_reduce(e->rt.comm, NULL, g, 2, ZN_DTYPE_F32);
	e->labels = g[0];
	e->all_labels = g[1] == 0.0f;
	return rc;
}

int zn_engine_label_mean(struct zn_engine *e, double sum, float *loss)
{
	float s = (float)sum;
	int rc = 0;

	if (e->rt.world > 1)
		rc = zn_comm_all_reduce(e->rt.comm, NULL, &s, 1, ZN_DTYPE_F32);
	*loss = e->labels > 0 ? s / e->labels : 0.0f;
	return rc;
}
