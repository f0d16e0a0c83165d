/* comm_check: every collective across the ranks of one launch, checked exactly.
 *
 *     mpirun -np 4 ./mpi_comm_check            # mpi backend on the host device
 *     ./mpi_comm_check                         # no mpirun: the single backend
 *     ./mpi_comm_check --kind mpi              # no mpirun, MPI singleton
 *
 * A plain program, not Criterion (Criterion forks per test, which MPI does not survive);
 * ctest launches it with 1, 2 and 4 ranks (label mpi). Inputs are small integers derived
 * from (rank, index), exact in fp32, bf16 and fp16, so every sum has one right answer:
 * element j of rank r is r * 1000 + j % 1000 + 1 (fp32) or r + 1 + j % 8 (bf16, fp16;
 * sums stay below 256). One more check sums seeded random fp32 inputs, compares with a
 * double-precision sum within size * 2^-23 * sum |x|, and repeats the sum to check it is
 * bit-for-bit the same. Each check runs on the host path (NULL stream) and on a host-device
 * stream. Every rank prints its failures; the exit status is 1 if any check failed, and a
 * collective that returns an error ends the rank at once (mpirun then ends the rest).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/dtype.h"
#include "gpu/device.h"

struct check {
	struct zn_comm *c;
	struct zn_stream *s; /* NULL: the host path */
	int rank;
	int size;
	int passed;
	int failed;
};

static const char *path_name(const struct check *k)
{
	return k->s ? "stream" : "host";
}

static void must(int rc, const char *what, const struct check *k)
{
	if (!rc)
		return;
	fprintf(stderr, "comm_check: rank %d: %s (%s path) returned %d (%s)\n", k->rank, what,
		path_name(k), rc, strerror(-rc));
	exit(1);
}

/* waits for the stream's ops, then asks for their sticky error */
static void finish(struct check *k, const char *what)
{
	if (k->s)
		must(zn_stream_synchronize(k->s), "zn_stream_synchronize", k);
	must(zn_comm_check(k->c), what, k);
}

static float exact_value(enum zn_dtype t, int r, uint64_t j)
{
	if (t == ZN_DTYPE_F32)
		return (float)(r * 1000 + (int)(j % 1000) + 1);
	return (float)(r + 1 + (int)(j % 8));
}

static void put(void *buf, enum zn_dtype t, uint64_t i, float v)
{
	if (t == ZN_DTYPE_F32)
		((float *)buf)[i] = v;
	else if (t == ZN_DTYPE_BF16)
		((uint16_t *)buf)[i] = zn_f32_to_bf16(v);
	else
		((uint16_t *)buf)[i] = zn_f32_to_f16(v);
}

static float get(const void *buf, enum zn_dtype t, uint64_t i)
{
	if (t == ZN_DTYPE_F32)
		return ((const float *)buf)[i];
	if (t == ZN_DTYPE_BF16)
		return zn_bf16_to_f32(((const uint16_t *)buf)[i]);
	return zn_f16_to_f32(((const uint16_t *)buf)[i]);
}

/* counts mismatches of got[0..n) against want(i); prints the first */
struct expect {
	const char *what;
	uint64_t bad;
	uint64_t first;
	float first_got;
	float first_want;
};

static void expect_value(struct expect *e, uint64_t i, float got, float want)
{
	if (got == want) /* NaN never equals */
		return;
	if (!e->bad++) {
		e->first = i;
		e->first_got = got;
		e->first_want = want;
	}
}

static void report(struct check *k, const struct expect *e, const char *type, uint64_t n)
{
	if (!e->bad) {
		k->passed++;
		return;
	}
	k->failed++;
	fprintf(stderr, "comm_check: rank %d of %d: %s %s count %llu (%s path): %llu wrong; "
		"first at %llu: got %g, expected %g\n", k->rank, k->size, e->what,
		type, (unsigned long long)n, path_name(k),
		(unsigned long long)e->bad, (unsigned long long)e->first, e->first_got,
		e->first_want);
}

static void *alloc_elems(uint64_t n, enum zn_dtype t)
{
	void *p = malloc(n * zn_dtype_size(t) + 1);

	if (!p) {
		fprintf(stderr, "comm_check: out of memory\n");
		exit(1);
	}
	return p;
}

static void fill_garbage(void *buf, uint64_t n, enum zn_dtype t)
{
	for (uint64_t i = 0; i < n; i++)
		put(buf, t, i, -3.0f); /* no rank's input is negative */
}

static void check_all_gather(struct check *k, enum zn_dtype t, uint64_t n, int in_place)
{
	struct expect e = { .what = in_place ? "all_gather in place" : "all_gather" };
	void *dst = alloc_elems(n * k->size, t);
	void *src = in_place ? (char *)dst + k->rank * n * zn_dtype_size(t) : alloc_elems(n, t);

	fill_garbage(dst, n * k->size, t);
	for (uint64_t i = 0; i < n; i++)
		put(src, t, i, exact_value(t, k->rank, i));
	must(zn_comm_all_gather(k->c, k->s, dst, src, n, t), e.what, k);
	finish(k, e.what);
	for (int q = 0; q < k->size; q++)
		for (uint64_t i = 0; i < n; i++)
			expect_value(&e, q * n + i, get(dst, t, q * n + i), exact_value(t, q, i));
	report(k, &e, zn_dtype_name(t), n);
	if (!in_place)
		free(src);
	free(dst);
}

