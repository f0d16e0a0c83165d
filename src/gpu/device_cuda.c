/* The cuda backend: CUDA runtime streams and events, and a memory pool behind zinc's
 * own budget. Built only with CUDA; plain C against cuda_runtime_api.h.
 *
 * Memory: one cudaMemPool per device (its release threshold at the maximum, so freed
 * memory stays cached in the pool and a reallocation costs no cudaMalloc). Allocations
 * are made with cudaMallocFromPoolAsync on a private stream that is synchronized at once,
 * so the memory is usable from every stream when zn_device_alloc returns; frees are
 * cudaFreeAsync on the same stream, which orders later reuse after them. The budget is
 * enforced by device.c's counters, not by the pool. Without memory-pool support the
 * backend falls back to cudaMalloc/cudaFree.
 * The default budget is the GPU's free memory at create minus the reserve of
 * zn_device_reserve_estimate (cuBLAS workspaces, lazily loaded kernels, context growth);
 * zn_device_comm_joined lowers it by NCCL's buffers once a communicator exists.
 * Host memory for copies (zn_device_host_alloc) is cudaHostAlloc'd (device_mem_cuda.c).
 *
 * Streams are non-blocking cudaStreams; events are cudaEvents with timing. zn_launch
 * runs fn at once on the calling thread: fn enqueues its kernels on the native stream.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "cuda/ops.h"
#include "cuda_kernels.h"
#include "gpu/cuda_check.h"
#include "gpu/device_impl.h"

/* threads expected to call cuBLAS (each has its own handle and workspace): the engine's
 * compute stream, the device optimizer and two more */
#define CUBLAS_HANDLES 4

struct cuda_device {
	bool use_pool;
	cudaMemPool_t pool;
	bool pool_created;
	cudaStream_t alloc_stream; /* private: allocations and frees, in order */
};

int zn_cuda_probe(char *why, int why_bytes)
{
	int count = 0;
	cudaError_t err = cudaGetDeviceCount(&count);

	if (err == cudaSuccess && count > 0)
		return count;
	/* No driver (35), no GPU (100) or anything else: zero GPUs, with the reason. */
	if (err == cudaSuccess)
		snprintf(why, why_bytes, "cudaGetDeviceCount found no GPU");
	else
		snprintf(why, why_bytes, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(err),
			 cudaGetErrorName(err));
	cudaGetLastError(); /* the failed probe must not look like a later call's error */
	return 0;
}

/* Takes a cudaErrorNotReady left by a poll off the thread's last error. Any other error
 * found there is left for the check that owns it (cudaPeekAtLastError first). */
static void clear_not_ready(void)
{
	if (cudaPeekAtLastError() == cudaErrorNotReady)
		cudaGetLastError();
}

static int set_device(const struct zn_device *dev)
{
	return zn_cuda_check(cudaSetDevice(dev->ordinal), "cudaSetDevice", __FILE__, __LINE__);
}

/* Budget: free memory minus the reserve by default; an explicit budget must fit. */
static int pick_budget(struct zn_device *dev, int sm_major)
{
	size_t free_b = 0, total_b = 0;
	char b[3][32];
	int rc;

	rc = zn_cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", __FILE__,
			   __LINE__);
	if (rc)
		return rc;
	rc = zn_device_reserve_estimate(&dev->reserve, sm_major, CUBLAS_HANDLES,
					getenv("CUBLAS_WORKSPACE_CONFIG"), 1, NULL, NULL);
	if (rc)
		return rc;
	if (!dev->budget_bytes) {
		dev->budget_bytes = zn_device_default_budget(free_b,
							     zn_device_reserve_bytes(&dev->reserve));
		return 0;
	}
	if (dev->budget_bytes > free_b) {
		zn_error("--device-mem of %s is more than the %s free on GPU %d (%s, %s in all); "
			 "lower it or leave it unset for the default",
			 zn_device_fmt_bytes(b[0], dev->budget_bytes),
			 zn_device_fmt_bytes(b[1], free_b), dev->ordinal, dev->name,
			 zn_device_fmt_bytes(b[2], total_b));
		return -EINVAL;
	}
	return 0;
}

