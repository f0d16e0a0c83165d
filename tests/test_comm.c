/* comm on one rank: the world hint from the environment, backend choice, the single
 * backend's collectives (copies and identities, host and stream paths, every dtype),
 * argument errors, and the sticky error from an injected fault. Multi-rank runs are in
 * tests/mpi/comm_check.c (launched by ctest through mpirun).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZN_HAVE_MPI
#include <mpi.h>
#endif

#include "comm/comm.h"
#include "gpu/device.h"

#define SEED 0x5eed1234u

static const char *const launcher_vars[] = {
	"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
	"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_SIZE",
	"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_STEP_NUM_TASKS",
	"SLURM_PROCID", "SLURM_LOCALID",
};

/* Criterion forks each test, so environment changes stay inside it. */
static void clear_launcher_env(void)
{
	for (unsigned i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
		unsetenv(launcher_vars[i]);
}

static uint32_t rng_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* random bytes, none of them zero, so a copy that did not happen cannot pass */
static void fill_random(void *buf, size_t bytes, uint32_t seed)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)(1 + rng_next(&seed) % 255);
}

static void expect_same(const void *got, const void *want, size_t bytes, const char *what)
{
	const unsigned char *g = got, *w = want;

	for (size_t i = 0; i < bytes; i++) {
		if (g[i] != w[i]) {
			cr_expect_fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i,
				       bytes, g[i], w[i]);
			return;
		}
	}
}

static struct zn_comm *make_single(uint64_t fail_op_index, struct zn_device *dev)
{
	struct zn_comm_config cfg = { .kind = ZN_COMM_AUTO, .dev = dev,
				      .fail_op_index = fail_op_index };
	struct zn_comm *c = NULL;

	clear_launcher_env();
	cr_assert_eq(zn_comm_create(&c, &cfg), 0);
	cr_assert_eq(zn_comm_kind_of(c), ZN_COMM_SINGLE);
	return c;
}

/* ---- world hint and backend choice ----------------------------------------------- */

Test(comm, hint_without_launcher_is_one_rank)
{
	int r = -1, n = -1, l = -1;

	clear_launcher_env();
	cr_assert_eq(zn_comm_world_hint(&r, &n, &l), 0);
	cr_expect_eq(r, 0);
	cr_expect_eq(n, 1);
	cr_expect_eq(l, 0);
	cr_expect_eq(zn_comm_world_hint(NULL, NULL, NULL), 0);
}

Test(comm, hint_reads_open_mpi)
{
	int r = -1, n = -1, l = -1;

	clear_launcher_env();
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	setenv("PMI_SIZE", "9", 1); /* Open MPI's variables come first */
	setenv("PMI_RANK", "8", 1);
	cr_assert_eq(zn_comm_world_hint(&r, &n, &l), 0);
	cr_expect_eq(r, 3);
	cr_expect_eq(n, 4);
	cr_expect_eq(l, 1);
}

Test(comm, hint_reads_pmi_and_takes_rank_as_local)
{
	int r = -1, n = -1, l = -1;

	clear_launcher_env();
	setenv("PMI_SIZE", "2", 1);
	setenv("PMI_RANK", "1", 1);
	cr_assert_eq(zn_comm_world_hint(&r, &n, &l), 0);
	cr_expect_eq(r, 1);
	cr_expect_eq(n, 2);
	cr_expect_eq(l, 1);
}

Test(comm, hint_reads_srun_step)
{
	int r = -1, n = -1, l = -1;

	clear_launcher_env();
	setenv("SLURM_PROCID", "5", 1); /* a batch script alone has no step size: one rank */
	cr_assert_eq(zn_comm_world_hint(&r, &n, &l), 0);
	cr_expect_eq(n, 1);
	setenv("SLURM_STEP_NUM_TASKS", "8", 1);
	setenv("SLURM_LOCALID", "1", 1);
	cr_assert_eq(zn_comm_world_hint(&r, &n, &l), 0);
	cr_expect_eq(r, 5);
	cr_expect_eq(n, 8);
	cr_expect_eq(l, 1);
}

Test(comm, hint_rejects_bad_values)
{
	int n = 0;

	clear_launcher_env();
	setenv("OMPI_COMM_WORLD_SIZE", "four", 1);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	cr_expect_eq(zn_comm_world_hint(NULL, &n, NULL), -EINVAL);
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	cr_expect_eq(zn_comm_world_hint(NULL, &n, NULL), -EINVAL);
	setenv("OMPI_COMM_WORLD_RANK", "-1", 1);
	cr_expect_eq(zn_comm_world_hint(NULL, &n, NULL), -EINVAL);
	unsetenv("OMPI_COMM_WORLD_RANK");
	cr_expect_eq(zn_comm_world_hint(NULL, &n, NULL), -EINVAL);
	setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	cr_expect_eq(zn_comm_world_hint(NULL, &n, NULL), -EINVAL);
}

