/* The model interface: what the engine (src/sched) knows about a model family, and all it
 * knows. A family (src/model/<family>/) fills a struct zn_model_ops, the pattern of the
 * device, comm, aio and kernel tables; a struct zn_model pairs the table with one
 * configuration of that family. The engine never names a family.
 *
 * A model is a chain of layers 0 .. n-1 (docs/architecture.md):
 *   layer 0      reads the tokens (x_in NULL) and writes x_out;
 *   layers 1..   read x_in (the previous layer's x_out) and write x_out [B, T, width];
 *   layer n-1    reads x_in and the targets and writes the per-token losses (x_out NULL).
 * Each layer's parameters are one flat fp32 buffer: its tensors back to back
 * (zn_layer_desc). A layer may also read the parameters of an earlier layer it is tied to
 * (tied_layer, e.g. GPT-2's lm_head = wte of layer 0) and then adds into that layer's
 * gradient; the engine reads tied_layer from the descriptors and passes tied_params and
 * tied_grads only to such a layer. Today the engine keeps layer 0 resident for the whole
 * step, so tied_layer must be 0 or -1.
 *
 *     struct zn_gpt2_config mc;                       // one family's configuration
 *     struct zn_model m = zn_gpt2_model(&mc);         // { &zn_gpt2_ops, &mc }
 *     zn_engine_create(&e, &cfg, &m, &opt);           // mc must outlive the engine
 */
#ifndef ZN_MODEL_MODEL_H
#define ZN_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "zinc.h"

struct zn_moe_source;
#define ZN_MODEL_NAME_MAX 96

struct zn_tensor_desc {
	char name[ZN_MODEL_NAME_MAX]; /* Hugging Face name, "transformer.h.3.mlp.c_fc.weight" */
	int ndim;                     /* 1 or 2 */
	int64_t shape[2];             /* in-memory shape (kernels' layout) */
	uint64_t offset;              /* in floats, into the layer's flat buffer */
	uint64_t numel;               /* shape[0] * shape[1] (in memory, padding included) */
	bool decay;                   /* weight decay applies */
	bool transpose;               /* the file holds the transpose (HF Conv1D [in, out]) */
	int64_t file_shape[2];        /* shape in a safetensors file (wte: [V, C]) */
	/* A stack of experts (a mixture of experts' weights, one tensor for E experts:
	 * docs/model.md): parts > 0 when a checkpoint holds the tensor as parts tensors of
	 * [shape[0] / parts, shape[1]] rows, back to back in memory; part j is named
	 * part_prefix + (j / part_kinds) + "." + part_suffix[j % part_kinds]
	 * ("model.layers.0.mlp.experts." "3" "." "up_proj.weight"); name is then transformers
	 * 5's fused name. zn_tensor_part_name writes one. */
	int parts, part_kinds;
	char part_prefix[ZN_MODEL_NAME_MAX];
	const char *part_suffix[2]; /* static strings */
};

/* Checkpoint tensors of d (parts, or 1), and part j's name into buf (d->name when 1). */
int zn_tensor_part_count(const struct zn_tensor_desc *d);
void zn_tensor_part_name(const struct zn_tensor_desc *d, int j, char *buf, size_t size);

struct zn_layer_desc {
	int kind;         /* the family's layer kind */
	int index;        /* 0 .. n - 1 */
	/* tensor_count descriptors, as many as the family needs (a Mixtral layer with LoRA on
	 * every expert has hundreds). describe fills them with zn_layer_desc_add, and the
	 * descriptor then owns the array: zn_layer_desc_release frees it. A copy of the
	 * struct shares the array (release one of them only); a caller that builds a
	 * descriptor by hand may point tensors at storage of its own and not release it. */
	int tensor_count;
	struct zn_tensor_desc *tensors;
	int tensor_cap;   /* allocated descriptors (zn_layer_desc_add) */
	bool add_failed;  /* a zn_layer_desc_add ran out of memory (zn_layer_desc_done) */
	uint64_t numel;   /* floats in the flat buffer: the tensors, back to back */
	int tied_layer;   /* the earlier layer whose parameters this one also reads, or -1 */
	/* Frozen parameters (docs/lora.md): floats of the layer's second flat buffer, which
	 * the model reads (zn_layer_io.frozen) but never trains: no gradient, no master, no
	 * optimizer state. Its tensors are the family's own business (LoRA: the base
	 * layer's); tensors[] above are the trainable ones only. 0: none. */
	uint64_t frozen_numel;
	/* Bytes the layer may size a work buffer of its own choosing to (the final layer's
	 * lm_head + cross-entropy chunks, kernels/lmhead_ce.h): the engine sets it from the
	 * device budget (zn_lmhead_ce_work_bytes) before asking for scratch_numel; describe
	 * leaves 0, the family's default. The scratch size and the layer's calls read the
	 * same descriptor, so they agree. */
	uint64_t work_bytes;
};

