/* The cuda budget's reserve (gpu/device.h, struct zn_device_reserve): pure arithmetic on
 * the GPU's architecture and the cuBLAS/NCCL environment, and the budget correction once a
 * communicator exists. The cuda backend supplies the inputs; nothing here calls CUDA. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/device_impl.h"

#define MiB (1ull << 20)
#define KERNEL_BYTES (192 * MiB)
#define CONTEXT_BYTES (64 * MiB)
#define HANDLE_STATE_BYTES (4 * MiB)
#define NCCL_FIXED_BYTES (512 * MiB)
#define NCCL_LL_BYTES (256ull << 10)

/* an unsigned decimal that fills s; false otherwise */
static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return false;
	*v = strtoull(s, &end, 10);
	return *end == 0 || *end == ':';
}

/* CUBLAS_WORKSPACE_CONFIG=":SIZE_KiB:COUNT[:SIZE_KiB:COUNT...]" -> bytes */
static int cublas_workspace(const char *cfg, int sm_major, uint64_t *bytes)
{
	const char *p = cfg;
	uint64_t total = 0, size, count;

	if (!cfg || !*cfg) {
		*bytes = sm_major >= 9 ? 32 * MiB : 4 * MiB;
		return 0;
	}
	while (*p) {
		if (*p != ':' || !parse_u64(p + 1, &size))
			goto bad;
		p = strchr(p + 1, ':');
		if (!p || !parse_u64(p + 1, &count))
			goto bad;
		total += size * 1024 * count;
		p = strchr(p + 1, ':');
		if (!p)
			break;
	}
	*bytes = total;
	return 0;
bad:
	zn_error("CUBLAS_WORKSPACE_CONFIG='%s' is not ':SIZE_KiB:COUNT[:SIZE_KiB:COUNT...]' "
		 "(e.g. ':4096:8'); fix or unset it", cfg);
	return -EINVAL;
}

static int env_number(const char *name, const char *v, uint64_t dflt, uint64_t *out)
{
	char *end;

	if (!v || !*v) {
		*out = dflt;
		return 0;
	}
	*out = strtoull(v, &end, 10);
	if (*v < '0' || *v > '9' || *end || *out == 0) {
		zn_error("%s='%s' is not a positive whole number; fix or unset it", name, v);
		return -EINVAL;
	}
	return 0;
}

int zn_device_reserve_estimate(struct zn_device_reserve *r, int sm_major, int handles,
			       const char *cublas_workspace_config, int world,
			       const char *nccl_buffsize, const char *nccl_max_nchannels)
{
	uint64_t ws, buff, channels;
	int rc;

	r->cublas_bytes = r->kernel_bytes = r->context_bytes = r->comm_bytes = 0;
	rc = cublas_workspace(cublas_workspace_config, sm_major, &ws);
	if (rc)
		return rc;
	if (handles < 1)
		handles = 1;
	r->cublas_bytes = (uint64_t)handles * (ws + HANDLE_STATE_BYTES);
	r->kernel_bytes = KERNEL_BYTES;
	r->context_bytes = CONTEXT_BYTES;
	if (world <= 1)
		return 0;
	rc = env_number("NCCL_BUFFSIZE", nccl_buffsize, 4 * MiB, &buff);
	if (!rc)
		rc = env_number("NCCL_MAX_NCHANNELS", nccl_max_nchannels, 32, &channels);
	if (rc)
		return rc;
	/* per channel: ring (2 peers) and tree (2 peers, up and down) connections, each
	 * with Simple, LL128 (about 1.2 x Simple) and LL buffers */
	r->comm_bytes = channels * 4 * (buff + buff * 6 / 5 + NCCL_LL_BYTES) + NCCL_FIXED_BYTES;
	return 0;
}

uint64_t zn_device_reserve_bytes(const struct zn_device_reserve *r)
{
	return r->cublas_bytes + r->kernel_bytes + r->context_bytes + r->comm_bytes;
}

uint64_t zn_device_default_budget(uint64_t free_bytes, uint64_t reserve_bytes)
{
	if (reserve_bytes > free_bytes / 2)
		return free_bytes / 2;
	return free_bytes - reserve_bytes;
}

uint64_t zn_device_budget_after_comm(uint64_t budget, bool is_default, uint64_t used_bytes,
				     uint64_t free_now, uint64_t reserve_bytes)
{
	uint64_t room;

	if (!is_default)
		return budget;
	room = free_now > reserve_bytes ? free_now - reserve_bytes : 0;
	if (used_bytes + room < budget)
		return used_bytes + room;
	return budget;
}

int zn_device_comm_joined(struct zn_device *dev, int world)
{
	struct zn_device_reserve r = dev->reserve;
	uint64_t free_now = 0, budget, used, left;
	char b[4][32];
	int rc;

	if (world <= 1 || !dev->ops->free_bytes)
		return 0;
	rc = zn_device_reserve_estimate(&r, 9, 1, NULL, world, getenv("NCCL_BUFFSIZE"),
					getenv("NCCL_MAX_NCHANNELS"));
	if (rc)
		return rc;
	dev->reserve.comm_bytes = r.comm_bytes;
	rc = dev->ops->free_bytes(dev, &free_now);
	if (rc)
		return rc;
	used = zn_device_used_bytes(dev);
	/* what the pool holds beyond zinc's live allocations is not "free" to cudaMemGetInfo
	 * but is still ours: the pool caches freed blocks, so count only live bytes */
	budget = zn_device_budget_after_comm(dev->budget_bytes, dev->budget_is_default, used,
					     free_now, zn_device_reserve_bytes(&dev->reserve));
	left = free_now > dev->budget_bytes - used ? free_now - (dev->budget_bytes - used) : 0;
	if (budget != dev->budget_bytes) {
		zn_debug("device %s: budget %s -> %s after the %d-rank communicator (%s free, "
			 "NCCL estimate %s)", dev->name, zn_device_fmt_bytes(b[0], dev->budget_bytes),
			 zn_device_fmt_bytes(b[1], budget), world,
			 zn_device_fmt_bytes(b[2], free_now),
			 zn_device_fmt_bytes(b[3], dev->reserve.comm_bytes));
		dev->budget_bytes = budget;
	} else if (!dev->budget_is_default && left < zn_device_reserve_bytes(&dev->reserve)) {
		zn_warn("device %s: --device-mem %s leaves %s outside zinc's budget, less than the "
			"%s estimated for cuBLAS, kernels and NCCL's %d-rank buffers; lower "
			"--device-mem if NCCL runs out of memory", dev->name,
			zn_device_fmt_bytes(b[0], dev->budget_bytes),
			zn_device_fmt_bytes(b[1], left),
			zn_device_fmt_bytes(b[2], zn_device_reserve_bytes(&dev->reserve)), world);
	}
	return 0;
}
