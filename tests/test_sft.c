/* Supervised fine-tuning data (src/data/sft.c, the masked token file of tokfile.c and
 * model/data.c): conversations rendered with the llama3 and chatml templates give the ids
 * and loss mask an independent Python reference computed (tests/ref/gen_sft_fixtures.py:
 * the whole rendered text tokenized with the `regex` module and merge-all-occurrences BPE,
 * the mask from byte offsets as transformers' return_assistant_tokens_mask); zinc tokenize
 * --template writes them as a masked file; the loader turns non-labels into -100 targets;
 * zinc train runs on it; and the refusals. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/fsio.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "model/data.h"

#define REF ZN_TEST_SRC_DIR "/tests/ref/"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_sft_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(sft, .init = make_dir, .fini = remove_dir, .timeout = 300);

/* the fixture's cases of template `name`, concatenated: ids and mask */
static int want_of(const char *name, struct zn_ids *ids, struct zn_ids *mask, int *convs)
{
	char path[512], *text = NULL;
	cJSON *cases, *c;

	snprintf(path, sizeof(path), REF "sft/%s.json", name);
	cr_assert_eq(zn_read_input_file(path, "cases", 1 << 24, &text, NULL), 0);
	cases = cJSON_Parse(text);
	cr_assert_not_null(cases);
	*convs = 0;
	cJSON_ArrayForEach(c, cases) {
		cJSON *x;

		cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "ids"))
			cr_assert_eq(zn_ids_push(ids, x->valueint), 0);
		cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "mask"))
			cr_assert_eq(zn_ids_push(mask, x->valueint), 0);
		(*convs)++;
	}
	cJSON_Delete(cases);
	free(text);
	return 0;
}

static void check_template(const char *name, const char *tok_dir, enum zn_sft_template t)
{
	struct zn_ids want = { 0 }, wmask = { 0 }, ids = { 0 }, mask = { 0 };
	struct zn_tok *tok = NULL;
	struct zn_tok_scratch *s;
	char *lines = NULL, *p, *save = NULL;
	int convs = 0, line = 0, labels = 0;

	want_of(name, &want, &wmask, &convs);
	cr_assert_eq(zn_tok_load(&tok, tok_dir), 0);
	cr_assert_eq(zn_sft_check(tok, t, tok_dir), 0);
	s = zn_tok_scratch_new(tok);
	cr_assert_eq(zn_read_input_file(REF "sft/chats.jsonl", "chats", 1 << 20, &lines, NULL), 0);
	for (p = strtok_r(lines, "\n", &save); p; p = strtok_r(NULL, "\n", &save))
		cr_assert_eq(zn_sft_encode(tok, s, t, p, strlen(p), "chats.jsonl", ++line, &ids,
					   &mask), 0);
	cr_assert_eq(line, convs);
	cr_assert_eq(ids.n, want.n, "%s: %zu ids, want %zu", name, ids.n, want.n);
	cr_assert_eq(mask.n, ids.n);
	for (size_t i = 0; i < ids.n; i++) {
		cr_expect_eq(ids.v[i], want.v[i], "%s: id %zu is %d, want %d", name, i, ids.v[i],
			     want.v[i]);
		cr_expect_eq(mask.v[i], wmask.v[i], "%s: mask %zu is %d, want %d", name, i,
			     mask.v[i], wmask.v[i]);
		labels += mask.v[i];
	}
	cr_expect_gt(labels, 20, "the fixture has assistant tokens");
	cr_expect_lt(labels, (int)ids.n / 2, "and more tokens that are not");
	zn_ids_free(&want);
	zn_ids_free(&wmask);
	zn_ids_free(&ids);
	zn_ids_free(&mask);
	free(lines);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
}

Test(sft, llama3_template_matches_the_reference)
{
	check_template("llama3", REF "sft/llama3", ZN_SFT_LLAMA3);
}

Test(sft, chatml_template_matches_the_reference)
{
	check_template("chatml", REF "tok/qwen2", ZN_SFT_CHATML);
}

/* zinc generate --template: the prompt is the text apply_chat_template(messages,
 * add_generation_prompt=True) renders (the strings below are Llama-3-Instruct's and
 * Qwen2's templates written out), and its special tokens come out as their ids */
