/* LoRA's configuration, its layers' descriptors, PEFT's initialization and the ops table
 * (lora.h). The forward and backward are lora_layer.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/hash.h"
#include "core/log.h"
#include "model/family.h"
#include "model/lora/lora.h"

bool zn_lora_target_known(const char *name)
{
	return zn_family_lora_target_known(name);
}

bool zn_lora_base_conv1d(const struct zn_lora_config *cfg)
{
	const struct zn_family *f = zn_family_by_name(cfg->base.ops->family);

	return f && f->conv1d;
}

void zn_lora_target_list(char *buf, size_t size)
{
	size_t at = 0;

	buf[0] = 0;
	for (int i = 0; i < zn_family_count() && at < size; i++) {
		const struct zn_family *f = zn_family_at(i);

		for (int k = 0; f->lora_targets[k] && at < size; k++)
			at += (size_t)snprintf(buf + at, size - at, "%s%s%s%s",
					       i && !k ? "; " : "", !k ? f->name : "",
					       !k ? ": " : ", ", f->lora_targets[k]);
	}
}

int zn_lora_add_targets(struct zn_lora_config *cfg, const char *list)
{
	const char *p = list;

	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char name[ZN_LORA_NAME_MAX];

		if (n == 0 || n >= sizeof(name)) {
			zn_error("--lora-targets '%s': an empty or too long name (give PEFT module "
				 "names separated by commas, e.g. q_proj,v_proj)", list);
			return -EINVAL;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		if (!zn_lora_target_known(name)) {
			char known[512];

			zn_lora_target_list(known, sizeof(known));
			zn_error("--lora-targets: unknown module '%s' (use one of a family's: %s)",
				 name, known);
			return -EINVAL;
		}
		for (int i = 0; i < cfg->target_count; i++)
			if (!strcmp(cfg->targets[i], name))
				goto next;
		if (cfg->target_count >= ZN_LORA_MAX_TARGETS) {
			zn_error("--lora-targets: more than %d modules", ZN_LORA_MAX_TARGETS);
			return -EINVAL;
		}
		snprintf(cfg->targets[cfg->target_count++], ZN_LORA_NAME_MAX, "%s", name);
next:
		p = end ? end + 1 : NULL;
	}
	return 0;
}

float zn_lora_scale(const struct zn_lora_config *cfg)
{
	return cfg->rslora ? (float)(cfg->alpha / sqrt((double)cfg->r)) :
			     cfg->alpha / (float)cfg->r;
}

/* Is name "<path>.<target>.weight", a target one of cfg's? Fills its module path. */
static bool name_targeted(const struct zn_lora_config *cfg, const char *name, char *module,
			  size_t size)
{
	size_t n = strlen(name);
	const char *suffix = ".weight";

	if (n <= 7 || n - 7 >= size || strcmp(name + n - 7, suffix))
		return false;
	memcpy(module, name, n - 7);
	module[n - 7] = '\0';
	for (int i = 0; i < cfg->target_count; i++) {
		size_t m = strlen(module), t = strlen(cfg->targets[i]);

		if (m > t && module[m - t - 1] == '.' && !strcmp(module + m - t, cfg->targets[i]))
			return true;
	}
	return false;
}

/* The adapters of ly (ad NULL: only counted): one per targeted matmul weight of its base
 * descriptor, in the base's order; a stack of experts (model.h parts) is its checkpoint
 * tensors, each expert's projection by its own name ("...experts.3.up_proj"), as PEFT puts
 * one adapter on each expert's nn.Linear. Returns how many. */
static int adapters_of(const struct zn_lora_config *cfg, const struct zn_lora_layer *ly,
		       struct zn_lora_adapter *ad)
{
	char module[ZN_MODEL_NAME_MAX], name[ZN_MODEL_NAME_MAX + 32];
	int n = 0;

