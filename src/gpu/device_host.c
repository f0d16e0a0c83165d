/* The host backend: an emulated device, so every budget, tier path and overlap can be
 * built and tested without a GPU.
 *
 * Memory is aligned_alloc'd host memory (device.c counts it against the budget). Each
 * stream is a worker thread running a FIFO queue of entries (copy, memset, launch, event
 * mark, event wait) one at a time, so work on one stream runs in order and work on
 * different streams really runs concurrently. Every entry gets the queue's next sequence
 * number when enqueued; the worker publishes the number of the last entry it finished
 * (`completed`) and broadcasts done_cv. An event is (queue, sequence number): recording
 * enqueues a mark entry, which also stamps the completion time for zn_event_elapsed_ms;
 * waiting enqueues an entry that blocks its worker until the other queue's `completed`
 * reaches that number.
 *
 * Queues are reference counted (the stream, each event recorded on it and each pending
 * wait entry hold one), so an event or a wait may outlive the stream it refers to: a
 * stream's destroy drains its queue first, so its counter is final by then.
 *
 * Lock order: event mu before queue mu; a worker holds no lock while it runs an entry.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "gpu/device_impl.h"

#define HOST_DEFAULT_BUDGET_BYTES (1ull << 30)

enum host_op {
	HOST_OP_COPY,
	HOST_OP_SET,
	HOST_OP_LAUNCH,
	HOST_OP_MARK,
	HOST_OP_WAIT,
};

struct host_queue;
struct host_event;

struct host_entry {
	struct host_entry *next;
	enum host_op op;
	uint64_t seq;
	union {
		struct {
			void *dst;
			const void *src;
			uint64_t bytes;
		} copy;
		struct {
			void *dst;
			int value;
			uint64_t bytes;
		} set;
		struct {
			zn_launch_fn fn;
			void *ctx;
		} launch;
		struct host_event *mark;
		struct {
			struct host_queue *q; /* holds a reference */
			uint64_t seq;
		} wait;
	} u;
	/* A launch's copied ctx lives here, in the same allocation as the entry. */
	_Alignas(max_align_t) unsigned char ctx[];
};

struct host_queue {
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* worker: an entry arrived or stop was set */
	pthread_cond_t done_cv; /* waiters: completed moved */
	struct host_entry *head, *tail;
	uint64_t enqueued;  /* seq of the last entry put on */
	uint64_t completed; /* seq of the last entry finished */
	bool stop;
	_Atomic int refs;
	const struct zn_kernel_table *kernels;
	pthread_t thread;
	bool thread_started;
};

struct host_event {
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* marks_pending reached 0 */
	struct host_queue *q; /* last record's queue (holds a reference); NULL = never */
	uint64_t seq;
	uint64_t done_ns; /* CLOCK_MONOTONIC when the last record's mark ran */
	bool timed;
	int marks_pending; /* mark entries still queued that point at this event */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- device ----------------------------------------------------------------------------- */

static int host_init(struct zn_device *dev, const struct zn_device_config *cfg)
{
	snprintf(dev->name, sizeof(dev->name), "host");
	dev->kernels = &zn_kernels_cpu;
	if (!dev->budget_bytes)
		dev->budget_bytes = HOST_DEFAULT_BUDGET_BYTES;
	return 0;
}

static void host_fini(struct zn_device *dev)
{
}

static int host_alloc(struct zn_device *dev, void **ptr_d, uint64_t bytes)
{
	char b[32];

	/* bytes is a multiple of 256, as aligned_alloc requires. */
	*ptr_d = aligned_alloc(ZN_DEVICE_ALIGN_BYTES, bytes);
	if (!*ptr_d) {
		zn_error("host device: out of host memory allocating %s",
			 zn_device_fmt_bytes(b, bytes));
		return -ENOMEM;
	}
	return 0;
}

static void host_free(struct zn_device *dev, void *ptr_d)
{
	free(ptr_d);
}

/* ---- queues ----------------------------------------------------------------------------- */

static void queue_ref(struct host_queue *q)
{
	atomic_fetch_add(&q->refs, 1);
}

static void queue_unref(struct host_queue *q)
{
	if (!q || atomic_fetch_sub(&q->refs, 1) != 1)
		return;
	pthread_cond_destroy(&q->done_cv);
	pthread_cond_destroy(&q->work_cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

static void wait_completed(struct host_queue *q, uint64_t seq)
{
	pthread_mutex_lock(&q->mu);
	while (q->completed < seq)
		pthread_cond_wait(&q->done_cv, &q->mu);
	pthread_mutex_unlock(&q->mu);
}

static void run_mark(struct host_queue *q, struct host_entry *e)
{
	struct host_event *ev = e->u.mark;

	pthread_mutex_lock(&ev->mu);
	/* Only the event's latest record stamps it; an older mark just retires. */
	if (ev->q == q && ev->seq == e->seq) {
		ev->done_ns = now_ns();
		ev->timed = true;
	}
	if (--ev->marks_pending == 0)
		pthread_cond_broadcast(&ev->cv);
	pthread_mutex_unlock(&ev->mu);
}

static void run_entry(struct host_queue *q, struct host_entry *e)
{
	switch (e->op) {
	case HOST_OP_COPY:
		memmove(e->u.copy.dst, e->u.copy.src, e->u.copy.bytes);
		break;
	case HOST_OP_SET:
		memset(e->u.set.dst, e->u.set.value, e->u.set.bytes);
		break;
	case HOST_OP_LAUNCH:
		e->u.launch.fn(e->u.launch.ctx, NULL, q->kernels);
		break;
	case HOST_OP_MARK:
		run_mark(q, e);
		break;
	case HOST_OP_WAIT:
		/* The cross-stream order: nothing after this entry starts before the other
		 * queue has finished the recorded entry. */
		wait_completed(e->u.wait.q, e->u.wait.seq);
		queue_unref(e->u.wait.q);
		break;
	}
}

static void *host_worker(void *arg)
{
	struct host_queue *q = arg;
	struct host_entry *e;

	for (;;) {
		pthread_mutex_lock(&q->mu);
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->work_cv, &q->mu);
		e = q->head;
		if (!e) { /* stop was set and the queue is drained */
			pthread_mutex_unlock(&q->mu);
			return NULL;
		}
		q->head = e->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->mu);

		run_entry(q, e);

		pthread_mutex_lock(&q->mu);
		q->completed = e->seq;
		pthread_cond_broadcast(&q->done_cv);
		pthread_mutex_unlock(&q->mu);
		free(e);
	}
}

static struct host_entry *entry_new(enum host_op op, uint64_t ctx_bytes)
{
	struct host_entry *e = malloc(sizeof(*e) + ctx_bytes);

