/* comm backend mpi (host buffers), and the MPI part the nccl backend shares: MPI start-up
 * and shut-down, the host communicator, and host-side ops.
 *
 * Each comm holds two duplicates of MPI_COMM_WORLD: `stream` for ops enqueued on streams
 * (they run on a host-device stream's worker thread) and `host` for barriers and host ops
 * on the calling thread. Two communicators let a barrier run while a stream collective
 * is in flight; MPI requires MPI_THREAD_MULTIPLE for that, and requires the collectives
 * of one communicator to be issued in the same order on every rank, which the caller
 * ensures by ordering its stream ops (comm.h).
 *
 * fp32 sums use MPI_SUM: Open MPI and MPICH pick the reduction algorithm from the rank
 * count and message size only, so a fixed launch sums in a fixed order. bf16 and fp16
 * are widened to fp32, summed with MPI_SUM, and rounded once (MPI has no bf16 type).
 * Errors: every MPI call goes through mpi_check (MPI_ERRORS_RETURN is set on both
 * communicators, so a failure comes back instead of aborting the job). Every collective is
 * issued non-blocking and waited for by zn_mpi_wait (comm_wait_mpi.c), bounded by the
 * comm's timeout: a rank that never arrives gives -ETIMEDOUT and a line naming it, not a
 * wait forever.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm/comm_backends.h"
#include "comm/comm_impl.h"
#include "comm/comm_mpi.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/size.h"
#include "gpu/device.h"

/* all-reduce and broadcast are split into pieces MPI's int count can hold */
#define MPI_PIECE_COUNT (1ull << 30)

struct zn_mpi {
	MPI_Comm host;   /* barrier, host ops, the NCCL id */
	MPI_Comm stream; /* ops enqueued on streams */
	struct zn_mpi_watch *watch; /* every wait, bounded by the timeout */
	bool counted;    /* holds one of mpi_users */
};

/* MPI is initialized once per process and cannot be restarted after MPI_Finalize, so its
 * ownership is process-wide state: the comms that use it are counted, and the last one
 * finalizes it if zinc initialized it. */
static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int mpi_users;
static bool mpi_ours;

int zn_mpi_check(int rc, const char *call, const char *file, int line)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return 0;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof(msg), "MPI error code %d", rc);
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s", call, msg);
	return -EIO;
}

static const char *level_name(int level)
{
	switch (level) {
	case MPI_THREAD_SINGLE:
		return "MPI_THREAD_SINGLE";
	case MPI_THREAD_FUNNELED:
		return "MPI_THREAD_FUNNELED";
	case MPI_THREAD_SERIALIZED:
		return "MPI_THREAD_SERIALIZED";
	case MPI_THREAD_MULTIPLE:
		return "MPI_THREAD_MULTIPLE";
	}
	return "an unknown thread level";
}

/* Initializes MPI unless someone has; counts one user (*counted says whether it did,
 * also on error, so the caller knows to release). Called with mpi_lock held. */
static int mpi_acquire_locked(int need, bool *counted)
{
	int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
	int rc;

	rc = zn_mpi_check(MPI_Finalized(&finalized), "MPI_Finalized", __FILE__, __LINE__);
	if (rc)
		return rc;
	if (finalized) {
		zn_error("MPI was already finalized in this process and cannot be restarted: "
			 "create one mpi/nccl comm per process and keep it until the end");
		return -EINVAL;
	}
	rc = zn_mpi_check(MPI_Initialized(&inited), "MPI_Initialized", __FILE__, __LINE__);
	if (rc)
		return rc;
	if (!inited) {
		/* MULTIPLE: stream ops run on a worker thread while the caller's thread may be
		 * in a barrier or a host op */
		rc = zn_mpi_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided),
			       "MPI_Init_thread", __FILE__, __LINE__);
		if (rc)
			return rc;
		mpi_ours = true;
	} else {
		rc = zn_mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread", __FILE__,
			       __LINE__);
		if (rc)
			return rc;
	}
	mpi_users++;
	*counted = true;
	if (provided < need) {
		zn_error("the MPI library provides %s but zinc needs %s: use an MPI built with "
			 "thread support (Open MPI 3+ and MPICH 3+ have it), or initialize MPI "
			 "with MPI_Init_thread(..., %s, ...) before zinc", level_name(provided),
			 level_name(need), level_name(need));
		return -ENOTSUP;
	}
	return 0;
}

