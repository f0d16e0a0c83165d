/* Optimizer ops on the CPU: AdamW (fp32 or compact moments) and the gradient squared norm are the CPU tier's own
 * (src/cpu/adamw.h), so the host device computes exactly what the CPU optimizer does. */
#include "ops.h"

#include "core/log.h"
#include "cpu/adamw.h"
#include "kernels.h"

void zn_cpu_adamw(float *master, float *m, float *v, uint16_t *out_bf16, const float *grad,
		  const struct zn_kernel_adamw *hp, size_t N)
{
	struct zn_adamw_params p = {
		.lr = hp->lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
		.weight_decay = hp->weight_decay, .step = hp->step, .grad_scale = hp->grad_scale,
		.thread_count = 0, /* the OpenMP default, as the CPU tier runs it */
		.l2 = hp->l2 != 0,
	};

	/* a bad hyperparameter is logged by zn_adamw_step, which then touches nothing */
	zn_adamw_step(&p, master, m, v, grad, ZN_DTYPE_F32, out_bf16, ZN_DTYPE_BF16, N);
}

void zn_cpu_adamw_states(float *master, const struct zn_kernel_moments *mo, uint16_t *out_bf16,
			 const float *grad, const struct zn_kernel_adamw *hp,
			 const struct zn_kernel_span *spans, int span_count, size_t N)
{
	struct zn_adamw_params p = {
		.lr = hp->lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
		.weight_decay = 0.0f, .step = hp->step, .grad_scale = hp->grad_scale,
		.thread_count = 0, .l2 = hp->l2 != 0,
	};
	struct zn_adamw_moments m = {
		.states = (enum zn_optim_states)mo->states, .m = mo->m, .v = mo->v,
		.m_absmax = mo->m_absmax, .v_absmax = mo->v_absmax,
	};
	struct zn_adamw_span sp[ZN_KERNEL_ADAMW_SPANS];
	int n = span_count < ZN_KERNEL_ADAMW_SPANS ? span_count : ZN_KERNEL_ADAMW_SPANS;

	for (int s = 0; s < n; s++)
		sp[s] = (struct zn_adamw_span){ (size_t)spans[s].first, (size_t)spans[s].count,
						spans[s].weight_decay };
	/* bad arguments are logged by zn_adamw_step_states, which then touches nothing */
	zn_adamw_step_states(&p, master, &m, grad, ZN_DTYPE_F32, out_bf16, ZN_DTYPE_BF16, N, sp,
			     n);
}

void zn_cpu_grad_sumsq(double *sumsq, int32_t *nonfinite, const float *grad, size_t N)
{
	bool bad = false;

	if (zn_grad_sumsq(grad, ZN_DTYPE_F32, N, 0, sumsq, &bad)) {
		/* only -ENOMEM (the dtype is fixed): report it as a norm nobody can use */
		zn_error("grad_sumsq: zn_grad_sumsq over %zu elements: out of memory", N);
		*sumsq = 0.0 / 0.0;
		bad = true;
	}
	*nonfinite = bad;
}
