/* The io_uring backend: one ring and one worker thread per `intra_op_parallelism`.
 *
 * Each worker keeps up to queue_depth pieces in flight: it takes pieces from the engine
 * queue into free slots, prepares one SQE each (READ_FIXED/WRITE_FIXED when the buffer is
 * registered, IOSQE_FIXED_FILE when the file is), submits the batch and waits for at least
 * one completion in the same io_uring_enter. A worker with free slots and nothing to take
 * sleeps in the kernel on its ring; an eventfd read kept armed on the ring is how a
 * submitter wakes it. Short transfers and EINTR/EAGAIN go straight back on the ring.
 * Accounting (aio.c) happens once per batch of completions under the engine lock.
 */
#include "nvme/aio_impl.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"

#define WAKE_TAG UINT64_MAX

struct zn_ring {
	struct zn_aio *aio;
	int index;
	struct io_uring uring;
	bool uring_ok;
	int wake_fd;
	uint64_t wake_buf;
	pthread_t thread;
	bool thread_ok;
	bool sleeping; /* aio->lock: has free slots and waits; wake it for new work */
	int broken;    /* a fatal submit error: pieces taken from now on fail with it */
	int slot_count;
	struct zn_aio_piece *slots;
	int *free_slots;
	int free_count;
};

struct zn_uring_be {
	int ring_count;
	struct zn_ring rings[];
};

static void prep_piece(struct zn_ring *r, int slot)
{
	struct zn_aio_piece *p = &r->slots[slot];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
	char *mem = p->mem + p->done;
	unsigned len = p->bytes - p->done;
	uint64_t off = p->offset + p->done;

	/* The ring has queue_depth + 1 entries and every SQE is submitted before the worker
	 * waits, so there is always room. */
	if (p->op == ZN_AIO_READ) {
		if (p->buf_index >= 0)
			io_uring_prep_read_fixed(sqe, p->fd, mem, len, off, p->buf_index);
		else
			io_uring_prep_read(sqe, p->fd, mem, len, off);
	} else {
		if (p->buf_index >= 0)
			io_uring_prep_write_fixed(sqe, p->fd, mem, len, off, p->buf_index);
		else
			io_uring_prep_write(sqe, p->fd, mem, len, off);
	}
	if (p->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, (uint64_t)slot);
	zn_aio_piece_issue(r->aio, p);
	if (r->aio->cfg.single_submit)
		io_uring_submit(&r->uring);
}

static void arm_wake(struct zn_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);

	io_uring_prep_read(sqe, r->wake_fd, &r->wake_buf, sizeof(r->wake_buf), 0);
	io_uring_sqe_set_data64(sqe, WAKE_TAG);
}

/* Takes pieces into free slots (lock held); returns how many, and in *wait_ns how long the
 * rate cap holds the next one back. */
static int take_pieces_locked(struct zn_ring *r, int *taken, uint64_t *wait_ns)
{
	struct zn_aio *aio = r->aio;
	int n = 0;

	*wait_ns = 0;
	/* Without overlap_events a batch is drained completely before the next one starts. */
	if (!aio->cfg.overlap_events && r->free_count < r->slot_count)
		return 0;
	while (r->free_count > 0) {
		int slot = r->free_slots[r->free_count - 1];

		if (!zn_aio_take_locked(aio, &r->slots[slot], wait_ns))
			break;
		r->free_count--;
		taken[n++] = slot;
	}
	return n;
}

/* Fails the pieces a broken ring took (lock held). */
static bool fail_taken_locked(struct zn_ring *r, const int *taken, int n)
{
	bool any = false;
	int i;

	for (i = 0; i < n; i++) {
		r->slots[taken[i]].err = r->broken;
		any |= zn_aio_finish_locked(r->aio, &r->slots[taken[i]]);
		r->free_slots[r->free_count++] = taken[i];
	}
	return any;
}

/* Submits what is prepared and waits for one completion or wait_ns. Returns 0 or a fatal
 * -errno. */
static int submit_and_wait(struct zn_ring *r, uint64_t wait_ns)
{
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts;
	int rc;

	if (wait_ns) {
		ts.tv_sec = (long long)(wait_ns / 1000000000u);
		ts.tv_nsec = (long long)(wait_ns % 1000000000u);
		rc = io_uring_submit_and_wait_timeout(&r->uring, &cqe, 1, &ts, NULL);
	} else {
		rc = io_uring_submit_and_wait(&r->uring, 1);
	}
	if (rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY)
		return 0;
	return rc;
}

