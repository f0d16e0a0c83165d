/* Training data: token files in llm.c's layout, or UTF-8 text as bytes.
 *
 * Token files (llm.c dev/data/, .bin): a header of 256 little-endian int32 (magic,
 * version, token count, the rest unused), then the tokens:
 *   GPT-2:   magic 20240520, version 1, uint16 tokens (vocab 50257)
 *   Llama 3: magic 20240801, version 7, uint32 tokens (vocab 128256)
 * (zinc also reads magic 20240520 version 2 with uint32 tokens, which it once documented.)
 * A bad version, or a size that does not match the header's count, is an error naming
 * the file. Format ZN_DATA_FORMAT_AUTO reads a file without a known magic as text only
 * when it is valid UTF-8 without NUL bytes (each byte a token, vocab 256, so a demo needs
 * nothing downloaded: data/demo.txt); anything else is refused naming the first bad byte,
 * unless the format is ZN_DATA_FORMAT_TEXT (every file as bytes). ZN_DATA_FORMAT_TOKENS
 * refuses a file without a known header. The magics start with a UTF-8 continuation byte,
 * so no text file is mistaken for a token file.
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
 *     if (zn_data_limit_vocab(d, vocab, &pos, &tok)) ... token tok at pos is >= vocab
 *     if (zn_data_next(d, tokens_h, targets_h))   // B * T ints each
 *             ... the file shrank or changed: stop
 *     zn_data_close(d);
 *
 * Masked token files (zinc tokenize --template writes them; supervised fine-tuning): the
 * same 256-int header with magic 20251264, version 1, the token count, and in int 5 the
 * number of labels; then uint32 entries: the token id in bits 0-30, bit 31
 * (ZN_DATA_NOT_LABEL) set when the token is no label. A window's target t is then
 * ZN_IGNORE_INDEX (zinc.h: Hugging Face's -100) where entry t + 1 has the bit; its input
 * is the id either way.
 *
 * The file is only an input: it must be a regular file (a FIFO, directory or device is
 * refused at open, naming the path). It is read with pread, never mapped, so a file
 * truncated while a run uses it is an error from zn_data_next, not a SIGBUS. A zn_data
 * is used by one thread at a time.
 */
#ifndef ZN_MODEL_DATA_H
#define ZN_MODEL_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "zinc.h"

#define ZN_DATA_MAGIC 20240520        /* llm.c GPT-2 token files (version 1, uint16) */
#define ZN_DATA_MAGIC_LLAMA3 20240801 /* llm.c Llama 3 token files (version 7, uint32) */
#define ZN_DATA_MAGIC_MASKED 20251264 /* zinc's ids + loss mask (version 1, uint32) */
#define ZN_DATA_NOT_LABEL 0x80000000u  /* masked files: the entry's token is no label */
#define ZN_DATA_HEADER_INTS 256
/* header int 3 == this: int 4 is the document delimiter token (zinc tokenize writes it;
 * llm.c leaves both 0) */
#define ZN_DATA_DOC_MARK 20241203

enum zn_data_kind {
	ZN_DATA_TOKENS = 0, /* llm.c token file */
	ZN_DATA_TEXT = 1,   /* bytes as tokens */
};

struct zn_data;

/* Opens path for batches of B x T on rank `rank` of `world`, reading it as `format`.
 * Returns 0, -errno (cannot open or read; not a regular file) or -EINVAL (bad arguments,
 * a malformed token file, a file that is neither, or fewer than world * B windows of
 * T + 1 tokens: the line logged says which). */
int zn_data_open_as(struct zn_data **out, const char *path, enum zn_data_format format,
		    int B, int T, int rank, int world, uint64_t seed, bool shuffle);
/* zn_data_open_as with ZN_DATA_FORMAT_AUTO. */
int zn_data_open(struct zn_data **out, const char *path, int B, int T, int rank, int world,
		 uint64_t seed, bool shuffle);
void zn_data_close(struct zn_data *d); /* accepts NULL */

/* Fills this rank's tokens_h and targets_h [B, T] for the current step and advances.
 * Returns 0, or a negative code (logged with the path) when the file can no longer be
 * read (truncated while in use) or holds a token >= the zn_data_limit_vocab limit. */
int zn_data_next(struct zn_data *d, int *tokens_h, int *targets_h);

/* Positions the loader at global step `step` (0 = the start), as if next had been called
 * step times: for resuming. */
void zn_data_seek(struct zn_data *d, uint64_t step);

enum zn_data_kind zn_data_kind_of(const struct zn_data *d);
uint64_t zn_data_token_count(const struct zn_data *d);
uint64_t zn_data_steps_per_epoch(const struct zn_data *d);
uint64_t zn_data_step(const struct zn_data *d); /* steps taken (global, across epochs) */
/* The largest token in the file (the model needs vocab > this); up to 2^32 - 1. */
int64_t zn_data_max_token(const struct zn_data *d);
/* The vocabulary the file implies: 256 for text, 50257 (GPT-2) for uint16 token files and
 * 128256 (Llama 3) for 20240801 files whose tokens fit it, else max_token + 1. */
int64_t zn_data_vocab(const struct zn_data *d);
/* Checks every token is below vocab: 0, or 1 with the first offending token and its
 * position (token index in the file) in *tok and *pos; negative on a read error. On 0,
 * zn_data_next also refuses any token >= vocab it reads later (the file changed). */
int zn_data_limit_vocab(struct zn_data *d, int64_t vocab, uint64_t *pos, int64_t *tok);
/* The token that starts each document (--packing documents, docs/packing.md): the
 * header's record (zinc tokenize), else 50256 (<|endoftext|>) for GPT-2 files and 128000
 * (<|begin_of_text|>) for Llama 3 files; -1 for text and other files. */
int64_t zn_data_doc_token(const struct zn_data *d);
/* tokens [first, first + count) of the file into out (checked against the vocabulary
 * limit, as zn_data_next; a masked file's ids without bit 31). 0 or a negative code
 * (logged). */
int zn_data_read(struct zn_data *d, uint64_t first, uint64_t count, int *out);
/* The same, and label[i] = whether token first + i is a label (always true in an unmasked
 * file); label may be NULL. */
int zn_data_read_labels(struct zn_data *d, uint64_t first, uint64_t count, int *out,
			bool *label);

/* The path given to open. */
const char *zn_data_path(const struct zn_data *d);
/* A masked token file (its targets may be ZN_IGNORE_INDEX). */
bool zn_data_masked(const struct zn_data *d);

#endif
