/* Llama-family elementwise ops on CUDA: token embedding (no position table), RoPE in place
 * on the q and k heads of qkv, SwiGLU. Same formulas as kernels/cpu (embedding.c, rope.c,
 * swiglu.c); grid-stride over 64-bit counts, the embedding and SwiGLU four elements a
 * thread where the rows allow (vec.cuh).
 *
 * Embedding backward is deterministic without atomics: a sorted, segmented reduction
 * (zn_cuda_segment_add_rows, embed_backward.cu: rows sorted stably by token, one thread per
 * (distinct token, channel) adding its rows in (b, t) order, so repeated tokens add in the
 * CPU's order and the result matches kernels/cpu bit for bit).
 */
#include <string.h>

#include "vec.cuh"

extern "C" {
#include "core/log.h"
#include "ops.h"
#include "rope.h"
}

/* the frequencies by value: a kernel argument, so the caller's host array may go away */
struct rope_freqs {
	float f[ZN_ROPE_MAX_HEAD_DIM / 2];
};

/* one thread per (b, t, head, i < hd/2) pair of the first nall heads, rotating those of
 * the first nrot (the q and k heads); sign -1 applies the transpose. qkv16 (NULL: none)
 * receives the pair rounded to bf16 after it, rotated or not. */
static __global__ void rope_kernel(float *qkv, uint16_t *qkv16,
				   const struct rope_freqs inv_freq, const int *pos, size_t n,
				   int T, int nrot, int nall, int half, long S, float sign)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		int i = (int)(idx % half);
		int h = (int)(idx / half % nall);
		size_t bt = idx / half / nall, at = bt * S + (size_t)h * 2 * half + i;
		float x0 = qkv[at], x1 = qkv[at + half];

		if (h < nrot) {
			float p = (float)(pos ? pos[bt] : (int)(bt % T));
			float a = p * inv_freq.f[i];
			float c = cosf(a), s = sign * sinf(a);
			float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;

			qkv[at] = y0, qkv[at + half] = y1;
			x0 = y0, x1 = y1;
		}
		if (qkv16)
			qkv16[at] = zn_bf16_rne(x0), qkv16[at + half] = zn_bf16_rne(x1);
	}
}

static __device__ __forceinline__ float swiglu_value(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

/* element idx of out [BT, IC] from gate and up of inp [BT, 2IC]. four(): IC % 4 == 0 (the
 * caller checks), so a quad stays in one row and each half's quad is aligned with inp.
 * OutT float: the op; uint16_t: swiglu_forward_bf16out (the same value, rounded). */
template <typename OutT> struct swiglu_forward_op {
	OutT *out;
	const float *inp;
	size_t IC;

	__device__ void one(size_t idx) const
	{
		size_t r = idx / IC * 2 * IC, i = idx % IC;

		zn_put(out + idx, swiglu_value(inp[r + i], inp[r + IC + i]));
	}
	__device__ void four(size_t q) const
	{
		size_t idx = 4 * q, r = idx / IC * 2 * IC, i = idx % IC;
		float4 g = zn_ld4(inp, (r + i) / 4), u = zn_ld4(inp, (r + IC + i) / 4);

		zn_put4(out, q, make_float4(swiglu_value(g.x, u.x), swiglu_value(g.y, u.y),
					    swiglu_value(g.z, u.z), swiglu_value(g.w, u.w)));
	}
};

/* one element's gradient: *dg += (gate's), *du += (up's) */
static __device__ __forceinline__ void swiglu_grad(float *dg, float *du, float g, float u,
						   float d)
{
	float e = 1.0f + expf(-g);
	float s = 1.0f / e, silu = g / e;

	*dg = *dg + d * u * (s * (1.0f + g * (1.0f - s)));
	*du = *du + d * silu;
}

/* dinp [BT, 2IC] += the gradient of element idx; dinp16 (NULL: none) receives both sums
 * rounded to bf16. four(): IC % 4 == 0 as above. */
struct swiglu_backward_op {
	float *dinp;
	uint16_t *dinp16;
	const float *dout, *inp;
	size_t IC;

	__device__ void one(size_t idx) const
	{
		size_t r = idx / IC * 2 * IC, i = idx % IC;
		float dg = dinp[r + i], du = dinp[r + IC + i];

		swiglu_grad(&dg, &du, inp[r + i], inp[r + IC + i], dout[idx]);
		dinp[r + i] = dg, dinp[r + IC + i] = du;
		if (dinp16)
			dinp16[r + i] = zn_bf16_rne(dg), dinp16[r + IC + i] = zn_bf16_rne(du);
	}
	__device__ void four(size_t q) const
	{
		size_t idx = 4 * q, r = idx / IC * 2 * IC, i = idx % IC;
		size_t qg = (r + i) / 4, qu = (r + IC + i) / 4;
		float4 g = zn_ld4(inp, qg), u = zn_ld4(inp, qu), d = zn_ld4(dout, q);
		float4 dg = zn_ld4(dinp, qg), du = zn_ld4(dinp, qu);

		swiglu_grad(&dg.x, &du.x, g.x, u.x, d.x);
		swiglu_grad(&dg.y, &du.y, g.y, u.y, d.y);
		swiglu_grad(&dg.z, &du.z, g.z, u.z, d.z);
		swiglu_grad(&dg.w, &du.w, g.w, u.w, d.w);
		zn_st4(dinp, qg, dg), zn_st4(dinp, qu, du);
		if (dinp16)
			zn_st4_bf16(dinp16, qg, dg), zn_st4_bf16(dinp16, qu, du);
	}
};

static unsigned blocks(size_t n)
{
	return zn_cuda_blocks(n, ZN_CUDA_THREADS);
}

extern "C" void zn_cuda_embedding_forward(void *stream, float *out, const int *inp,
					  const float *wte, int B, int T, int C)
{
	zn_embed((cudaStream_t)stream, "embedding_forward", out, inp, (const int *)NULL, wte,
		 (const float *)NULL, B, T, C);
}

extern "C" void zn_cuda_embedding_backward(void *stream, float *dwte, const float *dout,
					   const int *inp, int B, int T, int C)
{
	zn_cuda_segment_add_rows((cudaStream_t)stream, "embedding_backward", dwte, dout, inp,
				 (long)B * T, C);
}

/* qkv16 NULL: the q and k heads rotated; else every head's bf16 copy written too */
static void rope(void *stream, const char *op, float *qkv, uint16_t *qkv16,
		 const float *inv_freq, const int *pos, int B, int T, int NH, int KV, int hd,
		 float sign)
{
	int nall = qkv16 ? NH + 2 * KV : NH + KV;
	size_t n = (size_t)B * T * nall * (hd / 2);
	long S = (long)(NH + 2 * KV) * hd;
	struct rope_freqs f;

	if (hd > ZN_ROPE_MAX_HEAD_DIM) { /* zn_rope_inv_freq refuses such a head_dim first */
		zn_error("%s: head_dim %d > %d: not rotated", op, hd, ZN_ROPE_MAX_HEAD_DIM);
		return;
	}
	memcpy(f.f, inv_freq, (size_t)(hd / 2) * sizeof(float));
	rope_kernel<<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		qkv, qkv16, f, pos, n, T, NH + KV, nall, hd / 2, S, sign);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}

