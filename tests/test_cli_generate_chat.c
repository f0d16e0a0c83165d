/* zinc generate's ends of text (docs/generate.md): a Llama whose greedy choice is always
 * one token X (every embedding has a large first coordinate; the head's only non-zero
 * weight reads it for row X) with the qwen2 tokenizer fixture beside it. Generation stops
 * at X when X is the tokenizer's EOS, when generation_config.json's eos_token_id names it
 * (a number or a list), or when it is the template's end of turn (<|im_end|> with
 * --template chatml, whose prompt is the rendered chat turn); otherwise, and with
 * --ignore-eos, it goes on. Refusals of the template flags. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_child.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "model/safetensors.h"

static char dir[64];

static const char *path(const char *name)
{
	static char p[8][512];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

static void sh(const char *fmt, const char *a, const char *b)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), fmt, a, b);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_cli_chat_XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "train", "--model", "llama-tiny",
			     "--tied-embeddings", "false", "--vocab", "320", "--steps", "0",
			     "--save-final", path("base"), NULL), 0);
}

static void rm_dir(void)
{
	sh("rm -rf %s%s", dir, "");
}

TestSuite(cli_generate_chat, .init = make_dir, .fini = rm_dir, .timeout = 300);

/* the base's weights with every embedding's first coordinate 50 and a head that reads only
 * it, for row x: logit x > 0 = every other logit, whatever the prompt */
static void always(const char *name, int x)
{
	char in[512], out[512];
	struct zn_st_file *f;
	struct zn_st_entry e[64];
	float *v[64];
	int n;

	snprintf(in, sizeof(in), "%s/base/model.safetensors", dir);
	snprintf(out, sizeof(out), "%s/%s", dir, name);
	cr_assert_eq(mkdir(out, 0755), 0);
	cr_assert_eq(zn_st_open(&f, in), 0);
	n = zn_st_tensor_count(f);
	for (int i = 0; i < n; i++) {
		const struct zn_st_tensor *t = zn_st_tensor_at(f, i);
		int64_t cols = t->ndim == 2 ? t->shape[1] : 1;

		v[i] = malloc(t->numel * sizeof(float));
		cr_assert_eq(zn_st_read_f32(f, t, v[i]), 0);
		if (!strcmp(t->name, "model.embed_tokens.weight"))
			for (int64_t r = 0; r < t->shape[0]; r++)
				v[i][r * cols] = 50.0f;
		if (!strcmp(t->name, "lm_head.weight")) {
			memset(v[i], 0, t->numel * sizeof(float));
			v[i][(int64_t)x * cols] = 1.0f;
		}
		if (!strcmp(t->name, "model.norm.weight"))
			v[i][0] = 1.0f;
		e[i] = (struct zn_st_entry){ .name = t->name, .ndim = t->ndim,
					     .shape = { t->shape[0], t->shape[1] }, .data_h = v[i] };
	}
	snprintf(out, sizeof(out), "%s/%s/model.safetensors", dir, name);
	cr_assert_eq(zn_st_write(out, ZN_DTYPE_F32, e, n, NULL, NULL, 0), 0);
	for (int i = 0; i < n; i++)
		free(v[i]);
	zn_st_close(f);
	snprintf(out, sizeof(out), "%s/%s", dir, name);
	sh("cp %s/config.json %s/", path("base"), out);
	sh("cp %s/tests/ref/tok/qwen2/tokenizer*.json %s/", ZN_TEST_SRC_DIR, out);
}

static bool has(const char *name, const char *text)
{
	char *s = zt_read_all(path(name), NULL);
	bool r = strstr(s, text) != NULL;

	if (!r)
		cr_log_error("'%s' not in %s: %s", text, name, s);
	free(s);
	return r;
}

