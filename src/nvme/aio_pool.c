/* The fallback backend: a pool of threads doing blocking pread/pwrite, for kernels or
 * sandboxes without io_uring (gVisor, seccomp filters, io_uring_disabled). Same queue,
 * pieces, rate cap, fault injection and error reporting as the io_uring backend; only the
 * way a piece moves differs. Fixed buffers and files do not exist here.
 *
 * Threads: intra_op_parallelism x queue_depth, at most ZN_AIO_MAX_POOL_THREADS, so the
 * number of pieces in flight approaches what the rings would keep.
 */
#include "nvme/aio_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

struct zn_pool_be {
	int thread_count;
	pthread_t threads[ZN_AIO_MAX_POOL_THREADS];
};

static void move_piece(struct zn_aio *aio, struct zn_aio_piece *p)
{
	long res;

	do {
		zn_aio_piece_issue(aio, p);
		if (p->op == ZN_AIO_READ)
			res = pread(p->fd, p->mem + p->done, p->bytes - p->done,
				    (off_t)(p->offset + p->done));
		else
			res = pwrite(p->fd, p->mem + p->done, p->bytes - p->done,
				     (off_t)(p->offset + p->done));
		if (res < 0)
			res = -errno;
	} while (zn_aio_piece_result(aio, p, res) == ZN_PIECE_AGAIN);
}

static void wait_work_locked(struct zn_aio *aio, uint64_t wait_ns)
{
	struct timespec ts;
	uint64_t ns;

	if (!wait_ns) {
		pthread_cond_wait(&aio->work_cv, &aio->lock);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ns = (uint64_t)ts.tv_nsec + wait_ns;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(&aio->work_cv, &aio->lock, &ts);
}

static void *pool_main(void *arg)
{
	struct zn_aio *aio = arg;
	struct zn_aio_piece p;
	uint64_t wait_ns;

	pthread_mutex_lock(&aio->lock);
	for (;;) {
		if (!zn_aio_take_locked(aio, &p, &wait_ns)) {
			if (aio->stopping && !aio->head)
				break;
			wait_work_locked(aio, wait_ns);
			continue;
		}
		pthread_mutex_unlock(&aio->lock);
		move_piece(aio, &p);
		pthread_mutex_lock(&aio->lock);
		if (zn_aio_finish_locked(aio, &p))
			pthread_cond_broadcast(&aio->done_cv);
	}
	pthread_mutex_unlock(&aio->lock);
	return NULL;
}

static int pool_start(struct zn_aio *aio)
{
	int want = aio->cfg.intra_op_parallelism * aio->cfg.queue_depth;
	struct zn_pool_be *be;
	char name[16];
	int i, rc;

	if (want > ZN_AIO_MAX_POOL_THREADS)
		want = ZN_AIO_MAX_POOL_THREADS;
	be = calloc(1, sizeof(*be));
	if (!be)
		return -ENOMEM;
	aio->be = be;
	for (i = 0; i < want; i++) {
		rc = pthread_create(&be->threads[i], NULL, pool_main, aio);
		if (rc) {
			zn_error("pthread_create for aio pool thread %d: %s", i, strerror(rc));
			return -rc;
		}
		be->thread_count = i + 1;
		snprintf(name, sizeof(name), "zn-aio-p%u", (unsigned)i % 1000u);
		pthread_setname_np(be->threads[i], name);
	}
	size_t len = strlen(aio->fallback_reason);
	snprintf(aio->fallback_reason + len, sizeof(aio->fallback_reason) - len, "%s%d threads",
		 len ? ", " : "", want);
	return 0;
}

static void pool_stop(struct zn_aio *aio)
{
	struct zn_pool_be *be = aio->be;
	int i;

	if (!be)
		return;
	pthread_mutex_lock(&aio->lock);
	aio->stopping = true;
	pthread_cond_broadcast(&aio->work_cv);
	pthread_mutex_unlock(&aio->lock);
	for (i = 0; i < be->thread_count; i++)
		pthread_join(be->threads[i], NULL);
	free(be);
	aio->be = NULL;
}

static void pool_wake_locked(struct zn_aio *aio)
{
	pthread_cond_broadcast(&aio->work_cv);
}

static int pool_file_add(struct zn_aio *aio, struct zn_aio_file *f)
{
	return 0;
}

static void pool_file_remove(struct zn_aio *aio, struct zn_aio_file *f)
{
}

static int pool_buffer_add(struct zn_aio *aio, struct zn_aio_region *r)
{
	return 0;
}

static void pool_buffer_remove(struct zn_aio *aio, struct zn_aio_region *r)
{
}

const struct zn_aio_backend_ops zn_aio_pool_ops = {
	.name = "pool",
	.start = pool_start,
	.stop = pool_stop,
	.wake_locked = pool_wake_locked,
	.file_add = pool_file_add,
	.file_remove = pool_file_remove,
	.buffer_add = pool_buffer_add,
	.buffer_remove = pool_buffer_remove,
};
