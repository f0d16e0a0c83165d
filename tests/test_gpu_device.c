/* The device interface on the cuda backend. Every test skips, with the reason, when no
 * usable GPU is visible (built without CUDA, no driver, no GPU). Only the interface is
 * used, so this file builds without CUDA headers. Host buffers are pageable (malloc):
 * cudaMemcpyAsync accepts them; the tests synchronize before reading. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_check.h"
#include "gpu/device.h"

static void need_gpu(void)
{
	char why[256] = "";

	if (zn_device_cuda_count_why(why, sizeof(why)) == 0)
		cr_skip_test("no usable CUDA GPU: %s", why);
}

static struct zn_device *gpu_device(uint64_t budget_bytes)
{
	struct zn_device_config cfg = { .kind = ZN_DEVICE_CUDA, .budget_bytes = budget_bytes };
	struct zn_device *dev = NULL;

	cr_assert_eq(zn_device_create(&dev, &cfg), 0);
	cr_assert_not_null(dev);
	return dev;
}

static void assert_all_bytes(const unsigned char *got, unsigned char want, size_t n,
			     const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (got[i] != want)
			cr_assert_fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n,
				       got[i], want);
}

Test(gpu_device, identity_and_default_budget)
{
	struct zn_device *dev;
	struct zn_device_config cfg = { .kind = ZN_DEVICE_AUTO };
	struct zn_stream *s;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_device_kind_of(dev), ZN_DEVICE_CUDA);
	cr_assert(strlen(zn_device_name(dev)) > 0 && strcmp(zn_device_name(dev), "host"),
		  "name '%s' is not a GPU's", zn_device_name(dev));
	cr_assert_not_null(zn_device_kernels(dev));
	cr_assert_str_eq(zn_device_kernels(dev)->name, "cuda");
	cr_assert_gt(zn_device_budget_bytes(dev), 0, "default budget is free memory - reserve");
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_not_null(zn_stream_native(s), "a cuda stream has a cudaStream_t");
	zn_stream_destroy(s);
	zn_device_destroy(dev);

	/* auto picks cuda when a GPU is visible */
	cr_assert_eq(zn_device_create(&dev, &cfg), 0);
	cr_assert_eq(zn_device_kind_of(dev), ZN_DEVICE_CUDA);
	zn_device_destroy(dev);
}

Test(gpu_device, bad_ordinal_and_oversized_budget)
{
	struct zn_device_config cfg = { .kind = ZN_DEVICE_CUDA };
	struct zn_device *dev = (void *)1;

	need_gpu();
	cfg.ordinal = zn_device_cuda_count();
	cr_assert_eq(zn_device_create(&dev, &cfg), -ENODEV, "ordinal past the last GPU");
	cr_assert_null(dev);
	cfg.ordinal = 0;
	cfg.budget_bytes = 1ull << 60; /* 1 EiB: more than any GPU has free */
	cr_assert_eq(zn_device_create(&dev, &cfg), -EINVAL);
	cr_assert_null(dev);
}

Test(gpu_device, memcpy_round_trip_random)
{
	static const size_t sizes[] = { 1, 7, 256, 4097, 1 << 20, (64 << 20) + 13 };
	struct zn_device *dev;

	need_gpu();
	dev = gpu_device(0);
	check_copy_round_trip(dev, sizes, sizeof(sizes) / sizeof(sizes[0]), 11);
	zn_device_destroy(dev);
}

Test(gpu_device, memset_sets_only_its_range)
{
	const size_t n = 1 << 20, off = 4099, len = 500001;
	unsigned char *want = malloc(n), *got = malloc(n), *buf_d;
	struct zn_device *dev;
	struct zn_stream *s;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&buf_d, n), 0);
	fill_random(want, n, 5);
	cr_assert_eq(zn_memcpy_async(s, buf_d, want, n, ZN_COPY_H2D), 0);
	cr_assert_eq(zn_memset_async(s, buf_d + off, 0x5c, len), 0);
	memset(want + off, 0x5c, len);
	cr_assert_eq(zn_memcpy_async(s, got, buf_d, n, ZN_COPY_D2H), 0);
	cr_assert_eq(zn_stream_synchronize(s), 0);
	assert_bytes_eq(got, want, n, "memset");
	zn_device_free(dev, buf_d);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
	free(want);
	free(got);
}

