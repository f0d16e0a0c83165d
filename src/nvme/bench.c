/* One benchmark case (see bench.h): timed sequential write and read of a file through the
 * engine, each checked outside the timed part. Printing and sweeping are the CLI's. */
#include "nvme/bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/hash.h"
#include "core/log.h"
#include "nvme/aio_impl.h"

#define MAX_BUFFER_BYTES (256ull << 20)
#define MAX_ITERS 1000

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb3f9e5e7b6c5ull;
	return x ^ (x >> 33);
}

/* Different for every 8-byte word of the buffer and every seed. */
static void fill_pattern(uint64_t *w, uint64_t bytes, uint64_t seed)
{
	uint64_t i;

	for (i = 0; i < bytes / 8; i++)
		w[i] = mix(seed * ZN_HASH_GOLDEN + i);
}

static int run_io(struct zn_aio *aio, enum zn_aio_op op, struct zn_aio_file *f, uint64_t bytes,
		  void *buf, uint64_t buf_bytes, double *seconds)
{
	/* The buffer repeats over the file: file byte x is buffer byte x % buf_bytes. */
	struct zn_aio_io io = {
		.op = op, .file = f, .offset = 0, .bytes = bytes, .buf_h = buf,
		.map_unit_bytes = buf_bytes, .map_stride_bytes = 0, .map_bias_bytes = 0,
	};
	struct zn_aio_req req;
	uint64_t t0 = zn_aio_now_ns();
	int rc = zn_aio_submit(aio, &io, &req);

	if (!rc)
		rc = zn_aio_wait(&req);
	*seconds = (double)(zn_aio_now_ns() - t0) / 1e9;
	return rc;
}

static bool first_mismatch(const char *got, const char *want, uint64_t bytes, uint64_t *at)
{
	uint64_t i;

	if (!memcmp(got, want, bytes))
		return false;
	for (i = 0; i < bytes && got[i] == want[i]; i++)
		;
	*at = i;
	return true;
}