Test(comm, kind_names_round_trip)
{
	enum zn_comm_kind k = ZN_COMM_AUTO;
	const enum zn_comm_kind all[] = { ZN_COMM_AUTO, ZN_COMM_SINGLE, ZN_COMM_MPI,
					  ZN_COMM_NCCL };

	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(zn_comm_kind_parse(zn_comm_kind_name(all[i]), &k), 0);
		cr_expect_eq(k, all[i]);
	}
	cr_expect_eq(zn_comm_kind_parse("gloo", &k), -EINVAL);
	cr_expect_eq(zn_comm_kind_parse(NULL, &k), -EINVAL);
	cr_expect_str_eq(zn_comm_kind_name((enum zn_comm_kind)9), "?");
}

Test(comm, auto_without_launcher_is_single_and_leaves_mpi_alone)
{
	struct zn_comm *c = make_single(0, NULL);

	cr_expect_eq(zn_comm_rank(c), 0);
	cr_expect_eq(zn_comm_size(c), 1);
	cr_expect_eq(zn_comm_local_rank(c), 0);
	cr_expect_eq(zn_comm_barrier(c), 0);
	cr_expect_eq(zn_comm_check(c), 0);
#ifdef ZN_HAVE_MPI
	int inited = 1;

	MPI_Initialized(&inited);
	cr_expect_eq(inited, 0, "a single-rank comm must not initialize MPI");
#endif
	zn_comm_destroy(c);
	zn_comm_destroy(NULL);
}

Test(comm, kinds_that_contradict_the_launch_are_refused)
{
	struct zn_comm_config cfg = { .kind = ZN_COMM_NCCL };
	struct zn_comm *c = (struct zn_comm *)&cfg;

	clear_launcher_env();
	/* nccl needs the cuda device; built without it, it is not there at all */
	cr_expect(zn_comm_create(&c, &cfg) < 0);
	cr_expect_null(c);
	cfg.kind = (enum zn_comm_kind)7;
	cr_expect_eq(zn_comm_create(&c, &cfg), -EINVAL);
	cr_expect_null(c);
	/* single while the launcher says there are two ranks */
	setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
	setenv("OMPI_COMM_WORLD_RANK", "0", 1);
	cfg.kind = ZN_COMM_SINGLE;
	cr_expect_eq(zn_comm_create(&c, &cfg), -EINVAL);
	cr_expect_null(c);
}

/* ---- single: collectives ------------------------------------------------------- */

static const enum zn_dtype dtypes[] = { ZN_DTYPE_F32, ZN_DTYPE_BF16, ZN_DTYPE_F16 };

/* One pass over every collective; s may be NULL (host path). Buffers come from dev when
 * given (the host device's memory is host memory, so they are also checked directly). */
static void run_collectives(struct zn_comm *c, struct zn_stream *s)
{
	const uint64_t count = 1031; /* odd: no alignment luck */

	for (unsigned t = 0; t < 3; t++) {
		size_t bytes = count * (t ? 2 : 4);
		unsigned char *src = malloc(bytes), *dst = malloc(bytes), *want = malloc(bytes);

		cr_assert(src && dst && want);
		fill_random(src, bytes, SEED + t);
		memcpy(want, src, bytes);
		fill_random(dst, bytes, SEED + 100 + t);

		cr_assert_eq(zn_comm_all_gather(c, s, dst, src, count, dtypes[t]), 0);
		if (s)
			cr_assert_eq(zn_stream_synchronize(s), 0);
		expect_same(dst, want, bytes, "all_gather");

		fill_random(dst, bytes, SEED + 200 + t);
		cr_assert_eq(zn_comm_reduce_scatter(c, s, dst, src, count, dtypes[t]), 0);
		if (s)
			cr_assert_eq(zn_stream_synchronize(s), 0);
		expect_same(dst, want, bytes, "reduce_scatter");

		/* in place: the same pointer (rank 0's block is the whole buffer) */
		cr_assert_eq(zn_comm_all_gather(c, s, dst, dst, count, dtypes[t]), 0);
		cr_assert_eq(zn_comm_reduce_scatter(c, s, dst, dst, count, dtypes[t]), 0);
		cr_assert_eq(zn_comm_all_reduce(c, s, dst, count, dtypes[t]), 0);
		cr_assert_eq(zn_comm_broadcast(c, s, dst, bytes, 0), 0);
		if (s)
			cr_assert_eq(zn_stream_synchronize(s), 0);
		expect_same(dst, want, bytes, "in place / all_reduce / broadcast");
		expect_same(src, want, bytes, "src after the collectives");
		free(src);
		free(dst);
		free(want);
	}
	cr_expect_eq(zn_comm_check(c), 0);
}

Test(comm, single_host_path_copies_and_identities)
{
	struct zn_comm *c = make_single(0, NULL);

	run_collectives(c, NULL);
	zn_comm_destroy(c);
}