Test(gpu_device, budget_and_peak)
{
	struct zn_device *dev;
	void *a_d, *b_d = (void *)1, *c_d;

	need_gpu();
	dev = gpu_device(64ull << 20);
	cr_assert_eq(zn_device_budget_bytes(dev), 64ull << 20);
	cr_assert_eq(zn_device_alloc(dev, &a_d, 40ull << 20), 0);
	cr_assert_eq(zn_device_alloc(dev, &b_d, 30ull << 20), -ENOMEM);
	cr_assert_null(b_d);
	cr_assert_eq(zn_device_used_bytes(dev), 40ull << 20, "a failed alloc changed used");
	cr_assert_eq(zn_device_alloc(dev, &c_d, 24ull << 20), 0, "the rest of the budget fits");
	cr_assert_eq(zn_device_used_bytes(dev), 64ull << 20);
	cr_assert_eq(zn_device_peak_bytes(dev), 64ull << 20);
	zn_device_free(dev, a_d);
	zn_device_free(dev, c_d);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	cr_assert_eq(zn_device_peak_bytes(dev), 64ull << 20);
	zn_device_reset_peak(dev);
	cr_assert_eq(zn_device_peak_bytes(dev), 0);
	/* Freed memory is reused from the pool: the whole budget fits again. */
	cr_assert_eq(zn_device_alloc(dev, &a_d, 64ull << 20), 0);
	zn_device_free(dev, a_d);
	zn_device_destroy(dev);
}

/* B waits on an event recorded on A after A's chain of copies; B's D2H must see A's last
 * write. Y holds the previous round's value until A's chain ends, so B copying too early
 * reads stale bytes. */
Test(gpu_device, event_wait_orders_two_streams)
{
	const size_t n = 64 << 20;
	unsigned char *x_d, *y_d, *got = malloc(n);
	struct zn_device *dev;
	struct zn_stream *a, *b;
	struct zn_event *e;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &a), 0);
	cr_assert_eq(zn_stream_create(dev, &b), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&x_d, n), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&y_d, n), 0);
	cr_assert_eq(zn_memset_async(a, y_d, 0, n), 0);
	for (int round = 1; round <= 4; round++) {
		unsigned char v = (unsigned char)(0x30 + round);

		cr_assert_eq(zn_memset_async(a, x_d, v, n), 0);
		for (int k = 0; k < 8; k++) { /* enough work that B would overtake it */
			cr_assert_eq(zn_memcpy_async(a, y_d, x_d, n, ZN_COPY_D2D), 0);
			cr_assert_eq(zn_memcpy_async(a, x_d, y_d, n, ZN_COPY_D2D), 0);
		}
		cr_assert_eq(zn_event_record(e, a), 0);
		cr_assert_eq(zn_stream_wait_event(b, e), 0);
		cr_assert_eq(zn_memcpy_async(b, got, y_d, n, ZN_COPY_D2H), 0);
		cr_assert_eq(zn_stream_synchronize(b), 0);
		cr_assert(zn_event_query(e), "B finished after waiting on e, so e is complete");
		assert_all_bytes(got, v, n, "B's copy after waiting on A's event");
	}
	cr_assert_eq(zn_stream_synchronize(a), 0);
	zn_device_free(dev, x_d);
	zn_device_free(dev, y_d);
	zn_event_destroy(e);
	zn_stream_destroy(a);
	zn_stream_destroy(b);
	zn_device_destroy(dev);
	free(got);
}

struct launch_probe {
	pthread_t caller;
	bool ran;
	bool on_caller;
	void *native;
	const struct zn_kernel_table *k;
};

static void probe_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	struct launch_probe *p = ctx;

	p->ran = true;
	p->on_caller = pthread_equal(pthread_self(), p->caller);
	p->native = native;
	p->k = k;
}

/* Under cuda, fn runs at once on the calling thread with the cudaStream_t and the
 * cuda kernel table. */
