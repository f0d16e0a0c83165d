/* AdamW on the CPU: one pass over a shard, OpenMP threads with SIMD bodies.
 *
 * The update (PyTorch's torch.optim.AdamW, decoupled weight decay, bias-corrected), with
 * t = p->step (1 for the first step) and every scalar below computed once per call:
 *
 *   per call, in double, then rounded to float:
 *     step_size    = lr / (1 - beta1^t)
 *     inv_bc2_sqrt = 1 / sqrt(1 - beta2^t)
 *     decay        = 1 - lr * weight_decay
 *     omb1 = 1 - beta1,  omb2 = 1 - beta2
 *   per element, in float, each operation rounded once (fma = fused multiply-add):
 *     g      = grad * grad_scale
 *     g      = fma(weight_decay, master, g)                   // L2 mode only (see below)
 *     m      = fma(beta1, m, omb1 * g)
 *     v      = fma(beta2, v, (omb2 * g) * g)
 *     denom  = fma(sqrt(v), inv_bc2_sqrt, eps)               // sqrt(v_hat) + eps
 *     master = fma(-step_size, m / denom, master * decay)   // master - lr*(m_hat/denom + wd*master)
 *     out    = master rounded to out_dtype (bf16/fp16: round to nearest, ties to even)
 *
 * which is master -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * master) with
 * m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t).
 *
 * With l2 set (L2-regularised Adam: torch.optim.Adam, DeepSpeed's Adam with adam_w_mode
 * false), the weight decay goes into the gradient before the moments, g += weight_decay *
 * master, and decay is 1 (master is not multiplied): master -= lr * m_hat / (sqrt(v_hat) +
 * eps) with the moments of grad * grad_scale + weight_decay * master. The fused multiply-adds are
 * written out (not left to the compiler's contraction), so the SIMD pass and the scalar
 * reference compute the same roundings; a build without hardware FMA uses a*b + c in both.
 * grad_scale multiplies the gradient in the same pass (1/loss_scale for unscaling, times the
 * clipping coefficient): no second pass over memory. The result does not depend on the
 * thread count: work is split into fixed chunks.
 *
 * Memory traffic per parameter (fp32 grad, bf16 out): grad 4 + master 4+4 + m 4+4 + v 4+4
 * + out 2 = 30 bytes; bf16 grad: 28; no out: 28 (26 with bf16 grad).
 *
 *     struct zn_adamw_params p;
 *     zn_adamw_params_init(&p, &cfg.optimizer);
 *     p.step = step;                             // 1, 2, ...
 *     p.grad_scale = 1.0f / loss_scale;
 *     rc = zn_adamw_step(&p, master_h, m_h, v_h, grad_h, ZN_DTYPE_BF16,
 *                        param_h, ZN_DTYPE_BF16, n);
 *
 * Threading: zn_adamw_step runs an OpenMP team of p->thread_count threads (0 = the OpenMP
 * default; 1 below 64 Ki elements); call it from one thread at a time per shard. Buffers
 * must not overlap. Returns 0, or -EINVAL for bad hyperparameters or arguments (logged,
 * naming the field), before touching any buffer.
 */
#ifndef ZN_CPU_ADAMW_H
#define ZN_CPU_ADAMW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

struct zn_adamw_params {
	float lr;
	float beta1;        /* [0, 1) */
	float beta2;        /* [0, 1) */
	float eps;          /* > 0 */
	float weight_decay; /* >= 0; decoupled (AdamW), or into the gradient when l2 */
	int64_t step;       /* >= 1: the step being taken, for bias correction */
	float grad_scale;   /* > 0 and finite; 1 = none */
	int thread_count;   /* 0 = OpenMP default */
	bool l2;            /* false: AdamW; true: L2-regularised Adam (g += weight_decay * p) */
	/* Tracing (NULL: off): worker w < worker_max widens [worker_ns[2w], worker_ns[2w+1]]
	 * to cover its part of this call (CLOCK_MONOTONIC ns; start at UINT64_MAX, 0). */
	uint64_t *worker_ns;
	int worker_max;
};

/* lr, betas, eps, weight decay from opt (or PyTorch's defaults when opt is NULL:
 * 1e-3, 0.9, 0.999, 1e-8, 0.01); l2 when opt is Adam with adam_w_mode false; step 1;
 * grad_scale 1; thread_count 0. */
void zn_adamw_params_init(struct zn_adamw_params *p, const struct zn_optimizer_config *opt);

/* Checks p (logs the first bad field). Returns 0 or -EINVAL. */
int zn_adamw_params_check(const struct zn_adamw_params *p);

/* One AdamW step over n elements: reads grad (grad_dtype: fp32, bf16 or fp16), master, m,
 * v (fp32); writes master, m, v and, unless param_out is NULL, the parameter copy in
 * out_dtype (fp32, bf16 or fp16), all in one pass. */
int zn_adamw_step(const struct zn_adamw_params *p, float *master, float *m, float *v,
		  const void *grad, enum zn_dtype grad_dtype, void *param_out,
		  enum zn_dtype out_dtype, size_t n);

/* The scalar reference: same arguments, same formula, one element at a time, no OpenMP.
 * Tests and `zinc bench adam` check zn_adamw_step against it. */
