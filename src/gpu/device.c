/* The device interface's front end: picks a backend, checks arguments, enforces the
 * memory budget and counts peak usage, injects faults, then calls the backend's ops table
 * (device_impl.h). What runs where, and how streams and events work, is the backends'
 * business (device_host.c, device_cuda.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/fault.h"
#include "core/log.h"
#include "gpu/device_impl.h"

static const enum zn_fault fault_hook[ZN_DEVICE_FAULT_COUNT] = {
	ZN_FAULT_DEVICE_ALLOC, ZN_FAULT_DEVICE_STREAM, ZN_FAULT_DEVICE_EVENT,
};
static const char *const fault_what[ZN_DEVICE_FAULT_COUNT] = {
	"device allocation", "stream creation", "event creation",
};

const char *zn_device_fmt_bytes(char *buf, uint64_t bytes)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%" PRIu64 " bytes", bytes);
	else
		snprintf(buf, 32, "%.2f %s", v, units[u]);
	return buf;
}

int zn_device_cuda_count(void)
{
	char why[256];

	return zn_cuda_probe(why, sizeof(why));
}

int zn_device_cuda_count_why(char *why, int why_bytes)
{
	char tmp[256];

	if (!why || why_bytes <= 0)
		return zn_cuda_probe(tmp, sizeof(tmp));
	why[0] = 0;
	return zn_cuda_probe(why, why_bytes);
}

/* Chooses the backend for cfg->kind; -ENODEV with a line saying why when cuda is asked
 * for and cannot be had. */
static int pick_ops(const struct zn_device_config *cfg, const struct zn_device_ops **ops)
{
	char why[256] = "";
	int count = zn_cuda_probe(why, sizeof(why));

	if (cfg->kind == ZN_DEVICE_HOST) {
		*ops = &zn_device_host_ops;
		return 0;
	}
	if (cfg->kind == ZN_DEVICE_AUTO && count == 0) {
		*ops = &zn_device_host_ops;
		zn_info("device: auto picked host, the emulated device (%s)", why);
		return 0;
	}
	if (cfg->kind == ZN_DEVICE_AUTO)
		zn_info("device: auto picked cuda (%d GPU%s visible)", count, count == 1 ? "" : "s");
	if (count == 0) {
		zn_error("--device cuda: no usable GPU: %s; use --device host or auto", why);
		return -ENODEV;
	}
	if (cfg->ordinal < 0 || cfg->ordinal >= count) {
		zn_error("cuda device: GPU %d asked for but %d visible (ordinals 0..%d); "
			 "check CUDA_VISIBLE_DEVICES and the local rank", cfg->ordinal, count,
			 count - 1);
		return -ENODEV;
	}
	*ops = zn_device_cuda_ops_or_null();
	return 0;
}

static void read_fault_env(struct zn_device *dev)
{
	for (int i = 0; i < ZN_DEVICE_FAULT_COUNT; i++) {
		const char *s = zn_fault_value(fault_hook[i]);

		if (s && *s)
			zn_device_inject_fault(dev, i, atoi(s));
	}
}

int zn_device_create(struct zn_device **out, const struct zn_device_config *cfg)
{
	const struct zn_device_ops *ops;
	struct zn_device *dev;
	int rc;

	if (!out || !cfg) {
		zn_error("zn_device_create: out and cfg must not be NULL");
		return -EINVAL;
	}
	*out = NULL;
	if (cfg->kind != ZN_DEVICE_AUTO && cfg->kind != ZN_DEVICE_HOST &&
	    cfg->kind != ZN_DEVICE_CUDA) {
		zn_error("zn_device_create: unknown device kind %d; use cuda, host or auto",
			 (int)cfg->kind);
		return -EINVAL;
	}
	rc = pick_ops(cfg, &ops);
	if (rc)
		return rc;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->ops = ops;
	dev->kind = ops == &zn_device_host_ops ? ZN_DEVICE_HOST : ZN_DEVICE_CUDA;
	dev->ordinal = cfg->ordinal;
	dev->budget_bytes = cfg->budget_bytes;
	dev->budget_is_default = cfg->budget_bytes == 0;
	dev->mem_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	read_fault_env(dev);

	rc = ops->init(dev, cfg);
	if (rc)
		goto fini_backend;
	zn_debug("device: %s (%s), budget %" PRIu64 " bytes", ops->name, dev->name,
		 dev->budget_bytes);
	*out = dev;
	return 0;

fini_backend:
	ops->fini(dev);
	pthread_mutex_destroy(&dev->mem_mu);
	free(dev);
	return rc;
}

