/* The engine's tracer (zinc train --trace): the spans of a traced step on the device's
 * streams (timed with events, so the same code serves the host device and CUDA), on the
 * NVMe engine (submission to completion) and on the CPU AdamW workers, handed to the trace
 * file (core/trace.h) at the end of the step. State: struct zn_tracer (engine field tr),
 * given at init the runtime whose streams it names; nothing else. Every part that traces is
 * given a pointer to the tracer at its creation.
 *
 * A stream span is an event recorded on the stream before the work is enqueued and one
 * after; at the end of the step (every stream drained) each event's time is the step's
 * reference event (recorded on the compute stream at the start, and waited for) plus
 * zn_event_elapsed_ms from it. Off, every hook is one test of tr->on (inline below).
 *
 *     int h, rc = zn_tracer_span_begin(tr, rt->comm_s, "all-reduce", l, bytes, &h);
 *     if (!rc) rc = zn_comm_all_reduce(...);
 *     if (!rc) rc = zn_tracer_span_end(tr, rt->comm_s, h);
 */
#ifndef ZN_SCHED_TRACE_DEV_H
#define ZN_SCHED_TRACE_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "core/trace.h"
#include "gpu/device.h"

struct zn_runtime;

struct zn_tracer_pend {
	int track, layer;
	const char *what;
	uint64_t bytes;
	int a, b; /* events in the pool */
};

struct zn_tracer {
	const struct zn_runtime *rt; /* whose streams the spans name (zn_tracer_init) */
	struct zn_trace *t;       /* NULL: not tracing */
	bool on;                  /* this step is traced */
	struct zn_device *dev;
	struct zn_event *ref;
	uint64_t ref_ns, step_t0_ns;
	struct zn_event **ev;     /* pool, reused every traced step */
	int ev_n, ev_cap, ev_made;
	struct zn_tracer_pend *p;
	int p_n, p_cap;
	uint64_t worker_ns[2 * ZN_TRACE_MAX_SUB]; /* AdamW workers of one layer */
};

/* zeroed, naming rt's streams; attach: the trace file (NULL: none) from the next step */
void zn_tracer_init(struct zn_tracer *tr, const struct zn_runtime *rt);
void zn_tracer_attach(struct zn_tracer *tr, struct zn_trace *t);
/* stream spans: begin records the first event and gives a handle */
int zn_tracer_begin(struct zn_tracer *tr, struct zn_stream *s, const char *what, int layer,
		    uint64_t bytes, int *h);
int zn_tracer_end(struct zn_tracer *tr, struct zn_stream *s, int h);
/* a span timed on the host (NVMe, AdamW workers) in this step; add_step: in the trace of
 * an earlier step (write-behind finished after its step) */
void zn_tracer_add_host(struct zn_tracer *tr, int track, int sub, const char *what, int layer,
			uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes);
void zn_tracer_add_step(struct zn_tracer *tr, int64_t step, int track, const char *what,
			int layer, uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes);
/* the CPU AdamW workers of one layer: begin clears their times, workers gives the array
 * the workers widen (cpu/adamw.h worker_ns; NULL when off), end adds each one's span */
void zn_tracer_workers_begin(struct zn_tracer *tr);
uint64_t *zn_tracer_workers(struct zn_tracer *tr);
void zn_tracer_workers_end(struct zn_tracer *tr, int layer);
int zn_tracer_step_begin(struct zn_tracer *tr, int64_t step); /* is this step traced */
/* after the drain: the step's spans to the file (rc != 0: dropped) */
int zn_tracer_step_end(struct zn_tracer *tr, int64_t step, int rc);
void zn_tracer_destroy(struct zn_tracer *tr);

/* whether this step is traced; a trace file is attached */
static inline bool zn_tracer_on(const struct zn_tracer *tr)
{
	return tr->on;
}

static inline bool zn_tracer_attached(const struct zn_tracer *tr)
{
	return tr->t != NULL;
}

/* whether t is the trace file attached (NULL: none is) */
static inline bool zn_tracer_attached_to(const struct zn_tracer *tr, const struct zn_trace *t)
{
	return tr->t == t;
}

/* the hooks: one flag test when off (h -1) */
static inline int zn_tracer_span_begin(struct zn_tracer *tr, struct zn_stream *s,
				       const char *what, int layer, uint64_t bytes, int *h)
{
	*h = -1;
	return tr->on ? zn_tracer_begin(tr, s, what, layer, bytes, h) : 0;
}

static inline int zn_tracer_span_end(struct zn_tracer *tr, struct zn_stream *s, int h)
{
	return h >= 0 ? zn_tracer_end(tr, s, h) : 0;
}

#endif
