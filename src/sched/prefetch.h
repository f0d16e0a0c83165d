/* The prefetcher: full-layer fp32 working copies of the parameters on the device, for
 * compute that cannot read the parameters where they live (stage 3 shards, bf16 storage).
 * State: struct zn_prefetch (engine field pf), given at create the runtime, the tracer, the
 * layers, the tiers' answers, the store (nvme shard reads) and the plan; the sequence of
 * layer uses comes with each zn_fetch_begin. See prefetch.c for the ring and the order.
 *
 *     rc = zn_fetch_begin(&pf, use, use_n);         // a micro-batch's sequence
 *     rc = zn_fetch_acquire(&pf, k, use[k].layer, &p); // item k's parameters in p
 *     ... compute on p ...
 *     rc = zn_fetch_release(&pf, k);
 */
#ifndef ZN_SCHED_PREFETCH_H
#define ZN_SCHED_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/device.h"
#include "zinc.h"

struct zn_engine_plan;
struct zn_layer;
struct zn_runtime;
struct zn_swapio;
struct zn_tiers;
struct zn_tracer;
struct zn_use;

/* What the prefetcher is given (borrowed: they outlive it). */
struct zn_prefetch_config {
	struct zn_runtime *rt;
	struct zn_tracer *tr;
	struct zn_layer *L;                /* the layers' buffers (tiers.h) */
	const struct zn_tiers *ti;         /* bytes of a stored parameter */
	struct zn_swapio *sw;              /* parameter shards on nvme; its read-ahead */
	const struct zn_engine_plan *plan; /* gathers, slots, depth, where parameters live */
	int stage;
	enum zn_dtype pdt;                 /* stored parameter dtype */
	bool compute16;                    /* bf16 compute reads the gathered bf16 layer */
};

/* A full-layer fp32 working copy of some layer's parameters on the device. */
struct zn_slot {
	float *f32_d;
	uint16_t *bf16_d;        /* stage 3 bf16: the gather lands here, then is cast */
	struct zn_event *ready;  /* the fetch into this slot is complete */
	struct zn_event *free;   /* compute is done with the slot's previous layer */
};

struct zn_prefetch {
	struct zn_prefetch_config c;
	const struct zn_use *use; /* the sequence of layer uses (zn_fetch_begin) */
	struct zn_slot slot0;    /* the held layer's (layer 0) copy, alive for the whole step */
	struct zn_slot *ring;
	int ring_n;
	int seq_len;             /* acts.h use_n: 2 x (n - 1) without recompute */
	int seq_staged;          /* items whose shard is read (parameters on nvme) or ready */
	int seq_issued;          /* items whose fetch is enqueued (<= seq_staged) */
};

/* slots of the plan (none without gathers); destroy accepts a half-built or never-created
 * (zeroed) prefetcher */
int zn_prefetch_create(struct zn_prefetch *pf, const struct zn_prefetch_config *c);
void zn_prefetch_destroy(struct zn_prefetch *pf);
/* enqueues layer 0's fetch (compute must wait); *params_d: where it lands */
int zn_fetch_layer0(struct zn_prefetch *pf, const float **params_d);
/* the pointer the compute reads in slot s (bf16 data with compute16) */
const float *zn_slot_params(struct zn_prefetch *pf, struct zn_slot *s);
const float *zn_fetch_layer0_params(struct zn_prefetch *pf); /* after zn_fetch_layer0 */
/* a new sequence of uses (acts.h use[], use_n; kept until the next begin) */
int zn_fetch_begin(struct zn_prefetch *pf, const struct zn_use *use, int use_n);
int zn_fetch_acquire(struct zn_prefetch *pf, int item, int layer, const float **params_d);
int zn_fetch_release(struct zn_prefetch *pf, int item);
int zn_fetch_layer0_wait(struct zn_prefetch *pf);
int zn_fetch_layer0_release(struct zn_prefetch *pf);

#endif