/* Appends a zeroed tensor descriptor to L (tensor_count + 1; the array grows as needed).
 * NULL when out of memory: L->add_failed is then set, and zn_layer_desc_done reports it,
 * so a family's describe may add tensors without checking each one. */
struct zn_tensor_desc *zn_layer_desc_add(struct zn_layer_desc *L);
/* The end of a describe: 0, or -ENOMEM (logged) after a failed add, L released. */
int zn_layer_desc_done(struct zn_layer_desc *L);
/* Frees L's tensors (from zn_layer_desc_add); L keeps no tensor. NULL or an empty L: no-op.
 *
 *     struct zn_layer_desc L;
 *     rc = m.ops->describe(m.config, l, &L); // L owns L.tensors on success
 *     ...
 *     zn_layer_desc_release(&L);
 */
void zn_layer_desc_release(struct zn_layer_desc *L);
/* An array of n descriptors (calloc'd, each described or zero) released and freed. */
void zn_layer_descs_free(struct zn_layer_desc *ld, int n);

/* One layer's call: device pointers (the stream's memory), B x T tokens. */
struct zn_layer_io {
	const struct zn_layer_desc *L;
	const float *params, *tied_params; /* tied_params: layer L->tied_layer's, else NULL */
	/* bf16 compute (the engine's compute16; model ops with act_numel_bf16): the stored
	 * bf16 parameters, read directly, and params/tied_params are NULL */
	const uint16_t *params16, *tied_params16;
	float *grads, *tied_grads;         /* backward: ACCUMULATED into */
	float *acts;                       /* act_numel floats: forward writes, backward reads */
	float *scratch;                    /* scratch_numel floats; zero before a backward */
	const float *x_in;                 /* layer 0: NULL */
	float *x_out;                       /* forward; last layer: NULL */
	const float *dx_out;               /* backward in; last layer: NULL (starts at the loss) */
	float *dx_in;                      /* backward out (overwritten); layer 0: NULL */
	const int *tokens, *targets;
	/* [B,T] each token's position in its document (--packing documents, docs/packing.md:
	 * 0 at a document's first token, then +1; attention stays inside a document), or
	 * NULL: position t, one sequence per row. A target < 0 is not predicted (no loss) */
	const int *pos;
	float *losses;                     /* last layer's forward: B x T losses */
	float dloss_scale;                 /* gradient of sum(losses) x dloss_scale */
	int B, T;
	/* frozen_numel > 0: the layer's frozen fp32 parameters (read only); tied_frozen: the
	 * tied layer's, or NULL. With bf16 compute (params16 set) they point at the stored
	 * bf16 values instead (read as uint16_t; docs/lora.md) */
	const float *frozen, *tied_frozen;
	uint64_t seed;                     /* this step and micro-batch's random stream */
	/* A model with an auxiliary loss (ops->aux_floats > 0: a mixture of experts' load
	 * balancing): aux_floats floats of the micro-batch, zero before its forward; the
	 * forward (not a recomputed one: NULL there, and in evaluation) gathers what the loss
	 * needs into it and the last layer's forward leaves the loss in aux[0]; the backward
	 * reads it, with aux_scale the factor of that loss's gradient (the loss scale over the
	 * micro-batches and ranks averaged). NULL: no auxiliary loss. */
	float *aux;
	float aux_scale;
	/* A mixture of experts' frozen experts fetched per routed expert (model/moe/moe.h
	 * zn_moe_source; the engine's, outliving the call), or NULL: every weight is in place */
	const struct zn_moe_source *experts;
};

/* Inference of one layer with a KV cache (zinc generate, docs/generate.md): batch 1, T new
 * tokens at positions pos0 .. pos0+T-1 appended to the cache. Device pointers, as above. */
