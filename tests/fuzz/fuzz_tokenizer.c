/* Fuzz target: a Hugging Face tokenizer.json (zn_tok_load on a directory holding it,
 * src/data/tokenizer.c, tok_vocab.c, tok_pre.c, tok_config.c): model.vocab,
 * added_tokens, model.merges, the normalizer and pre-tokenizer. An accepted tokenizer
 * has at least one id and tables no larger than the ids allow (below 2^20 or twice the
 * input's bytes); texts (ASCII, UTF-8, a NUL, invalid bytes) encode to ids inside the
 * vocabulary, each of which decodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "fuzz.h"

static char dir[4096];

static void remove_dir(void)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
	unlink(p);
	rmdir(dir);
}

#define TEXT(s) { s, sizeof(s) - 1 }

static const struct {
	const char *s;
	size_t n;
} texts[] = {
	TEXT("Hello world, it's 2024!"),
	TEXT("a\0b"),
	TEXT("\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80"),
	TEXT("\xff\xfe bad bytes \xc3"),
	TEXT("   \n\n\t x"),
};

static void check_texts(const struct zn_tok *tok)
{
	struct zn_tok_scratch *s = zn_tok_scratch_new(tok);
	char buf[256];

	ZN_FUZZ_CHECK(s != NULL);
	for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
		struct zn_ids ids = { 0 };

		if (zn_tok_encode(tok, s, texts[t].s, texts[t].n, &ids))
			ids.n = 0;
		for (size_t i = 0; i < ids.n; i++) {
			ZN_FUZZ_CHECK(ids.v[i] >= 0 && ids.v[i] < zn_tok_vocab(tok));
			ZN_FUZZ_CHECK(zn_tok_decode_one(tok, ids.v[i], buf, sizeof(buf)) >= 0);
		}
		zn_ids_free(&ids);
	}
	zn_tok_scratch_free(s);
}

int zn_fuzz_one(const uint8_t *data, size_t n)
{
	struct zn_tok *tok = NULL;
	char p[4200];
	FILE *fp;

	if (!dir[0]) {
		const char *tmp = getenv("TMPDIR");

		snprintf(dir, sizeof(dir), "%s/zinc-fuzz-tok-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		ZN_FUZZ_CHECK(mkdtemp(dir) != NULL);
		atexit(remove_dir);
	}
	snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
	fp = fopen(p, "wb");
	ZN_FUZZ_CHECK(fp != NULL);
	ZN_FUZZ_CHECK(fwrite(data, 1, n, fp) == n);
	ZN_FUZZ_CHECK(fclose(fp) == 0);
	if (zn_tok_load(&tok, dir))
		return 0;
	ZN_FUZZ_CHECK(zn_tok_vocab(tok) >= 1);
	ZN_FUZZ_CHECK(zn_tok_vocab(tok) <= ((int64_t)1 << 20) ||
		      zn_tok_vocab(tok) <= 2 * (int64_t)n);
	check_texts(tok);
	zn_tok_free(tok);
	return 1;
}