Test(gpu_device, launch_runs_on_the_caller)
{
	struct launch_probe p = { 0 };
	struct zn_device *dev;
	struct zn_stream *s;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	p.caller = pthread_self();
	cr_assert_eq(zn_launch(s, probe_fn, &p, 0), 0);
	cr_assert(p.ran, "fn had not run when zn_launch returned");
	cr_assert(p.on_caller, "fn ran on another thread");
	cr_assert_eq(p.native, zn_stream_native(s));
	cr_assert_eq(p.k, zn_device_kernels(dev));
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

Test(gpu_device, events_query_sync_elapsed)
{
	const size_t n = 64 << 20;
	struct zn_event *start, *end, *never;
	struct zn_device *dev;
	struct zn_stream *s;
	unsigned char *a_d, *b_d;
	float ms = -1;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &start), 0);
	cr_assert_eq(zn_event_create(dev, &end), 0);
	cr_assert_eq(zn_event_create(dev, &never), 0);
	cr_assert(zn_event_query(never), "a never-recorded event is complete");
	cr_assert_eq(zn_event_synchronize(never), 0);
	cr_assert_eq(zn_stream_wait_event(s, never), 0);
	cr_assert_eq(zn_event_elapsed_ms(never, end, &ms), -EINVAL);

	cr_assert_eq(zn_device_alloc(dev, (void **)&a_d, n), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&b_d, n), 0);
	cr_assert_eq(zn_event_record(start, s), 0);
	cr_assert_eq(zn_memset_async(s, a_d, 1, n), 0);
	for (int k = 0; k < 8; k++)
		cr_assert_eq(zn_memcpy_async(s, b_d, a_d, n, ZN_COPY_D2D), 0);
	cr_assert_eq(zn_event_record(end, s), 0);
	cr_assert_eq(zn_event_synchronize(end), 0);
	cr_assert(zn_event_query(end));
	cr_assert(zn_event_query(start));
	cr_assert_eq(zn_event_elapsed_ms(start, end, &ms), 0);
	cr_assert_geq(ms, 0.0f, "elapsed %.4f ms", ms);
	cr_assert_lt(ms, 60000.0f, "elapsed %.4f ms for 1 GiB of copies", ms);
	zn_device_free(dev, a_d);
	zn_device_free(dev, b_d);
	zn_event_destroy(start);
	zn_event_destroy(end);
	zn_event_destroy(never);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

/* Destroying a stream with queued copies finishes them first. */
Test(gpu_device, stream_destroy_waits_for_queued_work)
{
	const size_t n = 32 << 20;
	unsigned char *src_h = malloc(n), *got = malloc(n), *a_d, *b_d;
	struct zn_device *dev;
	struct zn_stream *s, *t;

	need_gpu();
	fill_random(src_h, n, 21);
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_stream_create(dev, &t), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&a_d, n), 0);
	cr_assert_eq(zn_device_alloc(dev, (void **)&b_d, n), 0);
	cr_assert_eq(zn_memcpy_async(s, a_d, src_h, n, ZN_COPY_H2D), 0);
	for (int k = 0; k < 8; k++)
		cr_assert_eq(zn_memcpy_async(s, b_d, a_d, n, ZN_COPY_D2D), 0);
	zn_stream_destroy(s);
	/* No event joins s and t: only destroy's wait makes b_d final here. */
	cr_assert_eq(zn_memcpy_async(t, got, b_d, n, ZN_COPY_D2H), 0);
	cr_assert_eq(zn_stream_synchronize(t), 0);
	assert_bytes_eq(got, src_h, n, "copy after the source stream was destroyed");
	zn_device_free(dev, a_d);
	zn_device_free(dev, b_d);
	zn_stream_destroy(t);
	zn_device_destroy(dev);
	free(src_h);
	free(got);
}

Test(gpu_device, fault_injection_walks_half_built_objects)
{
	struct zn_device *dev;
	struct zn_stream *s = (void *)1;
	struct zn_event *e = (void *)1;
	void *p_d = (void *)1;

	need_gpu();
	dev = gpu_device(0);
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_STREAM, 1);
	cr_assert_eq(zn_stream_create(dev, &s), -ENOMEM);
	cr_assert_null(s);
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_EVENT, 1);
	cr_assert_eq(zn_event_create(dev, &e), -ENOMEM);
	cr_assert_null(e);
	zn_device_inject_fault(dev, ZN_DEVICE_FAULT_ALLOC, 1);
	cr_assert_eq(zn_device_alloc(dev, &p_d, 4096), -ENOMEM);
	cr_assert_null(p_d);
	cr_assert_eq(zn_device_used_bytes(dev), 0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_device_alloc(dev, &p_d, 4096), 0);
	cr_assert_eq(zn_event_record(e, s), 0);
	cr_assert_eq(zn_event_synchronize(e), 0);
	zn_device_free(dev, p_d);
	zn_event_destroy(e);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

/* ---- host memory for copies, copy bandwidth (issue 16, items 6 and 7) ------------------- */

