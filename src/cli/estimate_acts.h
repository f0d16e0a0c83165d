/* zinc estimate's activation lines (estimate_acts.c). */
#ifndef ZN_CLI_ESTIMATE_ACTS_H
#define ZN_CLI_ESTIMATE_ACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "train/train_model.h"

struct zn_est_acts {
	int micro;          /* --micro-batch */
	int every;          /* --checkpoint-every (>= 1) */
	bool checkpointing; /* --gradient-checkpointing */
	bool quiet;         /* no lines (--json) */
	int T;              /* the run's sequence length (0: the model's) */
	/* --device-mem (0: not given): sizes the lm_head chunks as the engine does */
	uint64_t device_mem;
};

/* The activations of tm's model (any registered family, model/family.h) at micro-batch
 * a->micro and sequence length T, per layer and in total, without and with activation
 * checkpointing on each home: prints the lines (unless quiet) and sets *device_bytes to
 * the device activation bytes of the chosen setting. Returns 0; the layers are described
 * one at a time, so nothing grows with the layer count. */
int zn_estimate_acts(const struct zn_est_acts *a, const struct zn_train_model *tm,
		     uint64_t *device_bytes);

#endif
