/* Host memory for copies (zn_device_host_alloc): the backend's page-locked memory where it
 * has a host_alloc slot (cuda), else ordinary 256-byte aligned memory. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gpu/device_impl.h"

int zn_device_host_alloc(struct zn_device *dev, void **ptr_h, uint64_t bytes)
{
	void *p;

	if (!dev || !ptr_h) {
		zn_error("zn_device_host_alloc: dev and ptr_h must not be NULL");
		return -EINVAL;
	}
	*ptr_h = NULL;
	if (bytes == 0)
		return 0;
	if (dev->ops->host_alloc) {
		int rc = dev->ops->host_alloc(dev, ptr_h, bytes);

		if (!rc)
			atomic_fetch_add(&dev->host_live, 1);
		return rc;
	}
	bytes = (bytes + ZN_DEVICE_ALIGN_BYTES - 1) / ZN_DEVICE_ALIGN_BYTES * ZN_DEVICE_ALIGN_BYTES;
	p = aligned_alloc(ZN_DEVICE_ALIGN_BYTES, bytes);
	if (!p) {
		zn_error("host memory of %llu bytes for device copies: out of memory",
			 (unsigned long long)bytes);
		return -ENOMEM;
	}
	memset(p, 0, bytes);
	*ptr_h = p;
	atomic_fetch_add(&dev->host_live, 1);
	return 0;
}

void zn_device_host_free(struct zn_device *dev, void *ptr_h)
{
	if (!ptr_h)
		return;
	atomic_fetch_sub(&dev->host_live, 1);
	if (dev->ops->host_free)
		dev->ops->host_free(dev, ptr_h);
	else
		free(ptr_h);
}

int zn_device_host_live(const struct zn_device *dev)
{
	return atomic_load(&dev->host_live);
}
