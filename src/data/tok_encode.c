/* Encoding: added tokens split out first, then each remaining segment normalized,
 * pre-tokenized into words (split regex / Metaspace) and each word merged by BPE. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "data/tok_impl.h"

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, the Metaspace replacement */

struct zn_tok_scratch *zn_tok_scratch_new(const struct zn_tok *tok)
{
	struct zn_tok_scratch *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (tok->re && !(s->md = pcre2_match_data_create_from_pattern(tok->re, NULL))) {
		free(s);
		return NULL;
	}
	return s;
}

void zn_tok_scratch_free(struct zn_tok_scratch *s)
{
	if (!s)
		return;
	if (s->md)
		pcre2_match_data_free(s->md);
	free(s->buf);
	free(s->sym);
	free(s->prev);
	free(s->next);
	free(s->heap);
	free(s->heap_new);
	free(s);
}

static size_t utf8_len(unsigned char c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xf0)
		return 4;
	if (c >= 0xe0)
		return 3;
	return 2;
}

/* One byte-level word: bytes mapped to GPT-2's chars, then BPE. */
static int encode_byte_word(const struct zn_tok *tok, struct zn_tok_scratch *s, const char *w,
			    size_t n, struct zn_ids *ids)
{
	int rc = zn_scratch_reserve(s, n, 2 * n + 1);
	size_t m = 0;

	if (rc)
		return rc;
	if (tok->ignore_merges) {
		for (size_t i = 0; i < n; i++) {
			unsigned char b = (unsigned char)w[i];

			memcpy(s->buf + m, tok->bl_char[b], tok->bl_len[b]);
			m += tok->bl_len[b];
		}
		int32_t id = zn_strmap_get(&tok->vocab, s->buf, m);

		if (id >= 0)
			return zn_ids_push(ids, id);
	}
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		int32_t id = tok->char_id[(unsigned char)w[i]];

		if (id < 0)
			id = tok->unk;
		if (id >= 0)
			s->sym[k++] = id;
	}
	return zn_bpe_merge(tok, s, k, ids);
}

/* Byte fallback takes a character as <0xXX> tokens only when each of its bytes has one
 * (tokenizers' BPE::tokenize_with_cache); otherwise the character is <unk>. */
static bool has_byte_tokens(const struct zn_tok *tok, const char *c, size_t n)
{
	for (size_t b = 0; b < n; b++)
		if (tok->byte_id[(unsigned char)c[b]] < 0)
			return false;
	return true;
}

/* One SentencePiece-style word (already with "▁" for spaces): chars, byte fallback, BPE. */
static int encode_spm_word(const struct zn_tok *tok, struct zn_tok_scratch *s, const char *w,
			   size_t n, struct zn_ids *ids)
{
	int rc = zn_scratch_reserve(s, n, 0);
	size_t k = 0;
	bool last_unk = false;

	if (rc)
		return rc;
	for (size_t i = 0; i < n;) {
		size_t cl = utf8_len((unsigned char)w[i]);
		int32_t id;

		if (i + cl > n)
			cl = n - i;
		id = zn_strmap_get(&tok->vocab, w + i, cl);
		if (id >= 0) {
			s->sym[k++] = id;
			last_unk = false;
		} else if (tok->byte_fallback && has_byte_tokens(tok, w + i, cl)) {
			for (size_t b = 0; b < cl; b++)
				s->sym[k++] = tok->byte_id[(unsigned char)w[i + b]];
			last_unk = false;
		} else if (tok->unk >= 0) {
			if (!(tok->fuse_unk && last_unk))
				s->sym[k++] = tok->unk;
			last_unk = true;
		}
		i += cl;
	}
	return zn_bpe_merge(tok, s, k, ids);
}

static int encode_bytelevel_segment(const struct zn_tok *tok, struct zn_tok_scratch *s,
				    const char *t, size_t n, struct zn_ids *ids)
{
	int rc = 0;
	size_t start = 0;

	if (tok->bl_prefix_space && n && t[0] != ' ') {
		char *c = malloc(n + 1);

		if (!c)
			return -ENOMEM;
		c[0] = ' ';
		memcpy(c + 1, t, n);
		struct zn_tok copy = *tok;

		copy.bl_prefix_space = false;
		rc = encode_bytelevel_segment(&copy, s, c, n + 1, ids);
		free(c);
		return rc;
	}
	if (!tok->re)
		return encode_byte_word(tok, s, t, n, ids);
	while (start < n && !rc) {
		int m = pcre2_match(tok->re, (PCRE2_SPTR)t, n, start, PCRE2_NO_UTF_CHECK, s->md, NULL);

		if (m < 0)
			break;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
		size_t a = ov[0], b = ov[1];

		if (a > start)
			rc = encode_byte_word(tok, s, t + start, a - start, ids);
		if (b == a) { /* an empty match: step over one character */
			b = a + utf8_len((unsigned char)t[a]);
			if (b > n)
				b = n;
		}
		if (!rc)
			rc = encode_byte_word(tok, s, t + a, b - a, ids);
		start = b;
	}
	if (!rc && start < n)
		rc = encode_byte_word(tok, s, t + start, n - start, ids);
	return rc;
}

