/* zinc train's input and output: this rank's token batches from a file (llm.c's layout)
 * and the header and per-step lines. Internal to zinc (src/train). */
#ifndef ZN_TRAIN_IO_H
#define ZN_TRAIN_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "train/train_model.h"
#include "zinc.h"

struct zn_data;
struct zn_pack;

struct zn_train_data {
	struct zn_data *d;
	int *inputs, *targets; /* this rank's gas x B x T for the current step */
	int B, T, gas;
	/* --packing documents (docs/packing.md): the rows, and each token's position in its
	 * document [gas x B x T]; NULL with --packing windows */
	struct zn_pack *pack;
	int *pos;
};

/* Opens path (an llm.c token file, or UTF-8 text: one token per byte; `format` as
 * zinc.data_format says) for this engine's ranks and checks every token is below vocab
 * (else the error names the token, its position and the --vocab to use). packed: the
 * file will be packed (zn_train_data_pack, which checks its rows against world x B), so
 * the window loader's check of world x B windows is not made. Returns 0 or a negative
 * code (logged). */
int zn_train_data_open(struct zn_train_data *d, const char *path, enum zn_data_format format,
		       int vocab, const struct zn_engine *e, int T, uint64_t seed, bool shuffle,
		       bool packed);
/* --packing documents: packs the open file's documents into rows (data/pack.h) and says
 * so on rank 0 ("<what>: packing documents: ..."; what NULL: no prefix);
 * zn_train_data_next then fills pos too. 0 or a negative code (logged). */
int zn_train_data_pack(struct zn_train_data *d, const struct zn_engine *e, const char *what);
/* Fills inputs/targets for the next step: one global batch per micro-batch (N x B
 * consecutive windows of the file, rank r's the r-th B of them; llm.c's layout). Returns 0
 * or a negative code (logged: the file was truncated or changed during the run). */
int zn_train_data_next(struct zn_train_data *d);
void zn_train_data_close(struct zn_train_data *d);

/* The data position, for checkpoint/resume: the data steps (global batches of one
 * micro-batch each; grad_accum per optimizer step) taken since the start, across epochs.
 * The epoch is position / zn_train_data_steps_per_epoch. Seeking to a saved position
 * gives the same batches from there as the run that saved it (the shuffle's permutation
 * depends only on the seed and the epoch), with any rank count. */
uint64_t zn_train_data_position(const struct zn_train_data *d);
void zn_train_data_seek(struct zn_train_data *d, uint64_t position);
uint64_t zn_train_data_steps_per_epoch(const struct zn_train_data *d); /* data steps */
/* The optimizer steps of `epochs` epochs (grad_accum data steps each, at least 1) into
 * *steps; ZN_EUSAGE (logged) when they are more than an int. */
int zn_train_data_epoch_steps(const struct zn_train_data *d, int epochs, int *steps);

void zn_train_print_header(FILE *f, const struct zn_config *cfg,
			   const struct zn_train_model *tm, const struct zn_engine *e, int T,
			   int steps);
/* The header's "memory plan: device 2.29 GiB, pinned 5.04 GiB + margin 2.00 MiB = 5.04 GiB
 * reserved (budget 62.8 GiB); gradients: pinned ring (2 buffers), 48.0 MiB" line: zinc
 * train's (zn_engine_memory) and zinc estimate's (zn_engine_plan_memory) for the same
 * flags are the same line. */
void zn_train_print_memory_plan(FILE *f, const struct zn_engine_memory *m);
/* "schedule: layer-major (...)" or "micro-batch (...)": the order the plan chose and why
 * (zinc.schedule), with the nvme bytes the step reads; train's header and zinc estimate */
void zn_train_print_schedule(FILE *f, const struct zn_engine_memory *m);
/* "step 3/20 | loss 4.1234 | lr 5e-05 | 12.3k tok/s | 812 ms (fwd 300 ms, bwd 400 ms, opt
 * 80 ms, wait 32 ms) | dev peak 412.0 MiB | pinned 96.0 MiB" (lr: the one this step used) (+ " | nvme read 1.2 GB/s, write
 * 820 MB/s" with state on nvme) every `every` steps and at the last; a progress bar
 * (carriage return, no newline) on the other steps when tty. Units as core/units.h. */
void zn_train_print_step(FILE *f, const struct zn_step_stats *st, int steps, int every,
			 bool tty);

/* The run's figures for the summary line (this rank's). */
struct zn_train_totals {
	int steps;
	uint64_t tokens;
	double step_ms;
	uint64_t pinned_peak, pinned_size, device_peak;
	uint64_t nvme_read, nvme_write;           /* measured, summed over the steps */
	uint64_t plan_nvme_read, plan_nvme_write; /* the plan's per step */
	uint64_t plan_nvme_first_read;            /* the plan's extra at the first step */
	/* frozen experts fetched per routed expert: fetches and stored bytes summed over the
	 * steps, and the same for every expert at every use (the whole layers' fetch) */
	uint64_t expert_fetches, expert_bytes, plan_expert_fetches, plan_expert_bytes;
};
void zn_train_totals_add(struct zn_train_totals *t, const struct zn_step_stats *st);
/* "summary: 3 steps | 1536 tokens | mean step 95.0 ms | 16.2k tok/s | peak RSS 412.30 MiB |
 * pinned peak 52.30 MiB of 1.00 GiB | dev peak 19.80 MiB | nvme per step read 94371840 B
 * (plan 94371840), write 70778880 B (plan 70778880)": peak RSS from the kernel
 * (getrusage ru_maxrss), NVMe bytes measured at the aio engine, exact, per step and rank;
 * with frozen experts fetched per routed expert "| experts per step 1.50 MiB of 12.00 MiB
 * (12.5%: 24 of 192 fetches)" (docs/lora.md). */
void zn_train_print_summary(FILE *f, const struct zn_train_totals *t);

#endif
