/* The cuda budget's reserve (issue 16, item 5) as pure arithmetic, and the device layer's
 * host memory for copies (item 7) on the host device. The reserve counts cuBLAS's
 * workspaces (CUBLAS_WORKSPACE_CONFIG or the per-architecture default), lazily loaded
 * kernels, context growth and, for more than one rank, NCCL's buffers (NCCL_BUFFSIZE,
 * NCCL_MAX_NCHANNELS); the budget after the communicator exists is lowered so the free
 * memory still covers it. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "gpu/device.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

Test(device_reserve, single_rank_defaults_by_architecture)
{
	struct zn_device_reserve r;

	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 4, NULL, 1, NULL, NULL), 0);
	cr_assert_eq(r.cublas_bytes, 4 * (32 + 4) * MiB, "Hopper: 32 MiB workspace + 4 MiB state");
	cr_assert_eq(r.kernel_bytes, 192 * MiB);
	cr_assert_eq(r.context_bytes, 64 * MiB);
	cr_assert_eq(r.comm_bytes, 0);
	cr_assert_eq(zn_device_reserve_bytes(&r), (144 + 192 + 64) * MiB);
	cr_assert_eq(zn_device_reserve_estimate(&r, 8, 2, "", 1, NULL, NULL), 0);
	cr_assert_eq(r.cublas_bytes, 2 * (4 + 4) * MiB, "Ampere: 4 MiB workspace");
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 0, NULL, 1, NULL, NULL), 0);
	cr_assert_eq(r.cublas_bytes, (32 + 4) * MiB, "at least one handle");
}

Test(device_reserve, cublas_workspace_config)
{
	struct zn_device_reserve r;

	/* ":4096:8" = 8 x 4 MiB; pairs add up */
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, ":4096:8", 1, NULL, NULL), 0);
	cr_assert_eq(r.cublas_bytes, (32 + 4) * MiB);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, ":4096:2:16:8", 1, NULL, NULL), 0);
	cr_assert_eq(r.cublas_bytes, 8 * MiB + 128 * 1024 + 4 * MiB);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, "4096:8", 1, NULL, NULL), -EINVAL);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, ":4096", 1, NULL, NULL), -EINVAL);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, ":x:8", 1, NULL, NULL), -EINVAL);
}

Test(device_reserve, nccl_buffers_for_more_than_one_rank)
{
	struct zn_device_reserve r;
	uint64_t per_conn = 4 * MiB + 4 * MiB * 6 / 5 + 256 * 1024;

	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, NULL, 8, NULL, NULL), 0);
	cr_assert_eq(r.comm_bytes, 32 * 4 * per_conn + 512 * MiB);
	cr_assert_gt(r.comm_bytes, GiB, "8 ranks on Hopper: over a GiB, twice the old reserve");
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, NULL, 8, "1048576", "4"), 0);
	cr_assert_eq(r.comm_bytes, 4 * 4 * (MiB + MiB * 6 / 5 + 256 * 1024) + 512 * MiB);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, NULL, 2, "4M", NULL), -EINVAL);
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, NULL, 2, NULL, "0"), -EINVAL);
	/* one rank: NCCL's variables do not matter, even malformed */
	cr_assert_eq(zn_device_reserve_estimate(&r, 9, 1, NULL, 1, "4M", "x"), 0);
	cr_assert_eq(r.comm_bytes, 0);
}

Test(device_reserve, default_budget)
{
	cr_assert_eq(zn_device_default_budget(140 * GiB, 400 * MiB), 140 * GiB - 400 * MiB);
	cr_assert_eq(zn_device_default_budget(600 * MiB, 400 * MiB), 300 * MiB,
		     "a reserve over half the free memory: half");
	cr_assert_eq(zn_device_default_budget(0, 400 * MiB), 0);
}

Test(device_reserve, budget_after_comm)
{
	/* default budget 100 GiB, 10 GiB in use, NCCL took 3 GiB so 87 GiB free */
	cr_assert_eq(zn_device_budget_after_comm(100 * GiB, true, 10 * GiB, 87 * GiB, 2 * GiB),
		     95 * GiB);
	/* plenty free: unchanged (never raised) */
	cr_assert_eq(zn_device_budget_after_comm(100 * GiB, true, 10 * GiB, 120 * GiB, 2 * GiB),
		     100 * GiB);
	/* nothing free beyond the reserve: what is in use */
	cr_assert_eq(zn_device_budget_after_comm(100 * GiB, true, 10 * GiB, GiB, 2 * GiB),
		     10 * GiB);
	/* an explicit budget is the user's */
	cr_assert_eq(zn_device_budget_after_comm(100 * GiB, false, 10 * GiB, GiB, 2 * GiB),
		     100 * GiB);
}

Test(device_reserve, comm_joined_is_a_no_op_on_the_host_device)
{
	struct zn_device_config dc = { .kind = ZN_DEVICE_HOST };
	struct zn_device *dev;

	cr_assert_eq(zn_device_create(&dev, &dc), 0);
	cr_assert_eq(zn_device_comm_joined(dev, 8), 0);
	cr_assert_eq(zn_device_budget_bytes(dev), GiB);
	zn_device_destroy(dev);
}

Test(device_hostmem, host_alloc_is_aligned_zeroed_and_outside_the_budget)
{
	struct zn_device_config dc = { .kind = ZN_DEVICE_HOST, .budget_bytes = 1 << 20 };
	struct zn_device *dev;
	unsigned char *p = NULL;
	void *z = (void *)1;

	cr_assert_eq(zn_device_create(&dev, &dc), 0);
	cr_assert_eq(zn_device_host_alloc(dev, (void **)&p, 3000), 0);
	cr_assert_not_null(p);
	cr_assert_eq((uintptr_t)p % 256, 0);
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(p[i], 0, "byte %d not zeroed", i);
	memset(p, 0xab, 3000);
	cr_assert_eq(zn_device_used_bytes(dev), 0, "host memory is not device memory");
	/* larger than the device budget: still fine, it is host memory */
	unsigned char *big = NULL;

	cr_assert_eq(zn_device_host_alloc(dev, (void **)&big, 4 << 20), 0);
	big[(4 << 20) - 1] = 1;
	cr_assert_eq(zn_device_host_alloc(dev, &z, 0), 0);
	cr_assert_null(z);
	cr_assert_eq(zn_device_host_alloc(dev, NULL, 8), -EINVAL);
	zn_device_host_free(dev, p);
	zn_device_host_free(dev, big);
	zn_device_host_free(dev, NULL);
	zn_device_destroy(dev);
}
