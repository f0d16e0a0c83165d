/* The device interface on the host backend: order on a stream, event order across
 * streams, real concurrency between streams, copies, memset, the budget, peak accounting,
 * teardown with queued work, events, fault injection and asking for cuda without a GPU. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device_check.h"
#include "gpu/device.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static struct zn_device *host_device(uint64_t budget_bytes)
{
	struct zn_device_config cfg = { .kind = ZN_DEVICE_HOST, .budget_bytes = budget_bytes };
	struct zn_device *dev = NULL;

	cr_assert_eq(zn_device_create(&dev, &cfg), 0);
	cr_assert_not_null(dev);
	return dev;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* Captures what the code between begin and end writes to stderr (fd 2). */
struct capture {
	int saved_fd;
	FILE *f;
};

static void capture_begin(struct capture *c)
{
	fflush(stderr);
	c->f = tmpfile();
	cr_assert_not_null(c->f);
	c->saved_fd = dup(2);
	cr_assert_geq(c->saved_fd, 0);
	cr_assert_geq(dup2(fileno(c->f), 2), 0);
}

static char *capture_end(struct capture *c)
{
	static char buf[4096];
	size_t n;

	fflush(stderr);
	dup2(c->saved_fd, 2);
	close(c->saved_fd);
	rewind(c->f);
	n = fread(buf, 1, sizeof(buf) - 1, c->f);
	buf[n] = 0;
	fclose(c->f);
	fprintf(stderr, "%s", buf); /* still show it in the test log */
	return buf;
}

/* ---- order on one stream -------------------------------------------------------------------- */

#define LOG_CAP 2048

struct order_log {
	int n;
	int idx[LOG_CAP];
};

struct append_args {
	struct order_log *log;
	int i;
	unsigned char pad[200]; /* larger than any inline buffer, exercises the big ctx path */
};

static void append_small(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct append_args *a = ctx; /* only log and i are used */

	a->log->idx[a->log->n++] = a->i;
}

static void append_big(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct append_args *a = ctx;

	cr_assert_eq(a->pad[199], (unsigned char)a->i, "big ctx was not copied whole");
	a->log->idx[a->log->n++] = a->i;
}

Test(device, one_stream_runs_in_order)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	struct order_log *log = calloc(1, sizeof(*log));
	const int n = 1500;

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	for (int i = 0; i < n; i++) {
		struct append_args a = { .log = log, .i = i };

		a.pad[199] = (unsigned char)i;
		/* Alternate small and large ctx copies; `a` goes out of scope at once. */
		if (i % 2)
			cr_assert_eq(zn_launch(s, append_small, &a, 16), 0);
		else
			cr_assert_eq(zn_launch(s, append_big, &a, sizeof(a)), 0);
	}
	cr_assert_eq(zn_stream_synchronize(s), 0);
	cr_assert_eq(log->n, n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(log->idx[i], i, "entry %d ran as number %d", log->idx[i], i);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
	free(log);
}

struct check_args {
	const uint32_t *buf;
	size_t n;
	uint32_t want;
	_Atomic int *bad;
};

static void fill_u32(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct check_args *a = ctx;

	for (size_t i = 0; i < a->n; i++)
		((uint32_t *)a->buf)[i] = a->want + (uint32_t)i;
}

static void check_u32(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct check_args *a = ctx;

	for (size_t i = 0; i < a->n; i++)
		if (a->buf[i] != a->want + (uint32_t)i)
			atomic_fetch_add(a->bad, 1);
}

/* launch -> copy -> launch on one stream: each sees the previous one's result. */
Test(device, copies_and_launches_keep_stream_order)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	const size_t n = 1 << 16;
	uint32_t *a_d, *b_d;
	_Atomic int bad = 0;

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&a_d, n * 4), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&b_d, n * 4), 0);
	for (uint32_t round = 1; round <= 20; round++) {
		struct check_args fa = { a_d, n, round * 1000003u, &bad };
		struct check_args cb = { b_d, n, round * 1000003u, &bad };

		cr_assert_eq(zn_launch(s, fill_u32, &fa, sizeof(fa)), 0);
		cr_assert_eq(zn_memcpy_async(s, b_d, a_d, n * 4, ZN_COPY_D2D), 0);
		cr_assert_eq(zn_launch(s, check_u32, &cb, sizeof(cb)), 0);
	}
	cr_assert_eq(zn_stream_synchronize(s), 0);
	cr_assert_eq(bad, 0, "%d words read before the copy before them had run", (int)bad);
	zn_device_free(dev, a_d);
	zn_device_free(dev, b_d);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

