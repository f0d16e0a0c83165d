/* Training data loader: llm.c token files or bytes of text, mapped read-only, cut into
 * windows of T + 1 tokens; the global batch of world * B windows per step is split by rank
 * (layout in data.h). The window order per epoch is the identity or a seeded permutation
 * computed from (seed, epoch) only, so every rank agrees without talking. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "model/data.h"

struct zn_data {
	enum zn_data_kind kind;
	int B, T, rank, world;
	uint64_t seed;
	bool shuffle;
	void *map;
	size_t map_bytes;
	const void *tok; /* uint8, uint16 or uint32 tokens */
	int tok_bytes;
	uint64_t tok_count;
	uint64_t windows;
	uint64_t steps_per_epoch;
	uint64_t step;
	int max_token;
	uint64_t *perm;      /* windows entries when shuffling */
	uint64_t perm_epoch; /* epoch perm was drawn for; UINT64_MAX: none yet */
};

void zn_data_close(struct zn_data *d)
{
	if (!d)
		return;
	if (d->map)
		munmap(d->map, d->map_bytes);
	free(d->perm);
	free(d);
}

static uint32_t token_at(const struct zn_data *d, uint64_t i)
{
	switch (d->tok_bytes) {
	case 1:
		return ((const uint8_t *)d->tok)[i];
	case 2:
		return ((const uint16_t *)d->tok)[i];
	default:
		return ((const uint32_t *)d->tok)[i];
	}
}

/* llm.c header: magic, version (1: uint16 tokens, 2: uint32), token count. */
static int parse_token_header(struct zn_data *d, const char *path)
{
	const int32_t *h = d->map;
	uint64_t want;

	if (d->map_bytes < ZN_DATA_HEADER_INTS * 4) {
		zn_error("%s: starts with the token-file magic %d but is only %zu bytes, shorter "
			 "than the %d-byte header: the file is truncated", path, ZN_DATA_MAGIC,
			 d->map_bytes, ZN_DATA_HEADER_INTS * 4);
		return -EINVAL;
	}
	if (h[1] != 1 && h[1] != 2) {
		zn_error("%s: token file version %d: only 1 (uint16 tokens) and 2 (uint32) are "
			 "supported", path, h[1]);
		return -EINVAL;
	}
	d->tok_bytes = h[1] == 1 ? 2 : 4;
	if (h[2] < 0) {
		zn_error("%s: the header's token count %d is negative", path, h[2]);
		return -EINVAL;
	}
	d->tok_count = (uint64_t)h[2];
	want = ZN_DATA_HEADER_INTS * 4 + d->tok_count * (uint64_t)d->tok_bytes;
	if (d->map_bytes != want) {
		zn_error("%s: the header says %llu tokens (%llu bytes in all) but the file has "
			 "%zu bytes: %s", path, (unsigned long long)d->tok_count,
			 (unsigned long long)want, d->map_bytes,
			 d->map_bytes < want ? "it is truncated" : "it has trailing bytes");
		return -EINVAL;
	}
	d->tok = (const char *)d->map + ZN_DATA_HEADER_INTS * 4;
	return 0;
}

static int map_file(struct zn_data *d, const char *path)
{
	struct stat st;
	int fd, rc = 0;

	/* the data, read-only, mapped for the loader's lifetime */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		zn_error("%s: cannot open: %s", path, zn_strerror(rc));
		return rc;
	}
	if (fstat(fd, &st)) {
		rc = zn_check_errno(-1, "fstat", __FILE__, __LINE__);
		goto close_fd;
	}
	if (st.st_size == 0) {
		zn_error("%s: the file is empty", path);
		rc = -EINVAL;
		goto close_fd;
	}
	d->map_bytes = (size_t)st.st_size;
	d->map = mmap(NULL, d->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
	if (d->map == MAP_FAILED) {
		d->map = NULL;
		rc = zn_check_errno(-1, "mmap", __FILE__, __LINE__);
	}
close_fd:
	close(fd);
	return rc;
}

