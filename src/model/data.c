/* Training data loader: llm.c token files or UTF-8 text as bytes, read with pread (never
 * mapped: a file truncated under a run is an error, not a SIGBUS), cut into windows of
 * T + 1 tokens; the global batch of world * B windows per step is split by rank (layout in
 * data.h). The window order per epoch is the identity or a seeded permutation computed
 * from (seed, epoch) only, so every rank agrees without talking. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsio.h"
#include "core/log.h"
#include "core/utf8.h"
#include "model/data.h"

#define SCAN_CHUNK (8u << 20) /* bytes per pread when scanning the whole file */

struct zn_data {
	enum zn_data_kind kind;
	int B, T, rank, world;
	uint64_t seed;
	bool shuffle;
	char *path;
	int fd;
	uint64_t file_bytes;
	uint64_t data_off; /* byte offset of token 0 */
	int tok_bytes;     /* 1 (text), 2 or 4 */
	bool masked;       /* ZN_DATA_MAGIC_MASKED: bit 31 of an entry marks no label */
	uint64_t tok_count;
	uint64_t windows;
	uint64_t steps_per_epoch;
	uint64_t step;
	int64_t max_token;
	uint64_t header_labels; /* masked: the header's label count (int 5) */
	int64_t vocab_limit; /* 0: none; else zn_data_next refuses tokens >= it */
	int64_t known_vocab; /* the tokenizer's vocabulary for this header, 0 if none */
	int64_t doc_token;   /* the document delimiter (zn_data_doc_token), -1 if none */
	unsigned char *win;  /* one window of T + 1 tokens as read */
	uint64_t *perm;      /* windows entries when shuffling */
	uint64_t perm_epoch; /* epoch perm was drawn for; UINT64_MAX: none yet */
};

void zn_data_close(struct zn_data *d)
{
	if (!d)
		return;
	if (d->fd >= 0)
		close(d->fd);
	free(d->win);
	free(d->perm);
	free(d->path);
	free(d);
}

static uint32_t token_in(const unsigned char *p, int tok_bytes, uint64_t i)
{
	const unsigned char *q = p + i * (uint64_t)tok_bytes;

	switch (tok_bytes) {
	case 1:
		return q[0];
	case 2:
		return (uint32_t)q[0] | (uint32_t)q[1] << 8;
	default:
		return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
		       (uint32_t)q[3] << 24;
	}
}

static int32_t le32(const unsigned char *p)
{
	return (int32_t)token_in(p, 4, 0);
}

/* llm.c header: magic, version, token count. */
static int parse_token_header(struct zn_data *d, const unsigned char *hb, size_t got)
{
	int32_t magic = le32(hb), version, count;
	uint64_t want;

	if (got < ZN_DATA_HEADER_INTS * 4) {
		zn_error("%s: starts with the token-file magic %d but is only %zu bytes, shorter "
			 "than the %d-byte header: the file is truncated", d->path, magic, got,
			 ZN_DATA_HEADER_INTS * 4);
		return -EINVAL;
	}
	version = le32(hb + 4);
	count = le32(hb + 8);
	if (magic == ZN_DATA_MAGIC && (version == 1 || version == 2)) {
		d->tok_bytes = version == 1 ? 2 : 4;
		d->known_vocab = version == 1 ? 50257 : 0;
	} else if (magic == ZN_DATA_MAGIC_LLAMA3 && version == 7) {
		d->tok_bytes = 4;
		d->known_vocab = 128256;
	} else if (magic == ZN_DATA_MAGIC_MASKED && version == 1) {
		d->tok_bytes = 4;
		d->masked = true;
	} else {
		zn_error("%s: token file magic %d with version %d: zinc reads llm.c's GPT-2 files "
			 "(magic %d, version 1, uint16 tokens), Llama 3 files (magic %d, "
			 "version 7, uint32 tokens) and its masked files (magic %d, version 1)",
			 d->path, magic, version, ZN_DATA_MAGIC, ZN_DATA_MAGIC_LLAMA3,
			 ZN_DATA_MAGIC_MASKED);
		return -EINVAL;
	}
	if (count < 0) {
		zn_error("%s: the header's token count %d is negative", d->path, count);
		return -EINVAL;
	}
	if (d->masked && le32(hb + 20) < 0) {
		zn_error("%s: the header's label count %d is negative", d->path, le32(hb + 20));
		return -EINVAL;
	}
	d->header_labels = d->masked ? (uint64_t)le32(hb + 20) : 0;
	d->tok_count = (uint64_t)count;
	d->data_off = ZN_DATA_HEADER_INTS * 4;
	/* the document delimiter: zinc tokenize's record, else the header's tokenizer's */
	if (le32(hb + 12) == ZN_DATA_DOC_MARK && le32(hb + 16) >= 0)
		d->doc_token = le32(hb + 16);
	else
		d->doc_token = magic == ZN_DATA_MAGIC_LLAMA3 ? 128000 :
			       version == 1 ? 50256 : -1;
	want = d->data_off + d->tok_count * (uint64_t)d->tok_bytes;
	if (d->file_bytes != want) {
		zn_error("%s: the header says %llu tokens (%llu bytes in all) but the file has "
			 "%llu bytes: %s", d->path, (unsigned long long)d->tok_count,
			 (unsigned long long)want, (unsigned long long)d->file_bytes,
			 d->file_bytes < want ? "it is truncated" : "it has trailing bytes");
		return -EINVAL;
	}
	return 0;
}