/* ---- events across streams ------------------------------------------------------------------ */

struct slow_write {
	int ms;
	_Atomic int *cell;
	int value;
};

static void slow_write_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct slow_write *w = ctx;

	sleep_ms(w->ms);
	atomic_store(w->cell, w->value);
}

struct read_cell {
	_Atomic int *cell;
	int *seen;
};

static void read_cell_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct read_cell *r = ctx;

	*r->seen = atomic_load(r->cell);
}

/* B waits on an event recorded on A after a slow launch: B's launch sees A's write. */
Test(device, event_wait_orders_two_streams)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *a, *b;
	struct zn_event *e;

	cr_assert_eq(zn_stream_create(dev, &a), 0);
	cr_assert_eq(zn_stream_create(dev, &b), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	for (int round = 1; round <= 5; round++) {
		_Atomic int cell = 0;
		int seen = -1;
		struct slow_write w = { 30, &cell, 1000 + round };
		struct read_cell r = { &cell, &seen };

		cr_assert_eq(zn_launch(a, slow_write_fn, &w, sizeof(w)), 0);
		cr_assert_eq(zn_event_record(e, a), 0);
		cr_assert_eq(zn_stream_wait_event(b, e), 0);
		cr_assert_eq(zn_launch(b, read_cell_fn, &r, sizeof(r)), 0);
		cr_assert_eq(zn_stream_synchronize(b), 0);
		cr_assert_eq(seen, 1000 + round, "B ran before A's recorded work: saw %d", seen);
		cr_assert(zn_event_query(e), "B finished after waiting on e, so e is complete");
		cr_assert_eq(zn_stream_synchronize(a), 0);
	}
	zn_event_destroy(e);
	zn_stream_destroy(a);
	zn_stream_destroy(b);
	zn_device_destroy(dev);
}

struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int count;
	bool timed_out;
};

static void gate_arrive_and_wait(struct gate *g, int need)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10; /* a serialized implementation fails here instead of hanging */
	pthread_mutex_lock(&g->mu);
	g->count++;
	pthread_cond_broadcast(&g->cv);
	while (g->count < need && !g->timed_out)
		if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT)
			g->timed_out = true;
	pthread_mutex_unlock(&g->mu);
}

struct gate_args {
	struct gate *g;
	int need;
};

static void gate_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct gate_args *a = ctx;

	gate_arrive_and_wait(a->g, a->need);
}

#define GATE_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false }

/* Two launches that rendezvous: each waits for the other, so they deadlock (and time
 * out) unless the two streams really run at the same time. */
Test(device, two_streams_run_concurrently, .timeout = 60)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *a, *b;
	struct gate g = GATE_INIT;
	struct gate_args ga = { &g, 2 };

	cr_assert_eq(zn_stream_create(dev, &a), 0);
	cr_assert_eq(zn_stream_create(dev, &b), 0);
	cr_assert_eq(zn_launch(a, gate_fn, &ga, sizeof(ga)), 0);
	cr_assert_eq(zn_launch(b, gate_fn, &ga, sizeof(ga)), 0);
	cr_assert_eq(zn_stream_synchronize(a), 0);
	cr_assert_eq(zn_stream_synchronize(b), 0);
	cr_assert_not(g.timed_out, "launches on two streams did not overlap");
	cr_assert_eq(g.count, 2);
	zn_stream_destroy(a);
	zn_stream_destroy(b);
	zn_device_destroy(dev);
}

/* A launch on stream A waits (with a timeout) for a copy on stream B that was enqueued
 * after it: it can only see the copy complete if the copy runs while the launch runs. */
struct copy_watch {
	struct zn_event *copied;
	_Atomic int armed; /* set once `copied` has been recorded */
	const unsigned char *dst;
	const unsigned char *want;
	size_t n;
	bool saw_copy;
	bool data_ok;
};

static void watch_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct copy_watch *w = ctx;
	int i;

	for (i = 0; i < 10000 && !atomic_load(&w->armed); i++)
		sleep_ms(1);
	for (; i < 10000 && !w->saw_copy; i++) {
		w->saw_copy = zn_event_query(w->copied);
		if (!w->saw_copy)
			sleep_ms(1);
	}
	if (w->saw_copy)
		w->data_ok = !memcmp(w->dst, w->want, w->n);
}