static uint32_t scan_max_token(const struct zn_data *d)
{
	uint32_t mx = 0;
	int64_t n = (int64_t)d->tok_count;

#pragma omp parallel for reduction(max : mx) schedule(static) if (n > (1 << 20))
	for (int64_t i = 0; i < n; i++) {
		uint32_t t = token_at(d, (uint64_t)i);

		if (t > mx)
			mx = t;
	}
	return mx;
}

static int check_args(const char *path, int B, int T, int rank, int world)
{
	if (B > 0 && T > 0 && world > 0 && rank >= 0 && rank < world)
		return 0;
	zn_error("%s: bad loader arguments B %d, T %d, rank %d of %d", path, B, T, rank, world);
	return -EINVAL;
}

int zn_data_open(struct zn_data **out, const char *path, int B, int T, int rank, int world,
		 uint64_t seed, bool shuffle)
{
	struct zn_data *d;
	uint64_t per_step = (uint64_t)world * (uint64_t)B;
	uint32_t max_token;
	int rc = check_args(path, B, T, rank, world);

	*out = NULL;
	if (rc)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = (struct zn_data){ .B = B, .T = T, .rank = rank, .world = world, .seed = seed,
			       .shuffle = shuffle, .perm_epoch = UINT64_MAX };
	rc = map_file(d, path);
	if (rc)
		goto close_data;
	if (d->map_bytes >= 4 && *(const int32_t *)d->map == ZN_DATA_MAGIC) {
		d->kind = ZN_DATA_TOKENS;
		rc = parse_token_header(d, path);
		if (rc)
			goto close_data;
	} else {
		d->kind = ZN_DATA_TEXT;
		d->tok = d->map;
		d->tok_bytes = 1;
		d->tok_count = d->map_bytes;
	}
	d->windows = d->tok_count > 0 ? (d->tok_count - 1) / (uint64_t)T : 0;
	d->steps_per_epoch = d->windows / per_step;
	if (!d->steps_per_epoch) {
		zn_error("%s: %llu tokens make %llu windows of T + 1 = %d, fewer than one step's "
			 "world x B = %llu: use a longer file or a smaller B or T", path,
			 (unsigned long long)d->tok_count, (unsigned long long)d->windows, T + 1,
			 (unsigned long long)per_step);
		rc = -EINVAL;
		goto close_data;
	}
	max_token = scan_max_token(d);
	if (max_token >= (uint32_t)INT32_MAX) {
		/* the vocabulary (max + 1) is an int everywhere */
		zn_error("%s: token id %lu is beyond the largest vocabulary zinc supports (%d): "
			 "the file is not a token file for a real tokenizer", path,
			 (unsigned long)max_token, INT32_MAX);
		rc = -EINVAL;
		goto close_data;
	}
	d->max_token = (int)max_token;
	if (shuffle) {
		d->perm = malloc(d->windows * sizeof(*d->perm));
		if (!d->perm) {
			rc = -ENOMEM;
			goto close_data;
		}
	}
	*out = d;
	return 0;
close_data:
	zn_data_close(d);
	return rc;
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

void zn_data_next(struct zn_data *d, int *tokens_h, int *targets_h)
{
	uint64_t epoch = d->step / d->steps_per_epoch;
	uint64_t first = (d->step % d->steps_per_epoch) * (uint64_t)d->world * (uint64_t)d->B +
			 (uint64_t)d->rank * (uint64_t)d->B;

	if (d->shuffle && d->perm_epoch != epoch)
		draw_perm(d, epoch);
	for (int b = 0; b < d->B; b++) {
		uint64_t w = first + (uint64_t)b;
		uint64_t start = (d->shuffle ? d->perm[w] : w) * (uint64_t)d->T;

		for (int t = 0; t < d->T; t++) {
			tokens_h[b * d->T + t] = (int)token_at(d, start + (uint64_t)t);
			targets_h[b * d->T + t] = (int)token_at(d, start + (uint64_t)t + 1);
		}
	}
	d->step++;
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

int zn_data_max_token(const struct zn_data *d)
{
	return d->max_token;
}

int zn_data_vocab(const struct zn_data *d)
{
	if (d->kind == ZN_DATA_TEXT)
		return 256;
	if (d->tok_bytes == 2 && d->max_token < 50257)
		return 50257;
	return d->max_token + 1;
}
