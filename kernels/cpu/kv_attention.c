/* KV-cache attention for inference (kernels.h: kv_attention_forward), batch 1.
 *
 * The T new rows of qkv [T,S] (S = (NH + 2 KV) hd, gqa_attention's layout) put their key
 * and value heads into rows pos0 .. pos0+T-1 of kcache and vcache [maxT, KV*hd]; then
 * query t (position p = pos0 + t) of head h attends the cached keys of head g = h/(NH/KV)
 * at positions first .. p (first = p - window + 1 with a window, else 0): scores
 * q.k / sqrt(hd), a softmax with the running maximum (two passes: max, then the weighted
 * sum), out [T, NH*hd]. Each (t, h) row is summed by one thread in key order.
 */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "par.h"

static void kv_row(float *o, const float *q, const float *kc, const float *vc, int first,
		   int last, int kvw, int hd, float scale)
{
	float mx = -INFINITY, sum = 0.0f;

	for (int j = first; j <= last; j++) {
		const float *k = kc + (long)j * kvw;
		float s = 0.0f;

		for (int i = 0; i < hd; i++)
			s += q[i] * k[i];
		s *= scale;
		if (s > mx)
			mx = s;
	}
	memset(o, 0, sizeof(float) * (size_t)hd);
	for (int j = first; j <= last; j++) {
		const float *k = kc + (long)j * kvw, *v = vc + (long)j * kvw;
		float s = 0.0f, w;

		for (int i = 0; i < hd; i++)
			s += q[i] * k[i];
		w = expf(s * scale - mx);
		sum += w;
		for (int i = 0; i < hd; i++)
			o[i] += w * v[i];
	}
	for (int i = 0; i < hd; i++)
		o[i] /= sum;
}

void zn_cpu_kv_attention_forward(float *out, float *kcache, float *vcache, const float *qkv,
				 int pos0, int T, int NH, int KV, int hd, int window)
{
	const long S = (long)(NH + 2 * KV) * hd, kvw = (long)KV * hd;
	const int G = NH / KV;
	const float scale = (float)(1.0 / sqrt((double)hd));
	const long rows = (long)T * NH;

	for (int t = 0; t < T; t++) {
		memcpy(kcache + (long)(pos0 + t) * kvw, qkv + t * S + (long)NH * hd,
		       sizeof(float) * (size_t)kvw);
		memcpy(vcache + (long)(pos0 + t) * kvw, qkv + t * S + (long)(NH + KV) * hd,
		       sizeof(float) * (size_t)kvw);
	}
#pragma omp parallel for schedule(static) if (rows * (pos0 + T) * hd > ZN_CPU_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		int t = (int)(r / NH), h = (int)(r % NH), g = h / G;
		int p = pos0 + t;
		int first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;

		kv_row(out + (long)t * NH * hd + (long)h * hd, qkv + t * S + (long)h * hd,
		       kcache + (long)g * hd, vcache + (long)g * hd, first, p, (int)kvw, hd, scale);
	}
}
