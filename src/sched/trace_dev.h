/* The engine's tracer (zinc train --trace): the spans of a traced step on the device's
 * streams (timed with events, so the same code serves the host device and CUDA), on the
 * NVMe engine (submission to completion) and on the CPU AdamW workers, handed to the trace
 * file (core/trace.h) at the end of the step. State: struct zn_tracer (engine field tr).
 *
 * A stream span is an event recorded on the stream before the work is enqueued and one
 * after; at the end of the step (every stream drained) each event's time is the step's
 * reference event (recorded on the compute stream at the start, and waited for) plus
 * zn_event_elapsed_ms from it. Off, every hook is one test of tr->on (inline below).
 */
#ifndef ZN_SCHED_TRACE_DEV_H
#define ZN_SCHED_TRACE_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "core/trace.h"
#include "gpu/device.h"

struct zn_engine;

struct zn_tracer_pend {
	int track, layer;
	const char *what;
	uint64_t bytes;
	int a, b; /* events in the pool */
};

struct zn_tracer {
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

/* stream spans: begin records the first event and gives a handle (-1 when off) */
int zn_tracer_begin(struct zn_engine *e, struct zn_stream *s, const char *what, int layer,
		    uint64_t bytes, int *h);
int zn_tracer_end(struct zn_engine *e, struct zn_stream *s, int h);
/* a span timed on the host (NVMe, AdamW workers) */
void zn_tracer_host(struct zn_engine *e, int track, int sub, const char *what, int layer,
		    uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes);
int zn_tracer_step_begin(struct zn_engine *e);  /* decides whether this step is traced */
/* after the drain: the step's spans to the file (rc != 0: dropped) */
int zn_tracer_step_end(struct zn_engine *e, int rc);
void zn_tracer_destroy(struct zn_engine *e);

static inline int zn_tr_begin(struct zn_engine *e, bool on, struct zn_stream *s,
			      const char *what, int layer, uint64_t bytes, int *h)
{
	*h = -1;
	return on ? zn_tracer_begin(e, s, what, layer, bytes, h) : 0;
}

static inline int zn_tr_end(struct zn_engine *e, struct zn_stream *s, int h)
{
	return h >= 0 ? zn_tracer_end(e, s, h) : 0;
}

#endif
