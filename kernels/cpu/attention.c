/* Causal multi-head self-attention, forward and backward (CPU reference, llm.c's layout).
 *
 * inp is qkv [B,T,3C]: q at channel 0, k at C, v at 2C; head h owns channels h*hs.. of each.
 * preatt = q.k * scale (scale = 1/sqrt(hs)), att = softmax over t2 <= t; both [B,NH,T,T],
 * with masked entries (t2 > t) written as 0 so every backend leaves identical buffers.
 * Backward writes its scratch gradients datt and dpreatt (same masking) and accumulates
 * into dinp. It uses the O(T) softmax gradient: dpreatt = att * (datt - sum(att * datt)).
 */
#include "ops.h"

#include <float.h>
#include <math.h>

#include "par.h"

/* one (b, t, h): the scores row, its softmax, and the weighted sum of values */
static void attention_row(float *out, float *pre, float *att, const float *inp, int t, int T,
			  int C, int hs, float scale)
{
	int C3 = 3 * C;
	const float *q = inp + (long)t * C3;
	float maxval = -FLT_MAX, sum = 0.0f;

	for (int t2 = 0; t2 <= t; t2++) {
		const float *k = inp + (long)t2 * C3 + C;
		float v = 0.0f;

		for (int i = 0; i < hs; i++)
			v += q[i] * k[i];
		v *= scale;
		pre[t2] = v;
		if (v > maxval)
			maxval = v;
	}
	for (int t2 = 0; t2 <= t; t2++) {
		float e = expf(pre[t2] - maxval);

		att[t2] = e;
		sum += e;
	}
	float inv = 1.0f / sum; /* sum >= 1: the max term is exp(0) */

	for (int t2 = 0; t2 <= t; t2++)
		att[t2] *= inv;
	for (int t2 = t + 1; t2 < T; t2++) {
		pre[t2] = 0.0f;
		att[t2] = 0.0f;
	}
	for (int i = 0; i < hs; i++)
		out[i] = 0.0f;
	for (int t2 = 0; t2 <= t; t2++) {
		const float *v = inp + (long)t2 * C3 + 2 * C;

		for (int i = 0; i < hs; i++)
			out[i] += att[t2] * v[i];
	}
}

void zn_cpu_attention_forward(float *out, float *preatt, float *att, const float *inp, int B,
			      int T, int C, int NH)
{
	int hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	long n = (long)B * T * NH;

#pragma omp parallel for schedule(static) if (n * T * hs > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		int h = (int)(j % NH);
		int t = (int)(j / NH % T);
		long b = j / NH / T;
		long r = ((b * NH + h) * T + t) * T;

		attention_row(out + (b * T + t) * C + h * hs, preatt + r, att + r,
			      inp + b * T * 3 * C + h * hs, t, T, C, hs, scale);
	}
}

/* one (b, h): every t in order, so dk and dv (shared across t) are summed in a fixed order */
static void attention_backward_head(float *dinp, float *dpreatt, float *datt, const float *dout,
				    const float *inp, const float *att, int T, int C, int hs,
				    float scale)
{
	int C3 = 3 * C;

	for (int t = 0; t < T; t++) {
		const float *a = att + (long)t * T;
		float *da = datt + (long)t * T;
		float *dp = dpreatt + (long)t * T;
		const float *d = dout + (long)t * C;
		const float *q = inp + (long)t * C3;
		float *dq = dinp + (long)t * C3;
		float s = 0.0f;

		for (int t2 = 0; t2 <= t; t2++) {
			const float *v = inp + (long)t2 * C3 + 2 * C;
			float *dv = dinp + (long)t2 * C3 + 2 * C;
			float x = 0.0f;

			for (int i = 0; i < hs; i++) {
				x += d[i] * v[i];
				dv[i] += a[t2] * d[i];
			}
			da[t2] = x;
			s += a[t2] * x;
		}
		for (int t2 = 0; t2 <= t; t2++) {
			const float *k = inp + (long)t2 * C3 + C;
			float *dk = dinp + (long)t2 * C3 + C;
			float g = a[t2] * (da[t2] - s);

			dp[t2] = g;
			g *= scale;
			for (int i = 0; i < hs; i++) {
				dq[i] += g * k[i];
				dk[i] += g * q[i];
			}
		}
		for (int t2 = t + 1; t2 < T; t2++) {
			da[t2] = 0.0f;
			dp[t2] = 0.0f;
		}
	}
}

void zn_cpu_attention_backward(float *dinp, float *dpreatt, float *datt, const float *dout,
			       const float *inp, const float *att, int B, int T, int C, int NH)
{
	int hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	long n = (long)B * NH;

#pragma omp parallel for schedule(static) if (n * T * T * hs > ZN_CPU_PAR_MIN)
	for (long j = 0; j < n; j++) {
		long b = j / NH;
		int h = (int)(j % NH);
		long r = j * T * T;
		long x = b * T * 3 * C + h * hs;

		attention_backward_head(dinp + x, dpreatt + r, datt + r, dout + b * T * C + h * hs,
					inp + x, att + r, T, C, hs, scale);
	}
}