/* The largest of cnt tokens at p (aligned for tok_bytes; little-endian host). Plain loops
 * of one type each, which the compiler vectorizes: faster than the pread feeding them. */
static uint32_t chunk_max(const unsigned char *p, int tok_bytes, bool masked, uint64_t cnt)
{
	if (masked) {
		const uint32_t *q = (const uint32_t *)(const void *)p;
		uint32_t mx = 0;

		for (uint64_t i = 0; i < cnt; i++)
			mx = (q[i] & ~ZN_DATA_NOT_LABEL) > mx ? (q[i] & ~ZN_DATA_NOT_LABEL) : mx;
		return mx;
	}
	if (tok_bytes == 1) {
		unsigned char mx = 0;

		for (uint64_t i = 0; i < cnt; i++)
			mx = p[i] > mx ? p[i] : mx;
		return mx;
	}
	if (tok_bytes == 2) {
		const uint16_t *q = (const uint16_t *)(const void *)p;
		uint16_t mx = 0;

		for (uint64_t i = 0; i < cnt; i++)
			mx = q[i] > mx ? q[i] : mx;
		return mx;
	}
	{
		const uint32_t *q = (const uint32_t *)(const void *)p;
		uint32_t mx = 0;

		for (uint64_t i = 0; i < cnt; i++)
			mx = q[i] > mx ? q[i] : mx;
		return mx;
	}
}

/* The labels among cnt masked entries at p: those without bit 31. */
static uint64_t chunk_labels(const unsigned char *p, uint64_t cnt)
{
	const uint32_t *q = (const uint32_t *)(const void *)p;
	uint64_t n = 0;

	for (uint64_t i = 0; i < cnt; i++)
		n += !(q[i] & ZN_DATA_NOT_LABEL);
	return n;
}

/* A masked file's header counts its labels: a count that disagrees with the entries is a
 * file written by something else or damaged, and the loss's normalisation would be wrong. */
static int check_labels(const struct zn_data *d, uint64_t labels)
{
	if (!d->masked || labels == d->header_labels)
		return 0;
	zn_error("%s: the header counts %llu labels but the entries hold %llu: the masked file "
		 "is damaged (write it again with zinc tokenize --template)", d->path,
		 (unsigned long long)d->header_labels, (unsigned long long)labels);
	return -EINVAL;
}

/* One pass over the tokens: the largest, the labels of a masked file, and (text under auto)
 * UTF-8 validity; *bad_at is the offset of the first byte that is not text, or
 * UINT64_MAX. */
static int scan(struct zn_data *d, bool check_text, uint64_t *bad_at)
{
	unsigned char *buf = malloc(SCAN_CHUNK + 4);
	uint64_t off = 0, total = d->tok_count * (uint64_t)d->tok_bytes, labels = 0;
	size_t carry = 0;
	int64_t mx = 0;
	int rc = 0;

	*bad_at = UINT64_MAX;
	if (!buf)
		return -ENOMEM;
	while (!rc && off < total) {
		size_t n = total - off < SCAN_CHUNK ? (size_t)(total - off) : SCAN_CHUNK;
		uint64_t cnt = n / (uint64_t)d->tok_bytes;
		bool bad;

		rc = zn_pread_all(d->fd, buf + carry, n, d->data_off + off, d->path);
		if (!rc) {
			int64_t t = chunk_max(buf + carry, d->tok_bytes, d->masked, cnt);

			mx = t > mx ? t : mx;
			if (d->masked)
				labels += chunk_labels(buf + carry, cnt);
		}
		if (!rc && check_text && *bad_at == UINT64_MAX) {
			size_t ok = zn_utf8_prefix(buf, carry + n, &bad);

			if (bad || (off + n == total && ok < carry + n))
				*bad_at = off - carry + ok;
			carry = carry + n - ok;
			memmove(buf, buf + ok, carry);
		}
		off += n;
	}
	free(buf);
	d->max_token = mx;
	return rc ? rc : check_labels(d, labels);
}