int zn_adamw_step_ref(const struct zn_adamw_params *p, float *master, float *m, float *v,
		      const void *grad, enum zn_dtype grad_dtype, void *param_out,
		      enum zn_dtype out_dtype, size_t n);

/* ---- compact moments (zinc.optimizer_states; docs/cpu.md, "Compact optimizer state") ----
 *
 * m and v stored as fp32, bf16 or int8 (enum zn_optim_states), the master always fp32.
 * zn_adamw_step_states runs the update above on each element with the moments widened to
 * float, then stores them back:
 *   bf16: widened exactly, stored rounded to nearest even (as the parameter copy);
 *   int8: per block of ZN_Q8_BLOCK elements (cpu/q8.h): every element widened (map entry
 *         times the block's absmax), updated with the fresh fp32 m and v, then the block
 *         quantized again from those fresh values (new absmax, nearest code, m's sign
 *         kept). bitsandbytes' rule for an element whose gradient is inf or NaN: its m
 *         and v become 0 and its master (and copy) stay as they were. Elements past n in
 *         n's last block are set to 0 (the shard's padding).
 * One pass: an int8 block is read, updated and written while it is in cache.
 *
 * Byte layout of a buffer holding the moments of n elements (n a multiple of ZN_Q8_BLOCK
 * for int8): fp32 n floats; bf16 n uint16; int8 n codes then zn_q8_blocks(n) floats of
 * absmax (zn_adamw_state_bytes). All-zero bytes are the zero state in every setting.
 */
struct zn_adamw_moments {
	enum zn_optim_states states;
	void *m, *v;                /* element 0: fp32 float, bf16 uint16_t, int8 codes */
	float *m_absmax, *v_absmax; /* int8: block 0's scale (element 0 starts a block) */
};

/* Weight decay of elements [first, first + count) of a call (each tensor's own). */
struct zn_adamw_span {
	size_t first, count;
	float weight_decay;
};

/* Bytes of the m (or v) buffer of n elements: 4n, 2n, or n + 4 x blocks. */
uint64_t zn_adamw_state_bytes(enum zn_optim_states s, uint64_t n);
/* The moments of a buffer pair laid out as above for n elements (int8: n a multiple of
 * ZN_Q8_BLOCK, the absmax right after the codes). */
void zn_adamw_moments_of(struct zn_adamw_moments *mo, enum zn_optim_states s, void *m_buf,
			 void *v_buf, uint64_t n);
/* The moments from element i on (int8: i a multiple of ZN_Q8_BLOCK). */
void zn_adamw_moments_at(struct zn_adamw_moments *out, const struct zn_adamw_moments *mo,
			 uint64_t i);
const char *zn_optim_states_name(enum zn_optim_states s); /* "fp32", "bf16", "int8" */
/* The setting named s ("fp32", "bf16", "int8"): 0, or -1 for any other name. */
int zn_optim_states_parse(const char *s, enum zn_optim_states *out);

/* One AdamW step over n elements with m and v as mo->states: p->weight_decay is ignored,
 * spans[0 .. span_count) give each element's (they must tile [0, n) in order). fp32 is
 * zn_adamw_step once per span. Same threading, checks and returns as zn_adamw_step. */
int zn_adamw_step_states(const struct zn_adamw_params *p, float *master,
			 const struct zn_adamw_moments *mo, const void *grad,
			 enum zn_dtype grad_dtype, void *param_out, enum zn_dtype out_dtype,
			 size_t n, const struct zn_adamw_span *spans, int span_count);
/* Its scalar reference (the moments through core/dtype.h and cpu/q8.h). */
int zn_adamw_step_states_ref(const struct zn_adamw_params *p, float *master,
			     const struct zn_adamw_moments *mo, const void *grad,
			     enum zn_dtype grad_dtype, void *param_out, enum zn_dtype out_dtype,
			     size_t n, const struct zn_adamw_span *spans, int span_count);

/* One pass over a gradient: *sumsq = sum of grad[i]^2 (accumulated in double, over fixed
 * chunks combined in order, so the same for any thread count) and *nonfinite = whether any
 * element is inf or NaN (then *sumsq is not meaningful). thread_count 0 = OpenMP default.
 * Returns 0, -EINVAL (bad dtype), or -ENOMEM. */
int zn_grad_sumsq(const void *grad, enum zn_dtype grad_dtype, size_t n, int thread_count,
		  double *sumsq, bool *nonfinite);

/* Scalar reference of zn_grad_sumsq (sequential double sum). */
int zn_grad_sumsq_ref(const void *grad, enum zn_dtype grad_dtype, size_t n, double *sumsq,
		      bool *nonfinite);

/* Bytes of memory traffic per element that an AdamW step must move (see above). */
unsigned zn_adamw_bytes_per_param(enum zn_dtype grad_dtype, bool has_out, enum zn_dtype out_dtype);
/* The same with m and v stored as s: 2 x (m + v) bytes each (int8: 1 + 4/256). */
double zn_adamw_states_bytes_per_param(enum zn_optim_states s, enum zn_dtype grad_dtype,
				       bool has_out, enum zn_dtype out_dtype);

#endif