static int encode_spm_segment(const struct zn_tok *tok, struct zn_tok_scratch *s,
			      const char *t, size_t n, bool first, struct zn_ids *ids)
{
	bool prepend = tok->prepend_always || (tok->prepend_first && first);
	size_t spaces = 0, m = 0;

	/* Metaspace prepends only to a segment that does not start with a space (which
	 * becomes the replacement); the Prepend normalizer always does */
	if (tok->ms_prepend_if_missing && n && t[0] == ' ')
		prepend = false;
	int rc;

	for (size_t i = 0; i < n; i++)
		spaces += t[i] == ' ';
	if (n == 0)
		return 0;
	/* the normalized text lives after the symbol area's needs: a separate buffer */
	char *w = malloc(n + 2 * spaces + 4);

	if (!w)
		return -ENOMEM;
	if (prepend) {
		memcpy(w, SPM_SPACE, 3);
		m = 3;
	}
	for (size_t i = 0; i < n; i++) {
		if (t[i] == ' ') {
			memcpy(w + m, SPM_SPACE, 3);
			m += 3;
		} else {
			w[m++] = t[i];
		}
	}
	rc = 0;
	if (!tok->ms_split && !tok->ms_safe_split) {
		rc = encode_spm_word(tok, s, w, m, ids);
	} else {
		/* words start at each "▁"; with ms_safe_split only where the char before is
		 * not "▁" (no vocab token spans such a boundary) */
		size_t ws = 0;

		for (size_t i = 3; i + 3 <= m && !rc; i++) {
			if (memcmp(w + i, SPM_SPACE, 3))
				continue;
			bool prev_space = i >= 3 && !memcmp(w + i - 3, SPM_SPACE, 3);

			if (!tok->ms_split && prev_space)
				continue;
			if (i > ws)
				rc = encode_spm_word(tok, s, w + ws, i - ws, ids);
			ws = i;
			i += 2;
		}
		if (!rc && m > ws)
			rc = encode_spm_word(tok, s, w + ws, m - ws, ids);
	}
	free(w);
	return rc;
}

/* The added token starting at t[0..n), the longest; NULL for none. */
static const struct zn_added *added_at(const struct zn_tok *tok, const char *t, size_t n)
{
	int i = tok->first_added[(unsigned char)t[0]];

	if (i < 0)
		return NULL;
	for (; i < tok->n_added && (unsigned char)tok->added[i].s[0] == (unsigned char)t[0]; i++)
		if (tok->added[i].len <= n && !memcmp(tok->added[i].s, t, tok->added[i].len))
			return &tok->added[i];
	return NULL;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int encode_valid(const struct zn_tok *tok, struct zn_tok_scratch *s, const char *t,
			size_t n, struct zn_ids *ids)
{
	size_t seg = 0, i = 0;
	bool first = true;
	int rc = 0;

	while (i <= n && !rc) {
		const struct zn_added *a = i < n ? added_at(tok, t + i, n - i) : NULL;

		if (i < n && !a) {
			i++;
			continue;
		}
		size_t end = i, next = a ? i + a->len : n + 1;

		if (a && a->lstrip)
			while (end > seg && is_ws(t[end - 1]))
				end--;
		if (end > seg) {
			if (tok->spm)
				rc = encode_spm_segment(tok, s, t + seg, end - seg, first, ids);
			else
				rc = encode_bytelevel_segment(tok, s, t + seg, end - seg, ids);
		}
		first = false;
		if (a && !rc) {
			rc = zn_ids_push(ids, a->id);
			if (a->rstrip)
				while (next < n && is_ws(t[next]))
					next++;
		}
		seg = i = next;
	}
	return rc;
}

int zn_tok_encode(const struct zn_tok *tok, struct zn_tok_scratch *s, const char *text,
		  size_t len, struct zn_ids *ids)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t ok = 0;
	bool bad = false;

	/* valid UTF-8 (NUL included) as is; otherwise a copy with U+FFFD for bad bytes */
	for (;;) {
		ok += zn_utf8_prefix(p + ok, len - ok, &bad);
		if (ok < len && p[ok] == 0) {
			ok++;
			continue;
		}
		break;
	}
	if (ok == len)
		return encode_valid(tok, s, text, len, ids);
	char *c = malloc(3 * len + 1);
	size_t m = 0, i = 0;
	int rc;

	if (!c)
		return -ENOMEM;
	while (i < len) {
		size_t k = zn_utf8_prefix(p + i, len - i, &bad);

		memcpy(c + m, p + i, k);
		m += k;
		i += k;
		if (i < len) {
			if (p[i] == 0) {
				c[m++] = 0;
			} else {
				memcpy(c + m, "\xef\xbf\xbd", 3);
				m += 3;
			}
			i++;
		}
	}
	rc = encode_valid(tok, s, c, m, ids);
	free(c);
	return rc;
}
