/* Training data: token files in llm.c's layout, or any other file as plain bytes.
 *
 * Token files (llm.c dev/data/, .bin): a header of 256 int32 (magic 20240520, version,
 * token count, the rest zero), then the tokens: version 1 uint16 (GPT-2's tokenizer),
 * version 2 uint32 (llm.c's llama 3 files). A bad magic or version, or a size that does
 * not match the header's count, is an error naming the file. Any file that does not start
 * with the magic is plain text: each byte is a token (vocab 256), so a demo needs nothing
 * downloaded (data/demo.txt).
 *
 * Batches: the file is cut into N = (tokens - 1) / T windows of T + 1 tokens (window w
 * starts at token w * T; inputs are its first T tokens, targets the last T: shifted by
 * one). Each step consumes world * B consecutive windows (the global batch); rank r takes
 * windows r*B .. r*B + B-1 of them, as llm.c's loader does, so world ranks with B each see
 * exactly the batch one rank with world * B would. An epoch is N / (world * B) steps (the
 * remainder windows are skipped); then the loader wraps to the start. With shuffle, each
 * epoch visits the windows in a permutation drawn from (seed, epoch) alone, the same on
 * every rank.
 *
 *     struct zn_data *d;
 *     if (zn_data_open(&d, "data/demo.txt", B, T, rank, world, seed, true))
 *             return 1;
 *     if (zn_data_max_token(d) >= cfg.vocab) ... the model's vocabulary is too small
 *     zn_data_next(d, tokens_h, targets_h);   // B * T ints each
 *     zn_data_close(d);
 *
 * The file is mapped read-only; a zn_data is used by one thread at a time.
 */
#ifndef ZN_MODEL_DATA_H
#define ZN_MODEL_DATA_H

#include <stdbool.h>
#include <stdint.h>

#define ZN_DATA_MAGIC 20240520
#define ZN_DATA_HEADER_INTS 256

enum zn_data_kind {
	ZN_DATA_TOKENS = 0, /* llm.c token file */
	ZN_DATA_TEXT = 1,   /* bytes as tokens */
};

struct zn_data;

/* Opens path for batches of B x T on rank `rank` of `world`. Returns 0, -errno (cannot
 * open or map) or -EINVAL (bad arguments, a malformed token file, or fewer than
 * world * B windows of T + 1 tokens: the line logged says which). */
int zn_data_open(struct zn_data **out, const char *path, int B, int T, int rank, int world,
		 uint64_t seed, bool shuffle);
void zn_data_close(struct zn_data *d); /* accepts NULL */

/* Fills this rank's tokens_h and targets_h [B, T] for the current step and advances. */
void zn_data_next(struct zn_data *d, int *tokens_h, int *targets_h);

/* Positions the loader at global step `step` (0 = the start), as if next had been called
 * step times: for resuming. */
void zn_data_seek(struct zn_data *d, uint64_t step);

enum zn_data_kind zn_data_kind_of(const struct zn_data *d);
uint64_t zn_data_token_count(const struct zn_data *d);
uint64_t zn_data_steps_per_epoch(const struct zn_data *d);
uint64_t zn_data_step(const struct zn_data *d); /* steps taken (global, across epochs) */
/* The largest token in the file (the model needs vocab > this). */
int zn_data_max_token(const struct zn_data *d);
/* The vocabulary the file implies: 256 for text, 50257 (GPT-2) for version 1 token files
 * whose tokens fit it, else max_token + 1. */
int zn_data_vocab(const struct zn_data *d);

#endif
