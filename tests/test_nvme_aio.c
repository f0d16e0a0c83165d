/* The io_uring engine and its pread/pwrite fallback: random extents written and read back
 * over several rings, concurrent submitters, misuse rejected, every injected fault
 * surfacing with the file named, short transfers completed, the rate cap. Each engine test
 * runs on both backends. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "nvme/aio.h"
#include "nvme_test_util.h"

static char dir[ZN_PATH_MAX];

/* Idempotent: a test with its own .init (stderr redirection) calls it again. */
static void setup(void)
{
	if (!dir[0])
		nvme_test_dir(dir, sizeof(dir));
}

static void teardown(void)
{
	if (dir[0])
		nvme_test_rmdir(dir);
	dir[0] = 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct zn_aio_config small_cfg(int rings, uint64_t block, int depth)
{
	struct zn_aio_config c = {
		.block_size_bytes = block,
		.queue_depth = depth,
		.intra_op_parallelism = rings,
		.overlap_events = true,
	};
	return c;
}

static struct zn_aio *make_engine(enum zn_aio_backend b, const struct zn_aio_config *c)
{
	struct zn_aio *aio;
	int rc = zn_aio_create_backend(&aio, c, b);

	if (rc == -ENOSYS && b == ZN_AIO_BACKEND_URING)
		cr_skip_test("io_uring is not available here (kernel, seccomp or valgrind)");
	cr_assert_eq(rc, 0, "zn_aio_create_backend: %s", zn_strerror(rc));
	cr_assert_eq(zn_aio_is_uring(aio), b == ZN_AIO_BACKEND_URING, "%s", zn_aio_describe(aio));
	return aio;
}

/* Random 4K-aligned extents written from one buffer and read back into another, many in
 * flight at once over `rings` rings; with `fixed`, the buffers are registered. */
static void roundtrip(enum zn_aio_backend b, int rings, bool fixed, bool single_submit,
		      bool overlap)
{
	enum { FILE_BYTES = 8 << 20, NREQ = 48 };
	struct zn_aio_config c = small_cfg(rings, 16384, 8);
	struct zn_aio_req reqs[NREQ];
	uint64_t off[NREQ], len[NREQ], seed = 1234 + (uint64_t)rings * 7 + fixed;
	struct zn_aio_file *f;
	char path[ZN_PATH_MAX + 32];
	char *src, *dst;
	struct zn_aio *aio;
	int fd, i, rc;

	c.single_submit = single_submit;
	c.overlap_events = overlap;
	aio = make_engine(b, &c);
	fd = nvme_test_open(dir, "rt.bin", FILE_BYTES, path, sizeof(path));
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	src = nvme_test_alloc(FILE_BYTES);
	dst = nvme_test_alloc(FILE_BYTES);
	nvme_test_fill(src, FILE_BYTES, seed);
	if (fixed) {
		cr_assert_eq(zn_aio_register_buffer(aio, src, FILE_BYTES), 0);
		cr_assert_eq(zn_aio_register_buffer(aio, dst, FILE_BYTES), 0);
	}
	/* Disjoint random extents: the file cut at random 4K boundaries. */
	uint64_t pos = 0;
	for (i = 0; i < NREQ; i++) {
		uint64_t max = (FILE_BYTES - pos) / ZN_AIO_ALIGN - (uint64_t)(NREQ - 1 - i);
		uint64_t blocks = 1 + nvme_test_rand(&seed) % (max < 64 ? max : 64);

		if (i == NREQ - 1)
			blocks = (FILE_BYTES - pos) / ZN_AIO_ALIGN;
		off[i] = pos;
		len[i] = blocks * ZN_AIO_ALIGN;
		pos += len[i];
	}
	for (i = 0; i < NREQ; i++) {
		rc = zn_aio_write(aio, f, off[i], len[i], src + off[i], &reqs[i]);
		cr_assert_eq(rc, 0);
	}
	for (i = 0; i < NREQ; i++)
		cr_assert_eq(zn_aio_wait(&reqs[i]), 0, "write %d", i);
	/* Read back in a shuffled order. */
	for (i = NREQ - 1; i >= 0; i--) {
		int j = (int)((uint64_t)i * 17 % NREQ);

		rc = zn_aio_read(aio, f, off[j], len[j], dst + off[j], &reqs[j]);
		cr_assert_eq(rc, 0);
	}
	for (i = 0; i < NREQ; i++)
		cr_assert_eq(zn_aio_wait(&reqs[i]), 0, "read %d", i);
	nvme_test_compare(dst, src, FILE_BYTES, zn_aio_describe(aio));
	struct zn_aio_stats st;
	zn_aio_get_stats(aio, &st);
	cr_assert_geq(st.pieces, 2 * FILE_BYTES / 16384);
	cr_assert_eq(st.bytes_read, FILE_BYTES);
	cr_assert_eq(st.bytes_written, FILE_BYTES);
	if (fixed && zn_aio_fixed_buffers(aio))
		cr_assert_eq(st.fixed_buffer_pieces, st.pieces, "every piece lies in a fixed buffer");
	else
		cr_assert_eq(st.fixed_buffer_pieces, 0);
	if (fixed)
		zn_aio_unregister_buffer(aio, src), zn_aio_unregister_buffer(aio, dst);
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(src);
	free(dst);
}

TestSuite(nvme_aio, .init = setup, .fini = teardown, .timeout = 120);

Test(nvme_aio, roundtrip_uring_1ring) { roundtrip(ZN_AIO_BACKEND_URING, 1, false, false, true); }
Test(nvme_aio, roundtrip_uring_3rings_fixed) { roundtrip(ZN_AIO_BACKEND_URING, 3, true, false, true); }
Test(nvme_aio, roundtrip_uring_single_submit_no_overlap)
{
	roundtrip(ZN_AIO_BACKEND_URING, 2, true, true, false);
}
Test(nvme_aio, roundtrip_pool) { roundtrip(ZN_AIO_BACKEND_POOL, 2, true, false, true); }

Test(nvme_aio, uring_uses_fixed_resources)
{
	struct zn_aio_config c = small_cfg(2, 65536, 4);
	struct zn_aio_probe p;
	struct zn_aio *aio = make_engine(ZN_AIO_BACKEND_URING, &c);

	cr_assert_eq(zn_aio_probe(&p), 0);
	cr_assert(p.uring, "probe says no io_uring but a ring was made");
	/* The engine must use what the kernel offers, and say so. */
	cr_assert_eq(zn_aio_fixed_buffers(aio), p.fixed_buffers, "%s", zn_aio_describe(aio));
	cr_assert_eq(zn_aio_fixed_files(aio), p.fixed_files, "%s", zn_aio_describe(aio));
	cr_assert_not_null(strstr(zn_aio_describe(aio), "io_uring, 2 rings"), "%s",
			   zn_aio_describe(aio));
	zn_aio_destroy(aio);
}

struct conc_arg {
	struct zn_aio *aio;
	struct zn_aio_file *f;
	char *src, *dst;
	uint64_t base, bytes;
	int rc;
};

/* One submitter: writes its region in 64K requests, reads it back, compares. */
static void *conc_main(void *p)
{
	struct conc_arg *a = p;
	struct zn_aio_req w[8], r[8];
	uint64_t chunk = a->bytes / 8;
	int i;

	for (i = 0; i < 8 && !a->rc; i++)
		a->rc = zn_aio_write(a->aio, a->f, a->base + i * chunk, chunk,
				     a->src + a->base + i * chunk, &w[i]);
	for (i = 0; i < 8; i++)
		a->rc = a->rc ? a->rc : zn_aio_wait(&w[i]);
	for (i = 0; i < 8 && !a->rc; i++)
		a->rc = zn_aio_read(a->aio, a->f, a->base + i * chunk, chunk,
				    a->dst + a->base + i * chunk, &r[i]);
	for (i = 0; i < 8; i++)
		a->rc = a->rc ? a->rc : zn_aio_wait(&r[i]);
	return NULL;
}

static void concurrent(enum zn_aio_backend b)
{
	enum { T = 4, BYTES = 1 << 20 };
	struct zn_aio_config c = small_cfg(2, 32768, 6);
	struct conc_arg a[T];
	pthread_t th[T];
	struct zn_aio_file *f;
	char path[ZN_PATH_MAX + 32];
	char *src, *dst;
	struct zn_aio *aio = make_engine(b, &c);
	int fd, i;

	fd = nvme_test_open(dir, "conc.bin", T * BYTES, path, sizeof(path));
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	src = nvme_test_alloc(T * BYTES);
	dst = nvme_test_alloc(T * BYTES);
	nvme_test_fill(src, T * BYTES, 99);
	for (i = 0; i < T; i++) {
		a[i] = (struct conc_arg){ aio, f, src, dst, (uint64_t)i * BYTES, BYTES, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, conc_main, &a[i]), 0);
	}
	for (i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(a[i].rc, 0, "thread %d: %s", i, zn_strerror(a[i].rc));
	}
	nvme_test_compare(dst, src, T * BYTES, zn_aio_describe(aio));
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(src);
	free(dst);
}