static float exact_sum(enum zn_dtype t, int size, uint64_t j)
{
	float s = 0;

	for (int q = 0; q < size; q++)
		s += exact_value(t, q, j); /* integers below 2^24: exact in any order */
	return s;
}

static void check_reduce_scatter(struct check *k, enum zn_dtype t, uint64_t n, int in_place)
{
	struct expect e = { .what = in_place ? "reduce_scatter in place" : "reduce_scatter" };
	uint64_t total = n * k->size;
	void *src = alloc_elems(total, t);
	void *dst = in_place ? (char *)src + k->rank * n * zn_dtype_size(t) : alloc_elems(n, t);

	for (uint64_t j = 0; j < total; j++)
		put(src, t, j, exact_value(t, k->rank, j));
	if (!in_place)
		fill_garbage(dst, n, t);
	must(zn_comm_reduce_scatter(k->c, k->s, dst, src, n, t), e.what, k);
	finish(k, e.what);
	for (uint64_t i = 0; i < n; i++)
		expect_value(&e, i, get(dst, t, i), exact_sum(t, k->size, k->rank * n + i));
	report(k, &e, zn_dtype_name(t), n);
	if (!in_place)
		free(dst);
	free(src);
}

static void check_all_reduce(struct check *k, enum zn_dtype t, uint64_t n)
{
	struct expect e = { .what = "all_reduce" };
	void *buf = alloc_elems(n, t);

	for (uint64_t i = 0; i < n; i++)
		put(buf, t, i, exact_value(t, k->rank, i));
	must(zn_comm_all_reduce(k->c, k->s, buf, n, t), e.what, k);
	finish(k, e.what);
	for (uint64_t i = 0; i < n; i++)
		expect_value(&e, i, get(buf, t, i), exact_sum(t, k->size, i));
	report(k, &e, zn_dtype_name(t), n);
	free(buf);
}

static unsigned char pattern(int r, uint64_t i)
{
	return (unsigned char)(1 + (r * 31 + i * 7) % 251);
}

static void check_broadcast(struct check *k, uint64_t bytes)
{
	for (int root = 0; root < k->size; root++) {
		struct expect e = { .what = "broadcast" };
		unsigned char *buf = alloc_elems(bytes, ZN_DTYPE_BF16);

		for (uint64_t i = 0; i < bytes; i++)
			buf[i] = pattern(k->rank, i);
		must(zn_comm_broadcast(k->c, k->s, buf, bytes, root), e.what, k);
		finish(k, e.what);
		for (uint64_t i = 0; i < bytes; i++)
			expect_value(&e, i, buf[i], pattern(root, i));
		report(k, &e, "bytes", bytes);
		free(buf);
	}
}

static float random_value(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return ((float)(*s >> 8) / 16777216.0f) * 2.0f - 0.999f; /* (-1, 1), never 0 */
}

/* Random fp32 sum: within rounding of the exact sum, and the same bits twice. */
static void check_random_sum(struct check *k, uint64_t n)
{
	struct expect e = { .what = "all_reduce random" }, again = { .what = "all_reduce repeat" };
	float *a = alloc_elems(n, ZN_DTYPE_F32), *b = alloc_elems(n, ZN_DTYPE_F32);
	double *want = calloc(n, sizeof(double)), *mag = calloc(n, sizeof(double));
	double worst = 0;

	if (!want || !mag)
		exit(1);
	for (int q = 0; q < k->size; q++) {
		uint32_t seed = 0x9e3779b9u + (uint32_t)q * 7919u;

		for (uint64_t i = 0; i < n; i++) {
			float x = random_value(&seed);

			want[i] += x;
			mag[i] += fabs(x);
			if (q == k->rank)
				a[i] = b[i] = x;
		}
	}
	must(zn_comm_all_reduce(k->c, k->s, a, n, ZN_DTYPE_F32), e.what, k);
	must(zn_comm_all_reduce(k->c, k->s, b, n, ZN_DTYPE_F32), again.what, k);
	finish(k, e.what);
	for (uint64_t i = 0; i < n; i++) {
		double err = fabs(a[i] - want[i]);
		double tol = k->size * 0x1p-23 * mag[i];

		if (err > worst)
			worst = err;
		if (!(err <= tol)) /* NaN fails */
			expect_value(&e, i, a[i], (float)want[i]);
		if (memcmp(&a[i], &b[i], sizeof(float)))
			expect_value(&again, i, b[i], a[i]);
	}
	report(k, &e, "fp32", n);
	report(k, &again, "fp32", n);
	free(a);
	free(b);
	free(want);
	free(mag);
}