static void write_file(const char *name, const char *text)
{
	FILE *f = fopen(path(name), "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* ids greedy generation gives from the model directory m for "hi" (4 new at most) */
static void expect_ids(const char *m, const char *ids, const char *extra)
{
	int rc = zt_zinc(path("out"), path("err"), "generate", "--init-from", path(m),
			 "--prompt", "hi", "--max-new-tokens", "4", "--print-ids", extra, NULL);
	char *err = zt_read_all(path("err"), NULL);
	bool found = strstr(err, ids) != NULL;

	cr_expect(rc == 0 && found, "%s %s: exit %d, '%s' not in: %s", m, extra ? extra : "",
		  rc, ids, err);
	free(err);
	cr_assert(rc == 0 && found);
}

Test(cli_generate_chat, the_tokenizer_eos_and_generation_config_eos_ids_end_the_text)
{
	/* 311 is the tokenizer's eos_token (<|endoftext|>) */
	always("eos", 311);
	expect_ids("eos", "ids: 311\n", NULL);
	cr_assert(has("out", "hi\n") && has("err", "decode: 0 tokens"));
	expect_ids("eos", "ids: 311 311 311 311\n", "--ignore-eos");
	/* 200 is an ordinary token: a stop only where generation_config.json says so */
	always("g", 200);
	expect_ids("g", "ids: 200 200 200 200\n", NULL);
	write_file("g/generation_config.json", "{\"eos_token_id\": [311, 200, 313]}\n");
	expect_ids("g", "ids: 200\n", NULL);
	write_file("g/generation_config.json", "{\"eos_token_id\": 200}\n");
	expect_ids("g", "ids: 200\n", NULL);
	expect_ids("g", "ids: 200 200 200 200\n", "--ignore-eos");
	/* none in generation_config.json: config.json's, as transformers falls back */
	write_file("g/generation_config.json", "{\"do_sample\": false}\n");
	expect_ids("g", "ids: 200 200 200 200\n", NULL);
	sh("sed -i 's/\"vocab_size\"/\"eos_token_id\": 200, \"vocab_size\"/' %s/config.json%s",
	   path("g"), "");
	sh("rm %s/generation_config.json%s", path("g"), "");
	expect_ids("g", "ids: 200\n", NULL);
}

Test(cli_generate_chat, a_chat_turn_ends_at_the_templates_end_of_turn)
{
	struct zn_tok *tok;
	struct zn_tok_scratch *s;
	struct zn_ids ids = { 0 };
	char *text, want[64];
	size_t n;

	/* 313 is <|im_end|>: not an end of text for plain generation */
	always("m", 313);
	expect_ids("m", "ids: 313 313 313 313\n", NULL);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("m"),
			     "--template", "chatml", "--system", "Be brief.", "--prompt",
			     "What is 2 + 2?", "--max-new-tokens", "4", "--print-ids", NULL), 0);
	cr_assert(has("err", "ids: 313\n") && has("err", "decode: 0 tokens"));
	/* the reply only (empty here), on its own line */
	text = zt_read_all(path("out"), NULL);
	cr_assert_str_eq(text, "\n");
	free(text);
	/* the prompt is the rendered turn's tokens */
	cr_assert_eq(zn_tok_load(&tok, path("m")), 0);
	cr_assert_eq(zn_sft_render_prompt(tok, ZN_SFT_CHATML, "Be brief.", "What is 2 + 2?",
					  &text, &n), 0);
	s = zn_tok_scratch_new(tok);
	cr_assert_eq(zn_tok_encode(tok, s, text, n, &ids), 0);
	snprintf(want, sizeof(want), "prefill: %zu tokens", ids.n);
	cr_assert(has("err", want));
	free(text);
	zn_ids_free(&ids);
	zn_tok_scratch_free(s);
	zn_tok_free(tok);
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("m"),
			     "--template", "chatml", "--prompt", "x", "--max-new-tokens", "4",
			     "--print-ids", "--ignore-eos", NULL), 0);
	cr_assert(has("err", "ids: 313 313 313 313\n"));
	/* the llama3 template needs its tokens; --system needs a template */
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("m"),
			     "--template", "llama3", "--prompt", "x", NULL), 2);
	cr_assert(has("err", "<|start_header_id|>"));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("m"),
			     "--system", "Be brief.", "--prompt", "x", NULL), 2);
	cr_assert(has("err", "--system needs --template"));
	cr_assert_eq(zt_zinc(path("out"), path("err"), "generate", "--init-from", path("m"),
			     "--template", "alpaca", "--prompt", "x", NULL), 2);
	cr_assert(has("err", "llama3 and chatml"));
}