static int create_pool(struct zn_device *dev, struct cuda_device *cd)
{
	struct cudaMemPoolProps props = { 0 };
	uint64_t keep = UINT64_MAX;
	int supported = 0, rc;

	rc = zn_cuda_check(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported,
						  dev->ordinal),
			   "cudaDeviceGetAttribute(MemoryPoolsSupported)", __FILE__, __LINE__);
	if (rc)
		return rc;
	if (!supported) {
		zn_warn("GPU %d (%s) has no stream-ordered allocator; using cudaMalloc",
			dev->ordinal, dev->name);
		return 0;
	}
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = dev->ordinal;
	rc = zn_cuda_check(cudaMemPoolCreate(&cd->pool, &props), "cudaMemPoolCreate", __FILE__,
			   __LINE__);
	if (rc)
		return rc;
	cd->pool_created = true;
	/* Keep freed memory in the pool: zinc's budget, not the pool, bounds the total. */
	rc = zn_cuda_check(cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrReleaseThreshold,
						   &keep),
			   "cudaMemPoolSetAttribute(ReleaseThreshold)", __FILE__, __LINE__);
	if (rc)
		return rc;
	cd->use_pool = true;
	return 0;
}

static int cuda_init(struct zn_device *dev, const struct zn_device_config *cfg)
{
	struct cudaDeviceProp prop;
	struct cuda_device *cd;
	int rc;

	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return -ENOMEM;
	dev->impl = cd;
	rc = set_device(dev);
	if (rc)
		return rc;
	rc = zn_cuda_check(cudaGetDeviceProperties(&prop, dev->ordinal),
			   "cudaGetDeviceProperties", __FILE__, __LINE__);
	if (rc)
		return rc;
	snprintf(dev->name, sizeof(dev->name), "%s", prop.name);
	dev->kernels = zn_kernels_cuda_table();
	rc = pick_budget(dev, prop.major);
	if (rc)
		return rc;
	rc = zn_cuda_check(cudaStreamCreateWithFlags(&cd->alloc_stream, cudaStreamNonBlocking),
			   "cudaStreamCreateWithFlags", __FILE__, __LINE__);
	if (rc)
		return rc;
	return create_pool(dev, cd);
}

static void cuda_fini(struct zn_device *dev)
{
	struct cuda_device *cd = dev->impl;

	if (!cd)
		return;
	if (cd->alloc_stream) {
		/* Pending cudaFreeAsync calls finish before the pool goes. */
		zn_cuda_check(cudaStreamSynchronize(cd->alloc_stream), "cudaStreamSynchronize",
			      __FILE__, __LINE__);
		zn_cuda_check(cudaStreamDestroy(cd->alloc_stream), "cudaStreamDestroy", __FILE__,
			      __LINE__);
	}
	if (cd->pool_created)
		zn_cuda_check(cudaMemPoolDestroy(cd->pool), "cudaMemPoolDestroy", __FILE__,
			      __LINE__);
	free(cd);
	dev->impl = NULL;
}