static int mpi_acquire(int need, bool *counted)
{
	int rc;

	*counted = false;
	pthread_mutex_lock(&mpi_lock);
	rc = mpi_acquire_locked(need, counted);
	pthread_mutex_unlock(&mpi_lock);
	return rc;
}

static void mpi_release(void)
{
	pthread_mutex_lock(&mpi_lock);
	if (--mpi_users == 0 && mpi_ours) {
		zn_mpi_check(MPI_Finalize(), "MPI_Finalize", __FILE__, __LINE__);
		mpi_ours = false;
	}
	pthread_mutex_unlock(&mpi_lock);
}

static int dup_world(MPI_Comm *out)
{
	int rc;

	rc = zn_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, out), "MPI_Comm_dup", __FILE__, __LINE__);
	if (rc)
		return rc;
	return zn_mpi_check(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN),
			 "MPI_Comm_set_errhandler", __FILE__, __LINE__);
}

/* rank, size, and the rank among the processes sharing this node's memory */
static int query_world(struct zn_mpi *m, struct zn_comm *c)
{
	MPI_Comm node = MPI_COMM_NULL;
	int hint_size = 1;
	int rc;

	rc = zn_mpi_check(MPI_Comm_rank(m->host, &c->rank), "MPI_Comm_rank", __FILE__, __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_size(m->host, &c->size), "MPI_Comm_size", __FILE__,
			       __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_split_type(m->host, MPI_COMM_TYPE_SHARED, c->rank,
						   MPI_INFO_NULL, &node),
			       "MPI_Comm_split_type", __FILE__, __LINE__);
	if (!rc)
		rc = zn_mpi_check(MPI_Comm_rank(node, &c->local_rank), "MPI_Comm_rank", __FILE__,
			       __LINE__);
	if (node != MPI_COMM_NULL)
		MPI_Comm_free(&node);
	if (rc)
		return rc;
	rc = zn_comm_world_hint(NULL, &hint_size, NULL);
	if (rc)
		return rc;
	if (hint_size != 1 && hint_size != c->size) {
		zn_error("the launcher's environment says %d ranks but MPI_Init found %d: this "
			 "zinc and the mpirun that started it are from different MPIs; launch "
			 "with the mpirun of the MPI zinc was built with", hint_size, c->size);
		return -EINVAL;
	}
	return 0;
}

int zn_mpi_open(struct zn_mpi **out, struct zn_comm *c, bool need_multiple)
{
	struct zn_mpi *m;
	int rc;

	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		zn_error("comm mpi: out of memory");
		return -ENOMEM;
	}
	m->host = MPI_COMM_NULL;
	m->stream = MPI_COMM_NULL;
	rc = mpi_acquire(need_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED,
			 &m->counted);
	if (rc)
		goto close_mpi;
	rc = dup_world(&m->host);
	if (!rc)
		rc = dup_world(&m->stream);
	if (!rc)
		rc = query_world(m, c);
	if (!rc)
		rc = zn_mpi_watch_open(&m->watch, MPI_COMM_WORLD, c->timeout_s);
	if (rc)
		goto close_mpi;
	*out = m;
	return 0;

close_mpi:
	zn_mpi_close(m);
	return rc;
}

void zn_mpi_close(struct zn_mpi *m)
{
	if (!m)
		return;
	zn_mpi_watch_close(m->watch);
	if (m->stream != MPI_COMM_NULL)
		MPI_Comm_free(&m->stream);
	if (m->host != MPI_COMM_NULL)
		MPI_Comm_free(&m->host);
	if (m->counted)
		mpi_release();
	free(m);
}

/* ---- the collectives on one communicator --------------------------------------- */

static MPI_Datatype mpi_type(enum zn_dtype dtype)
{
	/* gathers move bits: a 2-byte type carries bf16 and fp16 unchanged */
	return dtype == ZN_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T;
}