static void check_prompt(const char *tok_dir, enum zn_sft_template t, const char *system,
			 const char *want, const int32_t *special, int n_special)
{
	struct zn_tok *tok;
	struct zn_tok_scratch *s;
	struct zn_ids ids = { 0 };
	char *text;
	size_t n;
	int found = 0;

	cr_assert_eq(zn_tok_load(&tok, tok_dir), 0);
	cr_assert_eq(zn_sft_render_prompt(tok, t, system, "  What is 2 + 2?\n", &text, &n), 0);
	cr_assert_eq(n, strlen(want));
	cr_assert_str_eq(text, want);
	s = zn_tok_scratch_new(tok);
	cr_assert_eq(zn_tok_encode(tok, s, text, n, &ids), 0);
	for (size_t i = 0; i < ids.n; i++)
		found += found < n_special && ids.v[i] == special[found];
	cr_assert_eq(found, n_special, "the template's special tokens, in order, as their ids");
	cr_assert_eq(zn_sft_end_of_turn(tok, t), t == ZN_SFT_LLAMA3 ? 128009 : 313);
	free(text);
	zn_ids_free(&ids);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
}


/* "\u0000" in a role's content is a character, as Python's json.loads has it: the
 * conversation renders with the NUL bytes (not cut at them) and tokenizes as that text. */
