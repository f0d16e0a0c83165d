/* zinc train's input and output: this rank's token batches from a file (llm.c's layout)
 * and the header and per-step lines. Internal to src/cli. */
#ifndef ZN_CLI_TRAIN_IO_H
#define ZN_CLI_TRAIN_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/gpt2/gpt2.h"
#include "zinc.h"

struct zn_data;

struct zn_train_data {
	struct zn_data *d;
	int *inputs, *targets; /* this rank's gas x B x T for the current step */
	int B, T, gas;
};

/* Opens path (an llm.c token file, or UTF-8 text: one token per byte; `format` as
 * zinc.data_format says) for this engine's ranks and checks every token is below vocab
 * (else the error names the token, its position and the --vocab to use). Returns 0 or a
 * negative code (logged). */
int zn_train_data_open(struct zn_train_data *d, const char *path, enum zn_data_format format,
		       int vocab, const struct zn_engine *e, int T, uint64_t seed);
/* Fills inputs/targets for the next step: one global batch per micro-batch (N x B
 * consecutive windows of the file, rank r's the r-th B of them; llm.c's layout). Returns 0
 * or a negative code (logged: the file was truncated or changed during the run). */
int zn_train_data_next(struct zn_train_data *d);
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