static int cuda_alloc(struct zn_device *dev, void **ptr_d, uint64_t bytes)
{
	struct cuda_device *cd = dev->impl;
	char b[3][32];
	cudaError_t err;
	int rc;

	rc = set_device(dev);
	if (rc)
		return rc;
	if (cd->use_pool) {
		err = cudaMallocFromPoolAsync(ptr_d, bytes, cd->pool, cd->alloc_stream);
		/* Synchronized so the memory is valid on every stream, not only this one. */
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(cd->alloc_stream);
	} else {
		err = cudaMalloc(ptr_d, bytes);
	}
	if (err == cudaErrorMemoryAllocation) {
		cudaGetLastError();
		zn_error("GPU %d (%s) is out of memory allocating %s with %s in use under a "
			 "budget of %s: the GPU has less free memory than the budget; lower "
			 "--device-mem", dev->ordinal, dev->name, zn_device_fmt_bytes(b[0], bytes),
			 zn_device_fmt_bytes(b[1], zn_device_used_bytes(dev) - bytes),
			 zn_device_fmt_bytes(b[2], dev->budget_bytes));
		return -ENOMEM;
	}
	return zn_cuda_check(err, cd->use_pool ? "cudaMallocFromPoolAsync" : "cudaMalloc",
			     __FILE__, __LINE__);
}

static void cuda_free(struct zn_device *dev, void *ptr_d)
{
	struct cuda_device *cd = dev->impl;

	if (cd->use_pool)
		zn_cuda_check(cudaFreeAsync(ptr_d, cd->alloc_stream), "cudaFreeAsync", __FILE__,
			      __LINE__);
	else
		zn_cuda_check(cudaFree(ptr_d), "cudaFree", __FILE__, __LINE__);
}

/* ---- streams ---------------------------------------------------------------------------- */

static cudaStream_t stream_of(struct zn_stream *s)
{
	return (cudaStream_t)s->impl;
}

static int cuda_stream_init(struct zn_stream *s)
{
	cudaStream_t st = NULL;
	int rc;

	rc = set_device(s->dev);
	if (rc)
		return rc;
	/* Non-blocking: no implicit order with the legacy default stream. */
	rc = zn_cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking),
			   "cudaStreamCreateWithFlags", __FILE__, __LINE__);
	if (rc)
		return rc;
	s->impl = st;
	if (zn_device_fault_hit(s->dev, ZN_DEVICE_FAULT_STREAM))
		return -ENOMEM;
	return 0;
}

static void cuda_stream_fini(struct zn_stream *s)
{
	if (!s->impl)
		return;
	zn_cuda_check(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize", __FILE__,
		      __LINE__);
	zn_cuda_check(cudaStreamDestroy(stream_of(s)), "cudaStreamDestroy", __FILE__, __LINE__);
	s->impl = NULL;
}

static int cuda_stream_sync(struct zn_stream *s)
{
	int rc = zn_cuda_check(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize",
			       __FILE__, __LINE__);

	/* The kernel ops return nothing: a failed launch or cuBLAS call is a sticky flag
	 * (kernels/cuda/ops.h) that surfaces here, where callers already check. */
	return rc ? rc : zn_cuda_kernels_error();
}

static int cuda_memcpy_async(struct zn_stream *s, void *dst, const void *src, uint64_t bytes,
			     enum zn_copy_kind kind)
{
	static const enum cudaMemcpyKind kinds[] = {
		[ZN_COPY_H2D] = cudaMemcpyHostToDevice,
		[ZN_COPY_D2H] = cudaMemcpyDeviceToHost,
		[ZN_COPY_D2D] = cudaMemcpyDeviceToDevice,
	};

	return zn_cuda_check(cudaMemcpyAsync(dst, src, bytes, kinds[kind], stream_of(s)),
			     "cudaMemcpyAsync", __FILE__, __LINE__);
}

static int cuda_memset_async(struct zn_stream *s, void *dst_d, int value, uint64_t bytes)
{
	return zn_cuda_check(cudaMemsetAsync(dst_d, value, bytes, stream_of(s)),
			     "cudaMemsetAsync", __FILE__, __LINE__);
}

static int cuda_launch(struct zn_stream *s, zn_launch_fn fn, const void *ctx,
		       uint64_t ctx_bytes)
{
	int rc = set_device(s->dev);

	if (rc)
		return rc;
	/* Errors already returned to earlier callers must not be blamed on this fn. */
	cudaGetLastError();
	/* fn runs now and only enqueues, so ctx needs no copy even when ctx_bytes > 0. */
	fn((void *)ctx, stream_of(s), s->dev->kernels);
	return zn_cuda_check(cudaGetLastError(), "kernel launch in zn_launch", __FILE__,
			     __LINE__);
}

