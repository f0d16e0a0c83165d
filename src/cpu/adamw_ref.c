/* The scalar AdamW reference, hyperparameter checks and per-call constants.
 *
 * This file is the definition the SIMD pass in adamw.c is tested against: one element at a
 * time, no OpenMP, dtype conversions through core/dtype.h (not adamw.c's branchless copies),
 * the formula exactly as written in adamw.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/log.h"
#include "cpu/adamw_impl.h"

/* A fused multiply-add where the hardware has one (FP_FAST_FMAF), else multiply then add:
 * the same choice as adamw.c, so both round alike. */
static float fma_ref(float a, float b, float c)
{
#ifdef FP_FAST_FMAF
	return fmaf(a, b, c);
#else
	return a * b + c;
#endif
}

void zn_adamw_params_init(struct zn_adamw_params *p, const struct zn_optimizer_config *opt)
{
	p->lr = opt ? opt->lr : 1e-3f;
	p->beta1 = opt ? opt->beta1 : 0.9f;
	p->beta2 = opt ? opt->beta2 : 0.999f;
	p->eps = opt ? opt->eps : 1e-8f;
	p->weight_decay = opt ? opt->weight_decay : 0.01f;
	p->step = 1;
	p->grad_scale = 1.0f;
	p->thread_count = 0;
	p->worker_ns = NULL;
	p->worker_max = 0;
	p->l2 = opt && opt->type == ZN_OPTIM_ADAM && !opt->adam_w_mode;
}

int zn_adamw_params_check(const struct zn_adamw_params *p)
{
	const char *bad = NULL;

	if (!(p->lr >= 0 && isfinite(p->lr)))
		bad = "lr must be finite and >= 0";
	else if (!(p->beta1 >= 0 && p->beta1 < 1))
		bad = "beta1 must be in [0, 1)";
	else if (!(p->beta2 >= 0 && p->beta2 < 1))
		bad = "beta2 must be in [0, 1)";
	else if (!(p->eps > 0 && isfinite(p->eps)))
		bad = "eps must be finite and > 0";
	else if (!(p->weight_decay >= 0 && isfinite(p->weight_decay)))
		bad = "weight_decay must be finite and >= 0";
	else if (p->step < 1)
		bad = "step must be >= 1 (the first step is 1)";
	else if (!(p->grad_scale > 0 && isfinite(p->grad_scale)))
		bad = "grad_scale must be finite and > 0 (1 = no scaling)";
	else if (p->thread_count < 0)
		bad = "thread_count must be >= 0 (0 = OpenMP default)";
	if (!bad)
		return 0;
	zn_error("%s: %s (lr %g, betas %g %g, eps %g, weight_decay %g, step %lld, "
		 "grad_scale %g)", p->l2 ? "Adam (L2)" : "AdamW", bad, p->lr, p->beta1,
		 p->beta2, p->eps, p->weight_decay, (long long)p->step, p->grad_scale);
	return -EINVAL;
}

void zn_adamw_consts_get(struct zn_adamw_consts *k, const struct zn_adamw_params *p)
{
	double t = (double)p->step;
	double bc1 = 1.0 - pow(p->beta1, t);
	double bc2 = 1.0 - pow(p->beta2, t);

	k->beta1 = p->beta1;
	k->beta2 = p->beta2;
	k->omb1 = (float)(1.0 - p->beta1);
	k->omb2 = (float)(1.0 - p->beta2);
	k->eps = p->eps;
	k->neg_step_size = (float)(-(double)p->lr / bc1);
	k->inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
	k->decay = p->l2 ? 1.0f : (float)(1.0 - (double)p->lr * p->weight_decay);
	k->l2_decay = p->l2 ? p->weight_decay : 0.0f;
	k->l2 = p->l2;
	k->grad_scale = p->grad_scale;
}

int zn_adamw_grad_dtype_check(enum zn_dtype t, const char *what)
{
	if (t == ZN_DTYPE_F32 || t == ZN_DTYPE_BF16 || t == ZN_DTYPE_F16)
		return 0;
	zn_error("AdamW: %s dtype %d is not fp32, bf16 or fp16", what, (int)t);
	return -EINVAL;
}