/* Reaps every completion; finished pieces go to done[], the rest back on the ring. */
static int reap(struct zn_ring *r, int *done)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	bool rearm = false;
	int n = 0;

	io_uring_for_each_cqe(&r->uring, head, cqe) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);

		seen++;
		if (tag == WAKE_TAG) {
			rearm = true;
			continue;
		}
		switch (zn_aio_piece_result(r->aio, &r->slots[tag], cqe->res)) {
		case ZN_PIECE_AGAIN:
			prep_piece(r, (int)tag);
			break;
		case ZN_PIECE_DONE:
		case ZN_PIECE_FAILED:
			done[n++] = (int)tag;
			break;
		}
	}
	io_uring_cq_advance(&r->uring, seen);
	if (rearm)
		arm_wake(r);
	return n;
}

static void *ring_main(void *arg)
{
	struct zn_ring *r = arg;
	struct zn_aio *aio = r->aio;
	int *taken = calloc((size_t)r->slot_count * 2, sizeof(int));
	int *done = taken + r->slot_count;
	uint64_t wait_ns;
	int i, n, rc;

	if (!taken) {
		r->broken = -ENOMEM;
		return NULL;
	}
	arm_wake(r);
	for (;;) {
		bool finished = false, stop;

		pthread_mutex_lock(&aio->lock);
		r->sleeping = false;
		n = take_pieces_locked(r, taken, &wait_ns);
		if (r->broken)
			finished = fail_taken_locked(r, taken, n), n = 0;
		stop = aio->stopping && !aio->head && r->free_count == r->slot_count;
		/* waiting for a completion, or for the rate cap: new work (the other
		 * direction, which the cap may let through) wakes it */
		if (r->free_count > 0 && (!n || wait_ns))
			r->sleeping = true;
		if (finished)
			pthread_cond_broadcast(&aio->done_cv);
		pthread_mutex_unlock(&aio->lock);
		if (stop)
			break;
		for (i = 0; i < n; i++)
			prep_piece(r, taken[i]);
		rc = submit_and_wait(r, wait_ns);
		if (rc && !r->broken) {
			zn_error("io_uring_submit on ring %d failed: %s", r->index, zn_strerror(rc));
			r->broken = rc;
		}
		n = reap(r, done);
		if (!n)
			continue;
		pthread_mutex_lock(&aio->lock);
		for (i = 0; i < n; i++) {
			finished |= zn_aio_finish_locked(aio, &r->slots[done[i]]);
			r->free_slots[r->free_count++] = done[i];
		}
		if (finished)
			pthread_cond_broadcast(&aio->done_cv);
		pthread_mutex_unlock(&aio->lock);
	}
	free(taken);
	return NULL;
}

static void wake_ring(struct zn_ring *r)
{
	uint64_t one = 1;

	/* The counter sticks until the armed read consumes it, so a wake sent before the
	 * worker reaches io_uring_enter is not lost. */
	if (write(r->wake_fd, &one, sizeof(one)) < 0)
		zn_warn("waking aio ring %d: %s", r->index, zn_strerror(-errno));
}

static void uring_wake_locked(struct zn_aio *aio)
{
	struct zn_uring_be *be = aio->be;
	int i;

	for (i = 0; i < be->ring_count; i++) {
		if (be->rings[i].sleeping) {
			be->rings[i].sleeping = false;
			wake_ring(&be->rings[i]);
		}
	}
}

/* Sparse file and buffer tables, filled in by file_add / buffer_add. Failure only means
 * plain descriptors or buffers. */
static void register_tables(struct zn_aio *aio, struct zn_ring *r)
{
	int rc;

	if (aio->fixed_files) {
		rc = io_uring_register_files_sparse(&r->uring, ZN_AIO_FIXED_FILES);
		if (rc < 0) {
			zn_debug("io_uring fixed files unavailable: %s", zn_strerror(rc));
			aio->fixed_files = false;
		}
	}
	if (aio->fixed_buffers) {
		rc = io_uring_register_buffers_sparse(&r->uring, ZN_AIO_FIXED_BUFS);
		if (rc < 0) {
			zn_debug("io_uring fixed buffers unavailable: %s", zn_strerror(rc));
			aio->fixed_buffers = false;
		}
	}
}