Test(nvme_aio, concurrent_uring) { concurrent(ZN_AIO_BACKEND_URING); }
Test(nvme_aio, concurrent_pool) { concurrent(ZN_AIO_BACKEND_POOL); }

/* A strided map: file bytes [0, 64K) land in 16K units every 32K of the buffer. */
Test(nvme_aio, mapped_request_strides)
{
	struct zn_aio_config c = small_cfg(1, 8192, 4);
	struct zn_aio *aio = make_engine(ZN_AIO_BACKEND_URING, &c);
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *src = nvme_test_alloc(65536), *dst = nvme_test_alloc(131072);
	int fd = nvme_test_open(dir, "map.bin", 65536, path, sizeof(path));
	int u;

	nvme_test_fill(src, 65536, 5);
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_write(aio, f, 0, 65536, src, &req), 0);
	cr_assert_eq(zn_aio_wait(&req), 0);
	struct zn_aio_io io = {
		.op = ZN_AIO_READ, .file = f, .offset = 0, .bytes = 65536, .buf_h = dst,
		.map_unit_bytes = 16384, .map_stride_bytes = 32768, .map_bias_bytes = 4096,
	};
	cr_assert_eq(zn_aio_submit(aio, &io, &req), 0);
	cr_assert_eq(zn_aio_wait(&req), 0);
	for (u = 0; u < 4; u++)
		nvme_test_compare(dst + 4096 + u * 32768, src + u * 16384, 16384, "strided unit");
	cr_assert_eq((unsigned char)dst[0], 0xee, "byte before the bias was written");
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(src);
	free(dst);
}

