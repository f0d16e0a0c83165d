/* Llama-family elementwise ops on CUDA: token embedding (no position table), RoPE in place
 * on the q and k heads of qkv, SwiGLU. Same formulas as kernels/cpu (embedding.c, rope.c,
 * swiglu.c); grid-stride over 64-bit counts.
 *
 * Embedding backward is deterministic without atomics: a sorted, segmented reduction
 * (zn_cuda_segment_add_rows, embed_backward.cu: rows sorted stably by token, one thread per
 * (distinct token, channel) adding its rows in (b, t) order, so repeated tokens add in the
 * CPU's order and the result matches kernels/cpu bit for bit).
 */
#include <string.h>

#include "common.cuh"

extern "C" {
#include "core/log.h"
#include "ops.h"
#include "rope.h"
}

/* the frequencies by value: a kernel argument, so the caller's host array may go away */
struct rope_freqs {
	float f[ZN_ROPE_MAX_HEAD_DIM / 2];
};

static __global__ void embedding_forward_kernel(float *out, const int *inp, const float *wte,
						size_t n, int C)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		size_t bt = idx / C;
		int i = (int)(idx % C);

		out[idx] = wte[(size_t)inp[bt] * C + i];
	}
}

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

/* OutT float: the op; uint16_t: swiglu_forward_bf16out (the same value, rounded) */
template <typename OutT>
static __global__ void swiglu_forward_kernel(OutT *out, const float *inp, size_t n, int IC)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		size_t bt = idx / IC;
		int i = (int)(idx % IC);
		float g = inp[bt * 2 * IC + i], u = inp[bt * 2 * IC + IC + i];

		zn_put(out + idx, g / (1.0f + expf(-g)) * u);
	}
}

/* dinp16 (NULL: none) receives both sums rounded to bf16 */
static __global__ void swiglu_backward_kernel(float *dinp, uint16_t *dinp16, const float *dout,
					      const float *inp, size_t n, int IC)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		size_t bt = idx / IC, r = bt * 2 * IC;
		int i = (int)(idx % IC);
		float g = inp[r + i], u = inp[r + IC + i], d = dout[idx];
		float e = 1.0f + expf(-g);
		float s = 1.0f / e, silu = g / e;
		float dg = dinp[r + i] + d * u * (s * (1.0f + g * (1.0f - s)));
		float du = dinp[r + IC + i] + d * silu;

		dinp[r + i] = dg, dinp[r + IC + i] = du;
		if (dinp16)
			dinp16[r + i] = zn_bf16_rne(dg), dinp16[r + IC + i] = zn_bf16_rne(du);
	}
}

static unsigned blocks(size_t n)
{
	return zn_cuda_blocks(n, ZN_CUDA_THREADS);
}

extern "C" void zn_cuda_embedding_forward(void *stream, float *out, const int *inp,
					  const float *wte, int B, int T, int C)
{
	size_t n = (size_t)B * T * C;

	embedding_forward_kernel<<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out, inp, wte, n, C);
	zn_cuda_note_launch("embedding_forward", __FILE__, __LINE__);
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

extern "C" void zn_cuda_rope_backward_bf16out(void *stream, float *dqkv, uint16_t *dqkv16,
					      const float *inv_freq, const int *pos, int B,
					      int T, int NH, int KV, int hd)
{
	rope(stream, "rope_backward_bf16out", dqkv, dqkv16, inv_freq, pos, B, T, NH, KV, hd,
	     -1.0f);
}

extern "C" void zn_cuda_swiglu_forward(void *stream, float *out, const float *inp, int B,
				       int T, int IC)
{
	size_t n = (size_t)B * T * IC;

	swiglu_forward_kernel<float><<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out, inp, n, IC);
	zn_cuda_note_launch("swiglu_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_swiglu_forward_bf16out(void *stream, uint16_t *out16,
					       const float *inp, int B, int T, int IC)
{
	size_t n = (size_t)B * T * IC;

	swiglu_forward_kernel<uint16_t><<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out16, inp, n, IC);
	zn_cuda_note_launch("swiglu_forward_bf16out", __FILE__, __LINE__);
}

extern "C" void zn_cuda_swiglu_backward_bf16out(void *stream, float *dinp, uint16_t *dinp16,
						const float *dout, const float *inp, int B, int T,
						int IC)
{
	size_t n = (size_t)B * T * IC;

	swiglu_backward_kernel<<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		dinp, dinp16, dout, inp, n, IC);
	zn_cuda_note_launch(dinp16 ? "swiglu_backward_bf16out" : "swiglu_backward", __FILE__,
			    __LINE__);
}

extern "C" void zn_cuda_swiglu_backward(void *stream, float *dinp, const float *dout,
					const float *inp, int B, int T, int IC)
{
	zn_cuda_swiglu_backward_bf16out(stream, dinp, NULL, dout, inp, B, T, IC);
}