static void *cuda_stream_native(struct zn_stream *s)
{
	return s->impl;
}

/* ---- events ----------------------------------------------------------------------------- */

static cudaEvent_t event_of(struct zn_event *e)
{
	return (cudaEvent_t)e->impl;
}

static int cuda_event_init(struct zn_event *e)
{
	cudaEvent_t ev = NULL;
	int rc;

	rc = set_device(e->dev);
	if (rc)
		return rc;
	/* Timing stays on: zn_event_elapsed_ms needs it. */
	rc = zn_cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDefault),
			   "cudaEventCreateWithFlags", __FILE__, __LINE__);
	if (rc)
		return rc;
	e->impl = ev;
	if (zn_device_fault_hit(e->dev, ZN_DEVICE_FAULT_EVENT))
		return -ENOMEM;
	return 0;
}

static void cuda_event_fini(struct zn_event *e)
{
	if (!e->impl)
		return;
	zn_cuda_check(cudaEventDestroy(event_of(e)), "cudaEventDestroy", __FILE__, __LINE__);
	e->impl = NULL;
}

static int cuda_event_record(struct zn_event *e, struct zn_stream *s)
{
	return zn_cuda_check(cudaEventRecord(event_of(e), stream_of(s)), "cudaEventRecord",
			     __FILE__, __LINE__);
}

static int cuda_stream_wait_event(struct zn_stream *s, struct zn_event *e)
{
	return zn_cuda_check(cudaStreamWaitEvent(stream_of(s), event_of(e), 0),
			     "cudaStreamWaitEvent", __FILE__, __LINE__);
}

static bool cuda_event_query(struct zn_event *e)
{
	cudaError_t err = cudaEventQuery(event_of(e));

	if (err == cudaErrorNotReady) {
		/* "not ready" is an answer, not a failure: clear it from the thread's last
		 * error, or a later launch check on this thread would report it */
		clear_not_ready();
		return false;
	}
	/* An error counts as complete so pollers do not spin; synchronize reports it. */
	zn_cuda_check(err, "cudaEventQuery", __FILE__, __LINE__);
	return true;
}

static int cuda_event_sync(struct zn_event *e)
{
	return zn_cuda_check(cudaEventSynchronize(event_of(e)), "cudaEventSynchronize",
			     __FILE__, __LINE__);
}

static int cuda_event_elapsed_ms(struct zn_event *start, struct zn_event *end, float *ms)
{
	cudaError_t err = cudaEventElapsedTime(ms, event_of(start), event_of(end));

	if (err == cudaErrorNotReady) {
		clear_not_ready();
		return -EAGAIN;
	}
	return zn_cuda_check(err, "cudaEventElapsedTime", __FILE__, __LINE__);
}

const struct zn_device_ops zn_device_cuda_ops = {
	.name = "cuda",
	.init = cuda_init,
	.fini = cuda_fini,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.stream_init = cuda_stream_init,
	.stream_fini = cuda_stream_fini,
	.stream_sync = cuda_stream_sync,
	.memcpy_async = cuda_memcpy_async,
	.memset_async = cuda_memset_async,
	.launch = cuda_launch,
	.event_init = cuda_event_init,
	.event_fini = cuda_event_fini,
	.event_record = cuda_event_record,
	.stream_wait_event = cuda_stream_wait_event,
	.event_query = cuda_event_query,
	.event_sync = cuda_event_sync,
	.event_elapsed_ms = cuda_event_elapsed_ms,
	.stream_native = cuda_stream_native,
	.host_alloc = zn_cuda_host_alloc,
	.host_free = zn_cuda_host_free,
	.free_bytes = zn_cuda_free_bytes,
};
