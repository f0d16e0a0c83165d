/* RoPE's inverse frequencies, as Hugging Face computes them for Llama-family models
 * (transformers' modeling_rope_utils: the default parameters and rope_scaling type
 * "llama3"). The kernels' rope_forward/rope_backward (kernels.h) take the result.
 *
 * Default: inv_freq[i] = 1 / theta^((2i) / hd) for i < hd/2.
 * llama3 (Llama 3.1+ configs), with L = original_max_position_embeddings:
 *   wavelen = 2 pi / inv_freq;
 *   wavelen > L / low_freq_factor:  inv_freq / factor           (low frequencies)
 *   wavelen < L / high_freq_factor: inv_freq                    (high frequencies)
 *   otherwise, with s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor):
 *                                   (1 - s) inv_freq / factor + s inv_freq
 * Computed step by step in fp32, as transformers does on fp32 tensors, so a checkpoint
 * sees the frequencies it was trained with (the same bits where powf is correctly rounded).
 *
 * Usage:
 *     struct zn_rope_params p = { .theta = 500000.0, .type = ZN_ROPE_LLAMA3, .factor = 32,
 *                                 .low_freq_factor = 1, .high_freq_factor = 4,
 *                                 .original_max_position_embeddings = 8192 };
 *     float inv_freq[64];
 *     if (zn_rope_inv_freq(inv_freq, 128, &p)) ... refused (logged) ...
 */
#ifndef ZN_KERNELS_ROPE_H
#define ZN_KERNELS_ROPE_H

#include <stdint.h>

/* the largest head_dim the rope ops take (their frequencies travel as kernel arguments) */
#define ZN_ROPE_MAX_HEAD_DIM 512

enum zn_rope_type {
	ZN_ROPE_DEFAULT = 0, /* rope_scaling null or absent */
	ZN_ROPE_LLAMA3 = 1,  /* rope_scaling {"rope_type": "llama3", ...} */
};

struct zn_rope_params {
	double theta; /* rope_theta, > 0 */
	int type;     /* enum zn_rope_type */
	/* llama3 only */
	double factor;           /* > 0 */
	double low_freq_factor;  /* > 0 */
	double high_freq_factor; /* > low_freq_factor */
	int64_t original_max_position_embeddings; /* > 0 */
};

/* Fills inv_freq[0 .. head_dim/2). Returns 0, or -EINVAL (logged, naming the bad value)
 * when head_dim is not even, positive and <= ZN_ROPE_MAX_HEAD_DIM, or a parameter is out
 * of range. */
int zn_rope_inv_freq(float *inv_freq, int head_dim, const struct zn_rope_params *p);

#endif
