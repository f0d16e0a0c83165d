/* src/model data loader: llm.c token files (GPT-2 and Llama 3) and UTF-8 text, batch
 * contents (targets shifted by one), the rank split equal to one rank with world x B,
 * wrapping, seeded shuffling, seek, every malformed-file error, files that are not
 * regular, a file truncated during a run, and tokens beyond the vocabulary. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/data.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_data_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(data, .init = make_dir, .fini = remove_dir);

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* token file with ntok seeded uint16 tokens < 50257; header fields overridable. */
static const char *write_tokens(const char *name, int ntok, int version, int header_count,
				int drop_bytes, uint16_t *out_tokens)
{
	static char p[128];
	int32_t h[256] = { ZN_DATA_MAGIC, version, header_count };
	uint64_t s = 17;
	FILE *fp;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fp = fopen(p, "wb");
	cr_assert(fp);
	fwrite(h, 4, 256, fp);
	for (int i = 0; i < ntok; i++) {
		uint16_t t = (uint16_t)(rng_next(&s) % 50257);

		if (out_tokens)
			out_tokens[i] = t;
		fwrite(&t, 2, 1, fp);
	}
	fclose(fp);
	if (drop_bytes)
		cr_assert_eq(truncate(p, 1024 + 2L * ntok - drop_bytes), 0);
	return p;
}