	for (int t = 0; t < ly->base.tensor_count; t++) {
		const struct zn_tensor_desc *d = &ly->base.tensors[t];
		int parts = zn_tensor_part_count(d);

		for (int j = 0; d->ndim == 2 && j < parts; j++) {
			zn_tensor_part_name(d, j, name, sizeof(name));
			if (!name_targeted(cfg, name, module, sizeof(module)))
				continue;
			if (ad) {
				struct zn_lora_adapter *a = &ad[n];

				snprintf(a->module, sizeof(a->module), "%s", module);
				a->base_tensor = t;
				a->a_tensor = 2 * n;
				a->out = d->shape[0] / parts;
				a->base_row = (int64_t)j * a->out;
				a->in = d->shape[1];
			}
			n++;
		}
	}
	return n;
}

/* ly's adapters (adapters_of) */
static int place_adapters(const struct zn_lora_config *cfg, struct zn_lora_layer *ly)
{
	int n = adapters_of(cfg, ly, NULL);

	ly->ad = n ? calloc((size_t)n, sizeof(*ly->ad)) : NULL;
	if (n && !ly->ad)
		return -ENOMEM;
	ly->count = adapters_of(cfg, ly, ly->ad);
	return 0;
}

int zn_lora_prepare(struct zn_lora_config *cfg)
{
	const struct zn_model_ops *b = cfg->base.ops;
	int total = 0, rc;

	if (cfg->r < 1 || !(cfg->alpha > 0) || !(cfg->dropout >= 0 && cfg->dropout < 1)) {
		zn_error("LoRA: --lora-r %d must be >= 1, --lora-alpha %g > 0 and --lora-dropout "
			 "%g in [0, 1)", cfg->r, (double)cfg->alpha, (double)cfg->dropout);
		return -EINVAL;
	}
	if (cfg->target_count < 1) {
		zn_error("LoRA: no --lora-targets (e.g. q_proj,v_proj or c_attn)");
		return -EINVAL;
	}
	if (!b || !cfg->base.config || !b->init) {
		zn_error("LoRA: no base model");
		return -EINVAL;
	}
	rc = b->validate(cfg->base.config);
	if (rc)
		return rc;
	cfg->scale = zn_lora_scale(cfg);
	zn_lora_release(cfg);
	cfg->layers = b->layer_count(cfg->base.config);
	cfg->lay = calloc((size_t)cfg->layers, sizeof(*cfg->lay));
	if (!cfg->lay)
		return -ENOMEM;
	for (int l = 0; !rc && l < cfg->layers; l++) {
		struct zn_lora_layer *ly = &cfg->lay[l];

		rc = b->describe(cfg->base.config, l, &ly->base);
		if (!rc)
			rc = place_adapters(cfg, ly);
		total += ly->count;
	}
	if (!rc && total == 0) {
		char list[512];

		zn_lora_target_list(list, sizeof(list));
		zn_error("LoRA: --lora-targets matches no linear layer of the %s model (%s)",
			 b->family, list);
		rc = -EINVAL;
	}
	if (rc)
		zn_lora_release(cfg);
	return rc;
}

void zn_lora_release(struct zn_lora_config *cfg)
{
	for (int l = 0; cfg->lay && l < cfg->layers; l++) {
		zn_layer_desc_release(&cfg->lay[l].base);
		free(cfg->lay[l].ad);
	}
	free(cfg->lay);
	cfg->lay = NULL;
	cfg->layers = 0;
}

static void add(struct zn_layer_desc *L, const char *module, const char *which, int64_t rows,
		int64_t cols)
{
	struct zn_tensor_desc *t = zn_layer_desc_add(L);

	if (!t)
		return;
	snprintf(t->name, sizeof(t->name), "base_model.model.%s.%s.weight", module, which);
	t->ndim = 2;
	t->shape[0] = t->file_shape[0] = rows;
	t->shape[1] = t->file_shape[1] = cols;
	t->numel = (uint64_t)rows * (uint64_t)cols;
	t->offset = L->numel;
	t->decay = true;
	L->numel += t->numel;
}

