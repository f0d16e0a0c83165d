/* Streamed llm.c token files (see tokfile.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "data/tokfile.h"
#include "model/data.h"

#define TOKFILE_BUF ((size_t)4 << 20)

static int write_header(struct zn_tokfile *w, uint64_t count)
{
	int32_t h[ZN_DATA_HEADER_INTS] = { 0 };

	h[0] = w->masked ? ZN_DATA_MAGIC_MASKED : w->u32 ? ZN_DATA_MAGIC_LLAMA3 : ZN_DATA_MAGIC;
	h[1] = w->masked ? 1 : w->u32 ? 7 : 1;
	h[2] = (int32_t)count;
	if (w->doc_token >= 0) { /* the document delimiter, for --packing documents */
		h[3] = ZN_DATA_DOC_MARK;
		h[4] = (int32_t)w->doc_token;
	}
	if (w->masked) /* the label count (docs/data.md) */
		h[5] = (int32_t)w->labels;
	if (pwrite(w->af.fd, h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return zn_check_errno(-1, "pwrite header", __FILE__, __LINE__);
	return 0;
}

int zn_tokfile_begin(struct zn_tokfile *w, const char *path, int64_t vocab)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->af.fd = -1;
	w->af.dir_fd = -1;
	w->path = path;
	w->u32 = vocab > 65536;
	w->doc_token = -1;
	w->cap = TOKFILE_BUF;
	if (!(w->buf = malloc(w->cap)))
		return -ENOMEM;
	rc = zn_atomic_file_begin(&w->af, path, "token file");
	if (!rc)
		rc = write_header(w, 0);
	if (!rc && lseek(w->af.fd, ZN_DATA_HEADER_INTS * 4, SEEK_SET) < 0)
		rc = zn_check_errno(-1, "lseek", __FILE__, __LINE__);
	if (rc) {
		zn_tokfile_abort(w);
		return rc;
	}
	return 0;
}

static int flush(struct zn_tokfile *w)
{
	int rc = w->n ? zn_write_all(w->af.fd, w->buf, w->n, w->path) : 0;

	w->n = 0;
	return rc;
}

int zn_tokfile_begin_masked(struct zn_tokfile *w, const char *path)
{
	int rc = zn_tokfile_begin(w, path, (int64_t)1 << 31);

	w->masked = true;
	return rc;
}

int zn_tokfile_append_masked(struct zn_tokfile *w, const int32_t *ids, const int32_t *mask,
			     size_t n)
{
	size_t width = 4;

	if (w->count + n > INT32_MAX) {
		zn_error("%s: more than 2^31 - 1 tokens, the most the header counts: write "
			 "several files (split the inputs)", w->path);
		return -EFBIG;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)ids[i] | (mask[i] ? 0u : ZN_DATA_NOT_LABEL);
		int rc = 0;

		if (w->n + width > w->cap && (rc = flush(w)))
			return rc;
		memcpy(w->buf + w->n, &v, 4);
		w->n += width;
		w->labels += mask[i] ? 1 : 0;
	}
	w->count += n;
	return 0;
}

int zn_tokfile_append(struct zn_tokfile *w, const int32_t *ids, size_t n)
{
	size_t width = w->u32 ? 4 : 2;

	if (w->masked) /* every token a label */
		for (size_t i = 0; i < n; i++) {
			int32_t one = 1;
			int rc = zn_tokfile_append_masked(w, ids + i, &one, 1);

			if (rc)
				return rc;
		}
	if (w->masked)
		return 0;

	if (w->count + n > INT32_MAX) {
		zn_error("%s: more than 2^31 - 1 tokens, the most llm.c's header counts: write "
			 "several files (split the inputs)", w->path);
		return -EFBIG;
	}
	for (size_t i = 0; i < n; i++) {
		int rc = 0;

		if (w->n + width > w->cap && (rc = flush(w)))
			return rc;
		if (w->u32) {
			uint32_t v = (uint32_t)ids[i];

			memcpy(w->buf + w->n, &v, 4);
		} else {
			uint16_t v = (uint16_t)ids[i];

			memcpy(w->buf + w->n, &v, 2);
		}
		w->n += width;
	}
	w->count += n;
	return 0;
}

int zn_tokfile_commit(struct zn_tokfile *w)
{
	int rc = flush(w);

	if (!rc)
		rc = write_header(w, w->count);
	if (rc) {
		zn_tokfile_abort(w);
		return rc;
	}
	rc = zn_atomic_file_commit(&w->af);
	free(w->buf);
	w->buf = NULL;
	return rc;
}

void zn_tokfile_abort(struct zn_tokfile *w)
{
	zn_atomic_file_abort(&w->af);
	free(w->buf);
	w->buf = NULL;
}
