/* comm backend nccl: device buffers of the cuda device, ops enqueued on the stream's
 * cudaStream_t. Bootstrap over MPI: rank 0 makes the NCCL unique id and broadcasts it on
 * the host communicator, then every rank joins with ncclCommInitRank on the GPU current
 * on the calling thread (the cuda device layer made it current: ordinal = local rank).
 * Host ops (s == NULL) and barriers go over MPI (comm_mpi.c), which NCCL does not need
 * on any other thread, so MPI_THREAD_SERIALIZED is enough.
 *
 * Under cuda, zn_launch runs its fn at once on the calling thread with the native stream,
 * so the NCCL call is issued here and a launch error is seen by the enqueue call; errors
 * that happen later on the GPU come from ncclCommGetAsyncError in zn_comm_check, and from
 * zn_comm_synchronize, which polls it while the end of a step waits for the comm stream
 * (bounded by --comm-timeout; a timeout aborts the communicator at destroy).
 * --deterministic sets NCCL_ALGO=Ring before the communicator is made (unless NCCL_ALGO
 * is set), so the reduction order does not follow the detected topology.
 * NCCL's in-place conventions are the ones comm.h gives, so arguments pass unchanged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm/comm_backends.h"
#include "comm/comm_impl.h"
#include "core/log.h"
#include "gpu/device.h"

struct nccl_state {
	struct zn_mpi *mpi;
	ncclComm_t comm; /* NULL until joined */
	int cuda_ordinal;
};

/* What rank 0 broadcasts: the id, or that it could not make one (so the others stop
 * too instead of waiting in ncclCommInitRank). */
struct nccl_bootstrap {
	int ok;
	ncclUniqueId id;
};

static int nccl_check(ncclResult_t r, const char *call, const char *file, int line)
{
	if (r == ncclSuccess)
		return 0;
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s", call, ncclGetErrorString(r));
	return -EIO;
}

static int cuda_check(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	zn_log(ZN_LOG_ERROR, file, line, "%s failed: %s", call, cudaGetErrorString(e));
	return -EIO;
}

static ncclDataType_t nccl_type(enum zn_dtype dtype)
{
	if (dtype == ZN_DTYPE_BF16)
		return ncclBfloat16;
	if (dtype == ZN_DTYPE_F16)
		return ncclFloat16;
	return ncclFloat32;
}

static int nccl_issue(struct nccl_state *st, cudaStream_t stream, const struct zn_comm_args *a)
{
	ncclDataType_t t = nccl_type(a->dtype);

	switch (a->op) {
	case ZN_COMM_OP_ALL_GATHER:
		return nccl_check(ncclAllGather(a->src, a->dst, a->count, t, st->comm, stream),
				  "ncclAllGather", __FILE__, __LINE__);
	case ZN_COMM_OP_REDUCE_SCATTER:
		return nccl_check(ncclReduceScatter(a->src, a->dst, a->count, t, ncclSum, st->comm,
						    stream),
				  "ncclReduceScatter", __FILE__, __LINE__);
	case ZN_COMM_OP_ALL_REDUCE:
		return nccl_check(ncclAllReduce(a->dst, a->dst, a->count, t, ncclSum, st->comm,
						stream),
				  "ncclAllReduce", __FILE__, __LINE__);
	case ZN_COMM_OP_BROADCAST:
		return nccl_check(ncclBroadcast(a->dst, a->dst, a->count, ncclUint8, a->root,
						st->comm, stream),
				  "ncclBroadcast", __FILE__, __LINE__);
	}
	return -EINVAL;
}

struct nccl_task {
	struct zn_comm *c;
	struct zn_comm_args a;
};

static void nccl_task_run(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct nccl_task *t = ctx;
	int rc;

	if (atomic_load(&t->c->error))
		return;
	rc = zn_comm_fault(t->c, &t->a);
	if (!rc)
		rc = nccl_issue(t->c->impl, (cudaStream_t)native, &t->a);
	if (rc)
		zn_comm_fail(t->c, rc);
}