int zn_adamw_args_check(const struct zn_adamw_params *p, const float *master, const float *m,
			const float *v, const void *grad, enum zn_dtype grad_dtype,
			const void *param_out, enum zn_dtype out_dtype, size_t n)
{
	int rc = zn_adamw_params_check(p);

	if (rc)
		return rc;
	rc = zn_adamw_grad_dtype_check(grad_dtype, "gradient");
	if (!rc && param_out)
		rc = zn_adamw_grad_dtype_check(out_dtype, "parameter output");
	if (rc)
		return rc;
	if (n && (!master || !m || !v || !grad)) {
		zn_error("AdamW: master, m, v and grad must not be NULL (n = %zu)", n);
		return -EINVAL;
	}
	return 0;
}

float zn_adamw_ref_load(const void *grad, enum zn_dtype t, size_t i)
{
	if (t == ZN_DTYPE_F32)
		return ((const float *)grad)[i];
	if (t == ZN_DTYPE_BF16)
		return zn_bf16_to_f32(((const uint16_t *)grad)[i]);
	return zn_f16_to_f32(((const uint16_t *)grad)[i]);
}

void zn_adamw_ref_store(void *out, enum zn_dtype t, size_t i, float x)
{
	if (t == ZN_DTYPE_F32)
		((float *)out)[i] = x;
	else if (t == ZN_DTYPE_BF16)
		((uint16_t *)out)[i] = zn_f32_to_bf16(x);
	else
		((uint16_t *)out)[i] = zn_f32_to_f16(x);
}

int zn_adamw_step_ref(const struct zn_adamw_params *p, float *master, float *m, float *v,
		      const void *grad, enum zn_dtype grad_dtype, void *param_out,
		      enum zn_dtype out_dtype, size_t n)
{
	struct zn_adamw_consts k;
	int rc = zn_adamw_args_check(p, master, m, v, grad, grad_dtype, param_out, out_dtype, n);

	if (rc)
		return rc;
	zn_adamw_consts_get(&k, p);
	for (size_t i = 0; i < n; i++) {
		zn_adamw_ref_element(&k, zn_adamw_ref_load(grad, grad_dtype, i), &master[i], &m[i],
				     &v[i]);
		if (param_out)
			zn_adamw_ref_store(param_out, out_dtype, i, master[i]);
	}
	return 0;
}

void zn_adamw_ref_element(const struct zn_adamw_consts *k, float grad, float *master, float *m,
			  float *v)
{
	float g = grad * k->grad_scale;

	if (k->l2)
		g = fma_ref(k->l2_decay, *master, g);
	*m = fma_ref(k->beta1, *m, k->omb1 * g);
	*v = fma_ref(k->beta2, *v, (k->omb2 * g) * g);
	float denom = fma_ref(sqrtf(*v), k->inv_bc2_sqrt, k->eps);

	*master = fma_ref(k->neg_step_size, *m / denom, *master * k->decay);
}

int zn_grad_sumsq_ref(const void *grad, enum zn_dtype grad_dtype, size_t n, double *sumsq,
		      bool *nonfinite)
{
	double s = 0;
	bool bad = false;
	int rc = zn_adamw_grad_dtype_check(grad_dtype, "gradient");

	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		float g = zn_adamw_ref_load(grad, grad_dtype, i);

		if (!isfinite(g))
			bad = true;
		s += (double)g * g;
	}
	*sumsq = s;
	*nonfinite = bad;
	return 0;
}

unsigned zn_adamw_bytes_per_param(enum zn_dtype grad_dtype, bool has_out, enum zn_dtype out_dtype)
{
	/* grad read + master, m, v each read and written + output written */
	return (unsigned)(zn_dtype_size(grad_dtype) + 3 * 8 +
			  (has_out ? zn_dtype_size(out_dtype) : 0));
}
