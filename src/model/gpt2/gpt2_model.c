/* GPT-2 as a struct zn_model_ops (model.h): the engine's view of gpt2_layers.c,
 * gpt2_layer.c and gpt2_io.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt2/gpt2.h"
#include "model/safetensors.h"

static int validate(const void *config)
{
	struct zn_gpt2_config c = *(const struct zn_gpt2_config *)config;

	if (zn_gpt2_config_validate(&c))
		return -EINVAL;
	/* the engine reads the configuration as given: it must already be complete */
	if (memcmp(&c, config, sizeof(c))) {
		zn_error("GPT-2 model: padded_vocab %d is not the validated value %d: call "
			 "zn_gpt2_config_validate on the configuration first",
			 ((const struct zn_gpt2_config *)config)->padded_vocab, c.padded_vocab);
		return -EINVAL;
	}
	return 0;
}

static int layer_count(const void *config)
{
	return zn_gpt2_layer_count(config);
}

static int describe(const void *config, int layer, struct zn_layer_desc *out)
{
	return zn_gpt2_layer(config, layer, out);
}

static int max_seq(const void *config)
{
	return ((const struct zn_gpt2_config *)config)->seq;
}

static int vocab(const void *config)
{
	return ((const struct zn_gpt2_config *)config)->vocab;
}

static int width(const void *config)
{
	return ((const struct zn_gpt2_config *)config)->d_model;
}

static uint64_t act_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	return zn_gpt2_act_numel(config, L, B, T);
}

static uint64_t scratch_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	return zn_gpt2_scratch_numel(config, L, B, T);
}

static uint64_t act_numel_bf16(const void *config, const struct zn_layer_desc *L, int B,
			       int T)
{
	return zn_gpt2_act_numel_bf16(config, L, B, T);
}

static uint64_t scratch_numel_bf16(const void *config, const struct zn_layer_desc *L, int B,
				   int T)
{
	return zn_gpt2_scratch_numel_bf16(config, L, B, T);
}

static void init(const void *config, const struct zn_layer_desc *L, uint64_t first,
		 uint64_t count, float *out_h, uint64_t seed)
{
	zn_gpt2_init_range(config, L, first, count, out_h, seed);
}

static void forward(const struct zn_kernel_table *k, void *stream, const void *config,
		    const struct zn_layer_io *io)
{
	if (io->params16) {
		zn_gpt2_layer_forward_bf16(k, stream, config, io->L, io->params16,
					   io->tied_params16, io->acts, io->scratch, io->x_in,
					   io->x_out, io->tokens, io->pos, io->targets,
					   io->losses, io->B, io->T);
		return;
	}
	zn_gpt2_layer_forward_pos(k, stream, config, io->L, io->params, io->tied_params,
				  io->acts, io->scratch, io->x_in, io->x_out, io->tokens, io->pos,
				  io->targets, io->losses, io->B, io->T);
}

static void backward(const struct zn_kernel_table *k, void *stream, const void *config,
		     const struct zn_layer_io *io)
{
	if (io->params16) {
		zn_gpt2_layer_backward_bf16(k, stream, config, io->L, io->params16,
					    io->tied_params16, io->grads, io->tied_grads, io->acts,
					    io->scratch, io->x_in, io->dx_out, io->dx_in,
					    io->tokens, io->pos, io->targets, io->dloss_scale,
					    io->B, io->T);
		return;
	}
	zn_gpt2_layer_backward_pos(k, stream, config, io->L, io->params, io->tied_params,
				   io->grads, io->tied_grads, io->acts, io->scratch, io->x_in,
				   io->dx_out, io->dx_in, io->tokens, io->pos, io->targets,
				   io->dloss_scale, io->B, io->T);
}

static int load_layer(const void *config, const struct zn_layer_desc *L, const char *path,
		      float *params_h)
{
	struct zn_st_file *f = NULL;
	int rc = zn_st_open(&f, path);

	if (!rc)
		rc = zn_gpt2_load_layer_safetensors(f, config, L, params_h);
	zn_st_close(f);
	return rc;
}

static int save(const void *config, const struct zn_layer_desc *layers,
		const float *const *params_h, const char *path, enum zn_dtype dtype)
{
	return zn_gpt2_save_safetensors(config, layers, params_h, path, dtype);
}

const struct zn_model_ops zn_gpt2_ops = {
	.family = "gpt2",
	.validate = validate,
	.layer_count = layer_count,
	.describe = describe,
	.max_seq = max_seq,
	.vocab = vocab,
	.width = width,
	.act_numel = act_numel,
	.scratch_numel = scratch_numel,
	.act_numel_bf16 = act_numel_bf16,
	.scratch_numel_bf16 = scratch_numel_bf16,
	.init = init,
	.forward = forward,
	.backward = backward,
	.load_layer = load_layer,
	.save = save,
	.decode_scratch_numel = zn_gpt2_decode_scratch_numel,
	.decode_kv_numel = zn_gpt2_decode_kv_numel,
	.decode = zn_gpt2_decode,
	.decode_max_t = zn_gpt2_decode_max_t,
};

struct zn_model zn_gpt2_model(const struct zn_gpt2_config *cfg)
{
	return (struct zn_model){ .ops = &zn_gpt2_ops, .config = cfg };
}