int zn_lora_describe(const struct zn_lora_config *cfg, int l, struct zn_layer_desc *out)
{
	const struct zn_lora_layer *ly;

	if (!cfg->lay || l < 0 || l >= cfg->layers) {
		zn_error("LoRA: layer %d: call zn_lora_prepare first (layers 0 .. %d)", l,
			 cfg->layers - 1);
		return -EINVAL;
	}
	ly = &cfg->lay[l];
	memset(out, 0, sizeof(*out));
	out->kind = ly->base.kind;
	out->index = l;
	out->tied_layer = ly->base.tied_layer;
	out->frozen_numel = ly->base.numel;
	for (int i = 0; i < ly->count; i++) {
		add(out, ly->ad[i].module, "lora_A", cfg->r, ly->ad[i].in);
		add(out, ly->ad[i].module, "lora_B", ly->ad[i].out, cfg->r);
	}
	return zn_layer_desc_done(out);
}

/* ---- PEFT's initialization ---------------------------------------------------------- */

void zn_lora_init_range(const struct zn_lora_config *cfg, const struct zn_layer_desc *L,
			uint64_t first, uint64_t count, float *out_h, uint64_t seed)
{
	uint64_t end = first + count;

	memset(out_h, 0, count * sizeof(float));
	for (int t = 0; t < L->tensor_count; t += 2) {
		const struct zn_tensor_desc *d = &L->tensors[t]; /* A; B (t + 1) stays 0 */
		uint64_t lo = first > d->offset ? first : d->offset;
		uint64_t hi = end < d->offset + d->numel ? end : d->offset + d->numel;
		/* torch kaiming_uniform_(a = sqrt(5)) on [r, in]: bound = 1 / sqrt(in) */
		double bound = 1.0 / sqrt((double)d->shape[1]);
		uint64_t key = zn_hash_seeded(zn_mix64(seed ^ 0x4c6f5241ull), (uint64_t)L->index);

		key = zn_hash_seeded(key, (uint64_t)t);
		(void)cfg;
		for (uint64_t i = lo; i < hi; i++) {
			double u = (double)(zn_hash_seeded(key, i - d->offset) >> 11) *
				   0x1.0p-53;

			out_h[i - first] = (float)((2.0 * u - 1.0) * bound);
		}
	}
}

/* ---- the merged weights ------------------------------------------------------------- */

double zn_lora_scale64(const struct zn_lora_config *cfg)
{
	return cfg->rslora ? (double)cfg->alpha / sqrt((double)cfg->r) :
			     (double)cfg->alpha / (double)cfg->r;
}

void zn_lora_merge_layer(const struct zn_lora_config *cfg, int l, const float *adapters,
			 float *base, enum zn_dtype dtype)
{
	const struct zn_lora_layer *ly = &cfg->lay[l];
	const double scale = zn_lora_scale64(cfg);
	struct zn_layer_desc d;

	if (zn_lora_describe(cfg, l, &d))
		return;
	for (int i = 0; i < ly->count; i++) {
		const struct zn_lora_adapter *a = &ly->ad[i];
		const float *A = adapters + d.tensors[a->a_tensor].offset;
		const float *B = adapters + d.tensors[a->a_tensor + 1].offset;
		float *W = base + ly->base.tensors[a->base_tensor].offset +
			   (uint64_t)a->base_row * (uint64_t)a->in;

#pragma omp parallel for schedule(static) if (a->out * a->in > (1 << 16))
		for (int64_t o = 0; o < a->out; o++)
			for (int64_t c = 0; c < a->in; c++) {
				double s = 0.0;

				for (int k = 0; k < cfg->r; k++)
					s += (double)B[o * cfg->r + k] * (double)A[k * a->in + c];
				/* one rounding, from float64 straight to the stored dtype */
				W[o * a->in + c] = zn_f64_round_to((double)W[o * a->in + c] +
								   scale * s, dtype);
			}
	}
	zn_layer_desc_release(&d);
}

/* ---- the ops ---------------------------------------------------------------------------- */

static const struct zn_lora_config *C(const void *config)
{
	return config;
}

static int validate(const void *config)
{
	if (!C(config)->lay) {
		zn_error("LoRA model: call zn_lora_prepare on the configuration first");
		return -EINVAL;
	}
	return C(config)->base.ops->validate(C(config)->base.config);
}