/* Reads the file back in buffer-sized pieces and compares each with the pattern. */
static int check_file(struct zn_aio *aio, struct zn_aio_file *f, uint64_t bytes, char *buf,
		      const char *pattern, uint64_t buf_bytes, struct zn_nvme_bench_result *r)
{
	uint64_t off, n, at;
	struct zn_aio_req req;
	int rc;

	for (off = 0; off < bytes; off += n) {
		n = bytes - off < buf_bytes ? bytes - off : buf_bytes;
		rc = zn_aio_read(aio, f, off, n, buf, &req);
		if (!rc)
			rc = zn_aio_wait(&req);
		if (rc)
			return rc;
		if (first_mismatch(buf, pattern, n, &at)) {
			snprintf(r->check, sizeof(r->check),
				 "FAIL: file byte %" PRIu64 " differs from what was written",
				 off + at);
			r->ok = false;
			return 0;
		}
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void summarize(double *t, int n, double *median, double *min, double *max)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	*median = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	*min = t[0];
	*max = t[n - 1];
}

static int one_iter(struct zn_aio *aio, struct zn_aio_file *f, const struct zn_nvme_bench_case *c,
		    char *buf, char *pattern, uint64_t buf_bytes, int it, double *tw, double *tr,
		    struct zn_nvme_bench_result *r)
{
	uint64_t at;
	int rc;

	/* Reads alone keep the file written at iteration 0. */
	if (c->write || it == 0)
		fill_pattern((uint64_t *)pattern, buf_bytes, c->seed + (uint64_t)it);
	if (c->warmup && it == 0) {
		memcpy(buf, pattern, buf_bytes);
		rc = run_io(aio, ZN_AIO_WRITE, f, c->bytes, buf, buf_bytes, tw);
		if (rc)
			return rc;
	}
	if (c->write || it == 0) {
		memcpy(buf, pattern, buf_bytes);
		rc = run_io(aio, ZN_AIO_WRITE, f, c->bytes, buf, buf_bytes, tw);
		if (rc)
			return rc;
		rc = check_file(aio, f, c->bytes, buf, pattern, buf_bytes, r);
		if (rc || !r->ok)
			return rc;
	}
	if (!c->read)
		return 0;
	/* Poisoned, so a read that moved nothing cannot pass. */
	memset(buf, 0xa5, buf_bytes);
	rc = run_io(aio, ZN_AIO_READ, f, c->bytes, buf, buf_bytes, tr);
	if (rc)
		return rc;
	if (first_mismatch(buf, pattern, buf_bytes, &at)) {
		snprintf(r->check, sizeof(r->check),
			 "FAIL: buffer byte %" PRIu64 " after the timed read differs from the file",
			 at);
		r->ok = false;
	}
	return 0;
}

static int check_case(const struct zn_nvme_bench_case *c)
{
	if (!c->bytes || c->bytes % ZN_AIO_ALIGN || c->iters < 1 || c->iters > MAX_ITERS ||
	    (!c->read && !c->write)) {
		zn_error("bench nvme: size %" PRIu64 " (a multiple of 4096), iters %d (1 to %d), "
			 "read %d / write %d (at least one)", c->bytes, c->iters, MAX_ITERS, c->read,
			 c->write);
		return -EINVAL;
	}
	return 0;
}

int zn_nvme_bench_run(const struct zn_nvme_bench_case *c, struct zn_nvme_bench_result *r)
{
	double tw[MAX_ITERS] = { 0 }, tr[MAX_ITERS] = { 0 };
	struct zn_aio_stats st;
	struct zn_aio_file *f;
	struct zn_aio *aio;
	uint64_t buf_bytes;
	char *buf, *pattern;
	int rc, it;

	memset(r, 0, sizeof(*r));
	r->ok = true;
	snprintf(r->check, sizeof(r->check), "ok");
	rc = check_case(c);
	if (rc)
		return rc;
	buf_bytes = c->aio.block_size_bytes * (uint64_t)c->aio.queue_depth *
		    (uint64_t)c->aio.intra_op_parallelism;
	if (buf_bytes > MAX_BUFFER_BYTES)
		buf_bytes = MAX_BUFFER_BYTES;
	if (buf_bytes > c->bytes)
		buf_bytes = c->bytes;
	r->buffer_bytes = buf_bytes;
	rc = zn_aio_create_backend(&aio, &c->aio, c->backend);
	if (rc)
		return rc;
	snprintf(r->engine, sizeof(r->engine), "%s", zn_aio_describe(aio));
	rc = zn_aio_file_add(aio, c->fd, c->name, &f);
	if (rc)
		goto destroy_aio;
	/* Page-aligned anonymous memory for the I/O buffer and the expected pattern. */
	buf = mmap(NULL, 2 * buf_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		rc = zn_check_errno(-1, "mmap of the benchmark buffer", __FILE__, __LINE__);
		goto remove_file;
	}
	pattern = buf + buf_bytes;
	if (!c->plain_buffers)
		zn_aio_register_buffer(aio, buf, buf_bytes);
	zn_aio_set_fault(aio, c->fault);
	for (it = 0; it < c->iters && !rc && r->ok; it++)
		rc = one_iter(aio, f, c, buf, pattern, buf_bytes, it, &tw[it], &tr[it], r);
	zn_aio_get_stats(aio, &st);
	r->fixed_buffers = st.pieces && st.fixed_buffer_pieces == st.pieces;
	if (!rc) {
		summarize(tw, c->iters, &r->write_s, &r->write_min_s, &r->write_max_s);
		summarize(tr, c->iters, &r->read_s, &r->read_min_s, &r->read_max_s);
	}
	if (!c->plain_buffers)
		zn_aio_unregister_buffer(aio, buf);
	munmap(buf, 2 * buf_bytes);
remove_file:
	zn_aio_file_remove(aio, f);
destroy_aio:
	zn_aio_destroy(aio);
	return rc;
}
