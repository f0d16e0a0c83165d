/* tokenizer.json's model.vocab, added_tokens and model.merges into a zn_tok, refused where
 * Hugging Face tokenizers refuses them (BPE::from / convert_merges_to_hashmap): an empty
 * vocab, an id that is not a whole number, a merge that is not two parts, a merge whose
 * parts or result are not tokens. The JSON itself was read by core/json (tokenizer.c). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "data/tok_impl.h"

/* The tables are sized by the largest id: ids may leave gaps (a test tokenizer keeps
 * Llama 3's specials at 128000), but below this or twice the token count, so a file of a
 * few bytes cannot ask for gigabytes. */
#define SPARSE_IDS_MAX ((int64_t)1 << 20)
#define ID_MAX ((int64_t)0x7ffffffe) /* n_ids = max + 1 must fit an int32 */

/* The id of a vocab value or an added token's "id"; what names it in messages. */
static int read_id(const cJSON *v, const char *file, const char *what, const char *name,
		   int64_t *id)
{
	int rc = zn_json_int(v, 0, ID_MAX, id);

	if (rc == -EDOM && cJSON_IsNumber(v))
		zn_error("%s: %s\"%.60s\" has id %s, a float: token ids are whole numbers", file,
			 what, name, v->valuestring ? v->valuestring : "?");
	else if (rc == -EDOM)
		zn_error("%s: %s\"%.60s\" has no id (a whole number >= 0)", file, what, name);
	else if (rc)
		zn_error("%s: %s\"%.60s\" has id %s: ids are 0 .. %lld", file, what, name,
			 v->valuestring ? v->valuestring : "?", (long long)ID_MAX);
	return rc ? -EINVAL : 0;
}

static int set_str(struct zn_tok *t, int64_t id, const char *s)
{
	if (t->str[id])
		return 0;
	if (!(t->str[id] = strdup(s)))
		return -ENOMEM;
	t->len[id] = (uint32_t)strlen(s);
	return 0;
}

/* every id checked; *max the largest, *count how many */
static int check_ids(const cJSON *vocab, const cJSON *added, const char *file, int64_t *max,
		     int64_t *count)
{
	const cJSON *it;
	int64_t id;

	*max = -1;
	*count = 0;
	cJSON_ArrayForEach(it, vocab) {
		if (read_id(it, file, "model.vocab: token ", it->string, &id))
			return -EINVAL;
		*max = id > *max ? id : *max;
		++*count;
	}
	cJSON_ArrayForEach(it, added) {
		const char *content = zn_tok_json_str(it, "content");

		if (!content) {
			zn_error("%s: added_tokens[%lld] has no \"content\" string", file,
				 (long long)(*count - cJSON_GetArraySize(vocab)));
			return -EINVAL;
		}
		if (read_id(cJSON_GetObjectItemCaseSensitive(it, "id"), file, "added token ",
			    content, &id))
			return -EINVAL;
		*max = id > *max ? id : *max;
		++*count;
	}
	if (*max >= SPARSE_IDS_MAX && *max >= 2 * *count) {
		zn_error("%s: id %lld in a tokenizer of %lld tokens: zinc's tables are sized by "
			 "the largest id, so ids must stay below %lld or twice the token count",
			 file, (long long)*max, (long long)*count, (long long)SPARSE_IDS_MAX);
		return -EINVAL;
	}
	return 0;
}

