/* RoPE in place on the q and k heads of the fused qkv projection (CPU reference), in
 * Hugging Face's rotate_half convention: channel i pairs with i + hd/2 (no permutation of
 * q_proj/k_proj rows at load). The angle is pos * inv_freq[i] in fp32, as transformers
 * computes it; backward applies the inverse rotation (angle -a) to the gradient.
 */
#include "ops.h"

#include <math.h>

#include "par.h"

/* sign +1: forward rotation; -1: its transpose */
static void rope_apply(float *qkv, const float *inv_freq, const int *pos, int B, int T, int NH,
		       int KV, int hd, float sign)
{
	long BT = (long)B * T;
	long S = (long)(NH + 2 * KV) * hd;
	int nh = NH + KV, half = hd / 2;

#pragma omp parallel for schedule(static) if (BT * nh * hd > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		float p = (float)(pos ? pos[bt] : (int)(bt % T));

		for (int i = 0; i < half; i++) {
			float a = p * inv_freq[i];
			float c = cosf(a), s = sign * sinf(a);

			for (int h = 0; h < nh; h++) {
				float *x = qkv + bt * S + (long)h * hd;
				float x0 = x[i], x1 = x[i + half];

				x[i] = x0 * c - x1 * s;
				x[i + half] = x1 * c + x0 * s;
			}
		}
	}
}

void zn_cpu_rope_forward(float *qkv, const float *inv_freq, const int *pos, int B, int T,
			 int NH, int KV, int hd)
{
	rope_apply(qkv, inv_freq, pos, B, T, NH, KV, hd, 1.0f);
}

void zn_cpu_rope_backward(float *dqkv, const float *inv_freq, const int *pos, int B, int T,
			  int NH, int KV, int hd)
{
	rope_apply(dqkv, inv_freq, pos, B, T, NH, KV, hd, -1.0f);
}
