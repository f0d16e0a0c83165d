/* Chunked lm_head + cross-entropy (kernels/lmhead_ce.h). */
#include "lmhead_ce.h"

#include <errno.h>

#include "core/log.h"

size_t zn_lmhead_ce_work_count(int chunk, int Vp)
{
	return 2 * (size_t)chunk * (size_t)Vp + (size_t)chunk;
}

uint64_t zn_lmhead_ce_work_bytes(uint64_t device_budget_bytes)
{
	uint64_t w = device_budget_bytes / 16;

	return w > ZN_LMHEAD_CE_WORK_BYTES_MIN ? w : ZN_LMHEAD_CE_WORK_BYTES_MIN;
}

int zn_lmhead_ce_chunk(int64_t BT, int Vp, uint64_t work_bytes)
{
	const int64_t q = ZN_LMHEAD_CE_ROW_QUANTUM;
	int64_t most, cap, n, rows;

	if (BT < 1 || Vp < 1)
		return 1;
	if (!work_bytes)
		work_bytes = ZN_LMHEAD_CE_WORK_BYTES_MIN;
	/* a row's logits and probs; the chunk's losses (1 float a row) are not counted */
	most = (int64_t)(work_bytes / (2 * sizeof(float) * (uint64_t)Vp));
	cap = INT32_MAX / Vp; /* the kernels' int element count of a [chunk, Vp] buffer */
	if (most > cap)
		most = cap;
	if (most >= BT)
		return (int)BT;
	if (BT <= q)
		return (int)(BT <= cap ? BT : cap);
	most = most / q * q;
	if (most < q)
		most = q <= cap ? q : cap;
	n = (BT + most - 1) / most;
	rows = (BT + n - 1) / n;
	rows = (rows + q - 1) / q * q;
	return (int)(rows < most ? rows : most);
}

static int check(const char *op, int64_t BT, int C, int V, int Vp, int chunk)
{
	if (chunk < 1 || BT < 0 || C < 1 || V < 1 || Vp < V) {
		zn_error("%s: bad sizes (rows %lld, C %d, V %d, Vp %d, chunk %d): chunk, C and V "
			 "must be >= 1 and Vp >= V", op, (long long)BT, C, V, Vp, chunk);
		return -EINVAL;
	}
	if ((int64_t)chunk * Vp > INT32_MAX) {
		zn_error("%s: chunk %d x padded vocab %d is over 2^31 - 1 elements: use a chunk "
			 "of at most %lld rows", op, chunk, Vp, (long long)(INT32_MAX / Vp));
		return -EINVAL;
	}
	return 0;
}

int zn_lmhead_ce_forward(const struct zn_kernel_table *k, void *stream, float *losses,
			 float *work, const float *x, const float *wte, const int *targets,
			 int64_t BT, int C, int V, int Vp, int chunk)
{
	int rc = check("lmhead_ce_forward", BT, C, V, Vp, chunk);
	float *logits = work, *probs = work + (size_t)chunk * Vp;

	if (rc)
		return rc;
	for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
		int n = BT - r0 < chunk ? (int)(BT - r0) : chunk;

		k->matmul_forward(stream, logits, x + r0 * C, wte, NULL, 1, n, C, Vp);
		k->crossentropy_forward(stream, losses + r0, probs, logits, targets + r0, 1, n, V,
					Vp);
	}
	return 0;
}

int zn_lmhead_ce_backward(const struct zn_kernel_table *k, void *stream, float *dx,
			  float *dwte, float *work, const float *x, const float *wte,
			  const int *targets, float dloss_scale, int64_t BT, int C, int V, int Vp,
			  int chunk)
{
	int rc = check("lmhead_ce_backward", BT, C, V, Vp, chunk);
	float *logits = work, *probs = work + (size_t)chunk * Vp;
	float *losses = probs + (size_t)chunk * Vp; /* recomputed, not kept */

	if (rc)
		return rc;
	for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
		int n = BT - r0 < chunk ? (int)(BT - r0) : chunk;

		k->matmul_forward(stream, logits, x + r0 * C, wte, NULL, 1, n, C, Vp);
		k->crossentropy_forward(stream, losses, probs, logits, targets + r0, 1, n, V, Vp);
		/* dlogits overwrite the logits */
		k->crossentropy_backward(stream, logits, probs, targets + r0, dloss_scale, 1, n, V,
					 Vp);
		k->matmul_backward(stream, dx + r0 * C, dwte, NULL, logits, x + r0 * C, wte, 1, n,
				   C, Vp);
	}
	return 0;
}

int zn_lmhead_ce_forward_bf16(const struct zn_kernel_table *k, void *stream, float *losses,
			      float *work, const uint16_t *x, const uint16_t *wte,
			      const int *targets, int64_t BT, int C, int V, int Vp, int chunk)
{
	int rc = check("lmhead_ce_forward_bf16", BT, C, V, Vp, chunk);
	float *logits = work, *probs = work + (size_t)chunk * Vp;

	if (rc)
		return rc;
	for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
		int n = BT - r0 < chunk ? (int)(BT - r0) : chunk;

		k->matmul_forward_bf16(stream, logits, x + r0 * C, wte, NULL, 1, n, C, Vp);
		k->crossentropy_forward(stream, losses + r0, probs, logits, targets + r0, 1, n, V,
					Vp);
	}
	return 0;
}

int zn_lmhead_ce_backward_bf16(const struct zn_kernel_table *k, void *stream, float *dx,
			       float *dwte, float *work, const uint16_t *x, const uint16_t *wte,
			       const int *targets, float dloss_scale, int64_t BT, int C, int V,
			       int Vp, int chunk)
{
	int rc = check("lmhead_ce_backward_bf16", BT, C, V, Vp, chunk);
	float *logits = work, *probs = work + (size_t)chunk * Vp;
	float *losses = probs + (size_t)chunk * Vp; /* recomputed, not kept */
	uint16_t *dlogits16 = (uint16_t *)probs;     /* once probs are consumed */

	if (rc)
		return rc;
	for (int64_t r0 = 0; r0 < BT; r0 += chunk) {
		int n = BT - r0 < chunk ? (int)(BT - r0) : chunk;

		k->matmul_forward_bf16(stream, logits, x + r0 * C, wte, NULL, 1, n, C, Vp);
		k->crossentropy_forward(stream, losses, probs, logits, targets + r0, 1, n, V, Vp);
		k->crossentropy_backward(stream, logits, probs, targets + r0, dloss_scale, 1, n, V,
					 Vp);
		k->cast_f32_to_bf16(stream, dlogits16, logits, (size_t)n * Vp);
		k->matmul_backward_bf16(stream, dx + r0 * C, dwte, NULL, dlogits16, NULL,
					x + r0 * C, wte, 1, n, C, Vp);
	}
	return 0;
}
