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

/* Threads split the channels, never the positions: each dwte/dwpe element is summed by one
 * thread in (b, t) order, so the result does not depend on the thread count. */
void zn_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
			     int B, int T, int C)
{
	zn_cpu_encoder_pos_backward(dwte, dwpe, dout, inp, NULL, B, T, C);
}

void zn_cpu_encoder_pos_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
				 const int *pos, int B, int T, int C)
{
	long BT = (long)B * T;
	int nchunk = (C + ZN_CPU_CHUNK - 1) / ZN_CPU_CHUNK;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (int k = 0; k < nchunk; k++) {
		int c0 = k * ZN_CPU_CHUNK;
		int c1 = c0 + ZN_CPU_CHUNK < C ? c0 + ZN_CPU_CHUNK : C;

		for (long bt = 0; bt < BT; bt++) {
			const float *d = dout + bt * C;
			float *wt = dwte + (long)inp[bt] * C;
			float *wp = dwpe + (pos ? (long)pos[bt] : bt % T) * C;

			for (int i = c0; i < c1; i++) {
				wt[i] += d[i];
				wp[i] += d[i];
			}
		}
	}
}