Test(nvme_aio, misaligned_rejected, .init = cr_redirect_stderr)
{
	struct zn_aio_config c = small_cfg(1, 65536, 4);
	struct zn_aio *aio;
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *buf = nvme_test_alloc(3 * 4096);
	int fd;

	setup();
	aio = make_engine(ZN_AIO_BACKEND_URING, &c);
	fd = nvme_test_open(dir, "mis.bin", 65536, path, sizeof(path));
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_read(aio, f, 100, 4096, buf, &req), -EINVAL, "offset");
	cr_assert_eq(zn_aio_poll(&req), -EINVAL, "a rejected request reads as failed");
	cr_assert_eq(zn_aio_read(aio, f, 0, 1000, buf, &req), -EINVAL, "size");
	cr_assert_eq(zn_aio_write(aio, f, 0, 4096, buf + 512, &req), -EINVAL, "buffer");
	cr_assert_eq(zn_aio_read(aio, NULL, 0, 4096, buf, &req), -EINVAL, "no file");
	cr_assert_eq(zn_aio_register_buffer(aio, buf + 1, 4096), -EINVAL, "register");
	cr_assert_eq(zn_aio_pieces_issued(aio), 0, "nothing reached the kernel");
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
	teardown();
	fflush(stderr);
	cr_assert_stderr_neq_str("", "errors were logged");
}

