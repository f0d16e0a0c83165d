/* Chat templates into ids and a loss mask (sft.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "data/sft.h"
#include "zinc.h"

#define SPANS_MAX 1024
#define PIECE_MAX 4096

/* the rendered text and the byte ranges whose tokens count */
struct render {
	char *text;
	size_t n, cap;
	size_t span[SPANS_MAX][2];
	int spans;
	bool open;
};

int zn_sft_template_parse(const char *name, enum zn_sft_template *t)
{
	if (!strcmp(name, "llama3"))
		*t = ZN_SFT_LLAMA3;
	else if (!strcmp(name, "chatml"))
		*t = ZN_SFT_CHATML;
	else {
		zn_error("--template %s: the built-in templates are llama3 and chatml (the Jinja "
			 "chat_template of tokenizer_config.json is not read)", name);
		return ZN_EUSAGE;
	}
	return 0;
}

const char *zn_sft_template_name(enum zn_sft_template t)
{
	return t == ZN_SFT_LLAMA3 ? "llama3" : t == ZN_SFT_CHATML ? "chatml" : "none";
}

static const char *const llama3_tokens[] = { "<|start_header_id|>", "<|end_header_id|>",
					     "<|eot_id|>", NULL };
static const char *const chatml_tokens[] = { "<|im_start|>", "<|im_end|>", NULL };

int zn_sft_check(const struct zn_tok *tok, enum zn_sft_template t, const char *tok_path)
{
	const char *const *need = t == ZN_SFT_LLAMA3 ? llama3_tokens : chatml_tokens;

	if (strcmp(zn_tok_kind(tok), "byte-level BPE")) {
		zn_error("--template %s with %s: a %s tokenizer does not spell the text back byte "
			 "for byte, which the loss mask's offsets need: use a byte-level BPE "
			 "tokenizer (Llama 3, Qwen2, GPT-2)", zn_sft_template_name(t), tok_path,
			 zn_tok_kind(tok));
		return ZN_EUSAGE;
	}
	for (int i = 0; need[i]; i++)
		if (zn_tok_id(tok, need[i]) < 0) {
			zn_error("--template %s: %s has no %s token: give the tokenizer of a model "
				 "trained with this template (or the other --template)",
				 zn_sft_template_name(t), tok_path, need[i]);
			return ZN_EUSAGE;
		}
	if (t == ZN_SFT_LLAMA3 && zn_tok_bos(tok) < 0) {
		zn_error("--template llama3: %s has no bos_token (<|begin_of_text|>)", tok_path);
		return ZN_EUSAGE;
	}
	if (t == ZN_SFT_CHATML && zn_tok_bos(tok) < 0 && zn_tok_eos(tok) < 0) {
		zn_error("--template chatml: %s has neither a BOS nor an EOS token to delimit "
			 "conversations", tok_path);
		return ZN_EUSAGE;
	}
	return 0;
}

int32_t zn_sft_delimiter(const struct zn_tok *tok, enum zn_sft_template t)
{
	int32_t d, alt;

	if (t == ZN_SFT_LLAMA3)
		return zn_tok_bos(tok);
	d = zn_tok_adds_bos(tok) || zn_tok_eos(tok) < 0 ? zn_tok_bos(tok) : zn_tok_eos(tok);
	/* an end-of-turn delimiter would split conversations at every turn */
	alt = zn_tok_id(tok, "<|endoftext|>");
	if (d == zn_tok_id(tok, "<|im_end|>") && alt >= 0)
		return alt;
	return d;
}

static int put(struct render *r, const char *s, size_t n)
{
	if (r->n + n + 1 > r->cap) {
		size_t cap = (r->n + n + 1) * 2;
		char *p = realloc(r->text, cap);

		if (!p)
			return -ENOMEM;
		r->text = p;
		r->cap = cap;
	}
	memcpy(r->text + r->n, s, n);
	r->n += n;
	r->text[r->n] = 0;
	return 0;
}

