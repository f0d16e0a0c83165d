/* Fused causal grouped-query attention on CUDA, the FlashAttention-2 algorithm
 * (kernels/cpu/flash_attention.c has the semantics and layout): no [T,T] buffer, the
 * forward saves lse [B,NH,T] only, the backward recomputes the scores tile by tile.
 *
 * One warp per row: a key tile is 32 keys, one per lane (its score is that lane's dot
 * product); the row's running max and sum use the fixed butterfly of zn_warp_max/sum; each
 * lane owns head channels lane, lane + 32, ... of the row's output and adds the tile's
 * keys in order (p broadcast by __shfl_sync). Backward: a warp per query row sums dq over
 * key tiles in order; a warp per key row (b, g, t2) sums dk and dv over the group's query
 * heads in order, then query tiles in order. Every output element is summed by one lane in
 * a fixed order: deterministic, no atomics. fp32 CUDA cores (no tensor cores yet).
 * Sliding window (window > 0): query t sees keys first_key(t) = max(0, t - window + 1)
 * .. t, so its key tiles start there; key t2 is seen by queries t2 .. t2 + window - 1.
 * window 0 runs exactly the loops of the causal kernel (first_key 0, every later query).
 * Packed documents (the _doc ops, pos [B,T] non-NULL): query t's keys start no earlier
 * than its document's first token t - pos[t]; key t2's queries stop at the end of its
 * document (the first t with t - pos[t] > t2; documents are contiguous).
 */
#include <math.h>

#include "common.cuh"

extern "C" {
#include "ops.h"
}

#define WARPS 8 /* rows per block */

struct fl_view {
	const int *pos; /* [B,T] or NULL */
	int T, NH, KV, hd, G, window;
	long S, C;
	float scale;
};

static struct fl_view fl_view_make(const int *pos, int T, int NH, int KV, int hd, int window)
{
	struct fl_view a = { pos, T, NH, KV, hd, NH / KV, window, (long)(NH + 2 * KV) * hd,
			     (long)NH * hd, (float)(1.0 / sqrt((double)hd)) };

	return a;
}

/* the first key query t of batch row b sees */
static __device__ __forceinline__ int first_key(const struct fl_view &a, long b, int t)
{
	int j = a.window > 0 && t - a.window + 1 > 0 ? t - a.window + 1 : 0;

	if (a.pos && t - a.pos[b * a.T + t] > j)
		j = t - a.pos[b * a.T + t];
	return j;
}

/* one past the last query that sees key t2 */
static __device__ __forceinline__ int query_end(const struct fl_view &a, int t2)
{
	return a.window > 0 && (long)t2 + a.window < a.T ? t2 + a.window : a.T;
}

static __device__ __forceinline__ float fl_dot(const float *x, const float *y, int n)
{
	float s = 0.0f;

	for (int i = 0; i < n; i++)
		s += x[i] * y[i];
	return s;
}

/* row r = (b*NH + h)*T + t */
static __global__ void flash_forward_kernel(float *out, float *lse, const float *qkv,
					    long rows, struct fl_view a)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % a.T), h = (int)(r / a.T % a.NH), g = h / a.G;
	long b = r / a.T / a.NH;
	const float *x = qkv + b * a.T * a.S;
	const float *q = x + t * a.S + (long)h * a.hd, *k = x + (long)(a.NH + g) * a.hd;
	const float *v = x + (long)(a.NH + a.KV + g) * a.hd;
	float *o = out + (b * a.T + t) * a.C + (long)h * a.hd;
	float m = -INFINITY, l = 0.0f;

	for (int i = lane; i < a.hd; i += 32)
		o[i] = 0.0f;
	for (int j0 = first_key(a, b, t); j0 <= t; j0 += 32) {
		int c = j0 + lane, nj = t - j0 + 1 < 32 ? t - j0 + 1 : 32;
		float s = c <= t ? fl_dot(q, k + c * a.S, a.hd) * a.scale : -INFINITY;
		float mx = zn_warp_max(fmaxf(m, s));
		float p = c <= t ? expf(s - mx) : 0.0f;
		float alpha = expf(m - mx); /* 0 on the first tile */

		l = l * alpha + zn_warp_sum(p);
		m = mx;
		for (int i0 = 0; i0 < a.hd; i0 += 32) {
			int i = i0 + lane;
			float acc = i < a.hd ? o[i] * alpha : 0.0f;

			for (int cc = 0; cc < nj; cc++) {
				float pc = __shfl_sync(0xffffffffu, p, cc);

				if (i < a.hd)
					acc += pc * v[(long)(j0 + cc) * a.S + i];
			}
			if (i < a.hd)
				o[i] = acc;
		}
	}
	float inv = 1.0f / l;

	for (int i = lane; i < a.hd; i += 32)
		o[i] *= inv;
	if (lane == 0)
		lse[r] = m + logf(l);
}