static int ring_init(struct zn_aio *aio, struct zn_ring *r, int index)
{
	int rc, i;

	r->aio = aio;
	r->index = index;
	r->wake_fd = -1;
	r->slot_count = aio->cfg.queue_depth;
	r->slots = calloc((size_t)r->slot_count, sizeof(*r->slots));
	r->free_slots = calloc((size_t)r->slot_count, sizeof(int));
	if (!r->slots || !r->free_slots)
		return -ENOMEM;
	for (i = 0; i < r->slot_count; i++)
		r->free_slots[i] = r->slot_count - 1 - i;
	r->free_count = r->slot_count;
	/* eventfd: the wake-up channel for a sleeping worker. */
	r->wake_fd = eventfd(0, EFD_CLOEXEC);
	rc = zn_check_errno(r->wake_fd, "eventfd", __FILE__, __LINE__);
	if (rc)
		return rc;
	/* One entry per slot plus the armed wake-up read. */
	rc = io_uring_queue_init((unsigned)r->slot_count + 1, &r->uring, 0);
	if (rc < 0) {
		zn_debug("io_uring_queue_init: %s", zn_strerror(rc));
		return rc;
	}
	r->uring_ok = true;
	register_tables(aio, r);
	return 0;
}

/* Valgrind (3.19) runs io_uring_enter holding its big lock, so a worker blocked there
 * stops every other thread: the engine would hang. Its preload library gives it away. */
static bool under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

static int uring_start(struct zn_aio *aio)
{
	int count = aio->cfg.intra_op_parallelism;
	struct zn_uring_be *be;
	char name[16];
	int i, rc;

	if (under_valgrind()) {
		zn_debug("io_uring: not used under valgrind (io_uring_enter would block it)");
		return -ENOTSUP;
	}

	be = calloc(1, sizeof(*be) + (size_t)count * sizeof(be->rings[0]));
	if (!be)
		return -ENOMEM;
	aio->be = be;
	aio->fixed_files = true;
	aio->fixed_buffers = true;
	for (i = 0; i < count; i++) {
		be->ring_count = i + 1;
		rc = ring_init(aio, &be->rings[i], i);
		if (rc)
			return rc;
	}
	/* register_tables() clears fixed_files / fixed_buffers when any ring refused them,
	 * so every ring agrees on what a slot means (an unused table costs nothing). */
	for (i = 0; i < count; i++) {
		rc = pthread_create(&be->rings[i].thread, NULL, ring_main, &be->rings[i]);
		if (rc) {
			zn_error("pthread_create for aio ring %d: %s", i, strerror(rc));
			return -rc;
		}
		be->rings[i].thread_ok = true;
		snprintf(name, sizeof(name), "zn-aio-%u", (unsigned)i % 1000u);
		pthread_setname_np(be->rings[i].thread, name);
	}
	return 0;
}

static void uring_stop(struct zn_aio *aio)
{
	struct zn_uring_be *be = aio->be;
	int i;

	if (!be)
		return;
	pthread_mutex_lock(&aio->lock);
	aio->stopping = true;
	pthread_mutex_unlock(&aio->lock);
	for (i = 0; i < be->ring_count; i++) {
		struct zn_ring *r = &be->rings[i];

		if (r->thread_ok) {
			wake_ring(r);
			pthread_join(r->thread, NULL);
		}
		if (r->uring_ok)
			io_uring_queue_exit(&r->uring);
		if (r->wake_fd >= 0)
			close(r->wake_fd);
		free(r->slots);
		free(r->free_slots);
	}
	free(be);
	aio->be = NULL;
}

static int uring_file_add(struct zn_aio *aio, struct zn_aio_file *f)
{
	struct zn_uring_be *be = aio->be;
	int slot, i, rc;

	if (!aio->fixed_files)
		return 0;
	for (slot = 0; slot < ZN_AIO_FIXED_FILES && aio->file_slot_used[slot]; slot++)
		;
	if (slot == ZN_AIO_FIXED_FILES)
		return 0; /* table full: this file uses its plain descriptor */
	for (i = 0; i < be->ring_count; i++) {
		rc = io_uring_register_files_update(&be->rings[i].uring, (unsigned)slot, &f->fd, 1);
		if (rc < 0)
			goto undo;
	}
	aio->file_slot_used[slot] = true;
	f->fixed_index = slot;
	return 0;
undo:
	zn_warn("registering %s with io_uring: %s; it uses a plain descriptor", f->name,
		zn_strerror(rc));
	while (i-- > 0) {
		int none = -1;

		io_uring_register_files_update(&be->rings[i].uring, (unsigned)slot, &none, 1);
	}
	return 0;
}