Test(nvme_aio, bad_config_rejected)
{
	struct zn_aio_config c = small_cfg(1, 5000, 4);
	struct zn_aio *aio = (void *)1;

	cr_assert_eq(zn_aio_create(&aio, &c), -EINVAL);
	cr_assert_null(aio);
	c = small_cfg(0, 65536, 4);
	cr_assert_eq(zn_aio_create(&aio, &c), -EINVAL);
	c = small_cfg(1, 65536, 0);
	cr_assert_eq(zn_aio_create(&aio, &c), -EINVAL);
	zn_aio_destroy(NULL);
}

/* Writes a 256K file of known data, arms `fault`, then does `op` over the whole file in
 * 64K pieces. Returns the request's result; checks the data when it succeeded. */
static int faulted(enum zn_aio_backend b, enum zn_aio_op op, const struct zn_aio_fault *fault,
		   uint64_t *extra_pieces, char *msg, size_t msg_bytes)
{
	enum { BYTES = 256 << 10 };
	struct zn_aio_config c = small_cfg(2, 65536, 4);
	struct zn_aio *aio = make_engine(b, &c);
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *src = nvme_test_alloc(BYTES), *dst = nvme_test_alloc(BYTES);
	int fd = nvme_test_open(dir, "fault.bin", BYTES, path, sizeof(path));
	uint64_t before;
	int rc;

	nvme_test_fill(src, BYTES, 77);
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_write(aio, f, 0, BYTES, src, &req), 0);
	cr_assert_eq(zn_aio_wait(&req), 0);
	before = zn_aio_pieces_issued(aio);
	zn_aio_set_fault(aio, fault);
	if (op == ZN_AIO_READ)
		rc = zn_aio_read(aio, f, 0, BYTES, dst, &req);
	else
		rc = zn_aio_write(aio, f, 0, BYTES, src, &req);
	cr_assert_eq(rc, 0);
	rc = zn_aio_wait(&req);
	*extra_pieces = zn_aio_pieces_issued(aio) - before - BYTES / 65536;
	if (rc) {
		zn_aio_req_strerror(&req, msg, msg_bytes);
		cr_assert_not_null(strstr(msg, path), "message '%s' does not name the file", msg);
	} else {
		zn_aio_set_fault(aio, NULL);
		if (op == ZN_AIO_WRITE) {
			cr_assert_eq(zn_aio_read(aio, f, 0, BYTES, dst, &req), 0);
			cr_assert_eq(zn_aio_wait(&req), 0);
		}
		nvme_test_compare(dst, src, BYTES, "after an injected fault");
	}
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(src);
	free(dst);
	return rc;
}

static void fault_matrix(enum zn_aio_backend b)
{
	static const struct {
		struct zn_aio_fault f;
		int want;
		uint64_t min_extra;
		const char *text;
	} cases[] = {
		{ { .nth = 2, .err = EIO }, -EIO, 0, "Input/output error" },
		{ { .nth = 1, .err = ENOSPC }, -ENOSPC, 0, "No space left on device" },
		{ { .nth = 4, .err = EBADF }, -EBADF, 0, "Bad file descriptor" },
		{ { .nth = 3, .err = EINTR, .repeat = 2 }, 0, 2, NULL },
		{ { .nth = 1, .err = EAGAIN }, 0, 1, NULL },
		{ { .nth = 2, .short_bytes = 4096 }, 0, 1, NULL },
		{ { .nth = 1, .short_bytes = 12288, .repeat = 3 }, 0, 3, NULL },
		{ { .nth = 2, .short_bytes = 0 }, -ENODATA, 0, "end of file" },
	};
	char msg[ZN_PATH_MAX + 200];
	uint64_t extra;
	size_t i;
	int op;

	for (op = ZN_AIO_READ; op <= ZN_AIO_WRITE; op++) {
		for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			int want = cases[i].want;

			if (want == -ENODATA && op == ZN_AIO_WRITE)
				want = -EIO; /* a write that moves nothing */
			msg[0] = 0;
			int rc = faulted(b, (enum zn_aio_op)op, &cases[i].f, &extra, msg, sizeof(msg));

			cr_assert_eq(rc, want, "op %d case %zu: got %s (%s), want %s", op, i,
				     zn_strerror(rc), msg, zn_strerror(want));
			if (cases[i].text && want != -EIO)
				cr_assert_not_null(strstr(msg, cases[i].text), "'%s'", msg);
			if (!want)
				cr_assert_geq(extra, cases[i].min_extra,
					      "case %zu: only %llu resubmissions", i,
					      (unsigned long long)extra);
		}
	}
}

