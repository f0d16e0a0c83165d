/* The Llama family as a struct zn_model_ops (model.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/llama/llama.h"

static int validate(const void *config)
{
	struct zn_llama_config c = *(const struct zn_llama_config *)config;

	if (zn_llama_config_validate(&c))
		return -EINVAL;
	/* the engine reads the configuration as given: inv_freq must already be filled */
	if (memcmp(c.inv_freq, ((const struct zn_llama_config *)config)->inv_freq,
		   sizeof(c.inv_freq))) {
		zn_error("llama model: inv_freq is not filled: call zn_llama_config_validate on "
			 "the configuration first");
		return -EINVAL;
	}
	return 0;
}

static int layer_count(const void *config)
{
	return zn_llama_layer_count(config);
}

static int describe(const void *config, int layer, struct zn_layer_desc *out)
{
	return zn_llama_layer(config, layer, out);
}

static int max_seq(const void *config)
{
	return ((const struct zn_llama_config *)config)->seq;
}

static int vocab(const void *config)
{
	return ((const struct zn_llama_config *)config)->vocab;
}

static int width(const void *config)
{
	return ((const struct zn_llama_config *)config)->hidden;
}

static uint64_t act_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	return zn_llama_act_numel(config, L, B, T);
}

static uint64_t scratch_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	return zn_llama_scratch_numel(config, L, B, T);
}

static uint64_t act_numel_bf16(const void *config, const struct zn_layer_desc *L, int B,
			       int T)
{
	return zn_llama_act_numel_bf16(config, L, B, T);
}

static uint64_t scratch_numel_bf16(const void *config, const struct zn_layer_desc *L, int B,
				   int T)
{
	return zn_llama_scratch_numel_bf16(config, L, B, T);
}

static void init(const void *config, const struct zn_layer_desc *L, uint64_t first,
		 uint64_t count, float *out_h, uint64_t seed)
{
	zn_llama_init_range(config, L, first, count, out_h, seed);
}

static void forward(const struct zn_kernel_table *k, void *stream, const void *config,
		    const struct zn_layer_io *io)
{
	if (io->params16) {
		zn_llama_layer_forward_bf16(k, stream, config, io);
		return;
	}
	zn_llama_layer_forward(k, stream, config, io);
}

static void backward(const struct zn_kernel_table *k, void *stream, const void *config,
		     const struct zn_layer_io *io)
{
	if (io->params16) {
		zn_llama_layer_backward_bf16(k, stream, config, io);
		return;
	}
	zn_llama_layer_backward(k, stream, config, io);
}

static int load_layer(const void *config, const struct zn_layer_desc *L, const char *path,
		      float *params_h)
{
	return zn_llama_load_layer(config, L, path, params_h);
}

static int save(const void *config, const struct zn_layer_desc *layers,
		const float *const *params_h, const char *path, enum zn_dtype dtype)
{
	return zn_llama_save(config, layers, params_h, path, dtype);
}

const struct zn_model_ops zn_llama_ops = {
	.family = "llama",
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
	.decode_scratch_numel = zn_llama_decode_scratch_numel,
	.decode_kv_numel = zn_llama_decode_kv_numel,
	.decode = zn_llama_decode,
	.decode_max_t = zn_llama_decode_max_t,
};

static int aux_floats(const void *config)
{
	return zn_llama_aux_floats(config);
}

/* A mixture of experts: no bf16 compute of its own (the engine hands the layers fp32
 * working copies of bf16 parameters), and its load-balancing loss */
const struct zn_model_ops zn_llama_moe_ops = {
	.family = "llama",
	.validate = validate,
	.layer_count = layer_count,
	.describe = describe,
	.max_seq = max_seq,
	.vocab = vocab,
	.width = width,
	.act_numel = act_numel,
	.scratch_numel = scratch_numel,
	.init = init,
	.forward = forward,
	.backward = backward,
	.load_layer = load_layer,
	.save = save,
	.decode_scratch_numel = zn_llama_decode_scratch_numel,
	.decode_kv_numel = zn_llama_decode_kv_numel,
	.decode = zn_llama_decode,
	.decode_max_t = zn_llama_decode_max_t,
	.aux_floats = aux_floats,
};

struct zn_model zn_llama_model(const struct zn_llama_config *cfg)
{
	return (struct zn_model){ .ops = cfg->experts > 0 ? &zn_llama_moe_ops : &zn_llama_ops,
				  .config = cfg };
}