Test(device, copy_overlaps_launch, .timeout = 60)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *a, *b;
	struct zn_event *copied;
	const size_t n = 1 << 20;
	unsigned char *src_h = malloc(n), *dst_d;
	struct copy_watch w = { 0 };

	fill_random(src_h, n, 7);
	cr_assert_eq(zn_stream_create(dev, &a), 0);
	cr_assert_eq(zn_stream_create(dev, &b), 0);
	cr_assert_eq(zn_event_create(dev, &copied), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&dst_d, n), 0);
	w.copied = copied;
	w.dst = dst_d;
	w.want = src_h;
	w.n = n;
	/* The watcher goes first, so streams run one after the other would time it out. */
	cr_assert_eq(zn_launch(a, watch_fn, &w, 0), 0);
	cr_assert_eq(zn_memcpy_async(b, dst_d, src_h, n, ZN_COPY_H2D), 0);
	cr_assert_eq(zn_event_record(copied, b), 0);
	atomic_store(&w.armed, 1);
	cr_assert_eq(zn_stream_synchronize(a), 0);
	cr_assert(w.saw_copy, "the copy on B did not complete while A's launch ran");
	cr_assert(w.data_ok, "the copy completed but the data differs");
	zn_device_free(dev, dst_d);
	zn_event_destroy(copied);
	zn_stream_destroy(a);
	zn_stream_destroy(b);
	zn_device_destroy(dev);
	free(src_h);
}

/* ---- copies and memset ---------------------------------------------------------------------- */

Test(device, memcpy_round_trip_random)
{
	struct zn_device *dev = host_device(0);
	static const size_t sizes[] = { 1, 7, 256, 4097, 1 << 20, (1 << 20) + 13 };

	check_copy_round_trip(dev, sizes, sizeof(sizes) / sizeof(sizes[0]), 1);
	zn_device_destroy(dev);
}

Test(device, memset_sets_only_its_range)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	const size_t n = 10000, off = 1000, len = 5003;
	unsigned char *buf_d, *want = malloc(n), *got = malloc(n);

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&buf_d, n), 0);
	fill_random(want, n, 99);
	cr_assert_eq(zn_memcpy_async(s, buf_d, want, n, ZN_COPY_H2D), 0);
	cr_assert_eq(zn_memset_async(s, buf_d + off, 0x1a5, len), 0); /* low byte: 0xa5 */
	memset(want + off, 0xa5, len);
	cr_assert_eq(zn_memcpy_async(s, got, buf_d, n, ZN_COPY_D2H), 0);
	cr_assert_eq(zn_stream_synchronize(s), 0);
	assert_bytes_eq(got, want, n, "memset");
	zn_device_free(dev, buf_d);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
	free(want);
	free(got);
}

/* ---- budget and accounting ------------------------------------------------------------------ */

Test(device, budget_overrun_fails_cleanly_and_names_the_budget)
{
	struct zn_device *dev = host_device(1 << 20);
	struct capture c;
	void *a_d, *b_d, *c_d;
	char *msg;
	int rc;

	cr_assert_eq(zn_device_budget_bytes(dev), 1 << 20);
	cr_assert_eq(zn_device_alloc(dev, &a_d, 600 << 10), 0);
	cr_assert_eq(zn_device_used_bytes(dev), 600 << 10);
	capture_begin(&c);
	b_d = (void *)1;
	rc = zn_device_alloc(dev, &b_d, 500 << 10);
	msg = capture_end(&c);
	cr_assert_eq(rc, -ENOMEM);
	cr_assert_null(b_d, "a failed alloc leaves *ptr_d NULL");
	cr_assert_eq(zn_device_used_bytes(dev), 600 << 10, "a failed alloc changed used bytes");
	cr_assert_eq(zn_device_peak_bytes(dev), 600 << 10, "a failed alloc changed the peak");
	cr_assert(strstr(msg, "budget of 1.00 MiB"), "message does not name the budget: %s", msg);
	cr_assert(strstr(msg, "requested 500.00 KiB"), "message lacks the request: %s", msg);
	cr_assert(strstr(msg, "600.00 KiB in use"), "message lacks the usage: %s", msg);
	cr_assert(strstr(msg, "--device-mem"), "message does not say what to change: %s", msg);
	/* Exactly the rest of the budget still fits. */
	cr_assert_eq(zn_device_alloc(dev, &c_d, (1 << 20) - (600 << 10)), 0);
	cr_assert_eq(zn_device_used_bytes(dev), 1 << 20);
	cr_assert_eq(zn_device_alloc(dev, &b_d, 1), -ENOMEM);
	/* An absurd request fails the same way, without overflow. */
	cr_assert_eq(zn_device_alloc(dev, &b_d, UINT64_MAX), -ENOMEM);
	zn_device_free(dev, a_d);
	zn_device_free(dev, c_d);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	zn_device_destroy(dev);
}