/* A barrier on the host communicator while a stream op may still be running. */
static void check_barrier_during_stream_op(struct check *k)
{
	struct expect e = { .what = "all_reduce across a barrier" };
	uint64_t n = 1 << 16;
	float *buf = alloc_elems(n, ZN_DTYPE_F32);

	for (uint64_t i = 0; i < n; i++)
		put(buf, ZN_DTYPE_F32, i, exact_value(ZN_DTYPE_F32, k->rank, i));
	must(zn_comm_all_reduce(k->c, k->s, buf, n, ZN_DTYPE_F32), e.what, k);
	must(zn_comm_barrier(k->c), "barrier", k);
	finish(k, e.what);
	for (uint64_t i = 0; i < n; i++)
		expect_value(&e, i, buf[i], exact_sum(ZN_DTYPE_F32, k->size, i));
	report(k, &e, "fp32", n);
	free(buf);
}

static void run_all(struct check *k)
{
	static const enum zn_dtype types[] = { ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };
	static const uint64_t counts[] = { 1, 37, 4099 };

	for (unsigned t = 0; t < 3; t++) {
		for (unsigned c = 0; c < 3; c++) {
			check_all_gather(k, types[t], counts[c], 0);
			check_all_gather(k, types[t], counts[c], 1);
			check_reduce_scatter(k, types[t], counts[c], 0);
			check_reduce_scatter(k, types[t], counts[c], 1);
			check_all_reduce(k, types[t], counts[c]);
		}
	}
	check_broadcast(k, 1);
	check_broadcast(k, 10007);
	check_random_sum(k, 10007);
	must(zn_comm_barrier(k->c), "barrier", k);
	if (k->s)
		check_barrier_during_stream_op(k);
}

/* An injected failure on the stream worker is seen by zn_comm_check and then sticks.
 * Every rank fails the same op, so none is left waiting. */
static void check_sticky_fault(struct check *k, struct zn_comm_config cfg)
{
	struct expect e = { .what = "injected fault" };
	struct zn_comm *c = NULL;
	float x = 1.0f;
	int rc;

	cfg.fail_op_index = 2;
	must(zn_comm_create(&c, &cfg), "zn_comm_create (fault)", k);
	must(zn_comm_all_reduce(c, k->s, &x, 1, ZN_DTYPE_F32), "all_reduce #1", k);
	rc = zn_comm_all_reduce(c, k->s, &x, 1, ZN_DTYPE_F32); /* fails at once or later */
	if (rc != 0 && rc != -EIO)
		expect_value(&e, 0, (float)rc, (float)-EIO);
	if (k->s)
		must(zn_stream_synchronize(k->s), "zn_stream_synchronize", k);
	expect_value(&e, 1, (float)zn_comm_check(c), (float)-EIO);
	expect_value(&e, 2, (float)zn_comm_all_reduce(c, k->s, &x, 1, ZN_DTYPE_F32), -EIO);
	expect_value(&e, 3, (float)zn_comm_barrier(c), (float)-EIO);
	expect_value(&e, 4, x, (float)k->size); /* only op #1 ran */
	report(k, &e, "fp32", 1);
	zn_comm_destroy(c);
}

int main(int argc, char **argv)
{
	struct zn_comm_config cfg = { .kind = ZN_COMM_AUTO };
	struct zn_device_config dcfg = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 26 };
	struct zn_device *dev = NULL;
	struct zn_stream *s = NULL;
	struct check k = { 0 };
	int hint_rank = 0, hint_size = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--kind") && i + 1 < argc &&
		    !zn_comm_kind_parse(argv[i + 1], &cfg.kind)) {
			i++;
			continue;
		}
		fprintf(stderr, "usage: %s [--kind auto|single|mpi]\n", argv[0]);
		return 2;
	}
	must(zn_comm_world_hint(&hint_rank, &hint_size, NULL), "zn_comm_world_hint", &k);
	must(zn_device_create(&dev, &dcfg), "zn_device_create", &k);
	must(zn_stream_create(dev, &s), "zn_stream_create", &k);
	cfg.dev = dev;
	must(zn_comm_create(&k.c, &cfg), "zn_comm_create", &k);
	k.rank = zn_comm_rank(k.c);
	k.size = zn_comm_size(k.c);
	if (k.rank != hint_rank || k.size != hint_size ||
	    (cfg.kind == ZN_COMM_AUTO && zn_comm_kind_of(k.c) !=
	     (hint_size > 1 ? ZN_COMM_MPI : ZN_COMM_SINGLE))) {
		fprintf(stderr, "comm_check: rank %d of %d (%s), but the launcher says %d of %d\n",
			k.rank, k.size, zn_comm_kind_name(zn_comm_kind_of(k.c)), hint_rank,
			hint_size);
		k.failed++;
	}
	run_all(&k);   /* host path */
	k.s = s;
	run_all(&k);   /* stream path */
	check_sticky_fault(&k, cfg);
	printf("comm_check: rank %d of %d (%s, local rank %d): %d checks passed, %d failed\n",
	       k.rank, k.size, zn_comm_kind_name(zn_comm_kind_of(k.c)),
	       zn_comm_local_rank(k.c), k.passed, k.failed);
	zn_comm_destroy(k.c);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
	return k.failed ? 1 : 0;
}
