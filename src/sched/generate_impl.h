/* Private to src/sched/generate*.c: struct zn_gen and the layers' fetches (generate_fz.c:
 * layers 1 .. n-1 as a frozen part, frozen.h). */
#ifndef ZN_SCHED_GENERATE_IMPL_H
#define ZN_SCHED_GENERATE_IMPL_H

#include <stdbool.h>

#include "gpu/device.h"
#include "sched/generate.h"

struct zn_gen_fz;

struct zn_gen {
	struct zn_model m;
	struct zn_gen_opts o;
	int n, width, vocab, pos;
	struct zn_layer_desc *L;
	struct zn_device *dev;
	struct zn_stream *compute, *copy;
	float **params_d;               /* layer 0's parameters (params_d[0]) on the device */
	/* layers 1 .. n-1: a frozen part of their own and what it is given (generate_fz.c) */
	struct zn_gen_fz *fz;
	int fz_forwards;                /* forwards per use sequence */
	int fz_item;                    /* the next item of the use sequence */
	bool fz_restart;                /* the next forward begins a fresh sequence */
	/* the rest, on the device */
	float **kv_d;
	float **adapters_d;             /* o.lora: layer l's adapters, NULL where it has none */
	struct zn_layer_desc *ad;       /* o.lora: their descriptors */
	float *x_d[2], *scratch_d, *logits_d;
	int *tokens_d, *pos_d;
	int *tokens_h, *pos_h;          /* page-locked staging of the inputs */
	uint64_t streamed_bytes;
	/* frozen experts fetched per routed expert: every expert of the streamed sparse
	 * layers' uses so far (what whole layers would have moved), fetches and bytes */
	uint64_t expert_all_fetches, expert_all_bytes;
};

int zn_gen_fz_create(struct zn_gen *g);  /* layers 1 .. n-1 onto their home */
void zn_gen_fz_destroy(struct zn_gen *g);
int zn_gen_fz_begin(struct zn_gen *g);   /* a forward starts */
/* the compute stream waits for layer l; its params on the device */
int zn_gen_fz_acquire(struct zn_gen *g, int l, const float **params_d);
int zn_gen_fz_release(struct zn_gen *g, int l); /* compute is done with layer l */
int zn_gen_fz_depth(const struct zn_gen *g);
uint64_t zn_gen_fz_read_bytes(struct zn_gen *g);
/* a mixture of experts streamed from cpu or nvme (frozen_experts.c): layer l's source of
 * routed experts for its call (NULL: none), the first failure of a fetch, and the experts'
 * figures into s (their bytes added to streamed_bytes and nvme_read_bytes) */
const struct zn_moe_source *zn_gen_fz_experts(struct zn_gen *g, int l);
int zn_gen_fz_error(struct zn_gen *g);
void zn_gen_fz_expert_stats(struct zn_gen *g, struct zn_gen_stats *s);

#endif
