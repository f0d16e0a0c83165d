/* The device interface: memory against a hard budget, streams, events, copies, kernels.
 *
 * Two backends sit behind these functions (docs/device.md):
 *   host: the emulated device. Memory is ordinary (256-byte aligned) memory counted against
 *         the budget; each stream is a worker thread that runs its queue in order; events
 *         are counters with a condition variable; kernels are zn_kernels_cpu.
 *   cuda: CUDA runtime streams and events, a memory pool that enforces the budget,
 *         cudaMemcpyAsync; kernels are zn_kernels_cuda.
 * The scheduler is written once against this header.
 *
 * Work is put on a stream three ways: copies (zn_memcpy_async), zn_memset_async, and
 * zn_launch(stream, fn, ctx, ctx_bytes). zn_launch is how kernels run: under host, fn runs
 * later on the stream's worker thread, in order with the stream's other work; under cuda,
 * fn runs at once on the calling thread and must only enqueue work on `native` (the
 * cudaStream_t) through the kernel table it is given. Either way fn sees the same
 * arguments, so model code is written once:
 *
 *     static void fwd(void *ctx, void *native, const struct zn_kernel_table *k)
 *     {
 *             struct args *a = ctx;
 *             k->gelu_forward(native, a->out_d, a->inp_d, a->n);
 *     }
 *     struct args a = { out_d, inp_d, n };
 *     rc = zn_launch(compute, fwd, &a, sizeof(a));   // ctx is copied: `a` may go away
 *
 * Threading: a stream may be used from one thread at a time; events may be waited on
 * from any thread. Errors: functions return 0 or a negative errno (-ENOMEM with a line
 * naming the budget and the shortfall; -ENODEV when cuda is asked for and no GPU exists).
 */
#ifndef ZN_GPU_DEVICE_H
#define ZN_GPU_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "zinc.h"
#include "kernels.h"

struct zn_device;
struct zn_stream;
struct zn_event;

struct zn_device_config {
	enum zn_device_kind kind; /* AUTO picks cuda when a GPU is usable, else host */
	uint64_t budget_bytes;    /* 0 = default: all free GPU memory (cuda), 1 GiB (host) */
	/* (cuda default: free memory at create minus the reserve of zn_device_reserve for
	 * cuBLAS, lazily loaded kernels and context growth, lowered again by the NCCL
	 * estimate once a communicator exists (zn_device_comm_joined); an explicit budget
	 * above the free memory is refused, -EINVAL) */
	int ordinal;              /* GPU index for cuda (e.g. local rank) */
};

enum zn_copy_kind {
	ZN_COPY_H2D = 0,
	ZN_COPY_D2H = 1,
	ZN_COPY_D2D = 2,
};

typedef void (*zn_launch_fn)(void *ctx, void *native_stream, const struct zn_kernel_table *k);

int zn_device_create(struct zn_device **out, const struct zn_device_config *cfg);
void zn_device_destroy(struct zn_device *dev); /* accepts NULL */

enum zn_device_kind zn_device_kind_of(const struct zn_device *dev);
const char *zn_device_name(const struct zn_device *dev); /* "host" or the GPU's name */
const struct zn_kernel_table *zn_device_kernels(const struct zn_device *dev);

/* Number of usable CUDA GPUs (0 when built without CUDA or no driver/GPU: never an error). */
int zn_device_cuda_count(void);
/* The same, and when it is 0 writes why into why (e.g. "built without CUDA", "cudaGetDeviceCount:
 * CUDA driver version is insufficient ..."); for skip messages and `zinc info`. */
int zn_device_cuda_count_why(char *why, int why_bytes);

/* Memory: allocations are 256-byte aligned at least, and counted against the budget
 * rounded up to a multiple of 256 bytes. bytes == 0 gives *ptr_d = NULL and returns 0.
 * Over budget: -ENOMEM, one line naming the budget, the request and the bytes in use, and
 * nothing changes. Thread-safe. The memory is not initialised.
 * zn_device_free: queued work that uses the memory must have completed (synchronize a
 * stream or an event first); freeing a pointer this device did not hand out logs an error
 * and does nothing. Allocations still live at zn_device_destroy are freed with a warning. */