static void free_leaked(struct zn_device *dev)
{
	uint64_t n = dev->allocs.count, bytes, total = 0;
	void *p;
	char b[32];

	if (!n)
		return;
	while (zn_ptr_map_pop(&dev->allocs, &p, &bytes)) {
		dev->ops->free(dev, p);
		total += bytes;
	}
	zn_warn("device %s destroyed with %" PRIu64 " allocation%s (%s) still live; freed them",
		dev->name, n, n == 1 ? "" : "s", zn_device_fmt_bytes(b, total));
}

void zn_device_destroy(struct zn_device *dev)
{
	if (!dev)
		return;
	if (dev->live_streams || dev->live_events)
		zn_warn("device %s destroyed with %d stream(s) and %d event(s) not destroyed",
			dev->name, dev->live_streams, dev->live_events);
	free_leaked(dev);
	zn_ptr_map_fini(&dev->allocs);
	dev->ops->fini(dev);
	pthread_mutex_destroy(&dev->mem_mu);
	free(dev);
}

enum zn_device_kind zn_device_kind_of(const struct zn_device *dev)
{
	return dev->kind;
}

const char *zn_device_name(const struct zn_device *dev)
{
	return dev->name;
}

const struct zn_kernel_table *zn_device_kernels(const struct zn_device *dev)
{
	return dev->kernels;
}

void zn_device_inject_fault(struct zn_device *dev, enum zn_device_fault what, int nth)
{
	if (!dev || what < 0 || what >= ZN_DEVICE_FAULT_COUNT)
		return;
	atomic_store(&dev->fault_left[what], nth > 0 ? nth : 0);
}

bool zn_device_fault_hit(struct zn_device *dev, enum zn_device_fault what)
{
	/* Only a positive count is decremented, so an unarmed knob never wraps. */
	int64_t left = atomic_load(&dev->fault_left[what]);

	while (left > 0) {
		if (atomic_compare_exchange_weak(&dev->fault_left[what], &left, left - 1)) {
			if (left != 1)
				return false;
			zn_error("%s on device %s failed by fault injection (%s or "
				 "zn_device_inject_fault)", fault_what[what], dev->name,
				 zn_fault_name(fault_hook[what]));
			return true;
		}
	}
	return false;
}

/* ---- memory ---------------------------------------------------------------------------- */

/* Takes bytes out of the budget, or says which budget is exceeded and by how much. */
static int reserve(struct zn_device *dev, uint64_t bytes, uint64_t asked)
{
	char b[3][32], exact[40] = "";
	uint64_t used;

	pthread_mutex_lock(&dev->mem_mu);
	used = dev->used_bytes;
	if (bytes > dev->budget_bytes || used > dev->budget_bytes - bytes) {
		pthread_mutex_unlock(&dev->mem_mu);
		if (asked >= 1024)
			snprintf(exact, sizeof(exact), " (%" PRIu64 " bytes)", asked);
		zn_error("device memory budget of %s exceeded: requested %s%s with %s in use on "
			 "%s; raise --device-mem or lower what needs it",
			 zn_device_fmt_bytes(b[0], dev->budget_bytes),
			 zn_device_fmt_bytes(b[1], asked), exact, zn_device_fmt_bytes(b[2], used),
			 dev->name);
		return -ENOMEM;
	}
	used += bytes;
	dev->used_bytes = used;
	if (used > dev->peak_bytes)
		dev->peak_bytes = used;
	pthread_mutex_unlock(&dev->mem_mu);
	return 0;
}

static void unreserve(struct zn_device *dev, uint64_t bytes)
{
	pthread_mutex_lock(&dev->mem_mu);
	dev->used_bytes -= bytes;
	pthread_mutex_unlock(&dev->mem_mu);
}

