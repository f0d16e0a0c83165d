/* A sparse mixture-of-experts MLP block, as transformers' MixtralSparseMoeBlock and
 * Qwen3MoeSparseMoeBlock compute it (docs/model.md, "Mixture of experts"), written once
 * against the kernel table so it runs on every device:
 *
 *     logits = h Wr^T                      router (gate) [E, C], fp32
 *     p = softmax(logits) (fp32); the K largest; w = them, / their sum when norm
 *     out[t] = sum over the token's experts e, ascending: w[t,e] * down_e(swiglu(gu_e h[t]))
 *
 * Each expert is Llama's MLP with its gate_proj and up_proj stacked ([2I, C]) and its
 * down_proj [C, I]; the E experts' weights are contiguous ([E, 2I, C] and [E, C, I]). The
 * tokens are grouped by expert (a stable counting sort: kernels.h moe_dispatch), each
 * expert runs one GEMM over its rows, and the weighted outputs are added per token in
 * ascending expert order, so a run is bit-identical to the next. An expert that gets no
 * token does no work and its gradient stays as it was (zero for the step): it still takes
 * its AdamW step with the layer, on every rank.
 *
 * The load-balancing loss (transformers' load_balancing_loss_func, over the MoE layers of
 * one forward): L = E sum_e f_e P_e, f_e the share of the token slots routed to e and P_e
 * its mean probability, both over every MoE layer's tokens; the forward's aux gathers the
 * counts and sums of a layer (kernels.h moe_aux_stats), moe_aux_finish makes L and the
 * gradient each layer's probabilities get (dprob, the same for every token).
 *
 * LoRA on the experts (docs/lora.md, "Experts") needs nothing here: each expert's GEMMs are
 * called on the expert's slice of W->gu and W->down (its [2I, C] and [C, I] rows) with the
 * rows routed to it, and LoRA's kernel table adds the adapters whose base rows lie in that
 * weight. So the weight passed to an expert's GEMM must stay that slice of the layer's
 * buffer (or the adapters of expert e must be found another way, e.g. by e).
 */
#ifndef ZN_MODEL_MOE_H
#define ZN_MODEL_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

struct zn_moe_dims {
	int N;    /* tokens (B T) */
	int C;    /* hidden */
	int E;    /* experts */
	int K;    /* experts per token */
	int I;    /* an expert's intermediate size */
	int norm; /* the top-k weights divided by their sum (Mixtral always; Qwen3-MoE's
		   * norm_topk_prob) */
};

struct zn_moe_weights {
	const float *router; /* [E, C] */
	const float *gu;     /* [E, 2I, C] */
	const float *down;   /* [E, C, I] */
};

/* Where the experts' weights come from when they are not all on the device: the frozen
 * experts of a LoRA base or of zinc generate, fetched per routed expert (docs/lora.md,
 * "Experts fetched per routed expert"). In a forward or backward, right before the GEMMs of
 * each expert e that has rows, the block calls fetch(src, k, stream, W, e, E): it makes
 * expert e readable at its slices of W->gu and W->down (through the kernel table on
 * stream, k->write_sync: complete when it returns; the expert GEMMs enqueued before it may
 * still run, so a read from storage overlaps them); the slices of experts without rows are
 * never read by the block. A failure is the source's to record (the caller's step fails).
 * ctx and layer are the source's own: it outlives every call. NULL: every expert is in
 * place (trainable experts, a home on the device). */
struct zn_moe_weights;
struct zn_moe_source {
	void (*fetch)(const struct zn_moe_source *src, const struct zn_kernel_table *k,
		      void *stream, const struct zn_moe_weights *W, int expert, int E);
	void *ctx;
	int layer;
};

struct zn_moe_grads {
	float *router, *gu, *down; /* added to; NULL: frozen (not computed) */
};

/* What the forward keeps for the backward, and the backward's scratch (zeroed before the
 * backward, as every layer's scratch). Sizes: zn_moe_acts_bytes, zn_moe_scratch_bytes. */
struct zn_moe_acts {
	float *logits, *probs;        /* [N, E] */
	float *w;                     /* [N, K] */
	int *sel;                     /* [N, K] */
	int *perm, *pos;              /* [M] */
	int *offsets;                 /* [E + 1], device */
	int *offsets_h;               /* [E + 1], host: the rows per expert */
	float *xg;                    /* [M, C] the routed rows of h */
	float *hgu;                   /* [M, 2I] */
	float *act;                   /* [M, I] */
	float *y;                     /* [M, C] each expert's output */
};

struct zn_moe_scratch {
	float *dy;                    /* [M, C] */
	float *dact;                  /* [M, I] */
	float *dhgu;                  /* [M, 2I] */
	float *dxg;                   /* [M, C] */
	float *dw;                    /* [N, K] */
	float *dlogits;               /* [N, E] */
};

/* Bytes of the device buffers (each rounded to 256) and the carving of one buffer. */
uint64_t zn_moe_acts_bytes(const struct zn_moe_dims *d);
uint64_t zn_moe_scratch_bytes(const struct zn_moe_dims *d);
void zn_moe_acts_carve(struct zn_moe_acts *a, void *base, int *offsets_h,
		       const struct zn_moe_dims *d);
void zn_moe_scratch_carve(struct zn_moe_scratch *s, void *base, const struct zn_moe_dims *d);

/* out [N, C] = the block of h [N, C]; aux (NULL: none) [2E] += the layer's statistics;
 * src (NULL: none) fetches the routed experts (above). */
void zn_moe_forward(const struct zn_kernel_table *k, void *stream, const struct zn_moe_dims *d,
		    const struct zn_moe_weights *W, const struct zn_moe_source *src,
		    struct zn_moe_acts *a, const float *h, float *out, float *aux);
/* dh [N, C] += the gradient of h from dout [N, C] (dprob [E]: the load-balancing loss's
 * per-probability gradient, NULL: none); the weights' gradients added to g. */
void zn_moe_backward(const struct zn_kernel_table *k, void *stream,
		     const struct zn_moe_dims *d, const struct zn_moe_weights *W,
		     const struct zn_moe_source *src, const struct zn_moe_grads *g, const struct zn_moe_acts *a,
		     const struct zn_moe_scratch *s, const float *h, const float *dout,
		     const float *dprob, float *dh);

#endif
