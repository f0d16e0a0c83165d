/* zn_comm_synchronize: the end-of-step wait on the comm stream, polling the backend for
 * asynchronous errors and bounded by the comm's timeout (--comm-timeout) unless the
 * backend bounds each op itself (mpi); and the pure decisions it and the NCCL backend
 * make (tested on the CPU, comm.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "core/log.h"
#include "gpu/device.h"

enum zn_comm_wait zn_comm_wait_next(bool done, int poll_rc, double waited_s, double timeout_s)
{
	if (poll_rc)
		return ZN_COMM_WAIT_ERROR; /* a failure reported while waiting wins */
	if (done)
		return ZN_COMM_WAIT_DONE;
	if (timeout_s > 0 && waited_s >= timeout_s)
		return ZN_COMM_WAIT_TIMEOUT;
	return ZN_COMM_WAIT_AGAIN;
}

const char *zn_comm_nccl_algo(bool deterministic, const char *current)
{
	if (!deterministic || (current && *current))
		return NULL;
	return "Ring";
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

int zn_comm_synchronize(struct zn_comm *c, struct zn_stream *s)
{
	struct zn_event *ev;
	enum zn_comm_wait w = ZN_COMM_WAIT_AGAIN;
	double t0 = now_s(), limit_s;
	long ns = 20000;
	int rc;

	if (!c || !s) {
		zn_error("zn_comm_synchronize: comm and stream must not be NULL");
		return -EINVAL;
	}
	rc = atomic_load(&c->error);
	if (rc)
		return rc;
	/* mpi's ops end within the timeout themselves, naming the ranks that did not come */
	limit_s = c->ops->bounded ? 0 : c->timeout_s;
	if (!c->ops->poll && limit_s == 0) {
		rc = zn_stream_synchronize(s);
		return rc ? rc : zn_comm_check(c);
	}
	/* one event for the comm's life: destroying a pending one would wait for it on
	 * the host device, which is what this wait must not do */
	if (!c->sync_ev) {
		rc = zn_event_create(zn_stream_device(s), &c->sync_ev);
		if (rc)
			return rc;
	}
	ev = c->sync_ev;
	rc = zn_event_record(ev, s);
	if (rc)
		return rc;
	while (w == ZN_COMM_WAIT_AGAIN) {
		bool done = zn_event_query(ev);
		int poll_rc = atomic_load(&c->error);

		if (!poll_rc && c->ops->poll)
			poll_rc = c->ops->poll(c);
		w = zn_comm_wait_next(done, poll_rc, now_s() - t0, limit_s);
		if (w == ZN_COMM_WAIT_ERROR)
			rc = zn_comm_fail(c, poll_rc);
		if (w != ZN_COMM_WAIT_AGAIN)
			break;
		nap(ns);
		if (ns < 2000000)
			ns *= 2;
	}
	if (w == ZN_COMM_WAIT_DONE) /* the event's own error, if any */
		rc = zn_event_synchronize(ev);
	if (w == ZN_COMM_WAIT_TIMEOUT) {
		zn_error("comm %s: collectives on the comm stream have not finished after %.1f s "
			 "(--comm-timeout %g): a peer rank is likely dead or hung; stopping. "
			 "Check the other ranks' logs, or raise --comm-timeout for very large "
			 "steps", c->ops->name, now_s() - t0, c->timeout_s);
		rc = zn_comm_fail(c, -ETIMEDOUT);
	}
	/* after an error the stream may still hold work: the comm's abort (nccl) ends it */
	return rc;
}
