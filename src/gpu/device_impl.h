/* Internal to src/gpu: the backend ops table and the parts of a device, stream and event
 * that every backend shares. device.c owns these structs, the budget, the allocation map
 * and fault injection; a backend owns only what hangs off the `impl` pointers.
 *
 * A backend is one `struct zn_device_ops` (ggml-backend style). Every slot is required
 * unless marked optional; device.c has already checked the arguments (non-NULL handles,
 * same backend on both sides, bytes > 0 for alloc) before calling a slot.
 */
#ifndef ZN_GPU_DEVICE_IMPL_H
#define ZN_GPU_DEVICE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"

#define ZN_DEVICE_ALIGN_BYTES 256u

struct zn_device_ops {
	const char *name; /* "host" or "cuda" */

	/* init fills dev->name, dev->kernels and dev->impl, and replaces dev->budget_bytes
	 * when it is 0 with the backend's default. fini must undo a half-built init (it is
	 * called whenever init has been called, success or not). */
	int (*init)(struct zn_device *dev, const struct zn_device_config *cfg);
	void (*fini)(struct zn_device *dev);

	/* bytes is already a multiple of ZN_DEVICE_ALIGN_BYTES and within the budget. */
	int (*alloc)(struct zn_device *dev, void **ptr_d, uint64_t bytes);
	void (*free)(struct zn_device *dev, void *ptr_d);

	/* stream_fini waits for queued work and must accept a half-built stream (it is
	 * called after a failed stream_init too). */
	int (*stream_init)(struct zn_stream *s);
	void (*stream_fini)(struct zn_stream *s);
	int (*stream_sync)(struct zn_stream *s);
	int (*memcpy_async)(struct zn_stream *s, void *dst, const void *src, uint64_t bytes,
			    enum zn_copy_kind kind);
	int (*memset_async)(struct zn_stream *s, void *dst_d, int value, uint64_t bytes);
	int (*launch)(struct zn_stream *s, zn_launch_fn fn, const void *ctx, uint64_t ctx_bytes);

	/* event_fini accepts a half-built event, like stream_fini. */
	int (*event_init)(struct zn_event *e);
	void (*event_fini)(struct zn_event *e);
	int (*event_record)(struct zn_event *e, struct zn_stream *s);
	int (*stream_wait_event)(struct zn_stream *s, struct zn_event *e); /* e was recorded */
	bool (*event_query)(struct zn_event *e);                           /* e was recorded */
	int (*event_sync)(struct zn_event *e);                             /* e was recorded */
	/* Both recorded; -EAGAIN without logging when either is not complete. */
	int (*event_elapsed_ms)(struct zn_event *start, struct zn_event *end, float *ms);

	/* Optional: the native stream handle. NULL slot: zn_stream_native returns NULL. */
	void *(*stream_native)(struct zn_stream *s);

	/* Optional: host memory for copies (page-locked under cuda). NULL slots: ordinary
	 * aligned memory. host_alloc gets bytes > 0 and must zero the memory. */
	int (*host_alloc)(struct zn_device *dev, void **ptr_h, uint64_t bytes);
	void (*host_free)(struct zn_device *dev, void *ptr_h);

	/* Optional: free device memory now (cudaMemGetInfo), for zn_device_comm_joined.
	 * NULL slot: the budget is not re-measured. */
	int (*free_bytes)(struct zn_device *dev, uint64_t *free_b);
};

/* Open-addressing map from device pointer to its counted bytes (device_map.c). Not
 * thread-safe: device.c holds mem_mu around it. */
struct zn_ptr_map {
	struct zn_ptr_slot *slots; /* NULL until the first put */
	uint64_t cap;              /* power of two */
	uint64_t count;
};
int zn_ptr_map_put(struct zn_ptr_map *m, void *key, uint64_t bytes);
bool zn_ptr_map_take(struct zn_ptr_map *m, void *key, uint64_t *bytes);
/* Removes and returns some entry; false when empty. For teardown. */
bool zn_ptr_map_pop(struct zn_ptr_map *m, void **key, uint64_t *bytes);
void zn_ptr_map_fini(struct zn_ptr_map *m);

struct zn_device {
	const struct zn_device_ops *ops;
	enum zn_device_kind kind;
	int ordinal;
	char name[256];
	const struct zn_kernel_table *kernels;
	uint64_t budget_bytes;
	bool budget_is_default;            /* budget_bytes was 0 in the config */
	struct zn_device_reserve reserve;  /* cuda: what the default budget leaves out */

	/* used/peak are changed under mem_mu and read without it. */
	pthread_mutex_t mem_mu;
	_Atomic uint64_t used_bytes;
	_Atomic uint64_t peak_bytes;
	struct zn_ptr_map allocs;

	_Atomic int64_t fault_left[ZN_DEVICE_FAULT_COUNT]; /* > 0: calls until one fails */
	_Atomic int live_streams;
	_Atomic int live_events;
	_Atomic int host_live;  /* zn_device_host_alloc blocks not yet freed */
	_Atomic uint64_t copy_bytes[3]; /* enqueued by zn_memcpy_async, per zn_copy_kind */

	void *impl;
};

struct zn_stream {
	struct zn_device *dev;
	void *impl;
};

struct zn_event {
	struct zn_device *dev;
	_Atomic bool recorded; /* set by zn_event_record; never recorded = complete */
	void *impl;
};

/* True when an injected fault fires for this call (device.c; backends call it for
 * STREAM and EVENT part-way through init so the half-built teardown runs). Logs the
 * line saying the failure was injected. */
bool zn_device_fault_hit(struct zn_device *dev, enum zn_device_fault what);

/* Bytes as "1.50 GiB" for messages; buf of 32 bytes is enough. */
const char *zn_device_fmt_bytes(char *buf, uint64_t bytes);

extern const struct zn_device_ops zn_device_host_ops;

/* The cuda backend (device_cuda.c), or stand-ins when zinc is built without CUDA.
 * zn_cuda_probe returns the number of usable GPUs; with none it writes why into why. */
#ifdef ZN_HAVE_CUDA
extern const struct zn_device_ops zn_device_cuda_ops;
int zn_cuda_probe(char *why, int why_bytes);
/* device_mem_cuda.c: the cuda ops' host_alloc, host_free and free_bytes slots */
int zn_cuda_host_alloc(struct zn_device *dev, void **ptr_h, uint64_t bytes);
void zn_cuda_host_free(struct zn_device *dev, void *ptr_h);
int zn_cuda_free_bytes(struct zn_device *dev, uint64_t *free_b);
static inline const struct zn_device_ops *zn_device_cuda_ops_or_null(void)
{
	return &zn_device_cuda_ops;
}
#else
#include <stdio.h>
static inline int zn_cuda_probe(char *why, int why_bytes)
{
	snprintf(why, why_bytes, "zinc was built without CUDA (no nvcc at configure time)");
	return 0;
}
static inline const struct zn_device_ops *zn_device_cuda_ops_or_null(void)
{
	return NULL;
}
#endif

#endif
