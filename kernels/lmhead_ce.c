/* Chunked lm_head + cross-entropy (kernels/lmhead_ce.h). */
#include "lmhead_ce.h"

#include <errno.h>

#include "core/log.h"

size_t zn_lmhead_ce_work_count(int chunk, int Vp)
{
	return 2 * (size_t)chunk * (size_t)Vp + (size_t)chunk;
}

int zn_lmhead_ce_chunk(int64_t BT, int Vp)
{
	int chunk = Vp > 0 ? (1 << 24) / Vp : 1;

	if (chunk < 1)
		chunk = 1;
	if ((int64_t)chunk > BT)
		chunk = BT > 0 ? (int)BT : 1;
	return chunk;
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