Test(device, peak_and_rounding)
{
	struct zn_device *dev = host_device(0);
	void *a_d, *b_d, *c_d, *z_d = (void *)1;

	cr_assert_eq(zn_device_budget_bytes(dev), 1ull << 30, "host default budget is 1 GiB");
	cr_assert_eq(zn_device_alloc(dev, &a_d, 1000), 0); /* counted as 1024 */
	cr_assert_eq(zn_device_alloc(dev, &b_d, 4096), 0);
	cr_assert_eq(zn_device_used_bytes(dev), 1024 + 4096);
	zn_device_free(dev, a_d);
	cr_assert_eq(zn_device_used_bytes(dev), 4096);
	cr_assert_eq(zn_device_peak_bytes(dev), 1024 + 4096);
	cr_assert_eq(zn_device_alloc(dev, &c_d, 256), 0);
	cr_assert_eq(zn_device_peak_bytes(dev), 1024 + 4096, "peak fell or rose wrongly");
	zn_device_reset_peak(dev);
	cr_assert_eq(zn_device_peak_bytes(dev), 4096 + 256);
	cr_assert_eq(zn_device_alloc(dev, &z_d, 0), 0);
	cr_assert_null(z_d, "a zero-byte allocation is NULL");
	cr_assert_eq(zn_device_used_bytes(dev), 4096 + 256);
	zn_device_free(dev, b_d);
	zn_device_free(dev, c_d);
	zn_device_free(dev, NULL);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	cr_assert_eq(zn_device_peak_bytes(dev), 4096 + 256);
	zn_device_destroy(dev);
}

Test(device, many_allocations_and_bad_free)
{
	struct zn_device *dev = host_device(0);
	enum { N = 3000 };
	void **p = calloc(N, sizeof(*p));
	uint64_t want = 0;
	struct capture c;
	char *msg;

	for (int i = 0; i < N; i++) {
		cr_assert_eq(zn_device_alloc(dev, &p[i], (uint64_t)(i % 5 + 1) * 256), 0);
		want += (uint64_t)(i % 5 + 1) * 256;
	}
	cr_assert_eq(zn_device_used_bytes(dev), want);
	/* Free in a scrambled order: every pointer must be found with its own size. */
	for (int k = 0; k < N; k++) {
		int i = (int)(((uint64_t)k * 7919) % N);

		zn_device_free(dev, p[i]);
		want -= (uint64_t)(i % 5 + 1) * 256;
		cr_assert_eq(zn_device_used_bytes(dev), want, "after freeing %d", i);
	}
	capture_begin(&c);
	zn_device_free(dev, p[0]); /* double free: logged, nothing changes */
	msg = capture_end(&c);
	cr_assert(strstr(msg, "already freed"), "double free not reported: %s", msg);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	/* Live allocations at destroy are freed (ASan would report a leak otherwise). */
	cr_assert_eq(zn_device_alloc(dev, &p[0], 4096), 0);
	zn_device_destroy(dev);
	free(p);
}

/* ---- teardown ------------------------------------------------------------------------------- */

struct bump {
	_Atomic int *count;
};

static void bump_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct bump *b = ctx;

	sleep_ms(1);
	atomic_fetch_add(b->count, 1);
}

Test(device, destroy_waits_for_queued_work)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	struct zn_event *e;
	_Atomic int count = 0;
	struct bump b = { &count };

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	for (int i = 0; i < 50; i++)
		cr_assert_eq(zn_launch(s, bump_fn, &b, sizeof(b)), 0);
	cr_assert_eq(zn_event_record(e, s), 0);
	cr_assert_lt(count, 50, "work ran synchronously: the test proves nothing");
	zn_stream_destroy(s);
	cr_assert_eq(count, 50, "stream destroy dropped queued work");
	/* The event outlives its stream and is complete. */
	cr_assert(zn_event_query(e));
	cr_assert_eq(zn_event_synchronize(e), 0);
	zn_event_destroy(e);
	zn_device_destroy(dev);
}

