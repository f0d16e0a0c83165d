/* zinc's tokenizer (src/data/tok*.c) against ids computed by an independent Python
 * implementation (tests/ref/gen_tokenizer_fixtures.py: the `regex` module and OpenAI's
 * merge-all-occurrences BPE) for GPT-2, Llama 3, Qwen2 (byte-level + split regexes) and
 * Llama 2 / Mistral (SentencePiece-style, byte fallback, Prepend / Metaspace) fixtures:
 * Unicode letters, digits, whitespace runs, contractions, special tokens, byte fallback. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsio.h"
#include "data/tokenizer.h"

#define FIX ZN_TEST_SRC_DIR "/tests/ref/tok/"

static void check_kind(const char *kind)
{
	char dir[512], path[600];
	struct zn_tok *tok = NULL;
	char *text = NULL;
	int ncase = 0;

	snprintf(dir, sizeof(dir), FIX "%s", kind);
	snprintf(path, sizeof(path), "%s/cases.json", dir);
	cr_assert_eq(zn_tok_load(&tok, dir), 0, "%s", kind);
	cr_assert_eq(zn_read_input_file(path, "cases", 1 << 24, &text, NULL), 0);
	cJSON *cases = cJSON_Parse(text), *c;
	struct zn_tok_scratch *s = zn_tok_scratch_new(tok);

	cr_assert(cases && s);
	cJSON_ArrayForEach(c, cases) {
		const char *t = cJSON_GetObjectItem(c, "text")->valuestring;
		cJSON *want = cJSON_GetObjectItem(c, "ids");
		struct zn_ids ids = { 0 };
		int n = cJSON_GetArraySize(want);

		cr_assert_eq(zn_tok_encode(tok, s, t, strlen(t), &ids), 0);
		cr_expect_eq((int)ids.n, n, "%s: \"%s\": %zu ids, want %d", kind, t, ids.n, n);
		for (int i = 0; i < n && i < (int)ids.n; i++)
			cr_expect_eq(ids.v[i], cJSON_GetArrayItem(want, i)->valueint,
				     "%s: \"%s\": id %d is %d, want %d", kind, t, i, ids.v[i],
				     cJSON_GetArrayItem(want, i)->valueint);
		/* decoding the ids gives the text back (special tokens as their text) */
		char back[4096];
		size_t m = 0;

		for (size_t i = 0; i < ids.n; i++) {
			int k = zn_tok_decode_one(tok, ids.v[i], back + m, sizeof(back) - m);

			cr_assert_geq(k, 0);
			m += (size_t)k;
		}
		if (!strstr(kind, "llama2") && !strstr(kind, "mistral"))
			cr_expect(m == strlen(t) && !memcmp(back, t, m), "%s: decode of \"%s\"", kind, t);
		zn_ids_free(&ids);
		ncase++;
	}
	cr_expect_gt(ncase, 10);
	cJSON_Delete(cases);
	free(text);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
}

Test(tokenizer, gpt2_byte_level_regex) { check_kind("gpt2"); }
Test(tokenizer, llama3_split_ignore_merges) { check_kind("llama3"); }
Test(tokenizer, qwen2_split_digits_one_by_one) { check_kind("qwen2"); }
Test(tokenizer, llama2_prepend_byte_fallback) { check_kind("llama2"); }
Test(tokenizer, mistral_metaspace_first) { check_kind("mistral"); }

Test(tokenizer, specials_from_config_and_template)
{
	struct zn_tok *tok = NULL;

	cr_assert_eq(zn_tok_load(&tok, FIX "llama3/tokenizer.json"), 0);
	cr_expect_eq(zn_tok_bos(tok), 128000);
	cr_expect_eq(zn_tok_eos(tok), 128001);
	cr_expect(zn_tok_adds_bos(tok));
	cr_expect(!zn_tok_adds_eos(tok));
	cr_expect_eq(zn_tok_vocab(tok), 128002);
	zn_tok_free(tok);
	cr_assert_eq(zn_tok_load(&tok, FIX "gpt2"), 0);
	cr_expect_eq(zn_tok_bos(tok), -1);
	cr_expect_eq(zn_tok_eos(tok), zn_tok_id(tok, "<|endoftext|>"));
	cr_expect(!zn_tok_adds_bos(tok));
	zn_tok_free(tok);
	cr_assert_eq(zn_tok_load(&tok, FIX "llama2"), 0);
	cr_expect_eq(zn_tok_bos(tok), 1);
	cr_expect_eq(zn_tok_eos(tok), 2);
	cr_expect(zn_tok_adds_bos(tok));
	zn_tok_free(tok);
}

Test(tokenizer, invalid_utf8_reads_as_replacement_char)
{
	struct zn_tok *tok = NULL;
	struct zn_ids a = { 0 }, b = { 0 };

	cr_assert_eq(zn_tok_load(&tok, FIX "gpt2"), 0);
	struct zn_tok_scratch *s = zn_tok_scratch_new(tok);

	cr_assert_eq(zn_tok_encode(tok, s, "ab\xff" "cd", 5, &a), 0);
	cr_assert_eq(zn_tok_encode(tok, s, "ab\xef\xbf\xbd" "cd", 7, &b), 0);
	cr_assert_eq(a.n, b.n);
	cr_expect(!memcmp(a.v, b.v, a.n * sizeof(int32_t)));
	zn_ids_free(&a);
	zn_ids_free(&b);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
}

Test(tokenizer, refuses_what_it_cannot_read)
{
	struct zn_tok *tok = NULL;
	const char *path = "/tmp/zn_tok_bad.json";
	FILE *f = fopen(path, "w");

	cr_assert(f);
	fputs("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", f);
	fclose(f);
	cr_expect_neq(zn_tok_load(&tok, path), 0);
	cr_expect_null(tok);
	cr_expect_neq(zn_tok_load(&tok, "/nonexistent/dir"), 0);
	remove(path);
}