extern "C" void zn_cuda_rope_forward(void *stream, float *qkv, const float *inv_freq,
				     const int *pos, int B, int T, int NH, int KV, int hd)
{
	rope(stream, "rope_forward", qkv, NULL, inv_freq, pos, B, T, NH, KV, hd, 1.0f);
}

extern "C" void zn_cuda_rope_backward(void *stream, float *dqkv, const float *inv_freq,
				      const int *pos, int B, int T, int NH, int KV, int hd)
{
	rope(stream, "rope_backward", dqkv, NULL, inv_freq, pos, B, T, NH, KV, hd, -1.0f);
}

extern "C" void zn_cuda_rope_forward_bf16out(void *stream, float *qkv, uint16_t *qkv16,
					     const float *inv_freq, const int *pos, int B, int T,
					     int NH, int KV, int hd)
{
	rope(stream, "rope_forward_bf16out", qkv, qkv16, inv_freq, pos, B, T, NH, KV, hd, 1.0f);
}

extern "C" void zn_cuda_rope_backward_bf16out(void *stream, float *dqkv, uint16_t *dqkv16,
					      const float *inv_freq, const int *pos, int B,
					      int T, int NH, int KV, int hd)
{
	rope(stream, "rope_backward_bf16out", dqkv, dqkv16, inv_freq, pos, B, T, NH, KV, hd,
	     -1.0f);
}

template <typename OutT>
static void swiglu_forward(void *stream, const char *name, OutT *out, const float *inp, int B,
			   int T, int IC)
{
	struct swiglu_forward_op<OutT> op = { out, inp, (size_t)IC };
	bool vec = IC % 4 == 0 && zn_aligned(inp, 16) && zn_aligned(out, 4 * sizeof(OutT));

	zn_ew_launch((cudaStream_t)stream, name, op, (size_t)B * T * IC, vec);
}

extern "C" void zn_cuda_swiglu_forward(void *stream, float *out, const float *inp, int B,
				       int T, int IC)
{
	swiglu_forward(stream, "swiglu_forward", out, inp, B, T, IC);
}

extern "C" void zn_cuda_swiglu_forward_bf16out(void *stream, uint16_t *out16,
					       const float *inp, int B, int T, int IC)
{
	swiglu_forward(stream, "swiglu_forward_bf16out", out16, inp, B, T, IC);
}

extern "C" void zn_cuda_swiglu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
						const float *dout, const float *inp, int B, int T,
						int IC)
{
	struct swiglu_backward_op op = { dinp, dinp16, dout, inp, (size_t)IC };
	bool vec = IC % 4 == 0 && zn_aligned(dinp, 16) && zn_aligned(dinp16, 8) &&
		   zn_aligned(dout, 16) && zn_aligned(inp, 16);

	zn_ew_launch((cudaStream_t)stream, dinp16 ? "swiglu_backward_bf16out" : "swiglu_backward",
		     op, (size_t)B * T * IC, vec);
}

extern "C" void zn_cuda_swiglu_backward(void *stream, float *dinp, const float *dout,
					const float *inp, int B, int T, int IC)
{
	zn_cuda_swiglu_backward_bf16out(stream, dinp, NULL, dout, inp, B, T, IC);
}
