/* The tensors of a Hugging Face checkpoint for a zn_hf_config, and their count. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/hf_config.h"

struct emit {
	struct zn_hf_tensor_spec *out; /* NULL: count only */
	int n;
	int layer;
};

static void __attribute__((format(printf, 5, 6)))
add(struct emit *e, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
{
	struct zn_hf_tensor_spec *t;
	va_list ap;

	if (e->out) {
		t = &e->out[e->n];
		va_start(ap, fmt);
		vsnprintf(t->name, sizeof(t->name), fmt, ap);
		va_end(ap);
		t->ndim = ndim;
		t->shape[0] = d0;
		t->shape[1] = ndim == 2 ? d1 : 0;
		t->layer = e->layer;
	}
	e->n++;
}

static void gpt2(const struct zn_hf_config *c, struct emit *e)
{
	const int64_t C = c->hidden_size, I = c->intermediate_size;

	add(e, 2, c->vocab_size, C, "transformer.wte.weight");
	add(e, 2, c->max_position_embeddings, C, "transformer.wpe.weight");
	for (int64_t l = 0; l < c->num_hidden_layers; l++) {
		e->layer = (int)l + 1;
#define H "transformer.h.%lld."
		add(e, 1, C, 0, H "ln_1.weight", (long long)l);
		add(e, 1, C, 0, H "ln_1.bias", (long long)l);
		add(e, 2, C, 3 * C, H "attn.c_attn.weight", (long long)l);
		add(e, 1, 3 * C, 0, H "attn.c_attn.bias", (long long)l);
		add(e, 2, C, C, H "attn.c_proj.weight", (long long)l);
		add(e, 1, C, 0, H "attn.c_proj.bias", (long long)l);
		add(e, 1, C, 0, H "ln_2.weight", (long long)l);
		add(e, 1, C, 0, H "ln_2.bias", (long long)l);
		add(e, 2, C, I, H "mlp.c_fc.weight", (long long)l);
		add(e, 1, I, 0, H "mlp.c_fc.bias", (long long)l);
		add(e, 2, I, C, H "mlp.c_proj.weight", (long long)l);
		add(e, 1, C, 0, H "mlp.c_proj.bias", (long long)l);
#undef H
	}
	e->layer = (int)c->num_hidden_layers + 1;
	add(e, 1, C, 0, "transformer.ln_f.weight");
	add(e, 1, C, 0, "transformer.ln_f.bias");
}

static void llama(const struct zn_hf_config *c, struct emit *e)
{
	const int64_t H = c->hidden_size, I = c->intermediate_size;
	const int64_t Q = c->num_attention_heads * c->head_dim;
	const int64_t KV = c->num_key_value_heads * c->head_dim;
	const int qkv_bias = c->attention_bias;
	const int o_bias = c->attention_bias && c->family == ZN_HF_LLAMA;

	add(e, 2, c->vocab_size, H, "model.embed_tokens.weight");
	for (int64_t l = 0; l < c->num_hidden_layers; l++) {
		long long n = (long long)l;

		e->layer = (int)l + 1;
#define P "model.layers.%lld."
		add(e, 1, H, 0, P "input_layernorm.weight", n);
		add(e, 2, Q, H, P "self_attn.q_proj.weight", n);
		if (qkv_bias)
			add(e, 1, Q, 0, P "self_attn.q_proj.bias", n);
		add(e, 2, KV, H, P "self_attn.k_proj.weight", n);
		if (qkv_bias)
			add(e, 1, KV, 0, P "self_attn.k_proj.bias", n);
		add(e, 2, KV, H, P "self_attn.v_proj.weight", n);
		if (qkv_bias)
			add(e, 1, KV, 0, P "self_attn.v_proj.bias", n);
		add(e, 2, H, Q, P "self_attn.o_proj.weight", n);
		if (o_bias)
			add(e, 1, H, 0, P "self_attn.o_proj.bias", n);
		add(e, 1, H, 0, P "post_attention_layernorm.weight", n);
		add(e, 2, I, H, P "mlp.gate_proj.weight", n);
		add(e, 2, I, H, P "mlp.up_proj.weight", n);
		add(e, 2, H, I, P "mlp.down_proj.weight", n);
#undef P
	}
	e->layer = (int)c->num_hidden_layers + 1;
	add(e, 1, H, 0, "model.norm.weight");
	if (!c->tie_word_embeddings)
		add(e, 2, c->vocab_size, H, "lm_head.weight");
}

static int walk(const struct zn_hf_config *cfg, struct zn_hf_tensor_spec *out)
{
	struct emit e = { out, 0, 0 };

	if (cfg->family == ZN_HF_GPT2)
		gpt2(cfg, &e);
	else
		llama(cfg, &e);
	return e.n;
}

int zn_hf_layout_count(const struct zn_hf_config *cfg)
{
	return walk(cfg, NULL);
}

void zn_hf_layout(const struct zn_hf_config *cfg, struct zn_hf_tensor_spec *out)
{
	walk(cfg, out);
}

uint64_t zn_hf_param_count(const struct zn_hf_config *c)
{
	const uint64_t H = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size;
	const uint64_t V = (uint64_t)c->vocab_size, L = (uint64_t)c->num_hidden_layers;
	const uint64_t Q = (uint64_t)(c->num_attention_heads * c->head_dim);
	const uint64_t KV = (uint64_t)(c->num_key_value_heads * c->head_dim);
	uint64_t block;

	if (c->family == ZN_HF_GPT2) {
		block = 4 * H + (H * 3 * H + 3 * H) + (H * H + H) + (H * I + I) + (I * H + H);
		return V * H + (uint64_t)c->max_position_embeddings * H + L * block + 2 * H;
	}
	block = 2 * H + Q * H + 2 * KV * H + H * Q + 3 * H * I;
	if (c->attention_bias)
		block += Q + 2 * KV + (c->family == ZN_HF_LLAMA ? H : 0);
	return V * H * (c->tie_word_embeddings ? 1 : 2) + L * block + H;
}
