/* Chunked lm_head + cross-entropy: the final projection logits = x @ wte^T and the fused
 * softmax cross-entropy over `chunk` rows at a time, so the [B*T, Vp] logits (and probs)
 * never exist at once: only 2 * chunk * Vp + chunk floats of `work`. Built from a kernel
 * table's matmul and crossentropy ops, so one code serves the CPU and CUDA tables (each op
 * enqueued on `stream`; work, x, wte, targets, losses, dx, dwte in that table's memory).
 *
 * x [BT, C] (BT = B*T rows), wte [Vp, C] (rows V..Vp-1 zero), targets [BT] in [0, V).
 * Forward writes losses [BT] = -log softmax(x wte^T)[target], as crossentropy_forward.
 * Backward recomputes each chunk's logits and probs, dlogits = (probs - onehot) *
 * dloss_scale, then dx += dlogits @ wte and dwte += dlogits^T @ x, chunk after chunk in row
 * order (a fixed order: deterministic; dwte sums in a different order from the unchunked
 * path, so it agrees to fp32 rounding). Row offsets are 64-bit; each chunk's operands must
 * fit the kernels' int sizes: chunk * Vp <= INT32_MAX. Returns 0, or -EINVAL with an error
 * naming the bad size (nothing is run).
 */
#ifndef ZN_KERNELS_LMHEAD_CE_H
#define ZN_KERNELS_LMHEAD_CE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* floats of work the two calls need for chunks of `chunk` rows */
size_t zn_lmhead_ce_work_count(int chunk, int Vp);

/* The models' chunk for BT rows: logits of at most 2^24 floats per chunk (64 MiB of fp32
 * logits and as much of probs), at least 1 row, at most BT (1 when BT is 0). */
int zn_lmhead_ce_chunk(int64_t BT, int Vp);

int zn_lmhead_ce_forward(const struct zn_kernel_table *k, void *stream, float *losses,
			 float *work, const float *x, const float *wte, const int *targets,
			 int64_t BT, int C, int V, int Vp, int chunk);
int zn_lmhead_ce_backward(const struct zn_kernel_table *k, void *stream, float *dx,
			  float *dwte, float *work, const float *x, const float *wte,
			  const int *targets, float dloss_scale, int64_t BT, int C, int V, int Vp,
			  int chunk);

/* bf16 compute (docs/kernels.md): x and wte bf16, the GEMMs through matmul_forward_bf16 /
 * matmul_backward_bf16; logits, the softmax, losses, dx and dwte fp32. The backward rounds
 * each chunk's dlogits to bf16 (into the probs half of work, once consumed) for its two
 * GEMMs. Same work count and checks as above. */
int zn_lmhead_ce_forward_bf16(const struct zn_kernel_table *k, void *stream, float *losses,
			      float *work, const uint16_t *x, const uint16_t *wte,
			      const int *targets, int64_t BT, int C, int V, int Vp, int chunk);
int zn_lmhead_ce_backward_bf16(const struct zn_kernel_table *k, void *stream, float *dx,
			       float *dwte, float *work, const uint16_t *x, const uint16_t *wte,
			       const int *targets, float dloss_scale, int64_t BT, int C, int V,
			       int Vp, int chunk);

#endif