static void widen(float *out, const void *in, uint64_t n, enum zn_dtype dtype)
{
	if (dtype == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(out, in, n);
	else
		zn_cast_f16_to_f32(out, in, n);
}

static void narrow(void *out, const float *in, uint64_t n, enum zn_dtype dtype)
{
	if (dtype == ZN_DTYPE_BF16)
		zn_cast_f32_to_bf16(out, in, n);
	else
		zn_cast_f32_to_f16(out, in, n);
}

/* A non-blocking call's request, waited for on channel ch within the timeout. */
static int wait_op(struct zn_mpi *m, enum zn_mpi_channel ch, int rc, const char *call,
		   MPI_Request *req)
{
	rc = zn_mpi_check(rc, call, __FILE__, __LINE__);
	return rc ? rc : zn_mpi_wait(m->watch, ch, call, req);
}

static MPI_Comm comm_of(const struct zn_mpi *m, enum zn_mpi_channel ch)
{
	return ch == ZN_MPI_HOST ? m->host : m->stream;
}

static int all_gather(struct zn_mpi *m, enum zn_mpi_channel ch, const struct zn_comm_args *a)
{
	const void *send = a->in_place ? MPI_IN_PLACE : a->src;
	MPI_Request req = MPI_REQUEST_NULL;
	int n = (int)a->count;

	return wait_op(m, ch, MPI_Iallgather(send, n, mpi_type(a->dtype), a->dst, n,
					     mpi_type(a->dtype), comm_of(m, ch), &req),
		       "all_gather (MPI_Iallgather)", &req);
}

/* fp32 sum; in place (dst == src + rank * count) goes through MPI_IN_PLACE, which
 * leaves the result at the start of src, so it is moved to block `rank` afterwards. */
static int reduce_scatter_f32(struct zn_mpi *m, enum zn_mpi_channel ch, int rank, float *dst,
			      float *src, int n, bool in_place)
{
	const char *call = "reduce_scatter (MPI_Ireduce_scatter_block)";
	MPI_Request req = MPI_REQUEST_NULL;
	int rc;

	if (!in_place)
		return wait_op(m, ch, MPI_Ireduce_scatter_block(src, dst, n, MPI_FLOAT, MPI_SUM,
								comm_of(m, ch), &req),
			       call, &req);
	rc = wait_op(m, ch, MPI_Ireduce_scatter_block(MPI_IN_PLACE, src, n, MPI_FLOAT, MPI_SUM,
						      comm_of(m, ch), &req),
		     call, &req);
	if (!rc && rank)
		memmove(dst, src, (size_t)n * sizeof(float));
	return rc;
}

static int reduce_scatter(struct zn_mpi *m, enum zn_mpi_channel ch, struct zn_comm *c,
			  const struct zn_comm_args *a)
{
	uint64_t n = a->count;
	float *wide;
	int rc;

	if (a->dtype == ZN_DTYPE_F32)
		return reduce_scatter_f32(m, ch, c->rank, a->dst, (float *)a->src, (int)n,
					  a->in_place);
	/* widened copy of the whole input, reduced in place into its first block */
	wide = zn_size_alloc(zn_size_mul(zn_size_mul(n, (uint64_t)c->size), sizeof(float)),
			     "reduce_scatter's fp32 copy of a 16-bit input");
	if (!wide)
		return -ENOMEM;
	widen(wide, a->src, n * c->size, a->dtype);
	rc = reduce_scatter_f32(m, ch, 0, wide, wide, (int)n, true);
	if (!rc)
		narrow(a->dst, wide, n, a->dtype);
	free(wide);
	return rc;
}

static int all_reduce_f32(struct zn_mpi *m, enum zn_mpi_channel ch, float *buf,
			  uint64_t count)
{
	int rc = 0;

	for (uint64_t off = 0; off < count && !rc; off += MPI_PIECE_COUNT) {
		uint64_t n = count - off < MPI_PIECE_COUNT ? count - off : MPI_PIECE_COUNT;
		MPI_Request req = MPI_REQUEST_NULL;

		rc = wait_op(m, ch, MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT,
						   MPI_SUM, comm_of(m, ch), &req),
			     "all_reduce (MPI_Iallreduce)", &req);
	}
	return rc;
}

static int all_reduce(struct zn_mpi *m, enum zn_mpi_channel ch, const struct zn_comm_args *a)
{
	float *wide;
	int rc;

	if (a->dtype == ZN_DTYPE_F32)
		return all_reduce_f32(m, ch, a->dst, a->count);
	wide = zn_size_alloc(zn_size_mul(a->count, sizeof(float)),
			     "all_reduce's fp32 copy of a 16-bit buffer");
	if (!wide)
		return -ENOMEM;
	widen(wide, a->dst, a->count, a->dtype);
	rc = all_reduce_f32(m, ch, wide, a->count);
	if (!rc)
		narrow(a->dst, wide, a->count, a->dtype);
	free(wide);
	return rc;
}

