/* Mixture-of-experts routing on CUDA (kernels.h, "mixture of experts"): the formulas and
 * orders of kernels/cpu/moe.c, so results are deterministic (no atomics): the router one
 * thread per token, the grouping by expert one block with a thread per expert (each
 * scans the slots in order), the combine one thread per (token, channel) adding the
 * token's slots by ascending expert, the dot products of scatter_dout one warp per slot
 * (a fixed shuffle tree: the same bits every run, not the CPU's serial sum).
 */
#include <string.h>

#include "common.cuh"

extern "C" {
#include "ops.h"
}

static unsigned blocks(size_t n)
{
	return zn_cuda_blocks(n, ZN_CUDA_THREADS);
}

static __global__ void route_forward_kernel(int *sel, float *w, float *probs,
					    const float *logits, int N, int E, int K, int norm)
{
	for (size_t t = first_index(); t < (size_t)N; t += grid_step()) {
		const float *x = logits + t * E;
		float *p = probs + t * E, mx = x[0], sum = 0.0f, s = 0.0f;
		int *st = sel + t * K;

		for (int e = 1; e < E; e++)
			mx = x[e] > mx ? x[e] : mx;
		for (int e = 0; e < E; e++) {
			p[e] = expf(x[e] - mx);
			sum += p[e];
		}
		for (int e = 0; e < E; e++)
			p[e] /= sum;
		for (int k = 0; k < K; k++) {
			int best = -1;

			for (int e = 0; e < E; e++) {
				bool taken = false;

				for (int j = 0; j < k; j++)
					taken = taken || st[j] == e;
				if (!taken && (best < 0 || p[e] > p[best]))
					best = e;
			}
			st[k] = best;
		}
		for (int k = 0; k < K; k++)
			s += p[st[k]];
		for (int k = 0; k < K; k++)
			w[t * K + k] = norm ? p[st[k]] / s : p[st[k]];
	}
}

static __global__ void route_backward_kernel(float *dlogits, const float *dw,
					     const float *probs, const int *sel,
					     const float *dprob, int N, int E, int K, int norm)
{
	for (size_t t = first_index(); t < (size_t)N; t += grid_step()) {
		const float *p = probs + t * E, *g = dw + t * K;
		const int *s = sel + t * K;
		float *d = dlogits + t * E, S = 0.0f, gw = 0.0f, dot = 0.0f;

		for (int e = 0; e < E; e++)
			d[e] = dprob ? dprob[e] : 0.0f;
		for (int k = 0; k < K; k++)
			S += p[s[k]];
		for (int k = 0; k < K; k++)
			gw += g[k] * (p[s[k]] / S);
		for (int k = 0; k < K; k++)
			d[s[k]] += norm ? (g[k] - gw) / S : g[k];
		for (int e = 0; e < E; e++)
			dot += p[e] * d[e];
		for (int e = 0; e < E; e++)
			d[e] = p[e] * (d[e] - dot);
	}
}

/* one block: thread e counts expert e's slots, thread 0 the prefix sums, then thread e
 * writes its slots in slot order (E at most the block's threads: the caller loops) */
static __global__ void dispatch_kernel(int *perm, int *pos, int *offsets, const int *sel,
				       long M, int E)
{
	for (int e0 = 0; e0 < E; e0 += blockDim.x) {
		int e = e0 + threadIdx.x;

		if (e < E) {
			int c = 0;

			for (long i = 0; i < M; i++)
				c += sel[i] == e;
			offsets[e + 1] = c;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		offsets[0] = 0;
		for (int e = 0; e < E; e++)
			offsets[e + 1] += offsets[e];
	}
	__syncthreads();
	for (int e0 = 0; e0 < E; e0 += blockDim.x) {
		int e = e0 + threadIdx.x;

		if (e < E) {
			int at = offsets[e];

			for (long i = 0; i < M; i++)
				if (sel[i] == e) {
					perm[at] = (int)i;
					pos[i] = at++;
				}
		}
	}
}

static __global__ void gather_kernel(float *out, const float *inp, const int *perm, size_t n,
				     int K, int C)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		size_t i = idx / C;
		int c = (int)(idx % C);

		out[idx] = inp[(size_t)(perm[i] / K) * C + c];
	}
}

static __global__ void combine_kernel(float *out, const float *y, const int *pos,
				      const int *sel, const float *w, size_t n, int K, int C,
				      int accumulate)
{
	for (size_t idx = first_index(); idx < n; idx += grid_step()) {
		size_t t = idx / C;
		int c = (int)(idx % C), done = 0;
		float o = accumulate ? out[idx] : 0.0f;

		for (int r = 0; r < K; r++) {
			int k = -1;

			for (int j = 0; j < K; j++) {
				int e = sel[t * K + j];

				if (!(done >> j & 1) && (k < 0 || e < sel[t * K + k]))
					k = j;
			}
			done |= 1 << k;
			o += (w ? w[t * K + k] : 1.0f) * y[(size_t)pos[t * K + k] * C + c];
		}
		out[idx] = o;
	}
}