static int puts_(struct render *r, const char *s)
{
	return put(r, s, strlen(s));
}

/* starts (counts true) or ends a counted span at the current end of the text */
static void mark(struct render *r, bool counts)
{
	if (counts && !r->open && r->spans < SPANS_MAX) {
		r->span[r->spans][0] = r->n;
		r->open = true;
	} else if (!counts && r->open) {
		r->span[r->spans++][1] = r->n;
		r->open = false;
	}
}

static int token_text(const struct zn_tok *tok, int32_t id, struct render *r)
{
	char buf[PIECE_MAX];
	int n = zn_tok_decode_one(tok, id, buf, sizeof(buf));

	return n < 0 ? -EINVAL : put(r, buf, (size_t)n);
}

/* c[0 .. n) with Python's str.strip() (Jinja's trim) when strip */
static int content(struct render *r, const char *c, size_t n, bool strip)
{
	size_t a = 0, b = n;

	while (strip && a < b && c[a] && strchr(" \t\n\r\v\f", c[a]))
		a++;
	while (strip && b > a && c[b - 1] && strchr(" \t\n\r\v\f", c[b - 1]))
		b--;
	return put(r, c + a, b - a);
}

static int render_message(struct render *r, enum zn_sft_template t, const char *role,
			  size_t role_len, const char *text, size_t text_len)
{
	bool a = role_len == 9 && !memcmp(role, "assistant", 9);
	int rc;

	if (t == ZN_SFT_LLAMA3) {
		rc = puts_(r, "<|start_header_id|>");
		if (!rc)
			rc = put(r, role, role_len);
		if (!rc)
			rc = puts_(r, "<|end_header_id|>\n\n");
		mark(r, a);
		if (!rc)
			rc = content(r, text, text_len, true);
		if (!rc)
			rc = puts_(r, "<|eot_id|>");
		mark(r, false);
		return rc;
	}
	rc = puts_(r, "<|im_start|>");
	if (!rc)
		rc = put(r, role, role_len);
	if (!rc)
		rc = puts_(r, "\n");
	mark(r, a);
	if (!rc)
		rc = content(r, text, text_len, false);
	if (!rc)
		rc = puts_(r, "<|im_end|>");
	mark(r, false);
	if (!rc)
		rc = puts_(r, "\n");
	return rc;
}

static int render(const struct zn_tok *tok, enum zn_sft_template t, const cJSON *msgs,
		  const char *file, uint64_t line, struct render *r)
{
	const cJSON *m;
	int i = 0, rc;

	rc = token_text(tok, zn_sft_delimiter(tok, t), r); /* zinc tokenize's delimiter */
	cJSON_ArrayForEach(m, msgs) {
		size_t role_len = 0, len = 0;
		const char *role = zn_json_string(cJSON_GetObjectItemCaseSensitive(m, "role"),
						  &role_len);
		const char *c = zn_json_string(cJSON_GetObjectItemCaseSensitive(m, "content"), &len);

		if (rc)
			return rc;
		if (!role || !c) {
			zn_error("%s:%llu: messages[%d] needs a \"role\" string and a \"content\" "
				 "string", file, (unsigned long long)line, i);
			return -EINVAL;
		}
		rc = render_message(r, t, role, role_len, c, len);
		i++;
	}
	if (!rc && r->spans == SPANS_MAX) {
		zn_error("%s:%llu: more than %d assistant messages in one conversation: split it",
			 file, (unsigned long long)line, SPANS_MAX - 1);
		return -EINVAL;
	}
	return rc;
}

