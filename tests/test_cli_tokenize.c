/* zinc tokenize end to end: JSONL and text inputs through the fixture tokenizers
 * (tests/ref/tok/) into llm.c token files whose tokens are the independent reference's
 * ids (cases.json) with the document delimiter before each document; uint16 / uint32
 * headers; --val-fraction splits whole documents; 1 and 2 threads write the same bytes;
 * bad inputs are refused naming the file and line. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fsio.h"
#include "data/tokenizer.h"
#include "model/data.h"

#define FIX ZN_TEST_SRC_DIR "/tests/ref/tok/"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_tokz_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_tokenize, .init = make_dir, .fini = remove_dir, .timeout = 120);

static int zinc(char *out, size_t size, const char *fmt, ...)
{
	char args[2048], cmd[2400];
	va_list ap;
	FILE *p;
	size_t n;
	int status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "timeout 60 %s tokenize %s 2>&1 </dev/null", ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *at(const char *name)
{
	static char p[4][160];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

/* Writes the kind's cases as JSONL (repeated `rep` times) and returns the cases. */
static cJSON *cases_jsonl(const char *kind, const char *path, int rep)
{
	char cpath[256], *text = NULL;
	FILE *f = fopen(path, "w");
	cJSON *cases, *c;

	snprintf(cpath, sizeof(cpath), FIX "%s/cases.json", kind);
	cr_assert_eq(zn_read_input_file(cpath, "cases", 1 << 24, &text, NULL), 0);
	cases = cJSON_Parse(text);
	free(text);
	cr_assert(cases && f);
	for (int r = 0; r < rep; r++)
		cJSON_ArrayForEach(c, cases) {
			cJSON *o = cJSON_CreateObject();
			char *line;

			cJSON_AddStringToObject(o, "text", cJSON_GetObjectItem(c, "text")->valuestring);
			line = cJSON_PrintUnformatted(o);
			fprintf(f, "%s\n", line);
			free(line);
			cJSON_Delete(o);
		}
	fclose(f);
	return cases;
}

static uint32_t *read_tokens(const char *path, int32_t *magic, int32_t *count)
{
	char *buf = NULL;
	size_t len = 0;
	int32_t h[3];

	cr_assert_eq(zn_read_input_file(path, "tokens", 1 << 26, &buf, &len), 0);
	cr_assert_geq(len, 1024u);
	memcpy(h, buf, sizeof(h));
	*magic = h[0];
	*count = h[2];
	bool u32 = h[0] == ZN_DATA_MAGIC_LLAMA3;

	cr_assert_eq(len, 1024u + (size_t)h[2] * (u32 ? 4 : 2));
	cr_assert_eq(h[1], u32 ? 7 : 1);
	uint32_t *t = malloc(((size_t)h[2] + 1) * 4);

	for (int32_t i = 0; i < h[2]; i++) {
		if (u32) {
			memcpy(&t[i], buf + 1024 + 4 * (size_t)i, 4);
		} else {
			uint16_t v;

			memcpy(&v, buf + 1024 + 2 * (size_t)i, 2);
			t[i] = v;
		}
	}
	free(buf);
	return t;
}

/* The file holds, for each case, delim followed by its ids. */
static void expect_docs(const char *path, cJSON *cases, int rep, uint32_t delim, int32_t magic_want)
{
	int32_t magic, count, k = 0;
	uint32_t *t = read_tokens(path, &magic, &count);
	cJSON *c;

	cr_expect_eq(magic, magic_want);
	for (int r = 0; r < rep; r++)
		cJSON_ArrayForEach(c, cases) {
			cJSON *ids = cJSON_GetObjectItem(c, "ids"), *id;

			cr_assert_lt(k, count);
			cr_expect_eq(t[k], delim, "token %d: delimiter %u, want %u", k, t[k], delim);
			k++;
			cJSON_ArrayForEach(id, ids) {
				cr_assert_lt(k, count);
				cr_expect_eq(t[k], (uint32_t)id->valueint, "token %d", k);
				k++;
			}
		}
	cr_expect_eq(k, count);
	free(t);
}

