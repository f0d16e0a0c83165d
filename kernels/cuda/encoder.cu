/* Token + position embedding on CUDA.
 *
 * Backward is deterministic without atomics: dwte as a sorted, segmented reduction
 * (zn_cuda_segment_add_rows, embed_backward.cu: rows sorted stably by token, one thread per
 * (distinct token, channel) adding its rows in (b, t) order, so the result matches
 * kernels/cpu bit for bit), and one thread per (t, channel) sums over b for dwpe.
 * With positions (packed documents, pos [B,T]): wpe[pos[b,t]]; dwpe as dwte, keyed by
 * position (the CPU's order: bit-identical). The forward four elements a thread where the
 * rows allow (vec.cuh's zn_embed).
 */
#include "vec.cuh"

extern "C" {
#include "ops.h"
}

static __global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
	size_t n = (size_t)T * C;

	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		float acc = dwpe[idx];

		for (int b = 0; b < B; b++)
			acc += dout[(size_t)b * n + idx];
		dwpe[idx] = acc;
	}
}

extern "C" void zn_cuda_encoder_forward(void *stream, float *out, const int *inp,
					const float *wte, const float *wpe, int B, int T, int C)
{
	zn_cuda_encoder_pos_forward(stream, out, inp, NULL, wte, wpe, B, T, C);
}

extern "C" void zn_cuda_encoder_pos_forward(void *stream, float *out, const int *inp,
					    const int *pos, const float *wte, const float *wpe,
					    int B, int T, int C)
{
	zn_embed((cudaStream_t)stream, "encoder_forward", out, inp, pos, wte, wpe, B, T, C);
}

extern "C" void zn_cuda_encoder_backward(void *stream, float *dwte, float *dwpe,
					 const float *dout, const int *inp, int B, int T, int C)
{
	zn_cuda_encoder_pos_backward(stream, dwte, dwpe, dout, inp, NULL, B, T, C);
}

extern "C" void zn_cuda_encoder_pos_backward(void *stream, float *dwte, float *dwpe,
					     const float *dout, const int *inp, const int *pos,
					     int B, int T, int C)
{
	cudaStream_t s = (cudaStream_t)stream;
	long BT = (long)B * T;
	size_t n = (size_t)T * C;

	zn_cuda_segment_add_rows(s, "encoder_backward", dwte, dout, inp, BT, C);
	if (pos) {
		zn_cuda_segment_add_rows(s, "encoder_backward", dwpe, dout, pos, BT, C);
		return;
	}
	encoder_backward_wpe_kernel<<<zn_cuda_blocks(n, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(
		dwpe, dout, B, T, C);
	zn_cuda_note_launch("encoder_backward", __FILE__, __LINE__);
}
