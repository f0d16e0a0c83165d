/* The normalizer and pre-tokenizer keys of tokenizer.json: ByteLevel, Split (PCRE2 with
 * UTF + UCP), Metaspace, NFC, Prepend/Replace. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/tok_impl.h"

/* GPT-2's split regex; tokenizers uses it for ByteLevel with use_regex */
static const char gpt2_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

const char *zn_tok_json_str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool zn_tok_json_true(const cJSON *o, const char *key, bool dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	return dflt;
}

static int compile_regex(struct zn_tok *t, const char *pat, const char *file)
{
	int err = 0;
	PCRE2_SIZE off = 0;

	t->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
			      &err, &off, NULL);
	if (!t->re) {
		PCRE2_UCHAR msg[256];

		pcre2_get_error_message(err, msg, sizeof(msg));
		zn_error("%s: pre_tokenizer Split regex does not compile at offset %zu: %s", file,
			 (size_t)off, (const char *)msg);
		return -EINVAL;
	}
	pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT it still matches */
	return 0;
}

/* Escapes a literal for PCRE2 (\Q...\E cannot hold "\E"). */
static char *regex_quote(const char *s)
{
	size_t n = strlen(s);
	char *q = malloc(2 * n + 1), *p = q;

	if (!q)
		return NULL;
	for (; *s; s++) {
		if (strchr("\\^$.|?*+()[]{}", *s))
			*p++ = '\\';
		*p++ = *s;
	}
	*p = 0;
	return q;
}

int zn_tok_read_pre(struct zn_tok *t, const cJSON *pre, const char *file)
{
	const char *type = zn_tok_json_str(pre, "type");

	if (!pre || cJSON_IsNull(pre))
		return 0;
	if (!type)
		goto bad;
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;

		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"))
			if (zn_tok_read_pre(t, it, file))
				return -EINVAL;
		return 0;
	}
	if (!strcmp(type, "ByteLevel")) {
		t->byte_level = true;
		t->bl_prefix_space = zn_tok_json_true(pre, "add_prefix_space", false);
		if (zn_tok_json_true(pre, "use_regex", true)) {
			if (t->re) {
				zn_error("%s: pre_tokenizer has a Split regex and a ByteLevel with "
					 "use_regex: zinc supports one split regex", file);
				return -EINVAL;
			}
			return compile_regex(t, gpt2_regex, file);
		}
		return 0;
	}
	if (!strcmp(type, "Split")) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pre, "pattern");
		const char *re = zn_tok_json_str(pat, "Regex"), *lit = zn_tok_json_str(pat, "String");
		const char *beh = zn_tok_json_str(pre, "behavior");
		int rc;

		if ((!re && !lit) || !beh || strcmp(beh, "Isolated") || zn_tok_json_true(pre, "invert", false)) {
			zn_error("%s: pre_tokenizer Split: zinc supports a Regex or String pattern "
				 "with behavior Isolated and invert false", file);
			return -EINVAL;
		}
		if (t->re) {
			zn_error("%s: pre_tokenizer has two split regexes: zinc supports one", file);
			return -EINVAL;
		}
		if (re)
			return compile_regex(t, re, file);
		char *q = regex_quote(lit);

		if (!q)
			return -ENOMEM;
		rc = compile_regex(t, q, file);
		free(q);
		return rc;
	}
	if (!strcmp(type, "Metaspace")) {
		const char *rep = zn_tok_json_str(pre, "replacement"), *scheme = zn_tok_json_str(pre, "prepend_scheme");

		if (rep && strcmp(rep, "\xe2\x96\x81")) {
			zn_error("%s: pre_tokenizer Metaspace replacement '%s': zinc supports U+2581",
				 file, rep);
			return -EINVAL;
		}
		t->spm = true;
		t->ms_prepend_if_missing = true;
		t->ms_split = zn_tok_json_true(pre, "split", true);
		if (scheme && !strcmp(scheme, "first"))
			t->prepend_first = true;
		else if (scheme ? !strcmp(scheme, "always") : zn_tok_json_true(pre, "add_prefix_space", true))
			t->prepend_always = true;
		return 0;
	}
bad:
	zn_error("%s: pre_tokenizer type '%s' is not supported (zinc reads ByteLevel, "
		 "Metaspace, Split and Sequence of them)", file, type ? type : "(none)");
	return -EINVAL;
}

int zn_tok_read_norm(struct zn_tok *t, const cJSON *nm, const char *file)
{
	const char *type = zn_tok_json_str(nm, "type");

	if (!nm || cJSON_IsNull(nm))
		return 0;
	if (type && !strcmp(type, "Sequence")) {
		const cJSON *it;

		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(nm, "normalizers"))
			if (zn_tok_read_norm(t, it, file))
				return -EINVAL;
		return 0;
	}
	if (type && !strcmp(type, "NFC")) {
		t->nfc = true;
		return 0;
	}
	if (type && !strcmp(type, "Prepend") && zn_tok_json_str(nm, "prepend") &&
	    !strcmp(zn_tok_json_str(nm, "prepend"), "\xe2\x96\x81")) {
		t->spm = true;
		t->prepend_always = true;
		return 0;
	}
	if (type && !strcmp(type, "Replace")) {
		const char *from = zn_tok_json_str(cJSON_GetObjectItemCaseSensitive(nm, "pattern"), "String");
		const char *to = zn_tok_json_str(nm, "content");

		if (from && to && !strcmp(from, " ") && !strcmp(to, "\xe2\x96\x81")) {
			t->spm = true;
			return 0;
		}
	}
	zn_error("%s: normalizer '%s' is not supported (zinc reads NFC and Llama 2's Prepend "
		 "\"\xe2\x96\x81\" + Replace \" \" -> \"\xe2\x96\x81\")", file, type ? type : "(none)");
	return -EINVAL;
}