static int refuse_format(const struct zn_data *d, enum zn_data_format format, int32_t magic,
			 uint64_t bad_at)
{
	if (format == ZN_DATA_FORMAT_TOKENS)
		zn_error("%s: not an llm.c token file (first int32 %d; GPT-2 files start with "
			 "%d, Llama 3 files with %d): give --data-format auto or text to read it "
			 "as text", d->path, magic, ZN_DATA_MAGIC, ZN_DATA_MAGIC_LLAMA3);
	else
		zn_error("%s: neither an llm.c token file (it does not start with GPT-2's magic "
			 "%d or Llama 3's %d) nor UTF-8 text (byte %llu is not): give "
			 "--data-format text to train on its bytes anyway", d->path, ZN_DATA_MAGIC,
			 ZN_DATA_MAGIC_LLAMA3, (unsigned long long)bad_at);
	return -EINVAL;
}

/* Decides the kind from the header and format, and checks the size. */
static int read_format(struct zn_data *d, enum zn_data_format format, bool *check_text,
		       int32_t *magic)
{
	unsigned char hb[ZN_DATA_HEADER_INTS * 4];
	size_t got = d->file_bytes < sizeof(hb) ? (size_t)d->file_bytes : sizeof(hb);
	int rc = zn_pread_all(d->fd, hb, got, 0, d->path);

	*check_text = false;
	*magic = got >= 4 ? le32(hb) : 0;
	if (rc)
		return rc;
	if (format != ZN_DATA_FORMAT_TEXT && (*magic == ZN_DATA_MAGIC ||
	    *magic == ZN_DATA_MAGIC_LLAMA3 || *magic == ZN_DATA_MAGIC_MASKED)) {
		d->kind = ZN_DATA_TOKENS;
		return parse_token_header(d, hb, got);
	}
	if (format == ZN_DATA_FORMAT_TOKENS)
		return refuse_format(d, format, *magic, 0);
	d->kind = ZN_DATA_TEXT;
	d->tok_bytes = 1;
	d->tok_count = d->file_bytes;
	*check_text = format == ZN_DATA_FORMAT_AUTO;
	return 0;
}

static int check_args(const char *path, int B, int T, int rank, int world)
{
	if (B > 0 && T > 0 && T < (1 << 28) && world > 0 && rank >= 0 && rank < world)
		return 0;
	zn_error("%s: bad loader arguments B %d, T %d, rank %d of %d", path, B, T, rank, world);
	return -EINVAL;
}

static int cut_windows(struct zn_data *d)
{
	uint64_t per_step = (uint64_t)d->world * (uint64_t)d->B;

	d->windows = d->tok_count > 0 ? (d->tok_count - 1) / (uint64_t)d->T : 0;
	d->steps_per_epoch = d->windows / per_step;
	if (d->steps_per_epoch)
		return 0;
	zn_error("%s: %llu tokens make %llu windows of T + 1 = %d, fewer than one step's "
		 "world x B = %llu: use a longer file or a smaller B or T", d->path,
		 (unsigned long long)d->tok_count, (unsigned long long)d->windows, d->T + 1,
		 (unsigned long long)per_step);
	return -EINVAL;
}