Test(device, event_destroyed_while_marks_are_queued)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *a, *b;
	struct zn_event *e;
	_Atomic int count = 0;
	struct bump bp = { &count };

	cr_assert_eq(zn_stream_create(dev, &a), 0);
	cr_assert_eq(zn_stream_create(dev, &b), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_launch(a, bump_fn, &bp, sizeof(bp)), 0);
	cr_assert_eq(zn_event_record(e, a), 0);
	cr_assert_eq(zn_launch(b, bump_fn, &bp, sizeof(bp)), 0);
	cr_assert_eq(zn_event_record(e, b), 0); /* re-recorded: a's mark still queued */
	cr_assert_eq(zn_stream_wait_event(a, e), 0);
	zn_event_destroy(e); /* the wait entry keeps what it needs */
	cr_assert_eq(zn_stream_synchronize(a), 0);
	cr_assert_eq(count, 2, "a's wait on b's record must have seen b's launch");
	zn_stream_destroy(a);
	zn_stream_destroy(b);
	zn_device_destroy(dev);
}

Test(device, destroy_accepts_null)
{
	zn_stream_destroy(NULL);
	zn_event_destroy(NULL);
	zn_device_destroy(NULL);
	cr_assert_null(zn_stream_native(NULL));
}

/* ---- events --------------------------------------------------------------------------------- */

Test(device, never_recorded_event_is_complete)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	struct zn_event *e, *f;
	float ms = -1;
	_Atomic int count = 0;
	struct bump b = { &count };

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_event_create(dev, &f), 0);
	cr_assert(zn_event_query(e));
	cr_assert_eq(zn_event_synchronize(e), 0);
	cr_assert_eq(zn_stream_wait_event(s, e), 0);
	cr_assert_eq(zn_launch(s, bump_fn, &b, sizeof(b)), 0);
	cr_assert_eq(zn_stream_synchronize(s), 0, "a wait on an unrecorded event blocked");
	cr_assert_eq(count, 1);
	cr_assert_eq(zn_event_elapsed_ms(e, f, &ms), -EINVAL);
	zn_event_destroy(e);
	zn_event_destroy(f);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

struct sleep_args {
	int ms;
};

static void sleep_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	sleep_ms(((struct sleep_args *)ctx)->ms);
}

Test(device, elapsed_time)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;
	struct zn_event *start, *end;
	struct sleep_args sl = { 20 };
	float ms = -1;

	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &start), 0);
	cr_assert_eq(zn_event_create(dev, &end), 0);
	cr_assert_eq(zn_event_record(start, s), 0);
	cr_assert_eq(zn_launch(s, sleep_fn, &sl, sizeof(sl)), 0);
	cr_assert_eq(zn_event_record(end, s), 0);
	/* Not complete yet: the sleep is still running (or queued). */
	if (!zn_event_query(end))
		cr_assert_eq(zn_event_elapsed_ms(start, end, &ms), -EAGAIN);
	cr_assert_eq(zn_event_synchronize(end), 0);
	cr_assert(zn_event_query(start));
	cr_assert_eq(zn_event_elapsed_ms(start, end, &ms), 0);
	cr_assert_geq(ms, 0.0f);
	/* The 20 ms sleep lies between the marks; nanosleep never returns early. */
	cr_assert_geq(ms, 19.9f, "elapsed %.3f ms across a 20 ms sleep", ms);
	zn_event_destroy(start);
	zn_event_destroy(end);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

/* ---- fault injection ------------------------------------------------------------------------ */

Test(device, inject_alloc_failure)
{
	struct zn_device *dev = host_device(0);
	void *p[4];

	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_ALLOC, 2);
	cr_assert_eq(zn_device_alloc(dev, &p[0], 512), 0);
	cr_assert_eq(zn_device_alloc(dev, &p[1], 512), -ENOMEM, "the 2nd allocation must fail");
	cr_assert_null(p[1]);
	cr_assert_eq(zn_device_used_bytes(dev), 512);
	cr_assert_eq(zn_device_alloc(dev, &p[2], 512), 0, "the fault fires once");
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_ALLOC, 1);
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_ALLOC, 0); /* disarmed */
	cr_assert_eq(zn_device_alloc(dev, &p[3], 512), 0);
	zn_device_free(dev, p[0]);
	zn_device_free(dev, p[2]);
	zn_device_free(dev, p[3]);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	zn_device_destroy(dev);
}

