/* --packing documents (docs/packing.md): rows of T tokens packed from whole documents of a
 * token file, with each token's position in its document and the targets that stay
 * inside a document.
 *
 * Documents: a document starts at each delimiter token (zn_data_doc_token: the BOS or
 * EOS zinc tokenize put before each document; tokens before the first delimiter are a
 * document too). Pieces: a document of n <= T tokens is one piece; a longer one is cut
 * into pieces of T tokens and a last shorter one. Rows: pieces in file order, first fit
 * without reordering: a piece that does not fit in what is left of the row closes the
 * row (the rest is padding) and starts the next. Each row is one contiguous range of the
 * file, so the rows are kept as their start offsets (8 bytes per row).
 *
 * In a row: pos restarts at 0 at the row's start and at each delimiter; target t is the
 * file's next token when it belongs to the same document (a piece cut inside a long
 * document keeps its last target: the next piece's first token), else ZN_TARGET_IGNORE
 * (the token before a document boundary, and the file's last token); in a masked file
 * (SFT: each conversation a document) a next token of the same document that is no label
 * gives ZN_IGNORE_INDEX, as the window loader does. Padding: the
 * delimiter as token (0 without one), targets ignored, positions 0, 1, ... of a segment of
 * its own, so it never reaches a real token's attention.
 *
 * Batches as the window loader's: a step (zn_pack_next) takes world x B consecutive
 * rows, rank r the r-th B of them, so world ranks with B each see the rows one rank with
 * world x B would; an epoch is rows / (world x B) steps (the remaining rows are skipped),
 * then the rows start again. The step counter is the zn_data's own (zn_data_step,
 * zn_data_seek), so a resumed run continues where the checkpoint was.
 *
 *     struct zn_pack *p;
 *     zn_pack_open(&p, data, B, T, rank, world);   // data: an open zn_data, borrowed
 *     zn_pack_next(p, tokens, targets, pos);      // B x T ints each
 *     zn_pack_close(p);
 */
#ifndef ZN_DATA_PACK_H
#define ZN_DATA_PACK_H

#include <stdint.h>

struct zn_data;
struct zn_pack;

/* Scans the file for documents and cuts the rows. Returns 0, -ENOMEM, or -EINVAL (logged:
 * no document delimiter known for the file (text), fewer rows than one step's world x B,
 * a masked file whose delimiter is also a label, bad arguments). */
int zn_pack_open(struct zn_pack **out, struct zn_data *d, int B, int T, int rank, int world);
void zn_pack_close(struct zn_pack *p); /* accepts NULL; the zn_data stays open */

/* This rank's B rows of the current step into tokens, targets and pos [B, T], and
 * advances the zn_data's step. 0 or a negative code (logged: the file changed). */
int zn_pack_next(struct zn_pack *p, int *tokens, int *targets, int *pos);

uint64_t zn_pack_rows(const struct zn_pack *p);
uint64_t zn_pack_documents(const struct zn_pack *p);
uint64_t zn_pack_steps_per_epoch(const struct zn_pack *p);

#endif