struct zn_decode_io {
	const struct zn_layer_desc *L;
	const float *params, *tied_params; /* tied_params: layer L->tied_layer's, else NULL */
	float *kv;            /* decode_kv_numel floats: this layer's key and value caches */
	int max_t;            /* positions the cache holds (pos0 + T <= max_t) */
	float *scratch;       /* decode_scratch_numel floats, any contents */
	const float *x_in;    /* layer 0: NULL */
	float *x_out;         /* [T, width]; last layer: NULL */
	const int *tokens;    /* layer 0: [T] */
	const int *pos;       /* [T]: pos0 .. pos0+T-1 (RoPE) */
	float *logits;        /* last layer: [n_logits, vocab], the last n_logits rows */
	int n_logits;         /* 1 .. T */
	int pos0, T;
	const struct zn_moe_source *experts; /* as zn_layer_io's */
};

struct zn_model_ops {
	const char *family;                                    /* "gpt2" */
	int (*validate)(const void *config);                   /* 0 or -EINVAL (logged) */
	int (*layer_count)(const void *config);
	/* *out overwritten (its old contents not read or freed); on success out owns its
	 * tensors (zn_layer_desc_release), on failure it holds none */
	int (*describe)(const void *config, int layer, struct zn_layer_desc *out);
	int (*max_seq)(const void *config);                    /* longest T */
	int (*vocab)(const void *config);                      /* tokens and targets < vocab */
	int (*width)(const void *config);                      /* floats per token of x */
	uint64_t (*act_numel)(const void *config, const struct zn_layer_desc *L, int B, int T);
	uint64_t (*scratch_numel)(const void *config, const struct zn_layer_desc *L, int B,
				  int T);
	/* elements [first, first + count) of the layer's initial parameters into out_h;
	 * elements at or beyond L->numel are 0; the same values for any split */
	void (*init)(const void *config, const struct zn_layer_desc *L, uint64_t first,
		     uint64_t count, float *out_h, uint64_t seed);
	void (*forward)(const struct zn_kernel_table *k, void *stream, const void *config,
			const struct zn_layer_io *io);
	void (*backward)(const struct zn_kernel_table *k, void *stream, const void *config,
			 const struct zn_layer_io *io);
	/* optional (NULL: no bf16 compute; the engine then gives bf16 parameters to the
	 * forward/backward as fp32 working copies): activation and scratch floats when the
	 * layer is called with io->params16 (bf16 GEMM inputs, fp32 accumulation) */
	uint64_t (*act_numel_bf16)(const void *config, const struct zn_layer_desc *L, int B,
				   int T);
	uint64_t (*scratch_numel_bf16)(const void *config, const struct zn_layer_desc *L, int B,
				       int T);
	/* optional (NULL: not supported): one layer's parameters from / every layer's into a
	 * checkpoint file */
	int (*load_layer)(const void *config, const struct zn_layer_desc *L, const char *path,
			  float *params_h);
	int (*save)(const void *config, const struct zn_layer_desc *layers,
		    const float *const *params_h, const char *path, enum zn_dtype dtype);
	/* required when a layer has frozen_numel > 0: elements [first, first + count) of the
	 * layer's initial frozen parameters (as init) */
	void (*init_frozen)(const void *config, const struct zn_layer_desc *L, uint64_t first,
			    uint64_t count, float *out_h, uint64_t seed);
	/* optional (NULL: zinc generate refuses the family): inference with a KV cache
	 * (struct zn_decode_io); the sizes in floats for T new tokens and a cache of max_t
	 * positions (0 for a layer without a cache) */
	uint64_t (*decode_scratch_numel)(const void *config, const struct zn_layer_desc *L,
					 int T);
	uint64_t (*decode_kv_numel)(const void *config, const struct zn_layer_desc *L,
				    int max_t);
	void (*decode)(const struct zn_kernel_table *k, void *stream, const void *config,
		       const struct zn_decode_io *io);
	int (*decode_max_t)(const void *config); /* the most positions a sequence may reach */
	/* optional (NULL or 0: none): floats of the per-micro-batch auxiliary loss buffer
	 * (zn_layer_io.aux) */
	int (*aux_floats)(const void *config);
	/* optional (NULL: a frozen base cannot be quantized): the descriptor of layer's
	 * frozen buffer, its tensors and their offsets (LoRA: the base layer's), from which
	 * --quantize-base chooses the linear weights (docs/qlora.md) */
	const struct zn_layer_desc *(*frozen_desc)(const void *config, int layer);
};

struct zn_model {
	const struct zn_model_ops *ops;
	const void *config; /* the family's configuration; borrowed, must outlive the users */
};

#endif