	if (!e) {
		zn_error("host device: out of host memory for a stream queue entry");
		return NULL;
	}
	memset(e, 0, sizeof(*e));
	e->op = op;
	return e;
}

/* Appends e and returns its sequence number. */
static uint64_t enqueue(struct host_queue *q, struct host_entry *e)
{
	uint64_t seq;

	pthread_mutex_lock(&q->mu);
	seq = ++q->enqueued;
	e->seq = seq;
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	pthread_cond_signal(&q->work_cv);
	pthread_mutex_unlock(&q->mu);
	return seq;
}

/* ---- streams ---------------------------------------------------------------------------- */

static int host_stream_init(struct zn_stream *s)
{
	struct host_queue *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	q->work_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
	q->done_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
	q->refs = 1;
	q->kernels = s->dev->kernels;
	s->impl = q;
	/* Injected here, with the queue built and no thread, to walk the half-built path. */
	if (zn_device_fault_hit(s->dev, ZN_DEVICE_FAULT_STREAM))
		return -ENOMEM;
	rc = pthread_create(&q->thread, NULL, host_worker, q);
	if (rc) {
		zn_error("host device: pthread_create for a stream worker failed: %s",
			 strerror(rc));
		return -rc;
	}
	q->thread_started = true;
	return 0;
}

static void host_stream_fini(struct zn_stream *s)
{
	struct host_queue *q = s->impl;

	if (!q)
		return;
	if (q->thread_started) {
		/* The worker drains what is queued, then exits. */
		pthread_mutex_lock(&q->mu);
		q->stop = true;
		pthread_cond_signal(&q->work_cv);
		pthread_mutex_unlock(&q->mu);
		pthread_join(q->thread, NULL);
	}
	queue_unref(q);
	s->impl = NULL;
}

static int host_stream_sync(struct zn_stream *s)
{
	struct host_queue *q = s->impl;
	uint64_t seq;

	pthread_mutex_lock(&q->mu);
	seq = q->enqueued;
	pthread_mutex_unlock(&q->mu);
	wait_completed(q, seq);
	return 0;
}

static int host_memcpy_async(struct zn_stream *s, void *dst, const void *src, uint64_t bytes,
			     enum zn_copy_kind kind)
{
	struct host_entry *e = entry_new(HOST_OP_COPY, 0);