/* one warp per sorted slot */
static __global__ void scatter_dout_kernel(float *dy, float *dw, const float *dout,
					   const float *y, const float *w, const int *perm, int M,
					   int K, int C)
{
	int warps = blockDim.x / 32;

	for (long i = (long)blockIdx.x * warps + threadIdx.x / 32; i < M;
	     i += (long)gridDim.x * warps) {
		int slot = perm[i], lane = threadIdx.x % 32;
		const float *g = dout + (size_t)(slot / K) * C, *yr = y + (size_t)i * C;
		float s = w[slot], acc = 0.0f;

		for (int c = lane; c < C; c += 32) {
			dy[(size_t)i * C + c] = s * g[c];
			acc += g[c] * yr[c];
		}
		acc = zn_warp_sum(acc);
		if (lane == 0)
			dw[slot] = acc;
	}
}

static __global__ void aux_stats_kernel(float *acc, const float *probs, const int *sel, int N,
					int E, int K)
{
	for (size_t e = first_index(); e < (size_t)E; e += grid_step()) {
		float c = 0.0f, s = 0.0f;

		for (long i = 0; i < (long)N * K; i++)
			c += sel[i] == (int)e ? 1.0f : 0.0f;
		for (int t = 0; t < N; t++)
			s += probs[(size_t)t * E + e];
		acc[e] += c;
		acc[E + e] += s;
	}
}

/* one thread: E is small */
static __global__ void aux_finish_kernel(float *loss, float *dprob, const float *acc, int E,
					 float ntot, float scale)
{
	float l = 0.0f;

	for (int e = 0; e < E; e++) {
		l += (acc[e] / ntot) * (acc[E + e] / ntot);
		if (dprob)
			dprob[e] = scale * (float)E * acc[e] / (ntot * ntot);
	}
	if (loss)
		loss[0] = (float)E * l;
}

extern "C" void zn_cuda_moe_route_forward(void *stream, int *sel, float *w, float *probs,
					  const float *logits, int N, int E, int K, int norm)
{
	route_forward_kernel<<<blocks((size_t)N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		sel, w, probs, logits, N, E, K, norm);
	zn_cuda_note_launch("moe_route_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_route_backward(void *stream, float *dlogits, const float *dw,
					   const float *probs, const int *sel,
					   const float *dprob, int N, int E, int K, int norm)
{
	route_backward_kernel<<<blocks((size_t)N), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		dlogits, dw, probs, sel, dprob, N, E, K, norm);
	zn_cuda_note_launch("moe_route_backward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_dispatch(void *stream, int *perm, int *pos, int *offsets,
				     const int *sel, int N, int E, int K)
{
	dispatch_kernel<<<1, ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(perm, pos, offsets, sel,
									 (long)N * K, E);
	zn_cuda_note_launch("moe_dispatch", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_gather(void *stream, float *out, const float *inp, const int *perm,
				   int M, int K, int C)
{
	size_t n = (size_t)M * C;

	gather_kernel<<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(out, inp, perm, n,
										K, C);
	zn_cuda_note_launch("moe_gather", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_combine(void *stream, float *out, const float *y, const int *pos,
				    const int *sel, const float *w, int N, int K, int C,
				    int accumulate)
{
	size_t n = (size_t)N * C;

	combine_kernel<<<blocks(n), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		out, y, pos, sel, w, n, K, C, accumulate);
	zn_cuda_note_launch("moe_combine", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_scatter_dout(void *stream, float *dy, float *dw, const float *dout,
					 const float *y, const float *w, const int *perm, int M,
					 int K, int C)
{
	scatter_dout_kernel<<<zn_cuda_grid(M, ZN_CUDA_THREADS / 32), ZN_CUDA_THREADS, 0,
			      (cudaStream_t)stream>>>(dy, dw, dout, y, w, perm, M, K, C);
	zn_cuda_note_launch("moe_scatter_dout", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_aux_stats(void *stream, float *acc, const float *probs,
				      const int *sel, int N, int E, int K)
{
	aux_stats_kernel<<<blocks((size_t)E), ZN_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
		acc, probs, sel, N, E, K);
	zn_cuda_note_launch("moe_aux_stats", __FILE__, __LINE__);
}

extern "C" void zn_cuda_moe_aux_finish(void *stream, float *loss, float *dprob,
				       const float *acc, int E, float ntot, float scale)
{
	aux_finish_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(loss, dprob, acc, E, ntot, scale);
	zn_cuda_note_launch("moe_aux_finish", __FILE__, __LINE__);
}

/* a failure sets the sticky error flag (the step fails) and leaves dst zero */
extern "C" void zn_cuda_read_sync(void *stream, void *dst, const void *src, size_t bytes)
{
	if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream) !=
		    cudaSuccess ||
	    cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess) {
		memset(dst, 0, bytes);
		zn_cuda_note_error();
	}
}

/* a failure sets the sticky error flag (the step fails) */
extern "C" void zn_cuda_write_sync(void *stream, void *dst, const void *src, size_t bytes)
{
	if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream) !=
		    cudaSuccess ||
	    cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess)
		zn_cuda_note_error();
}