static void uring_file_remove(struct zn_aio *aio, struct zn_aio_file *f)
{
	struct zn_uring_be *be = aio->be;
	int none = -1, i;

	if (f->fixed_index < 0)
		return;
	for (i = 0; i < be->ring_count; i++)
		io_uring_register_files_update(&be->rings[i].uring, (unsigned)f->fixed_index,
					       &none, 1);
	aio->file_slot_used[f->fixed_index] = false;
	f->fixed_index = -1;
}

static int find_buf_slots(struct zn_aio *aio, int count)
{
	int first, i;

	for (first = 0; first + count <= ZN_AIO_FIXED_BUFS; first++) {
		for (i = 0; i < count && !aio->buf_slot_used[first + i]; i++)
			;
		if (i == count)
			return first;
		first += i;
	}
	return -1;
}

static void update_buffers(struct zn_uring_be *be, int rings, int first, struct iovec *iov,
			   int count)
{
	int i;

	for (i = 0; i < rings; i++)
		io_uring_register_buffers_update_tag(&be->rings[i].uring, (unsigned)first, iov,
						     NULL, (unsigned)count);
}

static int uring_buffer_add(struct zn_aio *aio, struct zn_aio_region *reg)
{
	struct zn_uring_be *be = aio->be;
	int count = (int)((reg->bytes + ZN_AIO_BUF_CHUNK_BYTES - 1) / ZN_AIO_BUF_CHUNK_BYTES);
	struct iovec *iov;
	int first, i, rc = 0;

	if (!aio->fixed_buffers)
		return 0;
	first = find_buf_slots(aio, count);
	iov = calloc((size_t)count, sizeof(*iov));
	if (first < 0 || !iov) {
		zn_warn("no room to register %p + %llu bytes as fixed buffers: using them plain",
			(void *)reg->base, (unsigned long long)reg->bytes);
		free(iov);
		return 0;
	}
	for (i = 0; i < count; i++) {
		uint64_t off = (uint64_t)i * ZN_AIO_BUF_CHUNK_BYTES;

		iov[i].iov_base = reg->base + off;
		iov[i].iov_len = reg->bytes - off < ZN_AIO_BUF_CHUNK_BYTES ?
				 reg->bytes - off : ZN_AIO_BUF_CHUNK_BYTES;
	}
	for (i = 0; i < be->ring_count; i++) {
		rc = io_uring_register_buffers_update_tag(&be->rings[i].uring, (unsigned)first, iov,
							  NULL, (unsigned)count);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		/* Typically ENOMEM: RLIMIT_MEMLOCK is too small to pin the region. */
		zn_warn("registering %llu bytes as io_uring fixed buffers: %s (raise ulimit -l); "
			"using them as plain buffers", (unsigned long long)reg->bytes,
			zn_strerror(rc));
		memset(iov, 0, (size_t)count * sizeof(*iov));
		update_buffers(be, i, first, iov, count);
		free(iov);
		return 0;
	}
	free(iov);
	for (i = 0; i < count; i++)
		aio->buf_slot_used[first + i] = true;
	reg->first_index = first;
	reg->index_count = count;
	return 0;
}

static void uring_buffer_remove(struct zn_aio *aio, struct zn_aio_region *reg)
{
	struct zn_uring_be *be = aio->be;
	struct iovec *iov;
	int i;

	if (reg->first_index < 0)
		return;
	/* An empty iovec clears the slot (and unpins the pages). */
	iov = calloc((size_t)reg->index_count, sizeof(*iov));
	if (iov)
		update_buffers(be, be->ring_count, reg->first_index, iov, reg->index_count);
	free(iov);
	for (i = 0; i < reg->index_count; i++)
		aio->buf_slot_used[reg->first_index + i] = false;
	reg->first_index = -1;
}

const struct zn_aio_backend_ops zn_aio_uring_ops = {
	.name = "io_uring",
	.start = uring_start,
	.stop = uring_stop,
	.wake_locked = uring_wake_locked,
	.file_add = uring_file_add,
	.file_remove = uring_file_remove,
	.buffer_add = uring_buffer_add,
	.buffer_remove = uring_buffer_remove,
};