static int broadcast(struct zn_mpi *m, enum zn_mpi_channel ch, void *buf, uint64_t bytes,
		     int root)
{
	int rc = 0;

	for (uint64_t off = 0; off < bytes && !rc; off += MPI_PIECE_COUNT) {
		uint64_t n = bytes - off < MPI_PIECE_COUNT ? bytes - off : MPI_PIECE_COUNT;
		MPI_Request req = MPI_REQUEST_NULL;

		rc = wait_op(m, ch, MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root,
					       comm_of(m, ch), &req),
			     "broadcast (MPI_Ibcast)", &req);
	}
	return rc;
}

static int mpi_collective(struct zn_mpi *m, enum zn_mpi_channel ch, struct zn_comm *c,
			  const struct zn_comm_args *a)
{
	/* the mpi backend's table carries this limit; nccl's host ops come here unchecked */
	if (a->op <= ZN_COMM_OP_REDUCE_SCATTER && a->count > INT_MAX) {
		zn_error("%s over MPI: count_per_rank %llu is above MPI's limit %d: split the "
			 "buffer", zn_comm_op_name(a->op), (unsigned long long)a->count, INT_MAX);
		return -EINVAL;
	}
	switch (a->op) {
	case ZN_COMM_OP_ALL_GATHER:
		return all_gather(m, ch, a);
	case ZN_COMM_OP_REDUCE_SCATTER:
		return reduce_scatter(m, ch, c, a);
	case ZN_COMM_OP_ALL_REDUCE:
		return all_reduce(m, ch, a);
	case ZN_COMM_OP_BROADCAST:
		return broadcast(m, ch, a->dst, a->count, a->root);
	}
	return -EINVAL;
}

int zn_mpi_run_host(struct zn_mpi *m, struct zn_comm *c, const struct zn_comm_args *a)
{
	return mpi_collective(m, ZN_MPI_HOST, c, a);
}

int zn_mpi_barrier(struct zn_mpi *m)
{
	MPI_Request req = MPI_REQUEST_NULL;

	return wait_op(m, ZN_MPI_HOST, MPI_Ibarrier(m->host, &req), "barrier (MPI_Ibarrier)",
		       &req);
}

int zn_mpi_broadcast_bytes(struct zn_mpi *m, void *buf, uint64_t bytes, int root)
{
	return broadcast(m, ZN_MPI_HOST, buf, bytes, root);
}

/* ---- the mpi backend ------------------------------------------------------------- */

struct mpi_task {
	struct zn_comm *c;
	struct zn_comm_args a;
};

/* Runs on the host device's stream worker, in order with the stream's other work. */
static void mpi_task_run(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct mpi_task *t = ctx;
	struct zn_mpi *m = t->c->impl;
	int rc;

	/* after a failure the ranks no longer agree on what comes next: run nothing more */
	if (atomic_load(&t->c->error))
		return;
	rc = zn_comm_fault(t->c, &t->a);
	if (!rc)
		rc = mpi_collective(m, ZN_MPI_STREAM, t->c, &t->a);
	if (rc)
		zn_comm_fail(t->c, rc);
}

static int mpi_enqueue(struct zn_comm *c, struct zn_stream *s, const struct zn_comm_args *a)
{
	struct mpi_task t = { .c = c, .a = *a };

	return zn_launch(s, mpi_task_run, &t, sizeof(t));
}

static int mpi_run(struct zn_comm *c, const struct zn_comm_args *a)
{
	int rc = zn_comm_fault(c, a);

	return rc ? rc : zn_mpi_run_host(c->impl, c, a);
}

static int mpi_barrier(struct zn_comm *c)
{
	return zn_mpi_barrier(c->impl);
}

static void mpi_close(struct zn_comm *c)
{
	zn_mpi_close(c->impl);
	c->impl = NULL;
}

static const struct zn_comm_ops mpi_ops = {
	.name = "mpi",
	.max_count_per_rank = INT_MAX,
	.bounded = true,
	.run = mpi_run,
	.enqueue = mpi_enqueue,
	.barrier = mpi_barrier,
	.close = mpi_close,
};

int zn_comm_mpi_open(struct zn_comm *c)
{
	struct zn_mpi *m;
	int rc;

	rc = zn_mpi_open(&m, c, true);
	if (rc)
		return rc;
	c->impl = m;
	c->ops = &mpi_ops;
	return 0;
}

void zn_comm_mpi_abort(int code)
{
	int inited = 0, finalized = 0;

	if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited)
		return;
	if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized)
		return;
	MPI_Abort(MPI_COMM_WORLD, code);
}
