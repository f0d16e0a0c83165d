/* The runtime: device, comm, streams, the timed wait (runtime.h). */
#include <time.h>

#include "sched/runtime.h"

double zn_runtime_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int zn_runtime_wait(struct zn_runtime *rt, struct zn_event *ev)
{
	double t0 = zn_runtime_now_ms();
	int rc = zn_event_synchronize(ev);

	rt->wait_ms += zn_runtime_now_ms() - t0;
	return rc;
}

int zn_runtime_create(struct zn_runtime *rt, const struct zn_config *cfg, int comm_kind)
{
	struct zn_device_config dc = { .kind = cfg->runtime.device,
				       .budget_bytes = cfg->runtime.device_mem_bytes };
	/* an explicit single comm is process-local, even under a multi-rank launch */
	struct zn_comm_config cc = { .kind = (enum zn_comm_kind)comm_kind,
				     .local = comm_kind == ZN_COMM_SINGLE,
				     .deterministic = cfg->runtime.deterministic,
				     .timeout_s = cfg->runtime.comm_timeout_s };
	int local = 0, rc;

	if (comm_kind != ZN_COMM_SINGLE) {
		rc = zn_comm_world_hint(NULL, NULL, &local);
		if (rc)
			return rc;
	}
	dc.ordinal = local;
	rc = zn_device_create(&rt->dev, &dc);
	if (rc)
		return rc;
	rt->k = zn_device_kernels(rt->dev);
	cc.dev = rt->dev;
	rc = zn_comm_create(&rt->comm, &cc);
	if (rc)
		return rc;
	rt->rank = zn_comm_rank(rt->comm);
	rt->world = zn_comm_size(rt->comm);
	rc = zn_stream_create(rt->dev, &rt->compute);
	if (!rc)
		rc = zn_stream_create(rt->dev, &rt->copy_in);
	if (!rc)
		rc = zn_stream_create(rt->dev, &rt->copy_out);
	if (!rc)
		rc = zn_stream_create(rt->dev, &rt->comm_s);
	/* the bounded wait's event is made now (the comm stream is empty): a step then
	 * creates nothing */
	if (!rc)
		rc = zn_comm_synchronize(rt->comm, rt->comm_s);
	return rc;
}

int zn_runtime_drain(struct zn_runtime *rt)
{
	struct zn_stream *s[] = { rt->compute, rt->copy_in, rt->copy_out };
	int rc = 0;

	/* The comm stream first, bounded by --comm-timeout and polling for asynchronous
	 * errors: a hung peer gives an error here, not a wait forever. After a comm error the
	 * other streams may wait on the hung collective: they are left to the teardown. */
	if (rt->comm && rt->comm_s)
		rc = zn_comm_synchronize(rt->comm, rt->comm_s);
	else if (rt->comm_s)
		rc = zn_stream_synchronize(rt->comm_s);
	if (rc && rt->comm && zn_comm_check(rt->comm))
		return rc;
	for (int i = 0; i < 3; i++) {
		int r = s[i] ? zn_stream_synchronize(s[i]) : 0;

		if (!rc)
			rc = r;
	}
	if (!rc && rt->comm)
		rc = zn_comm_check(rt->comm);
	return rc;
}

bool zn_runtime_comm_first(enum zn_comm_kind kind, int comm_rc)
{
	return comm_rc != 0 && kind == ZN_COMM_NCCL;
}

void zn_runtime_sync(struct zn_runtime *rt)
{
	struct zn_stream *s[] = { rt->compute, rt->copy_in, rt->copy_out, rt->comm_s };

	/* after a comm error under nccl the comm goes first: its abort ends the hung
	 * collectives the streams would otherwise wait on forever */
	if (rt->comm && zn_runtime_comm_first(zn_comm_kind_of(rt->comm), zn_comm_check(rt->comm))) {
		zn_comm_destroy(rt->comm);
		rt->comm = NULL;
	}
	for (int i = 0; i < 4; i++)
		if (s[i])
			zn_stream_synchronize(s[i]);
}

void zn_runtime_destroy(struct zn_runtime *rt)
{
	if (rt->comm && zn_runtime_comm_first(zn_comm_kind_of(rt->comm), zn_comm_check(rt->comm))) {
		zn_comm_destroy(rt->comm);
		rt->comm = NULL;
	}
	zn_stream_destroy(rt->compute);
	zn_stream_destroy(rt->copy_in);
	zn_stream_destroy(rt->copy_out);
	zn_stream_destroy(rt->comm_s);
	zn_comm_destroy(rt->comm);
	zn_device_destroy(rt->dev);
	*rt = (struct zn_runtime){ 0 };
}
