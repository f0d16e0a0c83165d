/* Decoding a sequence of ids to text (tokenizer.h: zn_tok_decode, zn_tok_is_special):
 * each id through zn_tok_decode_one, then, for a SentencePiece-style tokenizer that puts
 * "▁" before the text (Metaspace with prepend_scheme first/always, Llama 2's Prepend
 * normalizer), the one leading space dropped, as tokenizers' Metaspace decoder and Llama
 * 2's Strip decoder do; special added tokens (BOS, EOS, ...) skipped when asked, as
 * tokenizers' skip_special_tokens. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data/tok_impl.h"
#include "data/tokenizer.h"

bool zn_tok_is_special(const struct zn_tok *tok, int32_t id)
{
	for (int i = 0; i < tok->n_added; i++)
		if (tok->added[i].id == id)
			return tok->added[i].special;
	return false;
}

static bool prepends(const struct zn_tok *tok)
{
	return tok->spm && (tok->prepend_always || tok->prepend_first);
}

int zn_tok_decode(const struct zn_tok *tok, const int32_t *ids, size_t n, bool skip_special,
		  bool at_start, char **out, size_t *len)
{
	size_t cap = 64, m = 0;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int k;

		if (skip_special && zn_tok_is_special(tok, ids[i]))
			continue;
		for (;;) {
			k = zn_tok_decode_one(tok, ids[i], buf + m, cap - m - 1);
			if (k < 0) {
				free(buf);
				return -EINVAL;
			}
			if ((size_t)k < cap - m - 1)
				break;
			cap *= 2; /* it may have filled the room: again with more */
			char *nb = realloc(buf, cap);

			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		if (at_start && k > 0 && prepends(tok) && buf[m] == ' ') {
			memmove(buf + m, buf + m + 1, (size_t)k - 1);
			k--;
		}
		if (k > 0 || !zn_tok_is_special(tok, ids[i]))
			at_start = false;
		m += (size_t)k;
	}
	buf[m] = 0;
	*out = buf;
	*len = m;
	return 0;
}