Test(cli_tokenize, gpt2_jsonl_uint16_eot_before_each_document)
{
	char out[8192];
	cJSON *cases = cases_jsonl("gpt2", at("in.jsonl"), 3);

	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s --threads 2 %s",
			  at("g.bin"), at("in.jsonl")), 0, "%s", out);
	cr_expect(strstr(out, "uint16, GPT-2 header"), "%s", out);
	expect_docs(at("g.bin"), cases, 3, 313, ZN_DATA_MAGIC);
	/* one thread writes the same bytes */
	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2/tokenizer.json -o %s "
			  "--threads 1 %s", at("g1.bin"), at("in.jsonl")), 0, "%s", out);
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "cmp -s %s %s", at("g.bin"), at("g1.bin"));
	cr_expect_eq(system(cmd), 0, "1 and 2 threads differ");
	/* zinc train's reader takes the file */
	struct zn_data *d = NULL;

	cr_assert_eq(zn_data_open(&d, at("g.bin"), 1, 8, 0, 1, 1, false), 0);
	cr_expect_eq(zn_data_kind_of(d), ZN_DATA_TOKENS);
	zn_data_close(d);
	cJSON_Delete(cases);
}

Test(cli_tokenize, llama3_uint32_bos_before_each_document)
{
	char out[8192];
	cJSON *cases = cases_jsonl("llama3", at("in.jsonl"), 2);

	cr_assert_eq(zinc(out, sizeof(out), "--init-from " FIX "llama3 -o %s %s", at("l.bin"),
			  at("in.jsonl")), 0, "%s", out);
	cr_expect(strstr(out, "uint32, Llama 3 header"), "%s", out);
	expect_docs(at("l.bin"), cases, 2, 128000, ZN_DATA_MAGIC_LLAMA3);
	cJSON_Delete(cases);
}

Test(cli_tokenize, llama2_text_file_is_one_document)
{
	char out[8192];
	FILE *f = fopen(at("doc.txt"), "w");
	const char *text = "Hello world! The quick brown fox.";

	cr_assert(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "llama2 -o %s %s %s", at("s.bin"),
			  at("doc.txt"), at("doc.txt")), 0, "%s", out);
	cJSON *cases = cases_jsonl("llama2", at("unused.jsonl"), 1);
	cJSON *one = cJSON_CreateArray();

	cJSON_AddItemToArray(one, cJSON_Duplicate(cJSON_GetArrayItem(cases, 0), 1));
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(one, 0), "text")->valuestring, text);
	expect_docs(at("s.bin"), one, 2, 1, ZN_DATA_MAGIC);
	cJSON_Delete(one);
	cJSON_Delete(cases);
}

Test(cli_tokenize, val_fraction_sends_whole_documents)
{
	char out[8192];
	cJSON *cases = cases_jsonl("gpt2", at("in.jsonl"), 20);
	int32_t m1, m2, m3, n_all, n_train, n_val;

	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s %s", at("all.bin"),
			  at("in.jsonl")), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s --val-fraction 0.3 "
			  "--seed 7 %s", at("t.bin"), at("in.jsonl")), 0, "%s", out);
	uint32_t *all = read_tokens(at("all.bin"), &m1, &n_all);
	uint32_t *tr = read_tokens(at("t.bin"), &m2, &n_train);
	uint32_t *va = read_tokens(at("t_val.bin"), &m3, &n_val);

	cr_expect_eq(n_train + n_val, n_all);
	cr_expect_gt(n_val, n_all / 10);
	cr_expect_gt(n_train, n_all / 2);
	/* documents (delimiter 313 first) of all = an interleaving of train's and val's, in order */
	int32_t i = 0, a = 0, b = 0;

	while (i < n_all) {
		int32_t j = i + 1;

		while (j < n_all && all[j] != 313)
			j++;
		int32_t len = j - i;

		if (a + len <= n_train && !memcmp(all + i, tr + a, (size_t)len * 4) &&
		    (a + len == n_train || tr[a + len] == 313))
			a += len;
		else if (b + len <= n_val && !memcmp(all + i, va + b, (size_t)len * 4))
			b += len;
		else
			cr_assert_fail("document at %d is in neither file whole", i);
		i = j;
	}
	cr_expect_eq(a, n_train);
	cr_expect_eq(b, n_val);
	free(all);
	free(tr);
	free(va);
	cJSON_Delete(cases);
}

