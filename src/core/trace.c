/* Trace files: spans buffered per step, written as Chrome trace-event JSON (trace.h).
 *
 * Format (the JSON Object Format of the Trace Event Format): {"displayTimeUnit":"ms",
 * "traceEvents":[...]} with one complete event ("ph":"X", ts and dur in microseconds from
 * the trace's open) per span, pid the rank, tid the track (track x 100 + lane or worker),
 * args {"step", "layer", "bytes"}; at close, metadata events name each track used
 * (thread_name) and order them (thread_sort_index). Written with fprintf-style formatting
 * into a buffer, then zn_write_all: every name is one of ours (no escaping needed).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fsio.h"
#include "core/log.h"
#include "core/trace.h"

#define TIDS (ZN_TRACE_TRACKS * 100)

struct span {
	int track, sub, layer;
	const char *what;
	uint64_t t0, t1, bytes;
	int64_t step; /* < 0: the step zn_trace_end_step names */
};

struct zn_trace {
	struct zn_atomic_file af;
	int64_t first, last;
	int rank;
	uint64_t base_ns;
	struct span *sp;
	size_t n, cap;
	char *buf;
	size_t len, bcap;
	bool any; /* an event was written (a comma goes before the next) */
	bool used[TIDS];
	int failed; /* first write error: later writes are skipped */
};

static const char *const track_names[ZN_TRACE_TRACKS] = {
	"step", "host", "compute", "copy-in", "copy-out", "comm", "nvme read", "nvme write",
	"adamw worker",
};

uint64_t zn_trace_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int zn_trace_parse_steps(const char *s, int64_t *first, int64_t *last)
{
	char *end;
	long long a, b = 0;

	a = strtoll(s, &end, 10);
	if (end != s && *end == '-' && end[1]) {
		const char *q = end + 1;

		b = strtoll(q, &end, 10);
		if (end == q)
			b = -1;
	} else if (end != s && *end == '-') {
		end++; /* "A-": no end */
	} else if (end != s) {
		b = a;
	}
	if (end == s || *end || a < 1 || b < 0 || (b && b < a)) {
		zn_error("--trace-steps '%s': use A-B (steps A to B, 1 <= A <= B), A (one step) or "
			 "A- (from A on)", s);
		return -EINVAL;
	}
	*first = a;
	*last = b;
	return 0;
}