int zn_data_open_as(struct zn_data **out, const char *path, enum zn_data_format format,
		    int B, int T, int rank, int world, uint64_t seed, bool shuffle)
{
	struct zn_data *d;
	uint64_t bad_at;
	bool check_text;
	int32_t magic;
	int rc = check_args(path, B, T, rank, world);

	*out = NULL;
	if (rc)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = (struct zn_data){ .B = B, .T = T, .rank = rank, .world = world, .seed = seed,
			       .shuffle = shuffle, .perm_epoch = UINT64_MAX, .fd = -1,
			       .doc_token = -1 };
	d->path = strdup(path);
	if (!d->path) {
		rc = -ENOMEM;
		goto close_data;
	}
	/* the data, read-only: a regular file, never a FIFO or device */
	d->fd = zn_open_input_regular(path, "--data", &d->file_bytes);
	if (d->fd < 0) {
		rc = d->fd;
		goto close_data;
	}
	if (d->file_bytes == 0) {
		zn_error("%s: the file is empty", path);
		rc = -EINVAL;
		goto close_data;
	}
	rc = read_format(d, format, &check_text, &magic);
	if (!rc)
		rc = cut_windows(d);
	if (!rc)
		rc = scan(d, check_text, &bad_at);
	if (!rc && check_text && bad_at != UINT64_MAX)
		rc = refuse_format(d, format, magic, bad_at);
	if (rc)
		goto close_data;
	d->win = malloc(((size_t)T + 1) * (size_t)d->tok_bytes);
	d->perm = shuffle ? malloc(d->windows * sizeof(*d->perm)) : NULL;
	if (!d->win || (shuffle && !d->perm)) {
		rc = -ENOMEM;
		goto close_data;
	}
	*out = d;
	return 0;
close_data:
	zn_data_close(d);
	return rc;
}