/* JSONL lines are read as Python's json.loads reads them: "a\u0000b" is three characters
 * (tokenized whole, not cut at the NUL), a repeated "text" is its last value, and a raw
 * NUL byte (not JSON) is refused with the file and line. */
Test(cli_tokenize, jsonl_strings_keep_their_nul_and_last_key)
{
	char out[8192];
	struct zn_tok *tok = NULL;
	struct zn_tok_scratch *s;
	struct zn_ids want = { 0 };
	int32_t magic, count, eot;
	uint32_t *got;
	size_t k = 0;
	FILE *f = fopen(at("nul.jsonl"), "w");
	static const char raw[] = "{\"text\": \"ok\"}\n{\"text\": \"a\0b\"}\n";

	cr_assert(f);
	fputs("{\"text\": \"a\\u0000b\"}\n{\"text\": \"first\", \"text\": \"last one\"}\n", f);
	fclose(f);
	cr_assert_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s %s", at("n.bin"),
			  at("nul.jsonl")), 0, "%s", out);
	cr_assert_eq(zn_tok_load(&tok, FIX "gpt2"), 0);
	s = zn_tok_scratch_new(tok);
	eot = zn_tok_eos(tok);
	cr_assert_eq(zn_ids_push(&want, eot), 0);
	cr_assert_eq(zn_tok_encode(tok, s, "a\0b", 3, &want), 0);
	cr_assert_gt(want.n, 2, "\"a\\0b\" is more than \"a\"");
	cr_assert_eq(zn_ids_push(&want, eot), 0);
	cr_assert_eq(zn_tok_encode(tok, s, "last one", 8, &want), 0);
	got = read_tokens(at("n.bin"), &magic, &count);
	cr_expect_eq((size_t)count, want.n, "%d tokens, want %zu", count, want.n);
	for (k = 0; k < want.n && k < (size_t)count; k++)
		cr_expect_eq(got[k], (uint32_t)want.v[k], "token %zu is %u, want %d", k, got[k],
			     want.v[k]);
	free(got);
	zn_ids_free(&want);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
	f = fopen(at("raw.jsonl"), "wb");
	cr_assert(f);
	fwrite(raw, 1, sizeof(raw) - 1, f);
	fclose(f);
	cr_expect_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s %s", at("r.bin"),
			  at("raw.jsonl")), 1);
	cr_expect(strstr(out, "raw.jsonl:2:12: a NUL byte inside a string"), "%s", out);
	cr_expect_neq(access(at("r.bin"), F_OK), 0, "a failed run leaves no output");
}

Test(cli_tokenize, bad_inputs_named)
{
	char out[8192];
	FILE *f = fopen(at("bad.jsonl"), "w");

	cr_assert(f);
	fputs("{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n", f);
	fclose(f);
	cr_expect_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s %s", at("b.bin"),
			  at("bad.jsonl")), 1);
	cr_expect(strstr(out, "bad.jsonl:2"), "%s", out);
	cr_expect_neq(access(at("b.bin"), F_OK), 0, "a failed run leaves no output");
	cr_expect_eq(zinc(out, sizeof(out), "-o %s %s", at("b.bin"), at("bad.jsonl")), 2);
	cr_expect(strstr(out, "--tokenizer"), "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s --val-fraction 1.5 %s",
			  at("b.bin"), at("bad.jsonl")), 2);
	cr_expect(strstr(out, "--val-fraction"), "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), "--tokenizer " FIX "gpt2 -o %s %s", at("b.bin"),
			  at("missing.txt")), 2);
	cr_expect(strstr(out, "missing.txt"), "%s", out);
}