int zn_device_alloc(struct zn_device *dev, void **ptr_d, uint64_t bytes)
{
	uint64_t rounded;
	void *p = NULL;
	int rc;

	if (!dev || !ptr_d) {
		zn_error("zn_device_alloc: dev and ptr_d must not be NULL");
		return -EINVAL;
	}
	*ptr_d = NULL;
	if (!bytes)
		return 0;
	if (bytes > UINT64_MAX - ZN_DEVICE_ALIGN_BYTES)
		rounded = UINT64_MAX; /* cannot fit any budget: reserve() says so */
	else
		rounded = (bytes + ZN_DEVICE_ALIGN_BYTES - 1) & ~(uint64_t)(ZN_DEVICE_ALIGN_BYTES - 1);
	if (zn_device_fault_hit(dev, ZN_DEVICE_FAULT_ALLOC))
		return -ENOMEM;
	rc = reserve(dev, rounded, bytes);
	if (rc)
		return rc;
	rc = dev->ops->alloc(dev, &p, rounded);
	if (rc)
		goto unreserve_bytes;

	pthread_mutex_lock(&dev->mem_mu);
	rc = zn_ptr_map_put(&dev->allocs, p, rounded);
	pthread_mutex_unlock(&dev->mem_mu);
	if (rc) {
		zn_error("zn_device_alloc: out of host memory for the allocation map");
		goto free_backend;
	}
	*ptr_d = p;
	return 0;

free_backend:
	dev->ops->free(dev, p);
unreserve_bytes:
	unreserve(dev, rounded);
	return rc;
}

void zn_device_free(struct zn_device *dev, void *ptr_d)
{
	uint64_t bytes = 0;
	bool found;

	if (!dev || !ptr_d)
		return;
	pthread_mutex_lock(&dev->mem_mu);
	found = zn_ptr_map_take(&dev->allocs, ptr_d, &bytes);
	pthread_mutex_unlock(&dev->mem_mu);
	if (!found) {
		zn_error("zn_device_free: %p was not allocated on device %s or was already freed",
			 ptr_d, dev->name);
		return;
	}
	dev->ops->free(dev, ptr_d);
	unreserve(dev, bytes);
}

uint64_t zn_device_budget_bytes(const struct zn_device *dev)
{
	return dev->budget_bytes;
}

uint64_t zn_device_used_bytes(const struct zn_device *dev)
{
	return atomic_load(&dev->used_bytes);
}

uint64_t zn_device_peak_bytes(const struct zn_device *dev)
{
	return atomic_load(&dev->peak_bytes);
}

void zn_device_reset_peak(struct zn_device *dev)
{
	pthread_mutex_lock(&dev->mem_mu);
	dev->peak_bytes = dev->used_bytes;
	pthread_mutex_unlock(&dev->mem_mu);
}

/* ---- streams ---------------------------------------------------------------------------- */

int zn_stream_create(struct zn_device *dev, struct zn_stream **out)
{
	struct zn_stream *s;
	int rc;

	if (!dev || !out) {
		zn_error("zn_stream_create: dev and out must not be NULL");
		return -EINVAL;
	}
	*out = NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dev = dev;
	rc = dev->ops->stream_init(s);
	if (rc)
		goto fini_stream;
	atomic_fetch_add(&dev->live_streams, 1);
	*out = s;
	return 0;

fini_stream:
	dev->ops->stream_fini(s);
	free(s);
	return rc;
}

void zn_stream_destroy(struct zn_stream *s)
{
	if (!s)
		return;
	s->dev->ops->stream_fini(s);
	atomic_fetch_sub(&s->dev->live_streams, 1);
	free(s);
}

void *zn_stream_native(struct zn_stream *s)
{
	if (!s || !s->dev->ops->stream_native)
		return NULL;
	return s->dev->ops->stream_native(s);
}

struct zn_device *zn_stream_device(struct zn_stream *s)
{
	return s ? s->dev : NULL;
}

int zn_stream_synchronize(struct zn_stream *s)
{
	if (!s)
		return -EINVAL;
	return s->dev->ops->stream_sync(s);
}

static const char *const copy_names[] = { "H2D", "D2H", "D2D" };

int zn_memcpy_async(struct zn_stream *s, void *dst, const void *src, uint64_t bytes,
		    enum zn_copy_kind kind)
{
	if (!s || kind < ZN_COPY_H2D || kind > ZN_COPY_D2D) {
		zn_error("zn_memcpy_async: %s", !s ? "stream is NULL" : "unknown copy kind");
		return -EINVAL;
	}
	if (!bytes)
		return 0;
	if (!dst || !src) {
		zn_error("zn_memcpy_async: %s copy of %" PRIu64 " bytes with a NULL %s",
			 copy_names[kind], bytes, !dst ? "destination" : "source");
		return -EINVAL;
	}
	atomic_fetch_add(&s->dev->copy_bytes[kind], bytes);
	return s->dev->ops->memcpy_async(s, dst, src, bytes, kind);
}

