/* Trace files (zinc train --trace FILE): Chrome trace-event JSON, which ui.perfetto.dev
 * and chrome://tracing open (docs/trace.md).
 *
 * A trace is a list of spans: what ran (a static name such as "fwd" and a layer, printed
 * "fwd 3"), on which track (a device stream, the NVMe reads or writes, a CPU AdamW worker,
 * the step), from when to when (CLOCK_MONOTONIC ns) and how many bytes it moved. The
 * engine adds spans during a traced step (src/sched/trace_dev.c times the device's with
 * events); zn_trace_end_step writes the step's spans, each track's overlapping spans
 * spread over lanes ("nvme read", "nvme read 2", ...: a viewer needs the spans of one
 * track nested, and reads ahead overlap). The file is written through zn_atomic_file:
 * it appears whole at zn_trace_close.
 *
 *     struct zn_trace *t;
 *     rc = zn_trace_open(&t, "run.json", 1, 0, rank);   // every step
 *     if (zn_trace_wants(t, step)) ... zn_trace_add(t, ZN_TRACE_COMPUTE, 0, "fwd", 3, t0, t1, 0);
 *     rc = zn_trace_end_step(t, step);
 *     rc = zn_trace_close(t);
 *
 * Off costs nothing: callers hold a NULL pointer (or a false flag) and test it.
 */
#ifndef ZN_CORE_TRACE_H
#define ZN_CORE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

enum zn_trace_track {
	ZN_TRACE_STEP = 0,
	ZN_TRACE_HOST = 1,       /* the calling thread: blocked waits */
	ZN_TRACE_COMPUTE = 2,
	ZN_TRACE_COPY_IN = 3,
	ZN_TRACE_COPY_OUT = 4,
	ZN_TRACE_COMM = 5,
	ZN_TRACE_NVME_READ = 6,
	ZN_TRACE_NVME_WRITE = 7,
	ZN_TRACE_ADAMW = 8,      /* one track per CPU AdamW worker (sub = worker) */
	ZN_TRACE_TRACKS = 9,
};

#define ZN_TRACE_MAX_SUB 64 /* lanes or workers of one track */

struct zn_trace;

/* "A-B" (steps A to B), "A" (step A only) or "A-" (A onwards): 1 <= A <= B. Returns 0 or
 * -EINVAL, logged naming --trace-steps. last 0 means no end. */
int zn_trace_parse_steps(const char *s, int64_t *first, int64_t *last);
/* Begins path (zn_atomic_file: checked now, in place at close). Returns 0 or -errno. */
int zn_trace_open(struct zn_trace **out, const char *path, int64_t first, int64_t last,
		  int rank);
bool zn_trace_wants(const struct zn_trace *t, int64_t step); /* t may be NULL: false */
/* One span; `what` must be a string literal (kept by pointer). layer < 0: no number.
 * sub: the worker of ZN_TRACE_ADAMW (0 elsewhere). */
int zn_trace_add(struct zn_trace *t, int track, int sub, const char *what, int layer,
		 uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes);
/* zn_trace_add of a span that belongs to `step` (>= 0), whichever step's end writes it:
 * NVMe write-behind waited for after its step ended (written at the next end_step or at
 * close). */
int zn_trace_add_step(struct zn_trace *t, int64_t step, int track, int sub, const char *what,
		      int layer, uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes);
/* The steps zn_trace_wants from now on (as zn_trace_open's first and last). */
void zn_trace_set_steps(struct zn_trace *t, int64_t first, int64_t last);
/* Writes the spans added since the last call as belonging to `step` (those added with
 * zn_trace_add_step: to theirs). */
int zn_trace_end_step(struct zn_trace *t, int64_t step);
/* Drops the spans added since the last end_step (a failed step). */
void zn_trace_drop_step(struct zn_trace *t);
/* Ends the JSON, puts the file in place and frees t (accepts NULL). */
int zn_trace_close(struct zn_trace *t);
const char *zn_trace_path(const struct zn_trace *t);
uint64_t zn_trace_now_ns(void);

#endif