/* one timed copy of bytes on s: milliseconds between events around it */
static float timed_copy(struct zn_device *dev, struct zn_stream *s, void *dst, const void *src,
			uint64_t bytes, enum zn_copy_kind kind)
{
	struct zn_event *a, *b;
	float ms = 0.0f;

	cr_assert_eq(zn_event_create(dev, &a), 0);
	cr_assert_eq(zn_event_create(dev, &b), 0);
	cr_assert_eq(zn_event_record(a, s), 0);
	cr_assert_eq(zn_memcpy_async(s, dst, src, bytes, kind), 0);
	cr_assert_eq(zn_event_record(b, s), 0);
	cr_assert_eq(zn_stream_synchronize(s), 0);
	cr_assert_eq(zn_event_elapsed_ms(a, b, &ms), 0);
	zn_event_destroy(a);
	zn_event_destroy(b);
	return ms;
}

/* Pinned (zn_device_host_alloc) and pageable (malloc) round trips of 256 MiB arrive byte
 * for byte; the bandwidths are printed for gpu-check.sh's summary (not asserted). */
Test(gpu_device, host_alloc_copies_and_bandwidth)
{
	const uint64_t n = 256ull << 20;
	struct zn_device *dev;
	struct zn_stream *s;
	unsigned char *pin = NULL, *pin_back = NULL, *page, *page_back;
	void *d = NULL;
	float ms[4];

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_device_host_alloc(dev, (void **)&pin, n), 0);
	cr_assert_eq(zn_device_host_alloc(dev, (void **)&pin_back, n), 0);
	cr_assert_eq(pin[n - 1], 0, "host_alloc memory is zeroed");
	page = malloc(n);
	page_back = malloc(n);
	cr_assert(page && page_back);
	cr_assert_eq(zn_device_alloc(dev, &d, n), 0);
	for (uint64_t i = 0; i < n; i++)
		pin[i] = page[i] = (unsigned char)(i * 131 + (i >> 12));
	timed_copy(dev, s, d, pin, n, ZN_COPY_H2D); /* warm-up */
	ms[0] = timed_copy(dev, s, d, pin, n, ZN_COPY_H2D);
	ms[1] = timed_copy(dev, s, pin_back, d, n, ZN_COPY_D2H);
	cr_assert(!memcmp(pin, pin_back, n), "pinned round trip differs");
	ms[2] = timed_copy(dev, s, d, page, n, ZN_COPY_H2D);
	ms[3] = timed_copy(dev, s, page_back, d, n, ZN_COPY_D2H);
	cr_assert(!memcmp(page, page_back, n), "pageable round trip differs");
	fprintf(stderr, "copy-bw: H2D pinned %.1f GB/s, pageable %.1f GB/s (256 MiB)\n",
		n / (ms[0] * 1e6), n / (ms[2] * 1e6));
	fprintf(stderr, "copy-bw: D2H pinned %.1f GB/s, pageable %.1f GB/s (256 MiB)\n",
		n / (ms[1] * 1e6), n / (ms[3] * 1e6));
	zn_device_free(dev, d);
	zn_device_host_free(dev, pin);
	zn_device_host_free(dev, pin_back);
	free(page);
	free(page_back);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

/* An event polled before its work is done answers "not ready" and leaves no error behind
 * for the next launch check on this thread: a kernel op called directly (not through
 * zn_launch, which clears first) checks cudaGetLastError after its launch, and a stale
 * cudaErrorNotReady would surface as -EIO at the stream's synchronize. */

Test(gpu_device, not_ready_poll_leaves_no_error)
{
	const uint64_t n = 512ull << 20;
	struct zn_device *dev;
	struct zn_stream *s;
	struct zn_event *e;
	void *a = NULL, *b = NULL;
	bool seen_not_ready = false;

	need_gpu();
	dev = gpu_device(0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	cr_assert_eq(zn_event_create(dev, &e), 0);
	cr_assert_eq(zn_device_alloc(dev, &a, n), 0);
	cr_assert_eq(zn_device_alloc(dev, &b, n), 0);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(zn_memcpy_async(s, b, a, n, ZN_COPY_D2D), 0);
	cr_assert_eq(zn_event_record(e, s), 0);
	while (!zn_event_query(e))
		seen_not_ready = true;
	zn_device_kernels(dev)->gelu_forward(zn_stream_native(s), a, b, 1024);
	cr_assert_eq(zn_stream_synchronize(s), 0, "a not-ready poll was reported as a failure");
	if (!seen_not_ready)
		cr_log_warn("4 GiB of copies finished before the first poll: not-ready not seen");
	zn_device_free(dev, a);
	zn_device_free(dev, b);
	zn_event_destroy(e);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}
