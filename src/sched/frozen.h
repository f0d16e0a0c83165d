/* Frozen parameters (docs/lora.md): each layer's second flat buffer (zn_layer_desc
 * frozen_numel), read by the compute and never trained. Homed on the plan's frozen_home
 * (frozen_plan.c) in the stored dtype; fetched ahead into fp32 working slots on the
 * device in the prefetcher's order (forward 1 .. n-1, backward n-1 .. 1, layer 0's slot
 * held for the step). No gradient, master, m, v or optimizer I/O exists for them.
 * State: struct zn_frozen (engine field fz). */
#ifndef ZN_SCHED_FROZEN_H
#define ZN_SCHED_FROZEN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "gpu/device.h"

struct zn_engine;

struct zn_fslot {
	float *f32_d;            /* the working copy the compute reads */
	void *stage_d;           /* 16-bit copy come up from the host (home off the device) */
	void *read_h;            /* home on nvme: the pinned buffer the layer is read into */
	struct zn_event *ready;  /* the fetch into this slot is complete */
	struct zn_event *free;   /* compute is done with the slot's previous layer */
	struct zn_event *copied; /* read_h's copy up is done (it may be read into again) */
	bool copy_pending;
};

struct zn_frozen {
	void **home;             /* per layer: device or pinned host home (NULL: nvme, none) */
	uint64_t *file_off;      /* home on nvme: byte offset of each layer's extent */
	int fd;                  /* the frozen file (unlinked at create), or -1 */
	struct zn_fslot slot0;
	struct zn_fslot *ring;
	int ring_n, seq_len, seq_issued;
	uint64_t bytes_read;     /* nvme bytes read by fetches (the step's figures) */
};

int zn_frozen_create(struct zn_engine *e);   /* the plan's buffers (none without frozen) */
void zn_frozen_destroy(struct zn_engine *e);
/* layer l's initial frozen parameters (fp32, frozen_numel floats) onto the home */
int zn_frozen_init_layer(struct zn_engine *e, int l, const float *f32_h);
/* layer l's frozen parameters as fp32 into out_h (frozen_numel floats), from the home */
int zn_frozen_read_layer(struct zn_engine *e, int l, float *out_h);

/* As prefetch.h's layer-0 and sequence calls; *f32_d NULL for a layer without frozen
 * parameters. */
int zn_frozen_layer0(struct zn_engine *e, const float **f32_d);
const float *zn_frozen_layer0_params(struct zn_engine *e);
int zn_frozen_layer0_wait(struct zn_engine *e);
int zn_frozen_layer0_release(struct zn_engine *e);
int zn_frozen_begin(struct zn_engine *e);
int zn_frozen_acquire(struct zn_engine *e, int item, int layer, const float **f32_d);
int zn_frozen_release(struct zn_engine *e, int item);

#endif