Test(comm, single_stream_path_on_host_device)
{
	struct zn_device_config dcfg = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 20 };
	struct zn_device *dev = NULL;
	struct zn_stream *s = NULL;
	struct zn_comm *c;

	cr_assert_eq(zn_device_create(&dev, &dcfg), 0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	c = make_single(0, dev);
	run_collectives(c, s);
	zn_comm_destroy(c);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}

Test(comm, zero_count_is_a_no_op)
{
	struct zn_comm *c = make_single(1, NULL); /* would fail the first op to run */

	cr_expect_eq(zn_comm_all_gather(c, NULL, NULL, NULL, 0, ZN_DTYPE_F32), 0);
	cr_expect_eq(zn_comm_reduce_scatter(c, NULL, NULL, NULL, 0, ZN_DTYPE_BF16), 0);
	cr_expect_eq(zn_comm_all_reduce(c, NULL, NULL, 0, ZN_DTYPE_F16), 0);
	cr_expect_eq(zn_comm_broadcast(c, NULL, NULL, 0, 0), 0);
	cr_expect_eq(zn_comm_check(c), 0);
	zn_comm_destroy(c);
}

/* ---- errors -------------------------------------------------------------------- */

Test(comm, bad_arguments_fail_without_sticking)
{
	struct zn_comm *c = make_single(0, NULL);
	float a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[8];

	cr_expect_eq(zn_comm_all_gather(c, NULL, b, a, 8, (enum zn_dtype)5), -EINVAL);
	cr_expect_eq(zn_comm_reduce_scatter(c, NULL, b, a, 8, (enum zn_dtype)-1), -EINVAL);
	cr_expect_eq(zn_comm_all_reduce(c, NULL, a, 8, (enum zn_dtype)3), -EINVAL);
	cr_expect_eq(zn_comm_all_gather(c, NULL, NULL, a, 8, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_reduce_scatter(c, NULL, b, NULL, 8, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_all_reduce(c, NULL, NULL, 8, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_broadcast(c, NULL, NULL, 8, 0), -EINVAL);
	cr_expect_eq(zn_comm_broadcast(c, NULL, a, 8, 1), -EINVAL);
	cr_expect_eq(zn_comm_broadcast(c, NULL, a, 8, -1), -EINVAL);
	/* overlapping, but not the in-place pair */
	cr_expect_eq(zn_comm_all_gather(c, NULL, a, a + 1, 4, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_reduce_scatter(c, NULL, a + 2, a, 4, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_all_gather(c, NULL, b, a, UINT64_MAX / 2, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_all_reduce(NULL, NULL, a, 8, ZN_DTYPE_F32), -EINVAL);
	cr_expect_eq(zn_comm_barrier(NULL), -EINVAL);
	cr_expect_eq(zn_comm_check(NULL), -EINVAL);
	/* none of that started anything: the comm still works */
	cr_expect_eq(zn_comm_check(c), 0);
	cr_expect_eq(zn_comm_all_gather(c, NULL, b, a, 8, ZN_DTYPE_F32), 0);
	expect_same(b, a, sizeof(a), "all_gather after argument errors");
	zn_comm_destroy(c);
}

static void expect_sticky(struct zn_comm *c, struct zn_stream *s)
{
	float a[4] = { 1, 2, 3, 4 }, b[4] = { 9, 9, 9, 9 };

	cr_expect_eq(zn_comm_all_reduce(c, s, a, 4, ZN_DTYPE_F32), 0);
	cr_expect_eq(zn_comm_all_gather(c, s, b, a, 4, ZN_DTYPE_F32), -EIO, "op #2 fails");
	if (s)
		cr_expect_eq(zn_stream_synchronize(s), 0);
	cr_expect_eq(b[0], 9.0f, "the failed op must not have run");
	cr_expect_eq(zn_comm_check(c), -EIO);
	cr_expect_eq(zn_comm_reduce_scatter(c, s, b, a, 4, ZN_DTYPE_F32), -EIO);
	cr_expect_eq(zn_comm_broadcast(c, s, a, 4, 0), -EIO);
	cr_expect_eq(zn_comm_barrier(c), -EIO);
	cr_expect_eq(zn_comm_check(c), -EIO);
}

Test(comm, injected_fault_is_sticky_host_path)
{
	struct zn_comm *c = make_single(2, NULL);

	expect_sticky(c, NULL);
	zn_comm_destroy(c);
}

Test(comm, injected_fault_is_sticky_stream_path)
{
	struct zn_device_config dcfg = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 20 };
	struct zn_device *dev = NULL;
	struct zn_stream *s = NULL;
	struct zn_comm *c;

	cr_assert_eq(zn_device_create(&dev, &dcfg), 0);
	cr_assert_eq(zn_stream_create(dev, &s), 0);
	c = make_single(2, dev);
	expect_sticky(c, s);
	zn_comm_destroy(c);
	zn_stream_destroy(s);
	zn_device_destroy(dev);
}
