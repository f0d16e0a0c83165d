/* Internal to src/cpu: the per-call AdamW scalars and argument checks shared by the SIMD
 * pass (adamw.c) and the scalar reference (adamw_ref.c), so both round them identically. */
#ifndef ZN_CPU_ADAMW_IMPL_H
#define ZN_CPU_ADAMW_IMPL_H

#include "cpu/adamw.h"

/* No output copy (param_out == NULL). */
#define ZN_ADAMW_OUT_NONE (-1)

struct zn_adamw_consts {
	float beta1, beta2, omb1, omb2, eps;
	float neg_step_size; /* -lr / (1 - beta1^t) */
	float inv_bc2_sqrt;  /* 1 / sqrt(1 - beta2^t) */
	float decay;         /* 1 - lr * weight_decay (AdamW); 1 (L2) */
	float l2_decay;      /* weight_decay (L2), added to the gradient times master; 0 (AdamW) */
	bool l2;
	float grad_scale;
};

/* Fills k from p (see adamw.h for the formulas). p must have passed the check. */
void zn_adamw_consts_get(struct zn_adamw_consts *k, const struct zn_adamw_params *p);

/* Checks p and the buffers of a step call. Returns 0 or -EINVAL (logged). */
int zn_adamw_args_check(const struct zn_adamw_params *p, const float *master, const float *m,
			const float *v, const void *grad, enum zn_dtype grad_dtype,
			const void *param_out, enum zn_dtype out_dtype, size_t n);

/* Checks the arguments of a zn_adamw_step_states call (the moments, each span's weight
 * decay, the spans tiling [0, n)). Returns 0 or -EINVAL (logged). */
int zn_adamw_states_check(const struct zn_adamw_params *p, const float *master,
			  const struct zn_adamw_moments *mo, const void *grad,
			  enum zn_dtype grad_dtype, const void *param_out, enum zn_dtype out_dtype,
			  size_t n, const struct zn_adamw_span *spans, int span_count);

/* The int8 block pass (adamw_q8.c) of zn_adamw_step_states; arguments checked. */
/* fn(a, c) for every chunk c in [0, chunks) of a call over n elements, on p's threads (one
 * below 65536 elements) in a static schedule, so results never depend on the timing; with
 * p->worker_ns each worker's first start and last end are recorded (--trace). */
void zn_adamw_run_chunks(const struct zn_adamw_params *p, size_t n, size_t chunks,
			 void (*fn)(const void *a, size_t c), const void *a);
int zn_adamw_q8_step(const struct zn_adamw_params *p, float *master,
		     const struct zn_adamw_moments *mo, const void *grad, enum zn_dtype grad_dtype,
		     void *param_out, enum zn_dtype out_dtype, size_t n,
		     const struct zn_adamw_span *spans, int span_count);

/* The scalar reference's pieces (adamw_ref.c): one element's update with the gradient
 * element grad (before grad_scale), and the dtype conversions through core/dtype.h. */
void zn_adamw_ref_element(const struct zn_adamw_consts *k, float grad, float *master, float *m,
			  float *v);
float zn_adamw_ref_load(const void *grad, enum zn_dtype t, size_t i);
void zn_adamw_ref_store(void *out, enum zn_dtype t, size_t i, float x);

/* Checks a gradient dtype. Returns 0 or -EINVAL (logged). */
int zn_adamw_grad_dtype_check(enum zn_dtype t, const char *what);

#endif
