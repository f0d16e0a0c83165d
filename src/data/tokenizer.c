/* Loading tokenizer.json and tokenizer_config.json (cJSON) into a zn_tok. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsio.h"
#include "core/json.h"
#include "core/log.h"
#include "data/tok_impl.h"

#define TOK_JSON_MAX ((size_t)1 << 30)

static void byte_level_map(struct zn_tok *t)
{
	int n = 0;

	for (int b = 0; b < 256; b++) {
		unsigned cp;

		if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
			cp = (unsigned)b;
		else
			cp = 256u + (unsigned)n++;
		if (cp < 0x80) {
			t->bl_char[b][0] = (char)cp;
			t->bl_len[b] = 1;
		} else {
			t->bl_char[b][0] = (char)(0xc0 | (cp >> 6));
			t->bl_char[b][1] = (char)(0x80 | (cp & 0x3f));
			t->bl_len[b] = 2;
		}
	}
}

static int cmp_added(const void *pa, const void *pb)
{
	const struct zn_added *a = pa, *b = pb;

	if ((unsigned char)a->s[0] != (unsigned char)b->s[0])
		return (unsigned char)a->s[0] < (unsigned char)b->s[0] ? -1 : 1;
	return a->len > b->len ? -1 : a->len < b->len;
}

static int read_added(struct zn_tok *t, const cJSON *added)
{
	const cJSON *it;
	int n = 0;

	for (int b = 0; b < 256; b++)
		t->first_added[b] = -1;
	t->added = calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof(*t->added));
	if (!t->added)
		return -ENOMEM;
	cJSON_ArrayForEach(it, added) {
		const char *c = zn_tok_json_str(it, "content");

		if (!c[0])
			continue;
		if (!(t->added[n].s = strdup(c)))
			return -ENOMEM;
		t->added[n].len = strlen(c);
		t->added[n].id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
		t->added[n].lstrip = zn_tok_json_true(it, "lstrip", false);
		t->added[n].rstrip = zn_tok_json_true(it, "rstrip", false);
		t->added[n].special = zn_tok_json_true(it, "special", false);
		n++;
	}
	t->n_added = n;
	qsort(t->added, (size_t)n, sizeof(*t->added), cmp_added);
	for (int i = n - 1; i >= 0; i--)
		t->first_added[(unsigned char)t->added[i].s[0]] = i;
	return 0;
}


/* tokenizer.json's path and tokenizer_config.json's (NULL when there is none) from a
 * directory or a file. */
static int resolve(const char *path, char **json, char **config)
{
	struct stat st;
	size_t n = strlen(path);
	const char *slash;

	*json = *config = NULL;
	if (stat(path, &st)) {
		zn_error("--tokenizer %s: no such file or directory (give a model directory "
			 "holding tokenizer.json, or the file)", path);
		return -ENOENT;
	}
	if (S_ISDIR(st.st_mode)) {
		*json = malloc(n + 32);
		*config = malloc(n + 32);
		if (!*json || !*config)
			return -ENOMEM;
		sprintf(*json, "%s/tokenizer.json", path);
		sprintf(*config, "%s/tokenizer_config.json", path);
	} else {
		slash = strrchr(path, '/');
		*json = strdup(path);
		*config = malloc(n + 32);
		if (!*json || !*config)
			return -ENOMEM;
		if (slash)
			sprintf(*config, "%.*s/tokenizer_config.json", (int)(slash - path), path);
		else
			sprintf(*config, "tokenizer_config.json");
	}
	if (stat(*config, &st)) {
		free(*config);
		*config = NULL;
	}
	return 0;
}

/* core/json: UTF-8 and strict JSON checked, a repeated key takes its last value as in
 * tokenizers (serde into a map) and transformers (json.load) */
static cJSON *parse_file(const char *path, const char *what)
{
	cJSON *root = NULL;

	zn_json_load(path, what, TOK_JSON_MAX, NULL, &root);
	return root;
}

static int check_model(const cJSON *model, const char *file)
{
	const char *type = zn_tok_json_str(model, "type");
	const char *pre = zn_tok_json_str(model, "continuing_subword_prefix");
	const char *suf = zn_tok_json_str(model, "end_of_word_suffix");

	if (!type || strcmp(type, "BPE")) {
		zn_error("%s: model.type '%s' is not supported: zinc reads BPE tokenizers (GPT-2, "
			 "Llama, Qwen2, Qwen3, Mistral)", file, type ? type : "(none)");
		return -EINVAL;
	}
	if ((pre && pre[0]) || (suf && suf[0])) {
		zn_error("%s: model.continuing_subword_prefix / end_of_word_suffix are not "
			 "supported (set them to null)", file);
		return -EINVAL;
	}
	return 0;
}

int zn_tok_load(struct zn_tok **out, const char *path)
{
	struct zn_tok *t = calloc(1, sizeof(*t));
	char *json = NULL, *config = NULL;
	cJSON *root = NULL, *cfg = NULL;
	const cJSON *model, *added;
	int rc;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->unk = t->bos = t->eos = -1;
	rc = resolve(path, &json, &config);
	if (rc)
		goto out;
	root = parse_file(json, "--tokenizer");
	if (!root) {
		rc = -EINVAL;
		goto out;
	}
	if (config && !(cfg = parse_file(config, "tokenizer_config.json"))) {
		rc = -EINVAL;
		goto out;
	}
	model = cJSON_GetObjectItemCaseSensitive(root, "model");
	added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	rc = check_model(model, json);
	if (!rc)
		rc = zn_tok_read_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), json);
	if (!rc)
		rc = zn_tok_read_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), json);
	if (!rc && t->byte_level && t->spm) {
		zn_error("%s: both ByteLevel and Metaspace/Prepend: not a tokenizer zinc knows", json);
		rc = -EINVAL;
	}
	if (!rc)
		rc = zn_tok_read_vocab(t, model, added, json);
	if (!rc)
		rc = zn_tok_read_merges(t, model, json);
	if (!rc)
		rc = read_added(t, added);
	if (rc)
		goto out;
	t->spm = !t->byte_level;
	t->ignore_merges = zn_tok_json_true(model, "ignore_merges", false);
	t->byte_fallback = zn_tok_json_true(model, "byte_fallback", false);
	t->fuse_unk = zn_tok_json_true(model, "fuse_unk", false);
	if (zn_tok_json_str(model, "unk_token"))
		t->unk = zn_strmap_get(&t->vocab, zn_tok_json_str(model, "unk_token"),
				       strlen(zn_tok_json_str(model, "unk_token")));
	byte_level_map(t);
	for (int b = 0; b < 256; b++) {
		char name[8];

		snprintf(name, sizeof(name), "<0x%02X>", b);
		t->byte_id[b] = zn_strmap_get(&t->vocab, name, 6);
		t->char_id[b] = zn_strmap_get(&t->vocab, t->bl_char[b], t->bl_len[b]);
	}
	if (t->spm && !t->ms_split)
		t->ms_safe_split = zn_tok_spm_split_is_exact(t);
	rc = zn_tok_read_specials(t, root, cfg, json);
out:
	cJSON_Delete(root);
	cJSON_Delete(cfg);
	free(json);
	free(config);
	if (rc)
		zn_tok_free(t);
	else
		*out = t;
	return rc;
}