int zn_device_alloc(struct zn_device *dev, void **ptr_d, uint64_t bytes);
void zn_device_free(struct zn_device *dev, void *ptr_d); /* accepts NULL */
uint64_t zn_device_budget_bytes(const struct zn_device *dev);
uint64_t zn_device_used_bytes(const struct zn_device *dev);
uint64_t zn_device_peak_bytes(const struct zn_device *dev);
void zn_device_reset_peak(struct zn_device *dev);

/* Host memory for small, often copied values (tokens, losses, the norm result): under
 * cuda page-locked (cudaHostAlloc), so copies to and from it are asynchronous and overlap;
 * when page-locking is refused, ordinary memory with a warning (copies stay correct but
 * block). Under host: ordinary memory. 256-byte aligned, zeroed. bytes == 0 gives NULL and
 * 0. zn_device_host_free accepts NULL and must get the device that allocated. */
int zn_device_host_alloc(struct zn_device *dev, void **ptr_h, uint64_t bytes);
void zn_device_host_free(struct zn_device *dev, void *ptr_h);
/* How many zn_device_host_alloc blocks are live (allocated, not yet freed): for tests
 * that check a part's host buffers come from here. */
int zn_device_host_live(const struct zn_device *dev);

/* What the default cuda budget leaves outside zinc's own allocations: memory the CUDA
 * context, cuBLAS and NCCL take behind zinc's back. Pure arithmetic (device_reserve.c),
 * tested on the CPU; the cuda backend fills it from the GPU and the environment.
 *   cublas:  handles x workspace per handle; CUBLAS_WORKSPACE_CONFIG=":KiB:count[...]"
 *            when set, else cuBLAS's default (32 MiB from sm_90, 4 MiB before), plus
 *            4 MiB of handle state each.
 *   kernels: modules loaded on first use (CUDA_MODULE_LOADING=LAZY, the default): zinc's
 *            kernels and the cuBLAS kernels its GEMMs pick; an estimate, 192 MiB.
 *   context: growth of the context after create (local memory for deeper stacks,
 *            printf buffers, the pool's granularity); 64 MiB.
 *   comm:    NCCL, 0 for one rank: per channel (NCCL_MAX_NCHANNELS, default 32) two ring
 *            and two tree connections, each with the Simple (NCCL_BUFFSIZE, default
 *            4 MiB), LL128 (about 1.2 x that) and LL (256 KiB) buffers, plus 512 MiB for
 *            proxy state and NVLS; buffers are connected at the first collective, after
 *            the budget was picked, so zn_device_comm_joined adds them then. */
struct zn_device_reserve {
	uint64_t cublas_bytes;
	uint64_t kernel_bytes;
	uint64_t context_bytes;
	uint64_t comm_bytes;
};
/* sm_major: the GPU's compute capability major; handles: threads that will call cuBLAS;
 * env strings may be NULL (unset). world <= 1: comm_bytes 0. Returns -EINVAL (logged,
 * naming the variable) for a malformed CUBLAS_WORKSPACE_CONFIG, NCCL_BUFFSIZE or
 * NCCL_MAX_NCHANNELS. */
int zn_device_reserve_estimate(struct zn_device_reserve *r, int sm_major, int handles,
			       const char *cublas_workspace_config, int world,
			       const char *nccl_buffsize, const char *nccl_max_nchannels);
uint64_t zn_device_reserve_bytes(const struct zn_device_reserve *r);
/* The default budget from the free memory and the reserve: free - reserve, or half the
 * free memory when the reserve would take more than half. */
uint64_t zn_device_default_budget(uint64_t free_bytes, uint64_t reserve_bytes);
/* The budget once a communicator exists: a default budget is lowered so that what is
 * free now still covers the reserve (never below what is in use); an explicit budget is
 * kept. */
