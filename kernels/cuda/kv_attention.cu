/* KV-cache attention for inference on CUDA (kernels.h: kv_attention_forward), batch 1.
 * The new key and value heads go into the caches (grid-stride copy), then one warp per
 * (t, h) query row walks the visible keys in order with an online softmax: each lane holds
 * hd/32 channels of q and of the output (hd <= 512), the score is a fixed butterfly sum.
 * Deterministic, no atomics. Slow for long contexts (a warp per row, keys one by one):
 * it is the decode step's op, where T is 1. */
#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define KV_MAX_PER_LANE 16 /* hd <= 512 (ZN_ROPE_MAX_HEAD_DIM) */
#define KV_WARPS 4

static __global__ void kv_store_kernel(float *kc, float *vc, const float *qkv, int pos0,
				       size_t total, int S, int qw, int kvw)
{
	for (size_t i = first_index(); i < total; i += grid_step()) {
		size_t t = i / (size_t)kvw, c = i % (size_t)kvw;
		size_t dst = ((size_t)pos0 + t) * (size_t)kvw + c;

		kc[dst] = qkv[t * (size_t)S + (size_t)qw + c];
		vc[dst] = qkv[t * (size_t)S + (size_t)qw + (size_t)kvw + c];
	}
}

static __global__ void kv_attn_kernel(float *out, const float *kc, const float *vc,
				      const float *qkv, int pos0, int T, int NH, int KV, int hd,
				      int window, float scale)
{
	const int lane = threadIdx.x & 31;
	const long row = (long)blockIdx.x * KV_WARPS + (threadIdx.x >> 5);
	const int S = (NH + 2 * KV) * hd, kvw = KV * hd, per = (hd + 31) / 32;
	float q[KV_MAX_PER_LANE], o[KV_MAX_PER_LANE];
	float mx = -INFINITY, sum = 0.0f;

	if (row >= (long)T * NH)
		return;
	const int t = (int)(row / NH), h = (int)(row % NH), g = h / (NH / KV);
	const int p = pos0 + t;
	const int first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const float *qr = qkv + (size_t)t * S + (size_t)h * hd;
	const float *kb = kc + (size_t)g * hd, *vb = vc + (size_t)g * hd;

	for (int i = 0; i < per; i++) {
		int c = lane + 32 * i;

		q[i] = c < hd ? qr[c] : 0.0f;
		o[i] = 0.0f;
	}
	for (int j = first; j <= p; j++) {
		const float *k = kb + (size_t)j * kvw, *v = vb + (size_t)j * kvw;
		float s = 0.0f, nm, a, w;

		for (int i = 0; i < per; i++) {
			int c = lane + 32 * i;

			s += c < hd ? q[i] * k[c] : 0.0f;
		}
		s = zn_warp_sum(s) * scale;
		nm = fmaxf(mx, s);
		a = expf(mx - nm); /* mx = -inf on the first key: 0 */
		w = expf(s - nm);
		sum = sum * a + w;
		for (int i = 0; i < per; i++) {
			int c = lane + 32 * i;

			o[i] = o[i] * a + (c < hd ? w * v[c] : 0.0f);
		}
		mx = nm;
	}
	float *orow = out + (size_t)t * NH * hd + (size_t)h * hd;

	for (int i = 0; i < per; i++) {
		int c = lane + 32 * i;

		if (c < hd)
			orow[c] = o[i] / sum;
	}
}

extern "C" void zn_cuda_kv_attention_forward(void *stream, float *out, float *kcache,
					     float *vcache, const float *qkv, int pos0, int T,
					     int NH, int KV, int hd, int window)
{
	cudaStream_t s = (cudaStream_t)stream;
	size_t total = (size_t)T * KV * hd;
	long rows = (long)T * NH;

	kv_store_kernel<<<zn_cuda_blocks(total, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(
		kcache, vcache, qkv, pos0, total, (NH + 2 * KV) * hd, NH * hd, KV * hd);
	zn_cuda_note_launch("kv_attention_forward", __FILE__, __LINE__);
	kv_attn_kernel<<<zn_cuda_grid(rows, KV_WARPS), 32 * KV_WARPS, 0, s>>>(
		out, kcache, vcache, qkv, pos0, T, NH, KV, hd, window,
		(float)(1.0 / sqrt((double)hd)));
	zn_cuda_note_launch("kv_attention_forward", __FILE__, __LINE__);
}