/* mask[i] = 1 when token i's bytes [off, off + len) overlap a counted span */
static int mask_tokens(const struct zn_tok *tok, const struct render *r, const int32_t *ids,
		       size_t n, struct zn_ids *mask, const char *file, uint64_t line)
{
	char buf[PIECE_MAX];
	size_t off = 0;
	int s = 0, rc = 0;

	for (size_t i = 0; !rc && i < n; i++) {
		int len = zn_tok_decode_one(tok, ids[i], buf, sizeof(buf));
		bool counts = false;

		if (len < 0 || off + (size_t)len > r->n ||
		    memcmp(buf, r->text + off, (size_t)len)) {
			zn_error("%s:%llu: the tokens do not spell the rendered conversation back "
				 "at byte %zu: the loss mask cannot be placed", file,
				 (unsigned long long)line, off);
			return -EINVAL;
		}
		while (s < r->spans && r->span[s][1] <= off)
			s++;
		for (int k = s; k < r->spans && r->span[k][0] < off + (size_t)len; k++)
			if (r->span[k][1] > off && r->span[k][1] > r->span[k][0])
				counts = true;
		rc = zn_ids_push(mask, counts ? 1 : 0);
		off += (size_t)len;
	}
	if (!rc && off != r->n) {
		zn_error("%s:%llu: the tokens spell %zu of the conversation's %zu bytes", file,
			 (unsigned long long)line, off, r->n);
		rc = -EINVAL;
	}
	return rc;
}

int zn_sft_encode(const struct zn_tok *tok, struct zn_tok_scratch *s, enum zn_sft_template t,
		  const char *json, size_t len, const char *file, uint64_t line,
		  struct zn_ids *ids, struct zn_ids *mask)
{
	/* core/json, as Python's json.loads: the line number in errors, the last of a repeated
	 * key, and each string's length through \u0000 */
	struct zn_json_opts o = { .origin = file, .line = line,
				  .flags = ZN_JSON_NUL_OK | ZN_JSON_QUIET_DUP };
	cJSON *root = NULL;
	const cJSON *msgs;
	struct render r = { 0 };
	size_t first = ids->n;
	int rc;

	if (zn_json_parse(json, len, &o, &root))
		return -EINVAL;
	msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
	if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
		zn_error("%s:%llu: %s: with --template each JSONL line needs a \"messages\" list "
			 "of {\"role\", \"content\"}", file, (unsigned long long)line,
			 cJSON_IsArray(msgs) ? "an empty \"messages\"" : "no \"messages\" list");
		cJSON_Delete(root);
		return -EINVAL;
	}
	rc = render(tok, t, msgs, file, line, &r);
	if (!rc)
		rc = zn_tok_encode(tok, s, r.text, r.n, ids);
	if (!rc)
		rc = mask_tokens(tok, &r, ids->v + first, ids->n - first, mask, file, line);
	free(r.text);
	cJSON_Delete(root);
	return rc;
}

int32_t zn_sft_end_of_turn(const struct zn_tok *tok, enum zn_sft_template t)
{
	return zn_tok_id(tok, t == ZN_SFT_LLAMA3 ? "<|eot_id|>" : "<|im_end|>");
}

int zn_sft_render_prompt(const struct zn_tok *tok, enum zn_sft_template t,
			 const char *system, const char *user, char **out, size_t *len)
{
	struct render r = { 0 };
	int rc = 0;

	*out = NULL;
	/* llama3's template opens with bos_token; chatml's with nothing */
	if (t == ZN_SFT_LLAMA3)
		rc = token_text(tok, zn_tok_bos(tok), &r);
	if (!rc && system)
		rc = render_message(&r, t, "system", 6, system, strlen(system));
	if (!rc)
		rc = render_message(&r, t, "user", 4, user, strlen(user));
	/* add_generation_prompt: the assistant's header, its turn left open */
	if (!rc && t == ZN_SFT_LLAMA3)
		rc = puts_(&r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	else if (!rc)
		rc = puts_(&r, "<|im_start|>assistant\n");
	if (rc) {
		free(r.text);
		return rc;
	}
	*out = r.text;
	*len = r.n;
	return 0;
}