int zn_trace_open(struct zn_trace **out, const char *path, int64_t first, int64_t last,
		  int rank)
{
	struct zn_trace *t = calloc(1, sizeof(*t));
	static const char head[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
	int rc;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->first = first;
	t->last = last;
	t->rank = rank;
	t->base_ns = zn_trace_now_ns();
	rc = zn_atomic_file_begin(&t->af, path, "--trace");
	if (!rc)
		rc = zn_write_all(t->af.fd, head, sizeof(head) - 1, path);
	if (rc) {
		zn_atomic_file_abort(&t->af);
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

const char *zn_trace_path(const struct zn_trace *t)
{
	return t ? t->af.path : NULL;
}

bool zn_trace_wants(const struct zn_trace *t, int64_t step)
{
	return t && step >= t->first && (!t->last || step <= t->last);
}

int zn_trace_add(struct zn_trace *t, int track, int sub, const char *what, int layer,
		 uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes)
{
	return zn_trace_add_step(t, -1, track, sub, what, layer, t0_ns, t1_ns, bytes);
}

void zn_trace_set_steps(struct zn_trace *t, int64_t first, int64_t last)
{
	t->first = first;
	t->last = last;
}

int zn_trace_add_step(struct zn_trace *t, int64_t step, int track, int sub, const char *what,
		      int layer, uint64_t t0_ns, uint64_t t1_ns, uint64_t bytes)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 256;
		struct span *sp = realloc(t->sp, cap * sizeof(*sp));

		if (!sp)
			return -ENOMEM;
		t->sp = sp;
		t->cap = cap;
	}
	if (sub < 0 || sub >= ZN_TRACE_MAX_SUB)
		sub = ZN_TRACE_MAX_SUB - 1;
	t->sp[t->n++] = (struct span){ track, sub, layer, what, t0_ns,
				       t1_ns > t0_ns ? t1_ns : t0_ns, bytes, step };
	return 0;
}

void zn_trace_drop_step(struct zn_trace *t)
{
	if (t)
		t->n = 0;
}

/* printf into the step's buffer */
static void emit(struct zn_trace *t, const char *fmt, ...)
{
	va_list ap;
	int k;

	for (;;) {
		size_t room = t->bcap - t->len;

		va_start(ap, fmt);
		k = vsnprintf(t->buf ? t->buf + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (k < 0) {
			t->failed = -EINVAL;
			return;
		}
		if ((size_t)k < room) {
			t->len += (size_t)k;
			return;
		}
		size_t cap = t->bcap ? 2 * t->bcap : 65536;
		char *b;

		while (cap - t->len <= (size_t)k)
			cap *= 2;
		b = realloc(t->buf, cap);
		if (!b) {
			t->failed = -ENOMEM;
			return;
		}
		t->buf = b;
		t->bcap = cap;
	}
}

static int flush(struct zn_trace *t)
{
	int rc = t->failed;

	if (!rc && t->len)
		rc = zn_write_all(t->af.fd, t->buf, t->len, t->af.path);
	t->len = 0;
	if (rc && !t->failed)
		t->failed = rc;
	return rc;
}

static int by_track_start(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->track != y->track)
		return x->track < y->track ? -1 : 1;
	if (x->sub != y->sub)
		return x->sub < y->sub ? -1 : 1;
	if (x->t0 != y->t0)
		return x->t0 < y->t0 ? -1 : 1;
	return x->t1 < y->t1 ? 1 : (x->t1 > y->t1 ? -1 : 0);
}

static double us_of(const struct zn_trace *t, uint64_t ns)
{
	return ns >= t->base_ns ? (double)(ns - t->base_ns) / 1e3 :
				  -(double)(t->base_ns - ns) / 1e3;
}

int zn_trace_end_step(struct zn_trace *t, int64_t step)
{
	uint64_t lane_end[ZN_TRACE_MAX_SUB];
	int group_track = -1, group_sub = -1;

	if (!t || t->failed)
		return t ? t->failed : 0;
	qsort(t->sp, t->n, sizeof(*t->sp), by_track_start);
	for (size_t i = 0; i < t->n; i++) {
		const struct span *s = &t->sp[i];
		int64_t sstep = s->step >= 0 ? s->step : step;
		int lane = 0, tid;

		if (s->track != group_track || s->sub != group_sub) {
			memset(lane_end, 0, sizeof(lane_end));
			group_track = s->track;
			group_sub = s->sub;
		}
		/* the first lane free at the span's start (the adamw track's sub is its worker,
		 * whose spans never overlap) */
		if (s->track != ZN_TRACE_ADAMW) {
			while (lane < ZN_TRACE_MAX_SUB - 1 && lane_end[lane] > s->t0)
				lane++;
			lane_end[lane] = s->t1;
		}
		tid = s->track * 100 + (s->track == ZN_TRACE_ADAMW ? s->sub : lane);
		t->used[tid] = true;
		emit(t, "%s{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"",
		     t->any ? ",\n" : "", t->rank, tid, us_of(t, s->t0),
		     (double)(s->t1 - s->t0) / 1e3);
		if (s->track == ZN_TRACE_STEP)
			emit(t, "step %" PRId64 "\"", sstep);
		else if (s->layer >= 0)
			emit(t, "%s %d\"", s->what, s->layer);
		else
			emit(t, "%s\"", s->what);
		emit(t, ",\"args\":{\"step\":%" PRId64, sstep);
		if (s->layer >= 0 && s->track != ZN_TRACE_STEP)
			emit(t, ",\"layer\":%d", s->layer);
		if (s->bytes)
			emit(t, ",\"bytes\":%" PRIu64, s->bytes);
		emit(t, "}}");
		t->any = true;
	}
	t->n = 0;
	return flush(t);
}

int zn_trace_close(struct zn_trace *t)
{
	int rc;

	if (!t)
		return 0;
	/* spans added after the last traced step (its write-behind, waited for later) */
	if (t->n)
		zn_trace_end_step(t, -1);
	emit(t, "%s{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":"
	     "\"zinc rank %d\"}}", t->any ? ",\n" : "", t->rank, t->rank);
	for (int tid = 0; tid < TIDS; tid++) {
		int track = tid / 100, sub = tid % 100;

		if (!t->used[tid])
			continue;
		if (track == ZN_TRACE_ADAMW)
			emit(t, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
			     "\"args\":{\"name\":\"%s %d\"}}", t->rank, tid, track_names[track], sub);
		else if (sub)
			emit(t, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
			     "\"args\":{\"name\":\"%s %d\"}}", t->rank, tid, track_names[track],
			     sub + 1);
		else
			emit(t, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
			     "\"args\":{\"name\":\"%s\"}}", t->rank, tid, track_names[track]);
		emit(t, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
		     "\"args\":{\"sort_index\":%d}}", t->rank, tid, tid);
	}
	emit(t, "\n]}\n");
	rc = flush(t);
	if (!rc)
		rc = zn_atomic_file_commit(&t->af);
	else
		zn_atomic_file_abort(&t->af);
	free(t->sp);
	free(t->buf);
	free(t);
	return rc;
}
