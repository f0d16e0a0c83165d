/* Token + position embedding, forward and backward (CPU reference).
 *
 * Token ids are not range-checked here (the op is not told the vocab size): the data loader
 * checks every id against the vocab before a batch reaches the model.
 */
#include "ops.h"

#include "par.h"

void zn_cpu_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
			    int B, int T, int C)
{
	zn_cpu_encoder_pos_forward(out, inp, NULL, wte, wpe, B, T, C);
}

/* pos [B,T] (packed documents: each token's position in its document) or NULL: t */
void zn_cpu_encoder_pos_forward(float *out, const int *inp, const int *pos, const float *wte,
				const float *wpe, int B, int T, int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		float *o = out + bt * C;
		const float *wt = wte + (long)inp[bt] * C;
		const float *wp = wpe + (pos ? (long)pos[bt] : bt % T) * C;

		for (int i = 0; i < C; i++)
			o[i] = wt[i] + wp[i];
	}
}

/* dwte (and dwpe with positions) as a sorted, segmented reduction (segment.c): each
 * element summed by one thread in (b, t) order; dwpe without positions: threads split
 * the positions t, each element summed over b in order. Independent of the thread count. */
void zn_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
			     int B, int T, int C)
{
	zn_cpu_encoder_pos_backward(dwte, dwpe, dout, inp, NULL, B, T, C);
}

void zn_cpu_encoder_pos_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
				 const int *pos, int B, int T, int C)
{
	long BT = (long)B * T;

	zn_cpu_segment_add_rows(dwte, dout, inp, BT, C);
	if (pos) {
		zn_cpu_segment_add_rows(dwpe, dout, pos, BT, C);
		return;
	}
#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (int t = 0; t < T; t++) {
		float *wp = dwpe + (long)t * C;

		for (int b = 0; b < B; b++) {
			const float *d = dout + ((long)b * T + t) * C;

			for (int i = 0; i < C; i++)
				wp[i] += d[i];
		}
	}
}