static int layer_count(const void *config)
{
	return C(config)->layers;
}

static int describe(const void *config, int layer, struct zn_layer_desc *out)
{
	return zn_lora_describe(config, layer, out);
}

static int max_seq(const void *config)
{
	return C(config)->base.ops->max_seq(C(config)->base.config);
}

static int vocab(const void *config)
{
	return C(config)->base.ops->vocab(C(config)->base.config);
}

static int width(const void *config)
{
	return C(config)->base.ops->width(C(config)->base.config);
}

static uint64_t act_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	const struct zn_lora_config *c = config;

	return c->base.ops->act_numel(c->base.config, &c->lay[L->index].base, B, T);
}

static uint64_t scratch_numel(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	const struct zn_lora_config *c = config;

	return c->base.ops->scratch_numel(c->base.config, &c->lay[L->index].base, B, T) +
	       zn_lora_scratch_extra(c, L, B, T, false);
}

static uint64_t act_numel_bf16(const void *config, const struct zn_layer_desc *L, int B, int T)
{
	const struct zn_lora_config *c = config;

	return c->base.ops->act_numel_bf16(c->base.config, &c->lay[L->index].base, B, T);
}

static uint64_t scratch_numel_bf16(const void *config, const struct zn_layer_desc *L, int B,
				   int T)
{
	const struct zn_lora_config *c = config;

	return c->base.ops->scratch_numel_bf16(c->base.config, &c->lay[L->index].base, B, T) +
	       zn_lora_scratch_extra(c, L, B, T, true);
}

static void init(const void *config, const struct zn_layer_desc *L, uint64_t first,
		 uint64_t count, float *out_h, uint64_t seed)
{
	zn_lora_init_range(config, L, first, count, out_h, seed);
}

static void init_frozen(const void *config, const struct zn_layer_desc *L, uint64_t first,
			uint64_t count, float *out_h, uint64_t seed)
{
	const struct zn_lora_config *c = config;

	c->base.ops->init(c->base.config, &c->lay[L->index].base, first, count, out_h, seed);
}

/* the frozen buffer is the base layer's flat buffer: its descriptor (docs/qlora.md) */
static const struct zn_layer_desc *frozen_desc(const void *config, int layer)
{
	const struct zn_lora_config *c = config;

	return layer >= 0 && layer < c->layers ? &c->lay[layer].base : NULL;
}

static void forward(const struct zn_kernel_table *k, void *stream, const void *config,
		    const struct zn_layer_io *io)
{
	zn_lora_forward(k, stream, config, io);
}

static void backward(const struct zn_kernel_table *k, void *stream, const void *config,
		     const struct zn_layer_io *io)
{
	zn_lora_backward(k, stream, config, io);
}

/* the base's auxiliary loss (a mixture of experts' load balancing): its gradient reaches the
 * adapters through the hidden states, as with PEFT on transformers' MoE models */
static int aux_floats(const void *config)
{
	const struct zn_model_ops *b = C(config)->base.ops;

	return b->aux_floats ? b->aux_floats(C(config)->base.config) : 0;
}

const struct zn_model_ops zn_lora_ops = {
	.family = "lora",
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
	.init_frozen = init_frozen,
	.frozen_desc = frozen_desc,
	.aux_floats = aux_floats,
};

const struct zn_model_ops zn_lora_ops_bf16 = {
	.family = "lora",
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
	.act_numel_bf16 = act_numel_bf16,
	.scratch_numel_bf16 = scratch_numel_bf16,
	.init_frozen = init_frozen,
	.frozen_desc = frozen_desc,
	.aux_floats = aux_floats,
};

struct zn_model zn_lora_model(const struct zn_lora_config *cfg)
{
	const struct zn_model_ops *b = cfg->base.ops;
	bool bf16 = b && b->act_numel_bf16 && b->scratch_numel_bf16;

	return (struct zn_model){ .ops = bf16 ? &zn_lora_ops_bf16 : &zn_lora_ops,
				  .config = cfg };
}