Test(sft, content_keeps_its_nul)
{
	static const char line[] = "{\"messages\": [{\"role\": \"user\", \"content\": "
				   "\"a\\u0000b\"}, {\"role\": \"assistant\", \"content\": "
				   "\"c\\u0000d\"}]}";
	static const char turns[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>assistant\n"
				    "c\0d<|im_end|>\n";
	struct zn_ids ids = { 0 }, mask = { 0 }, want = { 0 };
	struct zn_tok *tok = NULL;
	struct zn_tok_scratch *s;
	char text[256];
	int n, labels = 0;

	cr_assert_eq(zn_tok_load(&tok, REF "tok/qwen2"), 0);
	s = zn_tok_scratch_new(tok);
	n = zn_tok_decode_one(tok, zn_sft_delimiter(tok, ZN_SFT_CHATML), text, sizeof(text));
	cr_assert_gt(n, 0);
	memcpy(text + n, turns, sizeof(turns) - 1);
	cr_assert_eq(zn_tok_encode(tok, s, text, (size_t)n + sizeof(turns) - 1, &want), 0);
	cr_assert_eq(zn_sft_encode(tok, s, ZN_SFT_CHATML, line, strlen(line), "nul.jsonl", 1, &ids,
				   &mask), 0);
	cr_assert_eq(ids.n, want.n, "%zu ids, want %zu", ids.n, want.n);
	for (size_t i = 0; i < ids.n; i++) {
		cr_expect_eq(ids.v[i], want.v[i], "id %zu is %d, want %d", i, ids.v[i], want.v[i]);
		labels += mask.v[i];
	}
	cr_expect_gt(labels, 0);
	zn_ids_free(&ids);
	zn_ids_free(&mask);
	zn_ids_free(&want);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
}

Test(sft, generation_prompt_is_the_chat_template_turn)
{
	static const int32_t l3[] = { 128000, 128006, 128007, 128009, 128006, 128007, 128009,
				      128006, 128007 };
	static const int32_t l3_nosys[] = { 128000, 128006, 128007, 128009, 128006, 128007 };
	static const int32_t cm[] = { 312, 313, 312, 313, 312 };

	check_prompt(REF "sft/llama3", ZN_SFT_LLAMA3, " Be brief. ",
		     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
		     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?"
		     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", l3, 9);
	check_prompt(REF "sft/llama3", ZN_SFT_LLAMA3, NULL,
		     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?"
		     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", l3_nosys, 6);
	/* chatml keeps the contents as they are (Qwen2's template does not trim) */
	check_prompt(REF "tok/qwen2", ZN_SFT_CHATML, " Be brief. ",
		     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n  What is 2 + "
		     "2?\n<|im_end|>\n<|im_start|>assistant\n", cm, 5);
}

Test(sft, bad_conversations_name_the_line)
{
	static const char *bad[] = { "{\"text\": \"no messages\"}", "{\"messages\": []}",
				     "{\"messages\": [{\"role\": \"user\"}]}", "not json" };
	struct zn_tok *tok = NULL;
	struct zn_tok_scratch *s;
	enum zn_sft_template t;

	cr_assert_eq(zn_tok_load(&tok, REF "tok/qwen2"), 0);
	s = zn_tok_scratch_new(tok);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct zn_ids ids = { 0 }, mask = { 0 };

		cr_expect_neq(zn_sft_encode(tok, s, ZN_SFT_CHATML, bad[i], strlen(bad[i]), "f",
					    (uint64_t)i + 1, &ids, &mask), 0, "%s", bad[i]);
		zn_ids_free(&ids);
		zn_ids_free(&mask);
	}
	/* a template whose tokens the tokenizer lacks, a SentencePiece tokenizer, a name */
	cr_expect_neq(zn_sft_check(tok, ZN_SFT_LLAMA3, "qwen2"), 0);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
	cr_assert_eq(zn_tok_load(&tok, REF "tok/mistral"), 0);
	cr_expect_neq(zn_sft_check(tok, ZN_SFT_CHATML, "mistral"), 0);
	zn_tok_free(tok);
	cr_expect_neq(zn_sft_template_parse("jinja", &t), 0);
	cr_expect_eq(zn_sft_template_parse("chatml", &t), 0);
	cr_expect_eq(t, ZN_SFT_CHATML);
}

static int zinc(char *out, size_t size, const char *fmt, ...)
{
	char args[1024], cmd[1400];
	va_list ap;
	FILE *p;
	size_t n;
	int status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "cd %s && OMP_NUM_THREADS=1 timeout 100 %s %s 2>&1 </dev/null",
		 dir, ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* zinc tokenize --template chatml: the masked file holds the reference's ids with bit 31 on
 * the non-labels and the label count in the header; the loader gives -100 targets exactly
 * where the next token is no label; zinc train trains on it. */
Test(sft, tokenize_writes_the_masked_file_and_train_reads_it)
{
	static char out[1 << 16];
	struct zn_ids want = { 0 }, wmask = { 0 };
	char path[128], *buf = NULL;
	size_t len = 0;
	int32_t h[6];
	int convs, labels = 0;
	struct zn_data *d = NULL;

	want_of("chatml", &want, &wmask, &convs);
	cr_assert_eq(zinc(out, sizeof(out), "tokenize --tokenizer %s --template chatml -o sft.bin "
			  "%s --quiet", REF "tok/qwen2", REF "sft/chats.jsonl"), 0, "%s", out);
	cr_expect(strstr(out, "masked header"), "%s", out);
	snprintf(path, sizeof(path), "%s/sft.bin", dir);
	cr_assert_eq(zn_read_input_file(path, "sft", 1 << 20, &buf, &len), 0);
	cr_assert_eq(len, 1024 + 4 * want.n);
	memcpy(h, buf, sizeof(h));
	for (size_t i = 0; i < want.n; i++)
		labels += wmask.v[i];
	cr_expect_eq(h[0], ZN_DATA_MAGIC_MASKED);
	cr_expect_eq(h[1], 1);
	cr_expect_eq(h[2], (int32_t)want.n);
	cr_expect_eq(h[5], labels);
	for (size_t i = 0; i < want.n; i++) {
		uint32_t v;

		memcpy(&v, buf + 1024 + 4 * i, 4);
		cr_expect_eq(v, (uint32_t)want.v[i] | (wmask.v[i] ? 0u : ZN_DATA_NOT_LABEL),
			     "entry %zu", i);
	}
	/* one window of the whole file (T = n - 1): inputs are the ids, targets -100 where
	 * the next token is no label */
	{
		int T = (int)want.n - 1;
		int *in = malloc(sizeof(int) * (size_t)T), *tg = malloc(sizeof(int) * (size_t)T);

		cr_assert_eq(zn_data_open(&d, path, 1, T, 0, 1, 0, false), 0);
		cr_expect(zn_data_masked(d));
		cr_expect_eq(zn_data_max_token(d), 313, "bit 31 is not part of the id");
		cr_assert_eq(zn_data_next(d, in, tg), 0);
		for (int t = 0; t < T; t++) {
			cr_expect_eq(in[t], want.v[t]);
			cr_expect_eq(tg[t], wmask.v[t + 1] ? want.v[t + 1] : ZN_IGNORE_INDEX,
				     "target %d", t);
		}
		zn_data_close(d);
		free(in);
		free(tg);
	}
	cr_assert_eq(zinc(out, sizeof(out), "train --device host --model tiny --vocab 314 "
			  "--padded-vocab 384 --seq 16 --micro-batch 2 --steps 6 --steps-per-print 1 "
			  "--data sft.bin"), 0, "%s", out);
	cr_expect(strstr(out, "step 6/6"), "%s", out);
	/* --packing documents: each conversation a document, the masks kept (test_pack_mask);
	 * the validation file packed the same way: at lr 0 its loss over the first global
	 * batch is the first step's loss. Micro-batch 16: 18 packed rows, although the file
	 * holds only 15 windows of 17 tokens (the window loader's count is not asked) */
	cr_assert_eq(zinc(out, sizeof(out), "train --device host --model tiny --vocab 314 "
			  "--padded-vocab 384 --seq 16 --micro-batch 16 --steps 1 --data sft.bin "
			  "--packing documents --val-data sft.bin --eval-batches 1 --lr 0"), 0,
		     "%s", out);
	{
		char want[64], *at = strstr(out, "| loss ");
		float loss = at ? strtof(at + 7, NULL) : -1.0f;

		snprintf(want, sizeof(want), "val loss %.4f |", loss);
		cr_expect(strstr(out, "packing documents: 4 documents") &&
			  strstr(out, "val data: packing documents: 4 documents"), "%s", out);
		cr_expect(loss > 0 && strstr(out, want), "want \"%s\": %s", want, out);
	}
	/* refusals: a text input, an unknown template */
	cr_expect_neq(zinc(out, sizeof(out), "tokenize --tokenizer %s --template chatml -o x.bin "
			   "%s --quiet", REF "tok/qwen2", REF "gen_sft_fixtures.py"), 0);
	cr_expect(strstr(out, ".jsonl"), "%s", out);
	cr_expect_eq(zinc(out, sizeof(out), "tokenize --tokenizer %s --template zephyr -o x.bin "
			  "%s", REF "tok/qwen2", REF "sft/chats.jsonl"), 2);
	cr_expect(strstr(out, "llama3 and chatml"), "%s", out);
	free(buf);
	zn_ids_free(&want);
	zn_ids_free(&wmask);
}

/* chatml with a tokenizer whose EOS is <|im_end|> (Qwen2-Instruct's tokenizer_config.json):
 * conversations still start with <|endoftext|> (zn_sft_delimiter), recorded as the file's
 * delimiter, so the file is the one the EOS <|endoftext|> fixture gives, byte for byte, and
 * --packing documents finds the 4 conversations, not a document per turn. */
Test(sft, im_end_eos_keeps_endoftext_as_the_delimiter)
{
	static char out[1 << 16];
	char a[256], b[256], *ta = NULL, *tb = NULL;
	size_t la = 0, lb = 0;
	FILE *f;

	snprintf(a, sizeof(a), "%s/tok", dir);
	cr_assert_eq(mkdir(a, 0700), 0);
	snprintf(a, sizeof(a), "%s/tok/tokenizer_config.json", dir);
	f = fopen(a, "w");
	cr_assert_not_null(f);
	fputs("{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"eos_token\": \"<|im_end|>\"}\n",
	      f);
	fclose(f);
	cr_assert_eq(zn_read_input_file(REF "tok/qwen2/tokenizer.json", "tok", 1 << 24, &ta, &la),
		     0);
	snprintf(a, sizeof(a), "%s/tok/tokenizer.json", dir);
	f = fopen(a, "w");
	cr_assert(f && fwrite(ta, 1, la, f) == la);
	fclose(f);
	free(ta);
	ta = NULL;
	cr_assert_eq(zinc(out, sizeof(out), "tokenize --tokenizer tok --template chatml -o a.bin "
			  "%s --quiet", REF "sft/chats.jsonl"), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), "tokenize --tokenizer %s --template chatml -o b.bin "
			  "%s --quiet", REF "tok/qwen2", REF "sft/chats.jsonl"), 0, "%s", out);
	snprintf(a, sizeof(a), "%s/a.bin", dir);
	snprintf(b, sizeof(b), "%s/b.bin", dir);
	cr_assert_eq(zn_read_input_file(a, "a", 1 << 20, &ta, &la), 0);
	cr_assert_eq(zn_read_input_file(b, "b", 1 << 20, &tb, &lb), 0);
	cr_assert(la == lb && !memcmp(ta, tb, la), "the files differ");
	cr_assert_eq(zinc(out, sizeof(out), "train --device host --model tiny --vocab 314 "
			  "--padded-vocab 384 --seq 16 --micro-batch 2 --steps 1 --data a.bin "
			  "--packing documents"), 0, "%s", out);
	cr_expect(strstr(out, "packing documents: 4 documents"), "%s", out);
	free(ta);
	free(tb);
}
