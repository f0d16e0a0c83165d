/* Inference with a KV cache for zinc generate (docs/generate.md): any model family whose
 * ops have the decode entries (model.h: struct zn_decode_io), batch 1.
 *
 *     struct zn_gen_opts o = { .max_t = 256, .max_chunk = 64, .home = ZN_GEN_DEVICE,
 *                              .init_layer = fn, .init_ctx = ctx };
 *     struct zn_gen *g;
 *     rc = zn_gen_create(&g, &model, &o);            // loads every layer once
 *     rc = zn_gen_forward(g, prompt, n, 1, logits);  // prefill: logits of the last token
 *     rc = zn_gen_forward(g, &next, 1, 1, logits);   // one decode step, and so on
 *     zn_gen_destroy(g);
 *
 * Where the parameters live (home): layer 0 (read again by a tied head) always on the
 * device; layers 1 .. n-1 are the training engine's frozen parameters (frozen.h,
 * generate_fz.c), homed on
 *   ZN_GEN_DEVICE  the device, read in place;
 *   ZN_GEN_CPU     pinned host memory, copied into the frozen part's ring of working slots
 *                  prefetch_depth layers ahead of the compute: what DeepSpeed calls
 *                  ZeRO-Inference;
 *   ZN_GEN_NVME    the frozen file under nvme_path (unlinked at once: nothing is left
 *                  behind), read through the aio engine (io_uring) into the slots' pinned
 *                  read buffers as soon as they are free, then copied up.
 * The KV caches (one per layer that has one), activations and logits stay on the device,
 * and so do LoRA adapters (o.lora), added to their targets' outputs by zn_lora_decode.
 * Results are the same bits in every home (the same kernels on the same values).
 */
#ifndef ZN_SCHED_GENERATE_H
#define ZN_SCHED_GENERATE_H

#include <stdint.h>

#include "model/lora/lora.h"
#include "model/model.h"
#include "zinc.h"

enum zn_gen_home { ZN_GEN_DEVICE = 0, ZN_GEN_CPU = 1, ZN_GEN_NVME = 2 };

struct zn_gen_opts {
	int max_t;              /* positions the KV cache holds (prompt + new tokens) */
	int max_chunk;          /* most tokens one zn_gen_forward takes (the prefill) */
	enum zn_gen_home home;
	const char *nvme_path;  /* ZN_GEN_NVME: a directory */
	enum zn_device_kind device;
	uint64_t device_mem;    /* 0: the backend's default budget */
	/* streamed layers fetched ahead of the one computing: 0 = the training default
	 * (zn_plan_prefetch_depth) lowered to what fits the budget; > 0 that many; < 0 none */
	int prefetch_depth;
	int fz_forwards;        /* forwards per use sequence of the frozen part (0: 64) */
	/* layer l's L->numel fp32 parameters into params_h (one layer in host memory) */
	int (*init_layer)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *init_ctx;
	/* LoRA adapters applied unmerged (zinc generate --adapter), or NULL: a prepared
	 * config whose base is the model generated from, dropout 0; init_adapter fills layer
	 * l's adapters (L: zn_lora_describe's descriptor; ctx adapter_ctx) for each layer that
	 * has some. They
	 * stay on the device whatever the home (a few MB), the base streams as without them. */
	const struct zn_lora_config *lora;
	int (*init_adapter)(void *ctx, int layer, const struct zn_layer_desc *L, float *out_h);
	void *adapter_ctx;
	/* the streamed layers (1 .. n-1) in 4 bits (docs/qlora.md): quantized at load
	 * (quantize_base, double_quant: --quantize-base nf4), or a checkpoint's as stored
	 * (q4: n layouts, plain parts fp32; init_q4 writes layer l's extent, ctx init_ctx) */
	enum zn_quantize_base quantize_base;
	bool double_quant;
	const struct zn_q4_layer *q4;
	int (*init_q4)(void *ctx, int layer, void *extent);
};

struct zn_gen_stats {
	uint64_t device_bytes;   /* allocated on the device */
	uint64_t streamed_bytes; /* parameter bytes copied to the device by forwards */
	uint64_t nvme_read_bytes; /* read from the layers' file (the aio engine's count) */
	int prefetch_depth;      /* streamed layers fetched ahead (0 on the device) */
	/* a mixture of experts streamed from cpu or nvme (docs/generate.md): the experts
	 * fetched as routed, their stored bytes (in streamed_bytes; their nvme reads in
	 * nvme_read_bytes), and the same for every expert of every layer use (whole layers) */
	uint64_t expert_fetches, expert_bytes;
	uint64_t expert_all_fetches, expert_all_bytes;
	const char *device_name;
};

struct zn_gen;

/* 0 or a negative code (logged: what does not fit and the flag to change). */
int zn_gen_create(struct zn_gen **out, const struct zn_model *m, const struct zn_gen_opts *o);
void zn_gen_destroy(struct zn_gen *g); /* accepts NULL */
/* Appends tokens[0 .. T) at the current position (T <= max_chunk, position + T <= max_t)
 * and writes the logits of the last n_logits of them to logits_h [n_logits, vocab]. */
int zn_gen_forward(struct zn_gen *g, const int *tokens, int T, int n_logits, float *logits_h);
int zn_gen_pos(const struct zn_gen *g);   /* tokens in the cache */
void zn_gen_reset(struct zn_gen *g);      /* empties the cache (position 0) */
int zn_gen_vocab(const struct zn_gen *g);
void zn_gen_stats(struct zn_gen *g, struct zn_gen_stats *s);
/* tests: the aio engine of the layers' file (fault injection), NULL unless ZN_GEN_NVME */
struct zn_aio *zn_gen_aio(struct zn_gen *g);

#endif
