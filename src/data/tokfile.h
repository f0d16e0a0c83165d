/* Writing llm.c token files (the layout src/model/data.h reads), streamed: the header's
 * token count is filled in at the end, and the file appears under its name only when
 * complete (written to a temporary next to it and renamed).
 *   vocab <= 65536: magic 20240520, version 1, uint16 tokens (GPT-2's header)
 *   otherwise:      magic 20240801, version 7, uint32 tokens (Llama 3's header)
 *   masked (zn_tokfile_begin_masked): magic 20251264, version 1, uint32 entries: the id in
 *                   bits 0-30, bit 31 set when the token is no label (loss mask 0); the
 *                   header's int 5 counts the labels (data.h, docs/data.md)
 */
#ifndef ZN_DATA_TOKFILE_H
#define ZN_DATA_TOKFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fsio.h"

struct zn_tokfile {
	struct zn_atomic_file af;
	bool u32;
	bool masked;
	uint64_t count, labels;
	unsigned char *buf;
	size_t n, cap;
	const char *path;
	int64_t doc_token; /* the document delimiter for the header (ZN_DATA_DOC_MARK), or
			    * -1 (begin sets it; the caller may set it before commit) */
};

int zn_tokfile_begin(struct zn_tokfile *w, const char *path, int64_t vocab);
int zn_tokfile_begin_masked(struct zn_tokfile *w, const char *path);
/* masked files only: mask[i] 1 (a label) or 0 */
int zn_tokfile_append_masked(struct zn_tokfile *w, const int32_t *ids, const int32_t *mask,
			     size_t n);
/* a masked file takes these as labels */
int zn_tokfile_append(struct zn_tokfile *w, const int32_t *ids, size_t n);
int zn_tokfile_commit(struct zn_tokfile *w);
void zn_tokfile_abort(struct zn_tokfile *w); /* safe after commit or a failed begin */

#endif