uint64_t zn_device_copy_bytes(const struct zn_device *dev, enum zn_copy_kind kind)
{
	return atomic_load(&((struct zn_device *)dev)->copy_bytes[kind]);
}

int zn_memset_async(struct zn_stream *s, void *dst_d, int value, uint64_t bytes)
{
	if (!s) {
		zn_error("zn_memset_async: stream is NULL");
		return -EINVAL;
	}
	if (!bytes)
		return 0;
	if (!dst_d) {
		zn_error("zn_memset_async: memset of %" PRIu64 " bytes with a NULL destination",
			 bytes);
		return -EINVAL;
	}
	return s->dev->ops->memset_async(s, dst_d, value, bytes);
}

int zn_launch(struct zn_stream *s, zn_launch_fn fn, const void *ctx, uint64_t ctx_bytes)
{
	if (!s || !fn || (ctx_bytes && !ctx)) {
		zn_error("zn_launch: %s", !s ? "stream is NULL" : !fn ? "fn is NULL" :
			 "ctx is NULL with ctx_bytes > 0");
		return -EINVAL;
	}
	return s->dev->ops->launch(s, fn, ctx, ctx_bytes);
}

/* ---- events ----------------------------------------------------------------------------- */

int zn_event_create(struct zn_device *dev, struct zn_event **out)
{
	struct zn_event *e;
	int rc;

	if (!dev || !out) {
		zn_error("zn_event_create: dev and out must not be NULL");
		return -EINVAL;
	}
	*out = NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->dev = dev;
	rc = dev->ops->event_init(e);
	if (rc)
		goto fini_event;
	atomic_fetch_add(&dev->live_events, 1);
	*out = e;
	return 0;

fini_event:
	dev->ops->event_fini(e);
	free(e);
	return rc;
}

void zn_event_destroy(struct zn_event *e)
{
	if (!e)
		return;
	e->dev->ops->event_fini(e);
	atomic_fetch_sub(&e->dev->live_events, 1);
	free(e);
}

int zn_event_record(struct zn_event *e, struct zn_stream *s)
{
	int rc;

	if (!e || !s || e->dev->ops != s->dev->ops) {
		zn_error("zn_event_record: %s", !e || !s ? "event or stream is NULL" :
			 "event and stream belong to different backends");
		return -EINVAL;
	}
	rc = e->dev->ops->event_record(e, s);
	if (!rc)
		e->recorded = true;
	return rc;
}

int zn_stream_wait_event(struct zn_stream *s, struct zn_event *e)
{
	if (!e || !s || e->dev->ops != s->dev->ops) {
		zn_error("zn_stream_wait_event: %s", !e || !s ? "event or stream is NULL" :
			 "event and stream belong to different backends");
		return -EINVAL;
	}
	if (!e->recorded)
		return 0; /* never recorded: complete, nothing to wait for */
	return s->dev->ops->stream_wait_event(s, e);
}

bool zn_event_query(struct zn_event *e)
{
	if (!e || !e->recorded)
		return true;
	return e->dev->ops->event_query(e);
}

int zn_event_synchronize(struct zn_event *e)
{
	if (!e)
		return -EINVAL;
	if (!e->recorded)
		return 0;
	return e->dev->ops->event_sync(e);
}

int zn_event_elapsed_ms(struct zn_event *start, struct zn_event *end, float *ms)
{
	if (!start || !end || !ms || start->dev->ops != end->dev->ops) {
		zn_error("zn_event_elapsed_ms: %s", !start || !end || !ms ?
			 "start, end and ms must not be NULL" :
			 "events belong to different backends");
		return -EINVAL;
	}
	if (!start->recorded || !end->recorded) {
		zn_error("zn_event_elapsed_ms: the %s event was never recorded",
			 !start->recorded ? "start" : "end");
		return -EINVAL;
	}
	return start->dev->ops->event_elapsed_ms(start, end, ms);
}
