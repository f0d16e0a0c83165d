/* Fused softmax + cross-entropy over padded logits [B,T,Vp] (CPU reference).
 *
 * Only the first V columns are real; probs and dlogits are written 0 in the padding.
 * The loss is log(sum exp(l - max)) - (l[target] - max), which stays finite where the
 * target's probability underflows. A negative target (ZN_TARGET_IGNORE: a token not
 * predicted, Hugging Face's -100 label) gives loss 0 and a zero gradient row. A target
 * >= V gives a NaN loss and zero
 * gradient row, and one error line per call naming the first bad position: the data has a
 * token id the vocab does not hold.
 */
#include "ops.h"

#include <float.h>
#include <math.h>

#include "core/log.h"
#include "par.h"

static void report_bad_target(const int *targets, long BT, int T, int V)
{
	for (long bt = 0; bt < BT; bt++) {
		if (targets[bt] >= V) {
			zn_error("crossentropy: target %d at (b %ld, t %ld) is outside the vocab "
				 "[0, %d): check the data's vocab size against the model's",
				 targets[bt], bt / T, bt % T, V);
			return;
		}
	}
}

void zn_cpu_crossentropy_forward(float *losses, float *probs, const float *logits,
				 const int *targets, int B, int T, int V, int Vp)
{
	long BT = (long)B * T;
	int bad = 0;

#pragma omp parallel for schedule(static) reduction(| : bad) if (BT * Vp > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *l = logits + bt * Vp;
		float *p = probs + bt * Vp;
		float maxval = -FLT_MAX, sum = 0.0f;
		int tg = targets[bt];

		for (int i = 0; i < V; i++)
			if (l[i] > maxval)
				maxval = l[i];
		for (int i = 0; i < V; i++) {
			p[i] = expf(l[i] - maxval);
			sum += p[i];
		}
		float inv = 1.0f / sum;

		for (int i = 0; i < V; i++)
			p[i] *= inv;
		for (int i = V; i < Vp; i++)
			p[i] = 0.0f;
		if (tg < 0) {
			losses[bt] = 0.0f; /* not predicted */
			continue;
		}
		if (tg >= V) {
			losses[bt] = NAN;
			bad = 1;
			continue;
		}
		losses[bt] = logf(sum) - (l[tg] - maxval);
	}
	if (bad)
		report_bad_target(targets, BT, T, V);
}

void zn_cpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets,
				  float dloss_scale, int B, int T, int V, int Vp)
{
	long BT = (long)B * T;
	int bad = 0;

#pragma omp parallel for schedule(static) reduction(| : bad) if (BT * Vp > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		const float *p = probs + bt * Vp;
		float *d = dlogits + bt * Vp;
		int tg = targets[bt];

		if (tg < 0 || tg >= V) {
			for (int i = 0; i < Vp; i++)
				d[i] = 0.0f;
			bad |= tg >= V;
			continue;
		}
		for (int i = 0; i < V; i++)
			d[i] = (p[i] - (i == tg ? 1.0f : 0.0f)) * dloss_scale;
		for (int i = V; i < Vp; i++)
			d[i] = 0.0f;
	}
	if (bad)
		report_bad_target(targets, BT, T, V);
}