int zn_tok_read_vocab(struct zn_tok *t, const cJSON *model, const cJSON *added,
		      const char *file)
{
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *it;
	int64_t max, count;
	int rc;

	if (!cJSON_IsObject(vocab) || !vocab->child) {
		zn_error("%s: model.vocab is %s: a BPE tokenizer needs its tokens", file,
			 cJSON_IsObject(vocab) ? "empty" : "missing or not an object");
		return -EINVAL;
	}
	if (added && !cJSON_IsArray(added)) {
		zn_error("%s: added_tokens must be a list", file);
		return -EINVAL;
	}
	rc = check_ids(vocab, added, file, &max, &count);
	if (rc)
		return rc;
	t->n_ids = max + 1;
	t->str = calloc((size_t)t->n_ids + 1, sizeof(char *));
	t->len = calloc((size_t)t->n_ids + 1, sizeof(uint32_t));
	if (!t->str || !t->len)
		return -ENOMEM;
	cJSON_ArrayForEach(it, vocab) {
		int64_t id = (int64_t)it->valuedouble; /* checked whole by check_ids */

		if (t->str[id]) {
			zn_error("%s: model.vocab gives id %lld to both \"%s\" and \"%s\"", file,
				 (long long)id, t->str[id], it->string);
			return -EINVAL;
		}
		rc = set_str(t, id, it->string);
		if (!rc)
			rc = zn_strmap_put(&t->vocab, t->str[id], t->len[id], (int32_t)id);
		if (rc)
			return rc;
	}
	cJSON_ArrayForEach(it, added) {
		rc = set_str(t, (int64_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble,
			     zn_tok_json_str(it, "content"));
		if (rc)
			return rc;
	}
	return 0;
}

/* merge i's two parts: "a b" (exactly one space, as tokenizers splits it) or ["a", "b"] */
static int merge_parts(const cJSON *it, int64_t i, const char *file, const char **a,
		       size_t *la, const char **b, size_t *lb)
{
	if (cJSON_IsString(it)) {
		const char *sp = strchr(it->valuestring, ' ');

		if (sp && !strchr(sp + 1, ' ')) {
			*a = it->valuestring;
			*la = (size_t)(sp - *a);
			*b = sp + 1;
			*lb = strlen(*b);
			return 0;
		}
	} else if (cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
		   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
		*a = cJSON_GetArrayItem(it, 0)->valuestring;
		*b = cJSON_GetArrayItem(it, 1)->valuestring;
		*la = strlen(*a);
		*lb = strlen(*b);
		return 0;
	}
	zn_error("%s: model.merges[%lld] is not a merge of two tokens: write \"a b\" (one "
		 "space) or [\"a\", \"b\"]", file, (long long)i);
	return -EINVAL;
}

static int32_t token_id(const struct zn_tok *t, const char *s, size_t n, int64_t i,
			const char *file)
{
	int32_t id = zn_strmap_get(&t->vocab, s, n);

	if (id < 0)
		zn_error("%s: model.merges[%lld] names \"%.*s\", which is not in model.vocab "
			 "(tokenizers refuses it too)", file, (long long)i, n > 60 ? 60 : (int)n,
			 s);
	return id;
}

int zn_tok_read_merges(struct zn_tok *t, const cJSON *model, const char *file)
{
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *it;
	int64_t rank = 0, i = -1; /* i: the index in the list, rank: without #version */
	char *buf = NULL;
	size_t cap = 0;
	int rc = 0;

	if (merges && !cJSON_IsArray(merges) && !cJSON_IsNull(merges)) {
		zn_error("%s: model.merges must be a list", file);
		return -EINVAL;
	}
	cJSON_ArrayForEach(it, merges) {
		const char *a = NULL, *b = NULL;
		size_t la = 0, lb = 0;
		int32_t ia, ib, im;

		i++;
		/* a merges.txt header carried over, skipped by tokenizers */
		if (cJSON_IsString(it) && !strncmp(it->valuestring, "#version", 8))
			continue;
		rc = merge_parts(it, i, file, &a, &la, &b, &lb);
		if (rc)
			break;
		if (la + lb + 1 > cap) {
			char *nb = realloc(buf, 2 * (la + lb + 1));

			rc = -ENOMEM;
			if (!nb)
				break;
			buf = nb;
			cap = 2 * (la + lb + 1);
		}
		memcpy(buf, a, la);
		memcpy(buf + la, b, lb);
		rc = -EINVAL;
		ia = token_id(t, a, la, i, file);
		ib = ia < 0 ? -1 : token_id(t, b, lb, i, file);
		im = ib < 0 ? -1 : token_id(t, buf, la + lb, i, file);
		if (im < 0)
			break;
		if ((rc = zn_pairmap_put(&t->merges, ia, ib, (int32_t)rank, im)))
			break;
		rank++;
	}
	free(buf);
	return rc;
}