uint64_t zn_device_budget_after_comm(uint64_t budget, bool is_default, uint64_t used_bytes,
				     uint64_t free_now, uint64_t reserve_bytes);
/* Called by the NCCL backend when the communicator of `world` ranks exists on dev: adds
 * the NCCL estimate to the reserve, measures free memory again and lowers a default
 * budget (logged at debug; a warning when an explicit budget no longer leaves room).
 * No-op (0) on the host device and for world <= 1. */
int zn_device_comm_joined(struct zn_device *dev, int world);

/* Streams */
int zn_stream_create(struct zn_device *dev, struct zn_stream **out);
void zn_stream_destroy(struct zn_stream *s); /* waits for queued work; accepts NULL */
void *zn_stream_native(struct zn_stream *s);  /* cudaStream_t under cuda, NULL under host */
struct zn_device *zn_stream_device(struct zn_stream *s);
int zn_stream_synchronize(struct zn_stream *s);

int zn_memcpy_async(struct zn_stream *s, void *dst, const void *src, uint64_t bytes,
		    enum zn_copy_kind kind);
int zn_memset_async(struct zn_stream *s, void *dst_d, int value, uint64_t bytes);
/* Bytes of copies of `kind` enqueued on dev's streams since create (zinc bench step). */
uint64_t zn_device_copy_bytes(const struct zn_device *dev, enum zn_copy_kind kind);
/* ctx_bytes > 0: ctx is copied into the queue entry; 0: the pointer is passed as is and
 * must stay valid until fn has run. */
int zn_launch(struct zn_stream *s, zn_launch_fn fn, const void *ctx, uint64_t ctx_bytes);
/* n 16-bit floats at in_d (dt: ZN_DTYPE_F16, else bf16) widened to fp32 at out_d, enqueued
 * on s (the kernel table's cast) */
int zn_launch_widen(struct zn_stream *s, float *out_d, const void *in_d, uint64_t n,
		    enum zn_dtype dt);

/* Events: record marks the point in s's queue reached so far; wait makes s wait for it
 * without blocking the caller; query/synchronize are for the host. An event never
 * recorded counts as complete (as in CUDA). */
int zn_event_create(struct zn_device *dev, struct zn_event **out);
void zn_event_destroy(struct zn_event *e); /* accepts NULL; may be recorded and pending */
int zn_event_record(struct zn_event *e, struct zn_stream *s);
int zn_stream_wait_event(struct zn_stream *s, struct zn_event *e);
bool zn_event_query(struct zn_event *e);
int zn_event_synchronize(struct zn_event *e);
/* Milliseconds between two completed events (for the step-time split). Returns -EINVAL
 * when either was never recorded, -EAGAIN (nothing logged) when either has not completed. */
int zn_event_elapsed_ms(struct zn_event *start, struct zn_event *end, float *ms);

/* Fault injection, for tests that walk their callers' cleanup paths: the nth call from now
 * (1 = the next one) of `what` on dev fails once with -ENOMEM and logs a line saying it was
 * injected; nth 0 turns it off. ALLOC is zn_device_alloc (nothing is counted against the
 * budget), STREAM is zn_stream_create and EVENT zn_event_create (both fail part-way through
 * building the object, so its half-built teardown runs). The environment variables
 * ZINC_DEVICE_FAIL_ALLOC, ZINC_DEVICE_FAIL_STREAM and ZINC_DEVICE_FAIL_EVENT=N do the same
 * for every device when it is created.
 *
 *     zn_device_inject_fault(dev, ZN_DEVICE_FAULT_ALLOC, 3); // third allocation fails
 */
enum zn_device_fault {
	ZN_DEVICE_FAULT_ALLOC = 0,
	ZN_DEVICE_FAULT_STREAM = 1,
	ZN_DEVICE_FAULT_EVENT = 2,
	ZN_DEVICE_FAULT_COUNT = 3,
};
void zn_device_inject_fault(struct zn_device *dev, enum zn_device_fault what, int nth);

#endif