Test(nvme_aio, faults_uring, .init = cr_redirect_stderr)
{
	setup();
	fault_matrix(ZN_AIO_BACKEND_URING);
	teardown();
}

Test(nvme_aio, faults_pool, .init = cr_redirect_stderr)
{
	setup();
	fault_matrix(ZN_AIO_BACKEND_POOL);
	teardown();
}

Test(nvme_aio, fault_is_logged_with_file_and_offset, .init = cr_redirect_stderr)
{
	struct zn_aio_fault f = { .nth = 1, .err = EIO };
	char msg[ZN_PATH_MAX + 200], line[ZN_PATH_MAX + 400], want[ZN_PATH_MAX + 64];
	uint64_t extra;
	bool found = false;

	setup();
	cr_assert_eq(faulted(ZN_AIO_BACKEND_URING, ZN_AIO_READ, &f, &extra, msg, sizeof(msg)),
		     -EIO);
	fflush(stderr);
	snprintf(want, sizeof(want), "read of %s/fault.bin at offset", dir);
	FILE *e = cr_get_redirected_stderr();
	while (fgets(line, sizeof(line), e))
		found |= strstr(line, want) && strstr(line, "Input/output error");
	teardown();
	cr_assert(found, "no log line with '%s ... Input/output error'", want);
}

/* writes_only: reads issued before and between do not count; the first write fails */
Test(nvme_aio, fault_writes_only_skips_the_reads, .init = cr_redirect_stderr)
{
	struct zn_aio_config c = small_cfg(1, 65536, 4);
	struct zn_aio *aio;
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req r1, r2, w1, w2;
	char *buf = nvme_test_alloc(4 * 65536);
	int fd;

	setup();
	aio = make_engine(ZN_AIO_BACKEND_URING, &c);
	fd = nvme_test_open(dir, "wo.bin", 4 * 65536, path, sizeof(path));
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	zn_aio_set_fault(aio, &(struct zn_aio_fault){ .nth = 2, .err = EIO, .writes_only = true });
	cr_assert_eq(zn_aio_read(aio, f, 0, 65536, buf, &r1), 0);
	cr_assert_eq(zn_aio_wait(&r1), 0, "a read is not counted");
	cr_assert_eq(zn_aio_write(aio, f, 65536, 65536, buf + 65536, &w1), 0);
	cr_assert_eq(zn_aio_wait(&w1), 0, "the first write is not the second");
	cr_assert_eq(zn_aio_read(aio, f, 0, 65536, buf, &r2), 0);
	cr_assert_eq(zn_aio_wait(&r2), 0, "a read between is not counted");
	cr_assert_eq(zn_aio_write(aio, f, 2 * 65536, 65536, buf + 2 * 65536, &w2), 0);
	cr_assert_eq(zn_aio_wait(&w2), -EIO, "the second write fails");
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
	teardown();
}

Test(nvme_aio, read_past_end_of_file_fails, .init = cr_redirect_stderr)
{
	struct zn_aio_config c = small_cfg(1, 65536, 4);
	struct zn_aio *aio;
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *buf = nvme_test_alloc(131072);
	int fd;

	setup();
	aio = make_engine(ZN_AIO_BACKEND_URING, &c);
	fd = nvme_test_open(dir, "eof.bin", 65536, path, sizeof(path));
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_read(aio, f, 0, 131072, buf, &req), 0);
	cr_assert_eq(zn_aio_wait(&req), -ENODATA);
	cr_assert_eq(req.err_offset, 65536, "error at %llu", (unsigned long long)req.err_offset);
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
	teardown();
}

