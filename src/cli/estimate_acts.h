/* zinc estimate's activation lines (estimate_acts.c). */
#ifndef ZN_CLI_ESTIMATE_ACTS_H
#define ZN_CLI_ESTIMATE_ACTS_H

#include <stdbool.h>
#include <stdint.h>

struct zn_est_acts {
	int layers, hidden, heads, vocab, seq; /* the GPT shape (heads 0: hidden / 64) */
	int micro;                             /* --micro-batch */
	int every;                             /* --checkpoint-every (>= 1) */
	bool checkpointing;                    /* --gradient-checkpointing: on the device */
	bool quiet;                            /* no lines (--json) */
};

/* Prints the per-layer and total lines (unless quiet) and sets *device_bytes to the
 * device activation bytes of the chosen setting (for the table's device column).
 * Returns 0 or ZN_EUSAGE (a shape the GPT-2 family refuses, logged). */
int zn_estimate_acts(const struct zn_est_acts *a, uint64_t *device_bytes);

#endif
