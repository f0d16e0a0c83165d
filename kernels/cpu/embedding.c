/* Token embedding without a position table (Llama family), forward and backward (CPU
 * reference). Token ids are not range-checked (the data loader checks them). */
#include "ops.h"

#include "par.h"

void zn_cpu_embedding_forward(float *out, const int *inp, const float *wte, int B, int T,
			      int C)
{
	long BT = (long)B * T;

#pragma omp parallel for schedule(static) if (BT * C > ZN_CPU_PAR_MIN)
	for (long bt = 0; bt < BT; bt++) {
		float *o = out + bt * C;
		const float *w = wte + (long)inp[bt] * C;

		for (int i = 0; i < C; i++)
			o[i] = w[i];
	}
}

/* A sorted, segmented reduction (segment.c): each dwte element summed by one thread in
 * (b, t) order, so the result does not depend on the thread count. */
void zn_cpu_embedding_backward(float *dwte, const float *dout, const int *inp, int B, int T,
			       int C)
{
	zn_cpu_segment_add_rows(dwte, dout, inp, (long)B * T, C);
}
