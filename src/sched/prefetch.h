/* The prefetcher: full-layer fp32 working copies of the parameters on the device, for
 * compute that cannot read the parameters where they live (stage 3 shards, bf16 storage).
 * State: struct zn_prefetch (engine field pf). See prefetch.c for the ring and the order. */
#ifndef ZN_SCHED_PREFETCH_H
#define ZN_SCHED_PREFETCH_H

#include <stdint.h>

#include "gpu/device.h"

struct zn_engine;

/* A full-layer fp32 working copy of some layer's parameters on the device. */
struct zn_slot {
	float *f32_d;
	uint16_t *bf16_d;        /* stage 3 bf16: the gather lands here, then is cast */
	struct zn_event *ready;  /* the fetch into this slot is complete */
	struct zn_event *free;   /* compute is done with the slot's previous layer */
};

struct zn_prefetch {
	struct zn_slot slot0;    /* the held layer's (layer 0) copy, alive for the whole step */
	struct zn_slot *ring;
	int ring_n;
	int seq_len;             /* acts.h use_n: 2 x (n - 1) without recompute */
	int seq_staged;          /* items whose shard is read (parameters on nvme) or ready */
	int seq_issued;          /* items whose fetch is enqueued (<= seq_staged) */
};

int zn_prefetch_create(struct zn_engine *e);   /* slots of the plan (none without gathers) */
void zn_prefetch_destroy(struct zn_engine *e);
/* enqueues layer 0's fetch (compute must wait); *params_d: where it lands */
int zn_fetch_layer0(struct zn_engine *e, const float **params_d);
/* the pointer the compute reads in slot s (bf16 data with compute16) */
const float *zn_slot_params(struct zn_engine *e, struct zn_slot *s);
const float *zn_fetch_layer0_params(struct zn_engine *e); /* after zn_fetch_layer0 */
int zn_fetch_begin(struct zn_engine *e);                 /* new micro-batch sequence */
int zn_fetch_acquire(struct zn_engine *e, int item, int layer, const float **params_d);
int zn_fetch_release(struct zn_engine *e, int item);
int zn_fetch_layer0_wait(struct zn_engine *e);
int zn_fetch_layer0_release(struct zn_engine *e);

#endif
