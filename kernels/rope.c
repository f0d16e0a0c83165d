/* RoPE inverse frequencies (kernels/rope.h): transformers' fp32 steps, one at a time. */
#include "rope.h"

#include <errno.h>
#include <math.h>

#include "core/log.h"

static int check(int head_dim, const struct zn_rope_params *p)
{
	if (head_dim <= 0 || head_dim % 2 || head_dim > ZN_ROPE_MAX_HEAD_DIM) {
		zn_error("rope: head_dim %d must be even, positive and at most %d (config.json "
			 "head_dim, or hidden_size / num_attention_heads)", head_dim,
			 ZN_ROPE_MAX_HEAD_DIM);
		return -EINVAL;
	}
	if (!(p->theta > 0) || isinf(p->theta)) {
		zn_error("rope: rope_theta %g must be a positive finite number", p->theta);
		return -EINVAL;
	}
	if (p->type == ZN_ROPE_DEFAULT)
		return 0;
	if (p->type != ZN_ROPE_LLAMA3) {
		zn_error("rope: rope_scaling type %d is not supported (only llama3 or none)",
			 p->type);
		return -EINVAL;
	}
	if (!(p->factor > 0) || !(p->low_freq_factor > 0) ||
	    !(p->high_freq_factor > p->low_freq_factor) ||
	    p->original_max_position_embeddings <= 0) {
		zn_error("rope: rope_scaling llama3 needs factor > 0 (%g), low_freq_factor > 0 (%g), "
			 "high_freq_factor > low_freq_factor (%g) and "
			 "original_max_position_embeddings > 0 (%lld)",
			 p->factor, p->low_freq_factor, p->high_freq_factor,
			 (long long)p->original_max_position_embeddings);
		return -EINVAL;
	}
	return 0;
}

/* _compute_llama3_parameters on one frequency: Python scalars meet fp32 tensors as fp32 */
static float llama3(float inv, const struct zn_rope_params *p)
{
	double L = (double)p->original_max_position_embeddings;
	float low_wavelen = (float)(L / p->low_freq_factor);
	float high_wavelen = (float)(L / p->high_freq_factor);
	float factor = (float)p->factor;
	float wavelen = (float)(2.0 * M_PI) / inv;
	float scaled = wavelen > low_wavelen ? inv / factor : inv;
	float smooth = ((float)L / wavelen - (float)p->low_freq_factor) /
		       (float)(p->high_freq_factor - p->low_freq_factor);
	float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;

	if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen))
		return smoothed;
	return scaled;
}

int zn_rope_inv_freq(float *inv_freq, int head_dim, const struct zn_rope_params *p)
{
	int rc = check(head_dim, p);

	if (rc)
		return rc;
	for (int i = 0; i < head_dim / 2; i++) {
		/* 1 / base ** (arange(0, dim, 2).float() / dim) */
		float e = (float)(2 * i) / (float)head_dim;
		float inv = 1.0f / powf((float)p->theta, e);

		inv_freq[i] = p->type == ZN_ROPE_LLAMA3 ? llama3(inv, p) : inv;
	}
	return 0;
}