Test(nvme_aio, poll_then_wait)
{
	struct zn_aio_config c = small_cfg(1, 4096, 1);
	struct zn_aio *aio = make_engine(ZN_AIO_BACKEND_URING, &c);
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *buf = nvme_test_alloc(1 << 20);
	int fd = nvme_test_open(dir, "poll.bin", 1 << 20, path, sizeof(path));
	int rc, polls = 0;

	nvme_test_fill(buf, 1 << 20, 3);
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_write(aio, f, 0, 1 << 20, buf, &req), 0);
	while ((rc = zn_aio_poll(&req)) == -EINPROGRESS)
		polls++;
	cr_assert_eq(rc, 0);
	cr_assert_eq(zn_aio_wait(&req), 0, "wait after a finished poll");
	cr_assert_eq(zn_aio_read(aio, f, 0, 0, buf, &req), 0);
	cr_assert_eq(zn_aio_poll(&req), 0, "an empty request is finished at once");
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
}

Test(nvme_aio, cap_bucket_arithmetic)
{
	struct zn_aio_cap c;
	uint64_t t = 1000000000ull, sent = 0, w;
	int i;

	/* 100 MB/s with a 10 ms burst: 1 MB may go at once, then 1 MB per 10 ms. */
	zn_aio_cap_init(&c, 100000000, 10000000);
	cr_assert_eq(zn_aio_cap_take(&c, 1000000, t), 0);
	w = zn_aio_cap_take(&c, 1000000, t);
	cr_assert_eq(w, 10000000, "wait %llu ns", (unsigned long long)w);
	cr_assert_eq(zn_aio_cap_take(&c, 1000000, t + w), 0);
	/* 64 GB at 3 GB/s: bytes x 1e9 is past 64 bits; the wait is exact, 21.33 s. */
	zn_aio_cap_init(&c, 3000000000ull, 0);
	cr_assert_eq(zn_aio_cap_take(&c, 64000000000ull, t), 0);
	w = zn_aio_cap_take(&c, 1, t);
	cr_assert_eq(w, 21333333333ull, "wait %llu ns", (unsigned long long)w);
	/* Sustained: over 1 s of simulated time no more than rate x 1 s + burst goes. */
	zn_aio_cap_init(&c, 100000000, 10000000);
	for (i = 0; i < 100000; i++) {
		uint64_t now = t + (uint64_t)i * 10000; /* every 10 us */

		if (!zn_aio_cap_take(&c, 65536, now))
			sent += 65536;
	}
	cr_assert_leq(sent, 100000000 + 1000000 + 65536, "sent %llu", (unsigned long long)sent);
	cr_assert_geq(sent, 100000000 - 65536, "sent %llu", (unsigned long long)sent);
	/* A piece bigger than the burst still goes when the bucket is empty. */
	zn_aio_cap_init(&c, 1000, 1000);
	cr_assert_eq(zn_aio_cap_take(&c, 1 << 20, t), 0);
	zn_aio_cap_init(&c, 0, 0);
	cr_assert_eq(zn_aio_cap_take(&c, 1ull << 40, 0), 0, "0 = uncapped");
}

static void capped(enum zn_aio_backend b)
{
	/* 8 MiB written and read at 40 MB/s each cannot take less than (8 MiB - burst) / rate. */
	enum { BYTES = 8 << 20 };
	struct zn_aio_config c = small_cfg(2, 65536, 8);
	struct zn_aio *aio;
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req req;
	char *buf = nvme_test_alloc(BYTES);
	uint64_t t0, ns;
	int fd, op;

	c.bandwidth_cap_bytes_per_s = 40000000;
	aio = make_engine(b, &c);
	fd = nvme_test_open(dir, "cap.bin", BYTES, path, sizeof(path));
	nvme_test_fill(buf, BYTES, 8);
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	for (op = ZN_AIO_WRITE; op >= ZN_AIO_READ; op--) {
		struct zn_aio_io io = { .op = op, .file = f, .bytes = BYTES, .buf_h = buf };
		double floor_s = (BYTES - 0.01 * 40e6 - 65536) / 40e6;

		t0 = now_ns();
		cr_assert_eq(zn_aio_submit(aio, &io, &req), 0);
		cr_assert_eq(zn_aio_wait(&req), 0);
		ns = now_ns() - t0;
		cr_assert_geq(ns / 1e9, floor_s, "op %d: %.3f s < %.3f s: the cap let more through",
			      op, ns / 1e9, floor_s);
	}
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
}

