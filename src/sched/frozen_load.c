/* Frozen parameters (frozen.h, docs/lora.md): each layer loaded onto its home at start-up
 * (cast to the stored dtype or quantized to 4 bits once, here) and read back from it
 * (checkpoints, tests), in its stored bytes: on the device, in pinned host memory, or its
 * extent in the nvme store (frozen_io.c; a streamed layer's experts each apart,
 * frozen_experts.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/quant/q4.h"
#include "sched/frozen.h"
#include "sched/plan.h"

static uint64_t fnumel(const struct zn_frozen *fz, int l)
{
	return fz->sh.numel[l];
}

static uint64_t stored_bytes(const struct zn_frozen *fz, int l)
{
	return zn_frozen_stored_bytes(fz, l);
}

static uint64_t extent(const struct zn_frozen *fz, int l)
{
	return zn_plan_host_alloc_bytes(stored_bytes(fz, l));
}

/* A 4 KiB aligned host buffer of layer l's extent (O_DIRECT wants aligned memory). */
static int aligned_buf(struct zn_frozen *fz, int l, void **out)
{
	uint64_t len = extent(fz, l);

	*out = NULL;
	if (posix_memalign(out, ZN_PLAN_HOST_ALIGN, len ? len : ZN_PLAN_HOST_ALIGN))
		return -ENOMEM;
	memset(*out, 0, len);
	return 0;
}

/* layer l's stored bytes buf (its natural order, an extent) to or from the frozen store; a
 * streamed layer's through its own extent (each expert apart, frozen_experts.c) */
static int nvme_rw(struct zn_frozen *fz, int l, void *buf, bool write)
{
	uint64_t len = zn_frozen_file_extent(fz, l);
	void *ext = NULL;
	int rc;

	if (!zn_frozen_streams(fz, l))
		return zn_frozen_io_rw(fz, l, buf, write);
	if (posix_memalign(&ext, ZN_PLAN_HOST_ALIGN, len))
		return -ENOMEM;
	memset(ext, 0, len);
	if (write)
		zn_frozen_experts_pack(fz, l, ext, buf);
	rc = zn_frozen_io_rw(fz, l, ext, write);
	if (!rc && !write)
		zn_frozen_experts_unpack(fz, l, buf, ext);
	free(ext);
	return rc;
}

/* the stored bytes src of layer l onto its home */
static int put_home(struct zn_frozen *fz, int l, const void *src)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t bytes = stored_bytes(fz, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(fz->c.copy_in, fz->home[l], src, bytes, ZN_COPY_H2D);
		return rc ? rc : zn_stream_synchronize(fz->c.copy_in);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(fz->home[l], src, bytes);
		return 0;
	}
	return nvme_rw(fz, l, (void *)src, true);
}

int zn_frozen_init_layer_q4(struct zn_frozen *fz, int l, const void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(fz, l))
		return 0;
	if (l == 0)
		fz->slot0_valid = false;
	rc = aligned_buf(fz, l, &buf); /* the 4 KiB extent, zero-padded (O_DIRECT) */
	if (!rc) {
		memcpy(buf, extent, stored_bytes(fz, l));
		rc = put_home(fz, l, buf);
	}
	free(buf);
	return rc;
}

int zn_frozen_init_layer(struct zn_frozen *fz, int l, const float *f32_h)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t n = fnumel(fz, l), bytes = stored_bytes(fz, l);
	void *src = (void *)f32_h, *buf = NULL;
	int rc = 0;

	if (!n)
		return 0;
	if (l == 0)
		fz->slot0_valid = false; /* fetched anew at the next step */
	if (fz->q4 || fz->sh.pdt != ZN_DTYPE_F32 || p->frozen_home == ZN_TIER_NVME) {
		rc = aligned_buf(fz, l, &buf);
		if (rc)
			return rc;
		if (fz->q4) /* quantized once, here, at load */
			rc = zn_q4_pack(&fz->q4[l], buf, f32_h, fz->sh.pdt);
		else if (fz->sh.pdt == ZN_DTYPE_BF16)
			zn_cast_f32_to_bf16(buf, f32_h, n);
		else if (fz->sh.pdt == ZN_DTYPE_F16)
			zn_cast_f32_to_f16(buf, f32_h, n);
		else
			memcpy(buf, f32_h, bytes);
		src = buf;
	}
	(void)bytes;
	if (!rc)
		rc = put_home(fz, l, src);
	free(buf);
	return rc;
}

/* layer l's stored bytes from its home into the 4 KiB-aligned buf (its extent) */
static int get_home(struct zn_frozen *fz, int l, void *buf)
{
	const struct zn_engine_plan *p = fz->c.plan;
	uint64_t bytes = stored_bytes(fz, l);
	int rc;

	if (p->frozen_home == ZN_TIER_DEVICE) {
		rc = zn_memcpy_async(fz->c.copy_out, buf, fz->home[l], bytes, ZN_COPY_D2H);
		return rc ? rc : zn_stream_synchronize(fz->c.copy_out);
	}
	if (p->frozen_home == ZN_TIER_HOST) {
		memcpy(buf, fz->home[l], bytes);
		return 0;
	}
	return nvme_rw(fz, l, buf, false);
}

int zn_frozen_read_layer_q4(struct zn_frozen *fz, int l, void *extent)
{
	void *buf = NULL;
	int rc;

	if (!fnumel(fz, l))
		return 0;
	rc = aligned_buf(fz, l, &buf);
	if (!rc)
		rc = get_home(fz, l, buf);
	if (!rc)
		memcpy(extent, buf, stored_bytes(fz, l));
	free(buf);
	return rc;
}

int zn_frozen_read_layer(struct zn_frozen *fz, int l, float *out_h)
{
	uint64_t n = fnumel(fz, l), bytes = stored_bytes(fz, l);
	void *buf = NULL;
	int rc;

	if (!n)
		return 0;
	rc = aligned_buf(fz, l, &buf);
	if (!rc)
		rc = get_home(fz, l, buf);
	if (!rc && fz->q4) /* dequantized as the device does */
		rc = zn_q4_unpack(&fz->q4[l], out_h, buf, fz->sh.pdt);
	else if (!rc && fz->sh.pdt == ZN_DTYPE_BF16)
		zn_cast_bf16_to_f32(out_h, buf, n);
	else if (!rc && fz->sh.pdt == ZN_DTYPE_F16)
		zn_cast_f16_to_f32(out_h, buf, n);
	else if (!rc)
		memcpy(out_h, buf, bytes);
	free(buf);
	return rc;
}

