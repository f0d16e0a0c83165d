/* zn_launch_widen (device.h): 16-bit floats widened to fp32 on a stream, the one launch
 * the parameters' prefetcher and the frozen base both enqueue after a copy up. */
#include "gpu/device.h"

struct widen {
	float *out;
	const void *in;
	uint64_t n;
	enum zn_dtype dt;
};

static void widen_fn(void *ctx, void *native, const struct zn_kernel_table *k)
{
	const struct widen *a = ctx;

	if (a->dt == ZN_DTYPE_F16)
		k->cast_f16_to_f32(native, a->out, a->in, (size_t)a->n);
	else
		k->cast_bf16_to_f32(native, a->out, a->in, (size_t)a->n);
}

int zn_launch_widen(struct zn_stream *s, float *out_d, const void *in_d, uint64_t n,
		    enum zn_dtype dt)
{
	struct widen a = { out_d, in_d, n, dt };

	return zn_launch(s, widen_fn, &a, sizeof(a));
}
