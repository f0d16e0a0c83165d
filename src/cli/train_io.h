/* zinc train's input and output: this rank's token batches from a file (llm.c's layout)
 * and the header and per-step lines. Internal to src/cli. */
#ifndef ZN_CLI_TRAIN_IO_H
#define ZN_CLI_TRAIN_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/gpt2.h"
#include "zinc.h"

struct zn_train_data {
	int *tokens;      /* the whole file's tokens */
	uint64_t count;
	int *inputs, *targets; /* this rank's gas x B x T for the current step */
	int B, T, gas, rank, world;
};

/* Reads path (an llm.c .bin token file, else text: one token per byte) and checks every
 * token is below vocab. Returns 0 or a negative code (logged, naming the file). */
int zn_train_data_open(struct zn_train_data *d, const char *path, int vocab,
		       const struct zn_engine *e, int T);
/* Fills inputs/targets for step `step` (0-based): the global batch of micro-batch k is
 * N x B sequences from token ((step x gas + k) x N x B x T) mod (count - 1), rank r's
 * the r-th B of them; targets are the next tokens. */
void zn_train_data_next(struct zn_train_data *d, int64_t step);
void zn_train_data_close(struct zn_train_data *d);

void zn_train_print_header(FILE *f, const struct zn_config *cfg,
			   const struct zn_gpt2_config *mc, const struct zn_engine *e, int T,
			   int steps);
/* "step 3/20 | loss 4.1234 | 12.3k tok/s | 812 ms (fwd 300, bwd 400, opt 80, wait 32) |
 * dev peak 412 MiB | pinned 96 MiB" every `every` steps and at the last; a progress bar
 * (carriage return, no newline) on the other steps when tty. */
void zn_train_print_step(FILE *f, const struct zn_step_stats *st, int steps, int every,
			 bool tty);

#endif