/* drow[r] = sum(dout * out) of row r */
static __global__ void flash_drow_kernel(float *drow, const float *dout, const float *out,
					 long rows, struct fl_view a)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % a.T), h = (int)(r / a.T % a.NH);
	long b = r / a.T / a.NH, o = (b * a.T + t) * a.C + (long)h * a.hd;
	float s = 0.0f;

	for (int i = lane; i < a.hd; i += 32)
		s += dout[o + i] * out[o + i];
	s = zn_warp_sum(s);
	if (lane == 0)
		drow[r] = s;
}

/* query row r = (b*NH + h)*T + t: dq += scale * sum over keys of ds * k */
static __global__ void flash_dq_kernel(float *dqkv, const float *dout, const float *qkv,
				       const float *lse, const float *drow, long rows,
				       struct fl_view a)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t = (int)(r % a.T), h = (int)(r / a.T % a.NH), g = h / a.G;
	long b = r / a.T / a.NH;
	const float *x = qkv + b * a.T * a.S;
	const float *q = x + t * a.S + (long)h * a.hd, *k = x + (long)(a.NH + g) * a.hd;
	const float *v = x + (long)(a.NH + a.KV + g) * a.hd;
	const float *d = dout + (b * a.T + t) * a.C + (long)h * a.hd;
	float *dq = dqkv + b * a.T * a.S + t * a.S + (long)h * a.hd;
	float ls = lse[r], dr = drow[r];

	for (int j0 = first_key(a, b, t); j0 <= t; j0 += 32) {
		int c = j0 + lane, nj = t - j0 + 1 < 32 ? t - j0 + 1 : 32;
		float ds = 0.0f;

		if (c <= t) {
			float p = expf(fl_dot(q, k + c * a.S, a.hd) * a.scale - ls);

			ds = p * (fl_dot(d, v + c * a.S, a.hd) - dr) * a.scale;
		}
		for (int i0 = 0; i0 < a.hd; i0 += 32) {
			int i = i0 + lane;
			float acc = 0.0f;

			for (int cc = 0; cc < nj; cc++) {
				float dc = __shfl_sync(0xffffffffu, ds, cc);

				if (i < a.hd)
					acc += dc * k[(long)(j0 + cc) * a.S + i];
			}
			if (i < a.hd)
				dq[i] += acc;
		}
	}
}

/* key row r = (b*KV + g)*T + t2: dk, dv over the group's query heads, then queries t >= t2 */
static __global__ void flash_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
					const float *lse, const float *drow, long rows,
					struct fl_view a)
{
	long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;

	if (r >= rows)
		return;
	int t2 = (int)(r % a.T), g = (int)(r / a.T % a.KV);
	long b = r / a.T / a.KV;
	const float *x = qkv + b * a.T * a.S;
	const float *k = x + t2 * a.S + (long)(a.NH + g) * a.hd;
	const float *v = x + t2 * a.S + (long)(a.NH + a.KV + g) * a.hd;
	float *dk = dqkv + b * a.T * a.S + t2 * a.S + (long)(a.NH + g) * a.hd;
	float *dv = dk + (long)a.KV * a.hd;
	const int *ps = a.pos ? a.pos + b * a.T : NULL;
	int tend = query_end(a, t2);

