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

/* A chunk holds a multiple of this many rows (the tensor-core GEMM tiles' M and K),
 * unless one chunk holds all BT rows. */
#define ZN_LMHEAD_CE_ROW_QUANTUM 128
/* The work budget when none is given: 128 MiB, the 2^24 floats of fp32 logits and as many
 * of probs that a chunk held before budgets existed. */
#define ZN_LMHEAD_CE_WORK_BYTES_MIN ((uint64_t)128 << 20)

/* The chunk's work budget on a device of `device_budget_bytes`: 1/16 of it, at least
 * ZN_LMHEAD_CE_WORK_BYTES_MIN (also for 0, no budget known). Pure. */
uint64_t zn_lmhead_ce_work_bytes(uint64_t device_budget_bytes);

/* The models' chunk for BT rows and a work budget (0: ZN_LMHEAD_CE_WORK_BYTES_MIN): BT
 * when the [BT, Vp] logits and probs fit the budget (one chunk, so dwte is one GEMM over
 * the step's tokens); otherwise the fewest chunks of at most the budget's rows, balanced
 * (ceil(BT / chunks) rounded up to ZN_LMHEAD_CE_ROW_QUANTUM, never over the budget's
 * rows rounded down to it), at least one quantum (a budget under 128 rows is exceeded
 * rather than run in slivers), never over INT32_MAX / Vp rows. 1 when BT < 1 or Vp < 1.
 * Pure: the plan, the estimate and the layers get the same answer. */
int zn_lmhead_ce_chunk(int64_t BT, int Vp, uint64_t work_bytes);

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