Test(nvme_aio, cap_limits_uring) { capped(ZN_AIO_BACKEND_URING); }
Test(nvme_aio, cap_limits_pool) { capped(ZN_AIO_BACKEND_POOL); }

/* The caps are per direction: a read held back by the read cap does not hold back a write
 * queued behind it (regression: the queue was strictly in order, so a capped read stalled
 * every write behind it and the two caps acted as one). An 8 MiB read at 20 MB/s takes 0.4 s;
 * a 64 KiB write submitted after it must finish while the read is still in flight. A cap
 * changed on the live engine (zn_aio_set_bandwidth_cap) applies to what follows. */
static void directions_apart(enum zn_aio_backend b)
{
	enum { BYTES = 8 << 20, SMALL = 65536 };
	struct zn_aio_config c = small_cfg(2, 65536, 8);
	struct zn_aio *aio;
	char path[ZN_PATH_MAX + 32];
	struct zn_aio_file *f;
	struct zn_aio_req rd, wr;
	char *buf = nvme_test_alloc(BYTES + SMALL);
	int fd;

	aio = make_engine(b, &c);
	fd = nvme_test_open(dir, "dirs.bin", BYTES + SMALL, path, sizeof(path));
	nvme_test_fill(buf, BYTES + SMALL, 9);
	cr_assert_eq(zn_aio_file_add(aio, fd, path, &f), 0);
	cr_assert_eq(zn_aio_write(aio, f, 0, BYTES + SMALL, buf, &wr), 0);
	cr_assert_eq(zn_aio_wait(&wr), 0);
	zn_aio_set_bandwidth_cap(aio, 20000000);
	zn_aio_set_timing(aio, true);
	cr_assert_eq(zn_aio_read(aio, f, 0, BYTES, buf, &rd), 0);
	cr_assert_eq(zn_aio_write(aio, f, BYTES, SMALL, buf + BYTES, &wr), 0);
	cr_assert_eq(zn_aio_wait(&wr), 0);
	cr_assert_eq(zn_aio_poll(&rd), -EINPROGRESS,
		     "the write waited for the capped read to finish");
	cr_assert_eq(zn_aio_wait(&rd), 0);
	cr_assert_gt(rd.done_ns, wr.done_ns, "completion times are stamped");
	zn_aio_file_remove(aio, f);
	zn_aio_destroy(aio);
	close(fd);
	free(buf);
}

Test(nvme_aio, caps_keep_directions_apart_uring) { directions_apart(ZN_AIO_BACKEND_URING); }
Test(nvme_aio, caps_keep_directions_apart_pool) { directions_apart(ZN_AIO_BACKEND_POOL); }

Test(nvme_aio, env_forces_pool)
{
	struct zn_aio_config c = small_cfg(1, 65536, 2);
	struct zn_aio *aio;

	setenv("ZINC_AIO_BACKEND", "pool", 1);
	cr_assert_eq(zn_aio_create(&aio, &c), 0);
	cr_assert(!zn_aio_is_uring(aio));
	cr_assert_not_null(strstr(zn_aio_describe(aio), "pread/pwrite pool (forced"), "%s",
			   zn_aio_describe(aio));
	zn_aio_destroy(aio);
	setenv("ZINC_AIO_BACKEND", "bogus", 1);
	cr_assert_eq(zn_aio_create(&aio, &c), -EINVAL);
	unsetenv("ZINC_AIO_BACKEND");
}

Test(nvme_aio, path_probe)
{
	struct zn_nvme_path_probe p;

	cr_assert_eq(zn_nvme_path_probe(dir, &p), 0);
	cr_assert(p.o_direct && p.writable && p.free_bytes > 0 && p.fs_type[0]);
	cr_assert_eq(zn_nvme_path_probe("/nonexistent/zinc", &p), -ENOENT);
}
