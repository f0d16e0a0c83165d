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
 * Where the parameters live (home):
 *   ZN_GEN_DEVICE  every layer on the device for the whole run;
 *   ZN_GEN_CPU     layer 0 (read by the tied head) on the device, layers 1 .. n-1 in
 *                  page-locked host memory, copied into a ring of two device slots ahead
 *                  of the compute (copy stream, events: layer l+1 comes in while layer l
 *                  runs): what DeepSpeed calls ZeRO-Inference;
 *   ZN_GEN_NVME    as CPU, but layers 1 .. n-1 live in a file under nvme_path (written
 *                  at create, unlinked at once so nothing is left behind) and are read
 *                  with pread into two page-locked staging buffers ahead of the copies.
 * The KV caches (one per layer that has one), activations and logits stay on the device.
 * Results are the same bits in every home (the same kernels on the same values).
 */
#ifndef ZN_SCHED_GENERATE_H
#define ZN_SCHED_GENERATE_H

#include <stdint.h>

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
	/* layer l's L->numel fp32 parameters into params_h (one layer in host memory) */
	int (*init_layer)(void *ctx, int layer, const struct zn_layer_desc *L, float *params_h);
	void *init_ctx;
};

struct zn_gen_stats {
	uint64_t device_bytes;   /* allocated on the device */
	uint64_t streamed_bytes; /* parameter bytes copied to the device by forwards */
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
void zn_gen_stats(const struct zn_gen *g, struct zn_gen_stats *s);

#endif
