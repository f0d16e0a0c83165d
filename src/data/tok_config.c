/* BOS/EOS (post_processor, tokenizer_config.json), the accessors, decoding, free. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/tok_impl.h"

int32_t zn_tok_id(const struct zn_tok *tok, const char *s)
{
	size_t n = strlen(s);

	for (int i = 0; i < tok->n_added; i++)
		if (tok->added[i].len == n && !memcmp(tok->added[i].s, s, n))
			return tok->added[i].id;
	return zn_strmap_get(&tok->vocab, s, n);
}

/* a token named in tokenizer_config.json: "<s>" or {"content": "<s>", ...} */
static const char *config_token(const cJSON *cfg, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);

	if (cJSON_IsString(v))
		return v->valuestring;
	v = cJSON_GetObjectItemCaseSensitive(v, "content");
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* TemplateProcessing's "single": special tokens before $A are BOS, after are EOS */
static void read_template(struct zn_tok *t, const cJSON *pp)
{
	const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pp, "type"));
	const cJSON *it;
	bool seen_a = false;

	if (!type)
		return;
	if (!strcmp(type, "Sequence")) {
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
			read_template(t, it);
		return;
	}
	if (strcmp(type, "TemplateProcessing"))
		return;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pp, "single")) {
		const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sp, "id"));

		if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
			seen_a = true;
		} else if (name && !seen_a) {
			t->bos = zn_tok_id(t, name);
			t->add_bos = t->bos >= 0;
		} else if (name) {
			t->eos = zn_tok_id(t, name);
			t->add_eos = t->eos >= 0;
		}
	}
}

int zn_tok_read_specials(struct zn_tok *t, const cJSON *root, const cJSON *cfg,
			 const char *file)
{
	static const char *const eos_names[] = { "<|endoftext|>", "</s>", "<|end_of_text|>" };
	const cJSON *v;
	const char *name;

	read_template(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
	if ((name = config_token(cfg, "bos_token")) && zn_tok_id(t, name) >= 0)
		t->bos = zn_tok_id(t, name);
	if ((name = config_token(cfg, "eos_token")) && zn_tok_id(t, name) >= 0)
		t->eos = zn_tok_id(t, name);
	v = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
	if (cJSON_IsBool(v))
		t->add_bos = cJSON_IsTrue(v) && t->bos >= 0;
	v = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
	if (cJSON_IsBool(v))
		t->add_eos = cJSON_IsTrue(v) && t->eos >= 0;
	for (size_t i = 0; t->eos < 0 && i < sizeof(eos_names) / sizeof(eos_names[0]); i++)
		t->eos = zn_tok_id(t, eos_names[i]);
	if (t->bos < 0 && t->eos < 0)
		zn_warn("%s: no BOS or EOS token found (tokenizer_config.json bos_token / "
			 "eos_token): documents cannot be delimited", file);
	return 0;
}

bool zn_tok_spm_split_is_exact(const struct zn_tok *t)
{
	for (int64_t id = 0; id < t->n_ids; id++) {
		const char *s = t->str[id];

		if (!s)
			continue;
		for (uint32_t i = 1; i + 3 <= t->len[id]; i++)
			if (!memcmp(s + i, "\xe2\x96\x81", 3) &&
			    (i < 3 || memcmp(s + i - 3, "\xe2\x96\x81", 3)))
				return false;
	}
	return true;
}

int zn_tok_decode_one(const struct zn_tok *tok, int32_t id, char *buf, size_t size)
{
	const char *s;
	size_t n = 0;

	if (id < 0 || id >= tok->n_ids || !(s = tok->str[id]))
		return -1;
	if (tok->byte_level && zn_strmap_get(&tok->vocab, s, tok->len[id]) == id) {
		for (const unsigned char *p = (const unsigned char *)s; *p && n < size;) {
			unsigned cp = *p < 0x80 ? *p : (unsigned)((p[0] & 0x1f) << 6 | (p[1] & 0x3f));
			int b;

			for (b = 0; b < 256; b++)
				if (!memcmp(tok->bl_char[b], p, tok->bl_len[b]))
					break;
			buf[n++] = b < 256 ? (char)b : '?';
			p += cp < 0x80 ? 1 : 2;
		}
		return (int)n;
	}
	for (int b = 0; b < 256; b++)
		if (tok->byte_id[b] == id) {
			if (size)
				buf[0] = (char)b;
			return size ? 1 : 0;
		}
	for (size_t i = 0; i < tok->len[id] && n < size;) {
		/* the length first: a token ending within 3 bytes must not be compared past it */
		if (tok->spm && i + 3 <= tok->len[id] && !memcmp(s + i, "\xe2\x96\x81", 3)) {
			buf[n++] = ' ';
			i += 3;
		} else {
			buf[n++] = s[i++];
		}
	}
	return (int)n;
}

int64_t zn_tok_vocab(const struct zn_tok *tok) { return tok->n_ids; }
int32_t zn_tok_bos(const struct zn_tok *tok) { return tok->bos; }
int32_t zn_tok_eos(const struct zn_tok *tok) { return tok->eos; }
bool zn_tok_adds_bos(const struct zn_tok *tok) { return tok->add_bos; }
bool zn_tok_adds_eos(const struct zn_tok *tok) { return tok->add_eos; }

const char *zn_tok_kind(const struct zn_tok *tok)
{
	return tok->byte_level ? "byte-level BPE" : "sentencepiece BPE";
}

void zn_tok_free(struct zn_tok *tok)
{
	if (!tok)
		return;
	if (tok->re)
		pcre2_code_free(tok->re);
	for (int64_t i = 0; tok->str && i <= tok->n_ids; i++)
		free(tok->str[i]);
	free(tok->str);
	free(tok->len);
	for (int i = 0; tok->added && i < tok->n_added; i++)
		free(tok->added[i].s);
	free(tok->added);
	zn_strmap_free(&tok->vocab);
	zn_pairmap_free(&tok->merges);
	free(tok);
}