int zn_data_open(struct zn_data **out, const char *path, int B, int T, int rank, int world,
		 uint64_t seed, bool shuffle)
{
	return zn_data_open_as(out, path, ZN_DATA_FORMAT_AUTO, B, T, rank, world, seed,
			       shuffle);
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Fisher-Yates with a splitmix64 stream keyed by (seed, epoch). The modulo bias is below
 * windows / 2^64: irrelevant here. */
static void draw_perm(struct zn_data *d, uint64_t epoch)
{
	uint64_t state = mix64(mix64(d->seed) ^ epoch);

	for (uint64_t i = 0; i < d->windows; i++)
		d->perm[i] = i;
	for (uint64_t i = d->windows - 1; i > 0; i--) {
		uint64_t j, t;

		state = mix64(state);
		j = state % (i + 1);
		t = d->perm[i];
		d->perm[i] = d->perm[j];
		d->perm[j] = t;
	}
	d->perm_epoch = epoch;
}

int zn_data_next(struct zn_data *d, int *tokens_h, int *targets_h)
{
	uint64_t epoch = d->step / d->steps_per_epoch;
	uint64_t first = (d->step % d->steps_per_epoch) * (uint64_t)d->world * (uint64_t)d->B +
			 (uint64_t)d->rank * (uint64_t)d->B;
	size_t n = ((size_t)d->T + 1) * (size_t)d->tok_bytes;

	if (d->shuffle && d->perm_epoch != epoch)
		draw_perm(d, epoch);
	for (int b = 0; b < d->B; b++) {
		uint64_t w = first + (uint64_t)b;
		uint64_t start = (d->shuffle ? d->perm[w] : w) * (uint64_t)d->T;
		int rc = zn_pread_all(d->fd, d->win, n,
				      d->data_off + start * (uint64_t)d->tok_bytes, d->path);

		if (rc)
			return rc;
		for (int t = 0; t <= d->T; t++) {
			uint32_t v = token_in(d->win, d->tok_bytes, (uint64_t)t);
			bool label = !d->masked || !(v & ZN_DATA_NOT_LABEL);

			if (d->masked)
				v &= ~ZN_DATA_NOT_LABEL;
			if (v > INT32_MAX || (d->vocab_limit && v >= d->vocab_limit)) {
				/* an int holds every token below a vocabulary zinc can have */
				zn_error("%s: token %u at position %llu is not below the vocabulary "
					 "%lld: the file changed while training, or zn_data_limit_vocab "
					 "was not called", d->path, v,
					 (unsigned long long)(start + (uint64_t)t),
					 (long long)(d->vocab_limit ? d->vocab_limit : INT32_MAX));
				return -EINVAL;
			}
			if (t < d->T)
				tokens_h[b * d->T + t] = (int)v;
			if (t > 0)
				targets_h[b * d->T + t - 1] = label ? (int)v : ZN_IGNORE_INDEX;
		}
	}
	d->step++;
	return 0;
}

int zn_data_limit_vocab(struct zn_data *d, int64_t vocab, uint64_t *pos, int64_t *tok)
{
	unsigned char *buf;
	uint64_t off = 0, total = d->tok_count * (uint64_t)d->tok_bytes;
	int rc = 0;

	if (d->max_token < vocab) {
		d->vocab_limit = vocab;
		return 0;
	}
	/* the first offending token, for the error line */
	buf = malloc(SCAN_CHUNK);
	if (!buf)
		return -ENOMEM;
	while (!rc && off < total) {
		size_t n = total - off < SCAN_CHUNK ? (size_t)(total - off) : SCAN_CHUNK;
		uint64_t cnt = n / (uint64_t)d->tok_bytes;

		rc = zn_pread_all(d->fd, buf, n, d->data_off + off, d->path);
		for (uint64_t i = 0; !rc && i < cnt; i++) {
			int64_t t = token_in(buf, d->tok_bytes, i) &
				    (d->masked ? ~ZN_DATA_NOT_LABEL : 0xffffffffu);

			if (t >= vocab) {
				*pos = off / (uint64_t)d->tok_bytes + i;
				*tok = t;
				rc = 1;
			}
		}
		off += n;
	}
	free(buf);
	if (!rc) {
		zn_error("%s: the largest token %lld was no longer found: the file changed",
			 d->path, (long long)d->max_token);
		rc = -EIO;
	}
	return rc;
}

void zn_data_seek(struct zn_data *d, uint64_t step)
{
	d->step = step;
}

enum zn_data_kind zn_data_kind_of(const struct zn_data *d)
{
	return d->kind;
}

uint64_t zn_data_token_count(const struct zn_data *d)
{
	return d->tok_count;
}

uint64_t zn_data_steps_per_epoch(const struct zn_data *d)
{
	return d->steps_per_epoch;
}

uint64_t zn_data_step(const struct zn_data *d)
{
	return d->step;
}

int64_t zn_data_max_token(const struct zn_data *d)
{
	return d->max_token;
}

int64_t zn_data_vocab(const struct zn_data *d)
{
	if (d->kind == ZN_DATA_TEXT)
		return 256;
	if (d->known_vocab && d->max_token < d->known_vocab)
		return d->known_vocab;
	return d->max_token + 1;
}

const char *zn_data_path(const struct zn_data *d)
{
	return d->path;
}

int64_t zn_data_doc_token(const struct zn_data *d)
{
	return d->kind == ZN_DATA_TOKENS ? d->doc_token : -1;
}

int zn_data_read(struct zn_data *d, uint64_t first, uint64_t count, int *out)
{
	return zn_data_read_labels(d, first, count, out, NULL);
}

int zn_data_read_labels(struct zn_data *d, uint64_t first, uint64_t count, int *out,
			bool *label)
{
	unsigned char *buf;
	uint64_t done = 0;
	int rc = 0;

	if (first > d->tok_count || count > d->tok_count - first) {
		zn_error("%s: tokens %llu .. %llu asked, the file holds %llu", d->path,
			 (unsigned long long)first, (unsigned long long)(first + count),
			 (unsigned long long)d->tok_count);
		return -EINVAL;
	}
	buf = malloc(count < SCAN_CHUNK / 4 ? count * 4 + 4 : SCAN_CHUNK);
	if (!buf)
		return -ENOMEM;
	while (!rc && done < count) {
		uint64_t n = count - done, cap = SCAN_CHUNK / 4;

		n = n < cap ? n : cap;
		rc = zn_pread_all(d->fd, buf, (size_t)(n * (uint64_t)d->tok_bytes),
				  d->data_off + (first + done) * (uint64_t)d->tok_bytes, d->path);
		for (uint64_t i = 0; !rc && i < n; i++) {
			uint32_t v = token_in(buf, d->tok_bytes, i);

			if (label)
				label[done + i] = !d->masked || !(v & ZN_DATA_NOT_LABEL);
			if (d->masked)
				v &= ~ZN_DATA_NOT_LABEL;
			if (v > INT32_MAX || (d->vocab_limit && v >= d->vocab_limit)) {
				zn_error("%s: token %u at position %llu is not below the vocabulary "
					 "%lld: the file changed while training", d->path, v,
					 (unsigned long long)(first + done + i),
					 (long long)(d->vocab_limit ? d->vocab_limit : INT32_MAX));
				rc = -EINVAL;
			}
			out[done + i] = (int)v;
		}
		done += n;
	}
	free(buf);
	return rc;
}

bool zn_data_masked(const struct zn_data *d)
{
	return d->masked;
}