	if (!e)
		return -ENOMEM;
	e->u.copy.dst = dst;
	e->u.copy.src = src;
	e->u.copy.bytes = bytes;
	enqueue(s->impl, e);
	return 0;
}

static int host_memset_async(struct zn_stream *s, void *dst_d, int value, uint64_t bytes)
{
	struct host_entry *e = entry_new(HOST_OP_SET, 0);

	if (!e)
		return -ENOMEM;
	e->u.set.dst = dst_d;
	e->u.set.value = value;
	e->u.set.bytes = bytes;
	enqueue(s->impl, e);
	return 0;
}

static int host_launch(struct zn_stream *s, zn_launch_fn fn, const void *ctx,
		       uint64_t ctx_bytes)
{
	struct host_entry *e;

	if (ctx_bytes > (1ull << 30)) {
		zn_error("zn_launch: ctx of %" PRIu64 " bytes is too large to copy; pass a "
			 "pointer with ctx_bytes 0", ctx_bytes);
		return -EINVAL;
	}
	e = entry_new(HOST_OP_LAUNCH, ctx_bytes);
	if (!e)
		return -ENOMEM;
	e->u.launch.fn = fn;
	if (ctx_bytes) {
		memcpy(e->ctx, ctx, ctx_bytes);
		e->u.launch.ctx = e->ctx;
	} else {
		e->u.launch.ctx = (void *)ctx;
	}
	enqueue(s->impl, e);
	return 0;
}

/* ---- events ----------------------------------------------------------------------------- */

static int host_event_init(struct zn_event *e)
{
	struct host_event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	ev->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	ev->cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
	e->impl = ev;
	if (zn_device_fault_hit(e->dev, ZN_DEVICE_FAULT_EVENT))
		return -ENOMEM;
	return 0;
}

static void host_event_fini(struct zn_event *e)
{
	struct host_event *ev = e->impl;

	if (!ev)
		return;
	/* Queued marks point at ev: let them retire before it goes. */
	pthread_mutex_lock(&ev->mu);
	while (ev->marks_pending > 0)
		pthread_cond_wait(&ev->cv, &ev->mu);
	pthread_mutex_unlock(&ev->mu);
	queue_unref(ev->q);
	pthread_cond_destroy(&ev->cv);
	pthread_mutex_destroy(&ev->mu);
	free(ev);
	e->impl = NULL;
}

static int host_event_record(struct zn_event *e, struct zn_stream *s)
{
	struct host_event *ev = e->impl;
	struct host_queue *q = s->impl;
	struct host_entry *m = entry_new(HOST_OP_MARK, 0);
	struct host_queue *old;

	if (!m)
		return -ENOMEM;
	m->u.mark = ev;
	pthread_mutex_lock(&ev->mu);
	old = ev->q;
	queue_ref(q);
	ev->q = q;
	ev->timed = false;
	ev->marks_pending++;
	/* Enqueued under ev->mu so the mark cannot run before ev names its seq. */
	ev->seq = enqueue(q, m);
	pthread_mutex_unlock(&ev->mu);
	queue_unref(old);
	return 0;
}

/* Snapshot of where the event points, holding a reference to its queue. */
static struct host_queue *event_target(struct host_event *ev, uint64_t *seq)
{
	struct host_queue *q;

	pthread_mutex_lock(&ev->mu);
	q = ev->q;
	*seq = ev->seq;
	if (q)
		queue_ref(q);
	pthread_mutex_unlock(&ev->mu);
	return q;
}

static int host_stream_wait_event(struct zn_stream *s, struct zn_event *e)
{
	struct host_entry *w = entry_new(HOST_OP_WAIT, 0);
	uint64_t seq;
	struct host_queue *q;

	if (!w)
		return -ENOMEM;
	q = event_target(e->impl, &seq);
	if (!q) {
		free(w);
		return 0;
	}
	w->u.wait.q = q; /* the entry owns this reference */
	w->u.wait.seq = seq;
	enqueue(s->impl, w);
	return 0;
}

static bool host_event_query(struct zn_event *e)
{
	uint64_t seq;
	struct host_queue *q = event_target(e->impl, &seq);
	bool done;

	if (!q)
		return true;
	pthread_mutex_lock(&q->mu);
	done = q->completed >= seq;
	pthread_mutex_unlock(&q->mu);
	queue_unref(q);
	return done;
}

static int host_event_sync(struct zn_event *e)
{
	uint64_t seq;
	struct host_queue *q = event_target(e->impl, &seq);

	if (!q)
		return 0;
	wait_completed(q, seq);
	queue_unref(q);
	return 0;
}

static int host_event_elapsed_ms(struct zn_event *start, struct zn_event *end, float *ms)
{
	struct host_event *a = start->impl, *b = end->impl;
	uint64_t ta, tb;
	bool ok;

	if (!host_event_query(start) || !host_event_query(end))
		return -EAGAIN;
	pthread_mutex_lock(&a->mu);
	ok = a->timed;
	ta = a->done_ns;
	pthread_mutex_unlock(&a->mu);
	pthread_mutex_lock(&b->mu);
	ok = ok && b->timed;
	tb = b->done_ns;
	pthread_mutex_unlock(&b->mu);
	if (!ok)
		return -EAGAIN; /* re-recorded between the query and here */
	*ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
	return 0;
}

const struct zn_device_ops zn_device_host_ops = {
	.name = "host",
	.init = host_init,
	.fini = host_fini,
	.alloc = host_alloc,
	.free = host_free,
	.stream_init = host_stream_init,
	.stream_fini = host_stream_fini,
	.stream_sync = host_stream_sync,
	.memcpy_async = host_memcpy_async,
	.memset_async = host_memset_async,
	.launch = host_launch,
	.event_init = host_event_init,
	.event_fini = host_event_fini,
	.event_record = host_event_record,
	.stream_wait_event = host_stream_wait_event,
	.event_query = host_event_query,
	.event_sync = host_event_sync,
	.event_elapsed_ms = host_event_elapsed_ms,
	.stream_native = NULL, /* no native stream under host */
};