Test(data, token_file_batches_are_windows_with_shifted_targets)
{
	uint16_t tok[1001];
	const char *p = write_tokens("a.bin", 1001, 1, 1001, 0, tok);
	struct zn_data *d;
	int x[2 * 10], y[2 * 10], mx = 0;

	cr_assert_eq(zn_data_open(&d, p, 2, 10, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TOKENS);
	cr_expect_eq(zn_data_token_count(d), 1001);
	cr_expect_eq(zn_data_steps_per_epoch(d), 50, "100 windows of 11 tokens / 2");
	for (int i = 0; i < 1001; i++)
		mx = tok[i] > mx ? tok[i] : mx;
	cr_expect_eq(zn_data_max_token(d), mx);
	cr_expect_eq(zn_data_vocab(d), 50257);
	for (int step = 0; step < 3; step++) {
		zn_data_next(d, x, y);
		for (int b = 0; b < 2; b++)
			for (int t = 0; t < 10; t++) {
				int at = (step * 2 + b) * 10 + t;

				cr_assert_eq(x[b * 10 + t], tok[at], "step %d b %d t %d", step, b, t);
				cr_assert_eq(y[b * 10 + t], tok[at + 1]);
			}
	}
	cr_expect_eq(zn_data_step(d), 3);
	zn_data_close(d);
	zn_data_close(NULL);
}

/* world ranks with B each == one rank with world * B, for every step across epochs */
static void check_split_w(bool shuffle, int W)
{
	const char *p = write_tokens("s.bin", 2000, 1, 2000, 0, NULL);
	enum { B = 2, T = 7 };
	struct zn_data *one, *r[8];
	int x1[8 * B * T], y1[8 * B * T], x[B * T], y[B * T];

	cr_assert_eq(zn_data_open(&one, p, W * B, T, 0, 1, 5, shuffle), 0);
	for (int i = 0; i < W; i++)
		cr_assert_eq(zn_data_open(&r[i], p, B, T, i, W, 5, shuffle), 0);
	cr_expect_eq(zn_data_steps_per_epoch(one), zn_data_steps_per_epoch(r[0]));
	for (uint64_t step = 0; step < 2 * zn_data_steps_per_epoch(one) + 3; step++) {
		zn_data_next(one, x1, y1);
		for (int i = 0; i < W; i++) {
			zn_data_next(r[i], x, y);
			cr_assert_eq(memcmp(x, x1 + i * B * T, sizeof(x)), 0,
				     "step %llu rank %d tokens", (unsigned long long)step, i);
			cr_assert_eq(memcmp(y, y1 + i * B * T, sizeof(y)), 0);
		}
	}
	zn_data_close(one);
	for (int i = 0; i < W; i++)
		zn_data_close(r[i]);
}

/* 2, 3 and 4 ranks each see their share of one rank's global batch (shuffled or not) */
static void check_split(bool shuffle)
{
	for (int w = 2; w <= 4; w++)
		check_split_w(shuffle, w);
}

Test(data, ranks_split_the_global_batch_as_one_rank_sees_it)
{
	check_split(false);
	check_split(true);
}

Test(data, wraps_after_an_epoch_and_seeks)
{
	const char *p = write_tokens("w.bin", 500, 1, 500, 0, NULL);
	struct zn_data *d;
	int x0[4 * 8], y0[4 * 8], x[4 * 8], y[4 * 8], x5[4 * 8];
	uint64_t spe;

	cr_assert_eq(zn_data_open(&d, p, 4, 8, 0, 1, 0, false), 0);
	spe = zn_data_steps_per_epoch(d);
	cr_expect_eq(spe, 15, "62 windows / 4");
	zn_data_next(d, x0, y0);
	for (uint64_t s = 1; s < spe; s++) {
		zn_data_next(d, x, y);
		if (s == 5)
			memcpy(x5, x, sizeof(x));
	}
	zn_data_next(d, x, y);
	cr_expect_eq(memcmp(x, x0, sizeof(x)), 0, "step spe is step 0 again");
	cr_expect_eq(memcmp(y, y0, sizeof(y)), 0);
	zn_data_seek(d, 5);
	zn_data_next(d, x, y);
	cr_expect_eq(memcmp(x, x5, sizeof(x)), 0, "seek(5) then next = the 6th batch");
	zn_data_close(d);
}

Test(data, shuffle_is_a_seeded_permutation_per_epoch)
{
	enum { B = 1, T = 4 };
	const char *p = write_tokens("p.bin", 401, 1, 401, 0, NULL);
	struct zn_data *a, *b, *c, *plain;
	int xa[T], ya[T], xb[T], xc[T], xp[T], y[T];
	int same_as_plain = 0, same_seed_diff = 0, other_seed_same = 0, epoch_same = 0;
	int first[100][T];

	cr_assert_eq(zn_data_open(&a, p, B, T, 0, 1, 1, true), 0);
	cr_assert_eq(zn_data_open(&b, p, B, T, 0, 1, 1, true), 0);
	cr_assert_eq(zn_data_open(&c, p, B, T, 0, 1, 2, true), 0);
	cr_assert_eq(zn_data_open(&plain, p, B, T, 0, 1, 1, false), 0);
	cr_assert_eq(zn_data_steps_per_epoch(a), 100);
	for (int s = 0; s < 100; s++) {
		zn_data_next(a, xa, ya);
		zn_data_next(b, xb, y);
		zn_data_next(c, xc, y);
		zn_data_next(plain, xp, y);
		memcpy(first[s], xa, sizeof(xa));
		same_as_plain += !memcmp(xa, xp, sizeof(xa));
		same_seed_diff += !!memcmp(xa, xb, sizeof(xa));
		other_seed_same += !memcmp(xa, xc, sizeof(xa));
		for (int t = 0; t < T - 1; t++)
			cr_assert_eq(ya[t], xa[t + 1], "targets shifted by one");
	}
	/* every window exactly once in the epoch: compare with the plain order as a set */
	zn_data_seek(plain, 0);
	for (int s = 0; s < 100; s++) {
		int found = 0;

		zn_data_next(plain, xp, y);
		for (int j = 0; j < 100; j++)
			found += !memcmp(first[j], xp, sizeof(xp));
		cr_assert_eq(found, 1, "window %d appears %d times in the shuffled epoch", s,
			     found);
	}
	for (int s = 0; s < 100; s++) {
		zn_data_next(a, xa, ya);
		epoch_same += !memcmp(xa, first[s], sizeof(xa));
	}
	cr_expect_eq(same_seed_diff, 0, "same seed, same order");
	cr_expect_lt(same_as_plain, 10, "shuffled order is not the file order");
	cr_expect_lt(other_seed_same, 10, "another seed, another order");
	cr_expect_lt(epoch_same, 10, "each epoch draws a new order");
	zn_data_close(a);
	zn_data_close(b);
	zn_data_close(c);
	zn_data_close(plain);
}

Test(data, text_is_bytes)
{
	char p[128];
	FILE *fp;
	struct zn_data *d;
	int x[3], y[3];

	snprintf(p, sizeof(p), "%s/t.txt", dir);
	fp = fopen(p, "w");
	fputs("Hello, world!\xff", fp);
	fclose(fp);
	cr_expect_eq(zn_data_open(&d, p, 1, 3, 0, 1, 0, false), -EINVAL, "\\xff: not UTF-8");
	cr_assert_eq(zn_data_open_as(&d, p, ZN_DATA_FORMAT_TEXT, 1, 3, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TEXT);
	cr_expect_eq(zn_data_vocab(d), 256);
	cr_expect_eq(zn_data_max_token(d), 255);
	zn_data_next(d, x, y);
	cr_expect(x[0] == 'H' && x[1] == 'e' && x[2] == 'l' && y[0] == 'e' && y[2] == 'l');
	zn_data_next(d, x, y);
	cr_expect(x[0] == 'l' && x[1] == 'o' && x[2] == ',' && y[2] == ' ');
	zn_data_close(d);
}

Test(data, demo_text_is_there_and_long_enough)
{
	struct zn_data *d;

	cr_assert_eq(zn_data_open(&d, ZN_TEST_SRC_DIR "/data/demo.txt", 8, 64, 0, 1, 0, true),
		     0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TEXT);
	cr_expect_gt(zn_data_token_count(d), 20000);
	cr_expect_lt(zn_data_max_token(d), 128, "plain ASCII");
	zn_data_close(d);
}

Test(data, rejects_malformed_files_and_bad_arguments)
{
	struct zn_data *d = NULL;
	char p[128];
	FILE *fp;

	cr_expect_neq(zn_data_open(&d, write_tokens("v.bin", 100, 3, 100, 0, NULL), 1, 4, 0, 1,
				   0, false), 0, "version 3");
	cr_expect_neq(zn_data_open(&d, write_tokens("t.bin", 100, 1, 100, 3, NULL), 1, 4, 0, 1,
				   0, false), 0, "truncated data");
	cr_expect_neq(zn_data_open(&d, write_tokens("c.bin", 100, 1, 90, 0, NULL), 1, 4, 0, 1,
				   0, false), 0, "trailing bytes beyond the count");
	cr_expect_neq(zn_data_open(&d, write_tokens("n.bin", 100, 1, -5, 0, NULL), 1, 4, 0, 1,
				   0, false), 0, "negative count");
	cr_expect_neq(zn_data_open(&d, write_tokens("h.bin", 0, 1, 0, 1000, NULL), 1, 4, 0, 1,
				   0, false), 0, "header truncated");
	cr_expect_neq(zn_data_open(&d, write_tokens("s.bin", 20, 1, 20, 0, NULL), 2, 10, 0, 1,
				   0, false), 0, "one window of 11, not 2");
	cr_expect_eq(zn_data_open(&d, write_tokens("ok.bin", 21, 1, 21, 0, NULL), 2, 10, 0, 1,
				  0, false), 0, "exactly two windows");
	zn_data_close(d);
	snprintf(p, sizeof(p), "%s/empty.txt", dir);
	fp = fopen(p, "w");
	fclose(fp);
	cr_expect_neq(zn_data_open(&d, p, 1, 4, 0, 1, 0, false), 0, "empty");
	cr_expect_neq(zn_data_open(&d, "/nonexistent/file", 1, 4, 0, 1, 0, false), 0);
	cr_expect_neq(zn_data_open(&d, p, 1, 4, 2, 2, 0, false), 0, "rank >= world");
	cr_expect_neq(zn_data_open(&d, p, 0, 4, 0, 1, 0, false), 0, "B 0");
	cr_expect_null(d);
}

/* A file of raw bytes. */
static const char *write_bytes(const char *name, const void *bytes, size_t n)
{
	static char p[128];
	FILE *fp;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fp = fopen(p, "wb");
	cr_assert(fp);
	cr_assert_eq(fwrite(bytes, 1, n, fp), n);
	fclose(fp);
	return p;
}

/* llm.c Llama 3 layout: magic 20240801, version 7, uint32 tokens. */
static const char *write_llama3(const char *name, const uint32_t *tok, int n)
{
	static char p[128];
	int32_t h[256] = { ZN_DATA_MAGIC_LLAMA3, 7, n };
	FILE *fp;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fp = fopen(p, "wb");
	cr_assert(fp);
	fwrite(h, 4, 256, fp);
	fwrite(tok, 4, (size_t)n, fp);
	fclose(fp);
	return p;
}

Test(data, llama3_token_files_are_uint32_tokens)
{
	uint32_t tok[41];
	struct zn_data *d;
	int x[2 * 4], y[2 * 4];
	uint64_t pos = 0;
	int64_t bad = 0;

	for (int i = 0; i < 41; i++)
		tok[i] = (uint32_t)(i * 3001 % 128256);
	cr_assert_eq(zn_data_open(&d, write_llama3("l3.bin", tok, 41), 2, 4, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TOKENS);
	cr_expect_eq(zn_data_token_count(d), 41);
	cr_expect_eq(zn_data_vocab(d), 128256, "Llama 3's vocabulary");
	cr_expect_eq(zn_data_limit_vocab(d, 128256, &pos, &bad), 0);
	cr_assert_eq(zn_data_next(d, x, y), 0);
	cr_assert_eq(zn_data_next(d, x, y), 0);
	for (int i = 0; i < 8; i++) {
		cr_expect_eq(x[i], (int)tok[8 + i], "token %d above 65535 read whole", i);
		cr_expect_eq(y[i], (int)tok[9 + i]);
	}
	zn_data_close(d);
	/* the same magic with GPT-2's version is not a Llama 3 file */
	{
		int32_t h[256] = { ZN_DATA_MAGIC_LLAMA3, 1, 0 };

		cr_expect_eq(zn_data_open(&d, write_bytes("l3v1.bin", h, sizeof(h)), 1, 1, 0, 1, 0,
					  false), -EINVAL);
	}
}

/* A masked file's header counts its labels (int 5): a count the entries disagree with is
 * refused when opened, naming both. */
Test(data, masked_file_label_count_must_match_its_entries, .init = cr_redirect_stderr)
{
	int32_t h[256 + 9] = { ZN_DATA_MAGIC_MASKED, 1, 9, 0, 0, 5 };
	struct zn_data *d = NULL;
	char err[4096];
	size_t n;

	for (int i = 0; i < 9; i++) /* labels at 0, 2, 4, 6, 8 */
		h[256 + i] = (int32_t)((uint32_t)(10 + i) | (i % 2 ? ZN_DATA_NOT_LABEL : 0));
	cr_assert_eq(zn_data_open(&d, write_bytes("m.bin", h, sizeof(h)), 1, 4, 0, 1, 0, false), 0);
	cr_expect(zn_data_masked(d));
	zn_data_close(d);
	h[5] = 6;
	cr_expect_eq(zn_data_open(&d, write_bytes("m6.bin", h, sizeof(h)), 1, 4, 0, 1, 0, false),
		     -EINVAL);
	cr_expect_null(d);
	h[5] = -1;
	cr_expect_eq(zn_data_open(&d, write_bytes("mneg.bin", h, sizeof(h)), 1, 4, 0, 1, 0, false),
		     -EINVAL);
	fflush(stderr);
	n = fread(err, 1, sizeof(err) - 1, cr_get_redirected_stderr());
	err[n] = 0;
	cr_expect(strstr(err, "m6.bin: the header counts 6 labels but the entries hold 5"), "%s",
		  err);
	cr_expect(strstr(err, "mneg.bin: the header's label count -1 is negative"), "%s", err);
}

Test(data, binary_without_a_known_header_is_refused_unless_text_is_asked)
{
	uint16_t tok[64];
	struct zn_data *d = NULL;
	const char *p;

	for (int i = 0; i < 64; i++)
		tok[i] = (uint16_t)(1000 + i * 37); /* a headerless uint16 token dump */
	p = write_bytes("raw.bin", tok, sizeof(tok));
	cr_expect_eq(zn_data_open(&d, p, 1, 4, 0, 1, 0, false), -EINVAL, "not silently text");
	cr_expect_null(d);
	cr_expect_eq(zn_data_open_as(&d, p, ZN_DATA_FORMAT_TOKENS, 1, 4, 0, 1, 0, false),
		     -EINVAL);
	cr_assert_eq(zn_data_open_as(&d, p, ZN_DATA_FORMAT_TEXT, 1, 4, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_token_count(d), sizeof(tok));
	zn_data_close(d);
	/* NUL bytes are not text either */
	cr_expect_eq(zn_data_open(&d, write_bytes("nul.txt", "abc\0defghijk", 12), 1, 4, 0, 1,
				  0, false), -EINVAL);
	/* a token file forced to text is its bytes */
	p = write_tokens("tt.bin", 100, 1, 100, 0, NULL);
	cr_assert_eq(zn_data_open_as(&d, p, ZN_DATA_FORMAT_TEXT, 1, 4, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TEXT);
	cr_expect_eq(zn_data_token_count(d), 1024 + 200);
	zn_data_close(d);
	/* text refused when tokens are asked for */
	cr_expect_eq(zn_data_open_as(&d, ZN_TEST_SRC_DIR "/data/demo.txt", ZN_DATA_FORMAT_TOKENS,
				     1, 4, 0, 1, 0, false), -EINVAL);
}

Test(data, utf8_text_is_checked_whole_including_across_read_chunks)
{
	/* 8 MiB - 1 ASCII bytes, then a 2-byte character across the 8 MiB read boundary */
	size_t n = (8u << 20) + 40;
	char *buf = malloc(n);
	struct zn_data *d;
	const char *p;

	cr_assert(buf);
	memset(buf, 'a', n);
	memcpy(buf + (8u << 20) - 1, "\xc3\xa9", 2);
	memcpy(buf + 100, "\xe2\x82\xac \xf0\x9f\x98\x80", 8); /* euro sign, emoji */
	p = write_bytes("big.txt", buf, n);
	cr_assert_eq(zn_data_open(&d, p, 1, 16, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TEXT);
	cr_expect_eq(zn_data_max_token(d), 0xf0);
	zn_data_close(d);
	memcpy(buf + (8u << 20) - 1, "\xc3\x41", 2); /* broken across the boundary */
	cr_expect_eq(zn_data_open(&d, write_bytes("bad.txt", buf, n), 1, 16, 0, 1, 0, false),
		     -EINVAL);
	free(buf);
	cr_expect_eq(zn_data_open(&d, write_bytes("cut.txt", "hello world \xe2\x82", 14), 1, 4,
				  0, 1, 0, false), -EINVAL, "a character cut at the end");
	cr_expect_eq(zn_data_open(&d, write_bytes("ovl.txt", "hello world \xc0\xaf", 14), 1, 4,
				  0, 1, 0, false), -EINVAL, "overlong form");
	cr_expect_eq(zn_data_open(&d, write_bytes("sur.txt", "hello world \xed\xa0\x80", 15), 1,
				  4, 0, 1, 0, false), -EINVAL, "surrogate");
}

Test(data, directory_fifo_and_device_are_refused_without_waiting, .timeout = 30)
{
	struct zn_data *d = NULL;
	char fifo[128];

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	/* the old loader blocked forever in open() here */
	cr_expect_eq(zn_data_open(&d, fifo, 1, 4, 0, 1, 0, false), -EINVAL);
	cr_expect_eq(zn_data_open(&d, dir, 1, 4, 0, 1, 0, false), -EISDIR);
	cr_expect_eq(zn_data_open(&d, "/dev/zero", 1, 4, 0, 1, 0, false), -EINVAL);
	cr_expect_null(d);
}

Test(data, a_file_truncated_during_the_run_is_an_error_not_sigbus)
{
	const char *p = write_tokens("trunc.bin", 4000, 1, 4000, 0, NULL);
	struct zn_data *d;
	int x[4 * 16], y[4 * 16];
	char path[128];

	snprintf(path, sizeof(path), "%s", p);
	cr_assert_eq(zn_data_open(&d, path, 4, 16, 0, 1, 0, false), 0);
	cr_assert_eq(zn_data_next(d, x, y), 0);
	/* the old loader mapped the file: reading past the new end raised SIGBUS */
	cr_assert_eq(truncate(path, 1024 + 200), 0);
	cr_assert_eq(zn_data_next(d, x, y), -EIO);
	cr_assert_eq(truncate(path, 0), 0);
	zn_data_seek(d, 0);
	cr_expect_eq(zn_data_next(d, x, y), -EIO);
	zn_data_close(d);
}

Test(data, tokens_beyond_the_vocabulary_are_found_with_their_position)
{
	uint32_t tok[50];
	struct zn_data *d;
	uint64_t pos = 0;
	int64_t bad = 0;
	int x[4], y[4];

	for (int i = 0; i < 50; i++)
		tok[i] = (uint32_t)i;
	tok[37] = 0xffffffffu; /* >= 2^31: no negative vocabulary */
	tok[45] = 70000;
	cr_assert_eq(zn_data_open(&d, write_llama3("big.bin", tok, 50), 1, 4, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_max_token(d), 4294967295ll);
	cr_expect_eq(zn_data_vocab(d), 4294967296ll, "max + 1, as a 64-bit count");
	cr_expect_eq(zn_data_limit_vocab(d, 50257, &pos, &bad), 1);
	cr_expect_eq(pos, 37);
	cr_expect_eq(bad, 4294967295ll);
	zn_data_close(d);
	tok[37] = 37;
	cr_assert_eq(zn_data_open(&d, write_llama3("b2.bin", tok, 50), 1, 4, 0, 1, 0, false), 0);
	cr_expect_eq(zn_data_vocab(d), 128256);
	cr_expect_eq(zn_data_limit_vocab(d, 50257, &pos, &bad), 1);
	cr_expect_eq(pos, 45);
	cr_expect_eq(bad, 70000);
	/* under the limit, a token rewritten beyond it later is refused when read */
	cr_assert_eq(zn_data_limit_vocab(d, 128256, &pos, &bad), 0);
	{
		uint32_t big = 200000;
		int fd = open(zn_data_path(d), O_WRONLY);

		cr_assert(fd >= 0);
		cr_assert_eq(pwrite(fd, &big, 4, 1024 + 4 * 2), 4);
		close(fd);
	}
	cr_expect_eq(zn_data_next(d, x, y), -EINVAL);
	zn_data_close(d);
}