static int nccl_enqueue(struct zn_comm *c, struct zn_stream *s, const struct zn_comm_args *a)
{
	struct nccl_task t = { .c = c, .a = *a };

	return zn_launch(s, nccl_task_run, &t, sizeof(t));
}

static int nccl_run(struct zn_comm *c, const struct zn_comm_args *a)
{
	struct nccl_state *st = c->impl;
	int rc = zn_comm_fault(c, a);

	return rc ? rc : zn_mpi_run_host(st->mpi, c, a);
}

static int nccl_barrier(struct zn_comm *c)
{
	struct nccl_state *st = c->impl;

	return zn_mpi_barrier(st->mpi);
}

static int nccl_poll(struct zn_comm *c)
{
	struct nccl_state *st = c->impl;
	ncclResult_t async = ncclSuccess;
	int rc;

	rc = nccl_check(ncclCommGetAsyncError(st->comm, &async), "ncclCommGetAsyncError",
			__FILE__, __LINE__);
	if (rc || async == ncclSuccess || async == ncclInProgress)
		return rc;
	return nccl_check(async, "NCCL collective (asynchronous error)", __FILE__, __LINE__);
}

static void nccl_close(struct zn_comm *c)
{
	struct nccl_state *st = c->impl;

	if (!st)
		return;
	if (st->comm) {
		/* after a failure other ranks may never arrive: abort rather than wait */
		if (atomic_load(&c->error))
			ncclCommAbort(st->comm);
		else
			nccl_check(ncclCommDestroy(st->comm), "ncclCommDestroy", __FILE__, __LINE__);
	}
	zn_mpi_close(st->mpi);
	free(st);
	c->impl = NULL;
}

static const struct zn_comm_ops nccl_ops = {
	.name = "nccl",
	.run = nccl_run,
	.enqueue = nccl_enqueue,
	.barrier = nccl_barrier,
	.poll = nccl_poll,
	.close = nccl_close,
};

static int nccl_join(struct nccl_state *st, struct zn_comm *c)
{
	struct nccl_bootstrap boot;
	const char *algo;
	int rc;

	memset(&boot, 0, sizeof(boot));
	if (c->rank == 0)
		boot.ok = !nccl_check(ncclGetUniqueId(&boot.id), "ncclGetUniqueId", __FILE__,
				      __LINE__);
	rc = zn_mpi_broadcast_bytes(st->mpi, &boot, sizeof(boot), 0);
	if (rc)
		return rc;
	if (!boot.ok) {
		zn_error("comm nccl: rank 0 could not make the NCCL id (see its log)");
		return -EIO;
	}
	rc = cuda_check(cudaGetDevice(&st->cuda_ordinal), "cudaGetDevice", __FILE__, __LINE__);
	if (rc)
		return rc;
	/* read by NCCL when the communicator is made: every rank sets the same value */
	algo = zn_comm_nccl_algo(c->deterministic, getenv("NCCL_ALGO"));
	if (algo) {
		setenv("NCCL_ALGO", algo, 0);
		zn_debug("comm nccl: --deterministic: NCCL_ALGO=%s", algo);
	}
	rc = nccl_check(ncclCommInitRank(&st->comm, c->size, boot.id, c->rank),
			"ncclCommInitRank", __FILE__, __LINE__);
	if (rc)
		return rc;
	/* NCCL's buffers come out of the same GPU memory as zinc's budget */
	return c->dev ? zn_device_comm_joined(c->dev, c->size) : 0;
}

int zn_comm_nccl_open(struct zn_comm *c)
{
	struct nccl_state *st;
	int rc;

	st = calloc(1, sizeof(*st));
	if (!st) {
		zn_error("comm nccl: out of memory");
		return -ENOMEM;
	}
	c->impl = st;
	c->ops = &nccl_ops;
	rc = zn_mpi_open(&st->mpi, c, false);
	if (!rc)
		rc = nccl_join(st, c);
	if (rc)
		return rc; /* zn_comm_destroy calls nccl_close */
	zn_debug("comm nccl: rank %d of %d on GPU %d", c->rank, c->size, st->cuda_ordinal);
	return 0;
}
