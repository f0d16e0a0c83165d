/* The engine's tracer (trace_dev.h): given the runtime, nothing else. */
#include "sched/trace_dev.h"

#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "sched/runtime.h"

void zn_tracer_init(struct zn_tracer *tr, const struct zn_runtime *rt)
{
	*tr = (struct zn_tracer){ .rt = rt };
}

void zn_tracer_attach(struct zn_tracer *tr, struct zn_trace *t)
{
	tr->t = t;
}

static int track_of(const struct zn_tracer *tr, const struct zn_stream *s)
{
	if (s == tr->rt->copy_in)
		return ZN_TRACE_COPY_IN;
	if (s == tr->rt->copy_out)
		return ZN_TRACE_COPY_OUT;
	if (s == tr->rt->comm_s)
		return ZN_TRACE_COMM;
	return ZN_TRACE_COMPUTE;
}

/* the next pooled event, made on first use */
static int next_event(struct zn_tracer *tr, int *idx)
{
	if (tr->ev_n == tr->ev_cap) {
		int cap = tr->ev_cap ? 2 * tr->ev_cap : 128;
		struct zn_event **ev = realloc(tr->ev, (size_t)cap * sizeof(*ev));

		if (!ev)
			return -ENOMEM;
		tr->ev = ev;
		tr->ev_cap = cap;
	}
	if (tr->ev_n == tr->ev_made) {
		int rc = zn_event_create(tr->dev, &tr->ev[tr->ev_n]);

		if (rc)
			return rc;
		tr->ev_made++;
	}
	*idx = tr->ev_n++;
	return 0;
}

int zn_tracer_begin(struct zn_tracer *tr, struct zn_stream *s, const char *what, int layer,
		    uint64_t bytes, int *h)
{
	int a, rc;

	*h = -1;
	if (tr->p_n == tr->p_cap) {
		int cap = tr->p_cap ? 2 * tr->p_cap : 64;
		struct zn_tracer_pend *p = realloc(tr->p, (size_t)cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		tr->p = p;
		tr->p_cap = cap;
	}
	rc = next_event(tr, &a);
	if (!rc)
		rc = zn_event_record(tr->ev[a], s);
	if (rc)
		return rc;
	tr->p[tr->p_n] = (struct zn_tracer_pend){ track_of(tr, s), layer, what, bytes, a, -1 };
	*h = tr->p_n++;
	return 0;
}

int zn_tracer_end(struct zn_tracer *tr, struct zn_stream *s, int h)
{
	int b, rc = next_event(tr, &b);

	if (!rc)
		rc = zn_event_record(tr->ev[b], s);
	if (!rc)
		tr->p[h].b = b;
	return rc;
}

void zn_tracer_add_host(struct zn_tracer *tr, int track, int sub, const char *what, int layer,
			uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes)
{
	if (tr->on && zn_trace_add(tr->t, track, sub, what, layer, t0_ns, t1_ns, bytes))
		tr->on = false; /* out of memory: this step's trace is incomplete, stop */
}

void zn_tracer_add_step(struct zn_tracer *tr, int64_t step, int track, const char *what,
			int layer, uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes)
{
	if (tr->t && zn_trace_add_step(tr->t, step, track, 0, what, layer, t0_ns, t1_ns, bytes))
		tr->on = false;
}

void zn_tracer_workers_begin(struct zn_tracer *tr)
{
	for (int w = 0; tr->on && w < ZN_TRACE_MAX_SUB; w++) {
		tr->worker_ns[2 * w] = UINT64_MAX;
		tr->worker_ns[2 * w + 1] = 0;
	}
}

uint64_t *zn_tracer_workers(struct zn_tracer *tr)
{
	return tr->on ? tr->worker_ns : NULL;
}

void zn_tracer_workers_end(struct zn_tracer *tr, int layer)
{
	for (int w = 0; tr->on && w < ZN_TRACE_MAX_SUB; w++)
		if (tr->worker_ns[2 * w + 1])
			zn_tracer_add_host(tr, ZN_TRACE_ADAMW, w, "adamw", layer,
					   tr->worker_ns[2 * w], tr->worker_ns[2 * w + 1], 0);
}

int zn_tracer_step_begin(struct zn_tracer *tr, int64_t step)
{
	uint64_t t0;
	int rc;

	tr->on = zn_trace_wants(tr->t, step);
	if (!tr->on)
		return 0;
	tr->ev_n = 0;
	tr->p_n = 0;
	tr->dev = tr->rt->dev;
	tr->step_t0_ns = zn_trace_now_ns();
	rc = tr->ref ? 0 : zn_event_create(tr->dev, &tr->ref);
	/* the reference: the compute stream is idle between steps, so this returns at once */
	t0 = zn_trace_now_ns();
	if (!rc)
		rc = zn_event_record(tr->ref, tr->rt->compute);
	if (!rc)
		rc = zn_event_synchronize(tr->ref);
	tr->ref_ns = t0 / 2 + zn_trace_now_ns() / 2;
	return rc;
}

static uint64_t event_ns(struct zn_tracer *tr, int i, int *rc)
{
	float ms = 0.0f;
	int r = zn_event_elapsed_ms(tr->ref, tr->ev[i], &ms);
	double ns = (double)tr->ref_ns + (double)ms * 1e6;

	if (r && !*rc)
		*rc = r;
	return ns > 0 ? (uint64_t)ns : 0;
}

int zn_tracer_step_end(struct zn_tracer *tr, int64_t step, int rc)
{

	if (!tr->t || !tr->on)
		return 0;
	tr->on = false;
	if (rc) {
		zn_trace_drop_step(tr->t);
		return 0;
	}
	for (int i = 0; !rc && i < tr->p_n; i++) {
		struct zn_tracer_pend *p = &tr->p[i];
		uint64_t a, b;

		if (p->b < 0)
			continue; /* its work failed to enqueue */
		a = event_ns(tr, p->a, &rc);
		b = event_ns(tr, p->b, &rc);
		if (!rc)
			rc = zn_trace_add(tr->t, p->track, 0, p->what, p->layer, a, b, p->bytes);
	}
	if (!rc)
		rc = zn_trace_add(tr->t, ZN_TRACE_STEP, 0, "step", -1, tr->step_t0_ns,
				  zn_trace_now_ns(), 0);
	if (!rc)
		rc = zn_trace_end_step(tr->t, step);
	else
		zn_trace_drop_step(tr->t);
	if (rc)
		zn_error("--trace %s: step %lld not traced: %s", zn_trace_path(tr->t),
			 (long long)step, zn_strerror(rc));
	return rc;
}

void zn_tracer_destroy(struct zn_tracer *tr)
{
	const struct zn_runtime *rt = tr->rt;

	for (int i = 0; i < tr->ev_made; i++)
		zn_event_destroy(tr->ev[i]);
	zn_event_destroy(tr->ref);
	free(tr->ev);
	free(tr->p);
	*tr = (struct zn_tracer){ .rt = rt };
}