Test(device, inject_half_built_stream_and_event)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s = (void *)1;
	struct zn_event *e = (void *)1;

	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_STREAM, 1);
	cr_assert_eq(zn_stream_create(dev, &s), -ENOMEM);
	cr_assert_null(s);
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_EVENT, 1);
	cr_assert_eq(zn_event_create(dev, &e), -ENOMEM);
	cr_assert_null(e);
	/* Both work again afterwards. */
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_event_record(e, s), 0);
	cr_assert_eq(zn_event_synchronize(e), 0);
	zn_event_destroy(e);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

Test(device, inject_from_environment)
{
	struct zn_device *dev;
	void *a_d, *b_d;

	setenv("ZINC_DEVICE_FAIL_ALLOC", "2", 1);
	dev = host_device(0);
	unsetenv("ZINC_DEVICE_FAIL_ALLOC");
	cr_assert_eq(zn_device_alloc(dev, &a_d, 256), 0);
	cr_assert_eq(zn_device_alloc(dev, &b_d, 256), -ENOMEM);
	cr_assert_eq(zn_device_alloc(dev, &b_d, 256), 0);
	zn_device_free(dev, a_d);
	zn_device_free(dev, b_d);
	zn_device_destroy(dev);
}

/* ---- backend selection and bad arguments ---------------------------------------------------- */

Test(device, host_identity)
{
	struct zn_device *dev = host_device(0);
	struct zn_stream *s;

	cr_assert_eq(zn_device_kind_of(dev), ZN_DEVICE_HOST);
	cr_assert_str_eq(zn_device_name(dev), "host");
	cr_assert_eq(zn_device_kernels(dev), &zn_kernels_cpu);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_null(zn_stream_native(s));
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

Test(device, cuda_without_gpu_is_enodev)
{
	struct zn_device_config cfg = { .kind = ZN_DEVICE_CUDA };
	struct zn_device *dev = (void *)1;
	struct capture c;
	char *msg;
	int rc;

	if (zn_device_cuda_count() > 0)
		cr_skip_test("a GPU is visible: this checks the no-GPU path (test_gpu_device "
			     "covers the GPU)");
	capture_begin(&c);
	rc = zn_device_create(&dev, &cfg);
	msg = capture_end(&c);
	cr_assert_eq(rc, -ENODEV);
	cr_assert_null(dev);
	cr_assert(strstr(msg, "--device host"), "message does not say what to do: %s", msg);

	/* auto falls back to host and says so. */
	cfg.kind = ZN_DEVICE_AUTO;
	capture_begin(&c);
	rc = zn_device_create(&dev, &cfg);
	msg = capture_end(&c);
	cr_assert_eq(rc, 0);
	cr_assert_eq(zn_device_kind_of(dev), ZN_DEVICE_HOST);
	cr_assert(strstr(msg, "auto picked host"), "auto did not log its choice: %s", msg);
	zn_device_destroy(dev);
}

Test(device, bad_arguments)
{
	struct zn_device_config cfg = { .kind = (enum zn_device_kind)7 };
	struct zn_device *dev;
	struct zn_stream *s;
	unsigned char buf[16];

	cr_assert_eq(zn_device_create(&dev, &cfg), -EINVAL);
	dev = host_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_memcpy_async(s, NULL, buf, 16, ZN_COPY_H2D), -EINVAL);
	cr_assert_eq(zn_memcpy_async(s, buf, buf, 16, (enum zn_copy_kind)9), -EINVAL);
	cr_assert_eq(zn_memcpy_async(s, NULL, NULL, 0, ZN_COPY_D2D), 0, "zero bytes: no-op");
	cr_assert_eq(zn_memset_async(s, NULL, 0, 16), -EINVAL);
	cr_assert_eq(zn_launch(s, NULL, NULL, 0), -EINVAL);
	cr_assert_eq(zn_launch(s, sleep_fn, NULL, 8), -EINVAL);
	cr_assert_eq(zn_stream_wait_event(s, NULL), -EINVAL);
	cr_assert_eq(zn_stream_synchronize(NULL), -EINVAL);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}
