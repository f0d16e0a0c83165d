/* The prefetcher: full-layer fp32 working copies of the parameters on the device, for
 * compute that cannot read the parameters where they live (stage 3 shards, bf16 storage).
 * State: struct zn_prefetch (engine field pf), given at create the runtime, the tracer, the
 * layers, the tiers' answers, the store (nvme shard reads) and the plan; the sequence of
 * layer uses comes with each zn_fetch_begin. The slots' indices, events and the order of
 * the fills are the prefetch ring's (store/ring.h); see prefetch.c for what a fill moves.
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
#include "store/ring.h"
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

/* A full-layer fp32 working copy of some layer's parameters on the device (a ring slot's
 * buffers; its events are the ring's). */
struct zn_slot {
	float *f32_d;
	uint16_t *bf16_d;        /* stage 3 bf16: the gather lands here, then is cast */
};

struct zn_prefetch {
	struct zn_prefetch_config c;
	const struct zn_use *use; /* the sequence of layer uses (zn_fetch_begin) */
	/* per ring slot its buffers, the held slot's (layer 0's copy, alive for the whole
	 * step) last */
	struct zn_slot *slot;
	int slot_n;
	struct zn_ring ring;     /* the slots' events and the fills' order (store/ring.h) */
};

/* slots of the plan (none without gathers); destroy accepts a half-built or never-created
 * (zeroed) prefetcher */
int zn_prefetch_create(struct zn_prefetch *pf, const struct zn_prefetch_config *c);
void zn_prefetch_destroy(struct zn_prefetch *pf);
/* enqueues layer 0's fetch (compute must wait); *params_d: where it lands */
int zn_fetch_layer0(struct zn_prefetch *pf, const float **params_d);
/* the pointer the compute reads in layer 0's slot (bf16 data with compute16), after
 * zn_fetch_layer0 */
const float *zn_fetch_layer0_params(struct zn_prefetch *pf);
/* a new sequence of uses (acts.h use[], use_n; kept until the next begin) */
int zn_fetch_begin(struct zn_prefetch *pf, const struct zn_use *use, int use_n);
int zn_fetch_acquire(struct zn_prefetch *pf, int item, int layer, const float **params_d);
int zn_fetch_release(struct zn_prefetch *pf, int item);
int zn_fetch_layer0_wait(struct zn_prefetch *pf);
int zn_fetch_layer0_release(struct zn_prefetch *pf);

#endif
