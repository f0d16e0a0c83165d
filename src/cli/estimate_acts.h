/* zinc estimate's activation lines (estimate_acts.c). */
#ifndef ZN_CLI_ESTIMATE_ACTS_H
#define ZN_CLI_ESTIMATE_ACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/train_model.h"

struct zn_est_acts {
	int micro;          /* --micro-batch */
	int every;          /* --checkpoint-every (>= 1) */
	bool checkpointing; /* --gradient-checkpointing: on the device */
	bool quiet;         /* no lines (--json) */
	/* --device-mem (0: not given): sizes the lm_head chunks as the engine does */
	uint64_t device_mem;
};

/* A GPT shape (--layers --hidden --heads --vocab --seq; heads 0: hidden / 64) as a GPT-2
 * model in *tm. Returns 0 or ZN_EUSAGE (a shape the GPT-2 family refuses, logged). */
int zn_estimate_gpt_shape(struct zn_train_model *tm, int layers, int hidden, int heads,
			  int vocab, int seq);

/* The activations of tm's model (any family: GPT-2, Llama, Qwen2, Mistral) at micro-batch
 * a->micro and the model's sequence length: prints the per-layer and total lines (unless
 * quiet) and sets *device_bytes to the device activation bytes of the chosen setting (for
 * the table's device column). Returns 0, or -ENOMEM. */
int zn_estimate_acts(const struct zn_est_acts *a, const struct zn_train_model *tm,
		     uint64_t *device_bytes);

#endif