	for (int h = g * a.G; h < (g + 1) * a.G; h++) {
		const float *q = x + (long)h * a.hd;
		const float *d = dout + b * a.T * a.C + (long)h * a.hd;
		const float *ls = lse + (b * a.NH + h) * a.T, *dr = drow + (b * a.NH + h) * a.T;

		for (int i0 = t2; i0 < tend; i0 += 32) {
			int t = i0 + lane, ni = tend - i0 < 32 ? tend - i0 : 32;
			float p = 0.0f, ds = 0.0f;

			if (ps && i0 - ps[i0] > t2)
				break; /* past key t2's document */
			if (t < tend && (!ps || t - ps[t] <= t2)) {
				p = expf(fl_dot(q + t * a.S, k, a.hd) * a.scale - ls[t]);
				ds = p * (fl_dot(d + t * a.C, v, a.hd) - dr[t]) * a.scale;
			}
			for (int c0 = 0; c0 < a.hd; c0 += 32) {
				int i = c0 + lane;
				float ak = 0.0f, av = 0.0f;

				for (int rr = 0; rr < ni; rr++) {
					float pr = __shfl_sync(0xffffffffu, p, rr);
					float dsr = __shfl_sync(0xffffffffu, ds, rr);

					if (i < a.hd) {
						ak += dsr * q[(long)(i0 + rr) * a.S + i];
						av += pr * d[(long)(i0 + rr) * a.C + i];
					}
				}
				if (i < a.hd) {
					dk[i] += ak;
					dv[i] += av;
				}
			}
		}
	}
}

static unsigned warp_blocks(long rows)
{
	return zn_cuda_grid(rows, WARPS);
}

extern "C" void zn_cuda_flash_attention_forward(void *stream, float *out, float *lse,
						const float *qkv, int B, int T, int NH, int KV,
						int hd, int window)
{
	zn_cuda_flash_attention_doc_forward(stream, out, lse, qkv, NULL, B, T, NH, KV, hd, window);
}

extern "C" void zn_cuda_flash_attention_doc_forward(void *stream, float *out, float *lse,
						    const float *qkv, const int *pos, int B,
						    int T, int NH, int KV, int hd, int window)
{
	struct fl_view a = fl_view_make(pos, T, NH, KV, hd, window);
	long rows = (long)B * NH * T;

	flash_forward_kernel<<<warp_blocks(rows), 32 * WARPS, 0, (cudaStream_t)stream>>>(
		out, lse, qkv, rows, a);
	zn_cuda_note_launch("flash_attention_forward", __FILE__, __LINE__);
}

extern "C" void zn_cuda_flash_attention_backward(void *stream, float *dqkv, float *drow,
						 const float *dout, const float *qkv,
						 const float *out, const float *lse, int B, int T,
						 int NH, int KV, int hd, int window)
{
	zn_cuda_flash_attention_doc_backward(stream, dqkv, drow, dout, qkv, out, lse, NULL, B, T,
					     NH, KV, hd, window);
}

extern "C" void zn_cuda_flash_attention_doc_backward(void *stream, float *dqkv, float *drow,
						     const float *dout, const float *qkv,
						     const float *out, const float *lse,
						     const int *pos, int B, int T, int NH, int KV,
						     int hd, int window)
{
	const char *op = "flash_attention_backward";
	struct fl_view a = fl_view_make(pos, T, NH, KV, hd, window);
	long rows = (long)B * NH * T, krows = (long)B * KV * T;
	cudaStream_t s = (cudaStream_t)stream;

	flash_drow_kernel<<<warp_blocks(rows), 32 * WARPS, 0, s>>>(drow, dout, out, rows, a);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	flash_dkv_kernel<<<warp_blocks(krows), 32 * WARPS, 0, s>>>(dqkv, dout, qkv, lse, drow,
								   krows, a);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	flash_dq_kernel<<<warp_blocks(rows), 32 * WARPS, 0, s>>>(dqkv, dout, qkv, lse, drow,
								 rows, a);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
}
