/* The tokenizer's internals, shared by tokenizer.c (loading), tok_map.c (hash maps),
 * tok_bpe.c (merging) and tok_encode.c (splitting and encoding). */
#ifndef ZN_DATA_TOK_IMPL_H
#define ZN_DATA_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/tokenizer.h"

/* string -> id, open addressing; keys point into the tokenizer's own strings */
struct zn_strmap {
	const char **key;
	uint32_t *klen;
	int32_t *val;
	size_t cap; /* power of two */
	size_t n;
};

/* (left id, right id) -> (rank, merged id) */
struct zn_pairmap {
	uint64_t *key; /* (left << 32 | right) + 1; 0 = empty */
	int32_t *rank, *merged;
	size_t cap;
	size_t n;
};

struct zn_added {
	char *s;
	size_t len;
	int32_t id;
	bool lstrip, rstrip, special;
};

struct zn_tok {
	bool spm;            /* SentencePiece-style (Metaspace / Prepend+Replace) else byte-level */
	bool byte_level;     /* ByteLevel pre-tokenizer: bytes mapped to GPT-2's printable chars */
	bool bl_prefix_space;/* ByteLevel add_prefix_space */
	pcre2_code *re;      /* the split regex, NULL for none */
	bool ignore_merges;  /* a whole word in the vocab is taken as is (Llama 3) */
	bool nfc;            /* NFC normalizer (input assumed NFC) */
	/* SentencePiece side */
	bool prepend_always; /* "▁" before every segment (Prepend normalizer, scheme always) */
	bool prepend_first;  /* only before the first segment of a text (scheme first) */
	bool ms_prepend_if_missing; /* Metaspace: not when the segment starts with a space */
	bool ms_split;       /* Metaspace split: a word starts at each "▁" */
	bool ms_safe_split;  /* no vocab token holds "x▁" (x not ▁): splitting is exact */
	bool byte_fallback, fuse_unk;
	int32_t unk;         /* -1: none */
	int32_t byte_id[256];/* <0xXX> tokens, -1 when absent */
	int32_t char_id[256];/* byte-level: the id of each byte's mapped char */
	char bl_char[256][3];/* byte-level mapping, UTF-8 */
	uint8_t bl_len[256];
	/* vocabulary */
	char **str;          /* id -> string (NULL for holes) */
	uint32_t *len;
	int64_t n_ids;
	struct zn_strmap vocab;
	struct zn_pairmap merges;
	/* added tokens, longest first; by_byte[b]: the first index starting with byte b */
	struct zn_added *added;
	int n_added;
	int32_t first_added[256];
	int32_t bos, eos;
	bool add_bos, add_eos;
};

struct zn_tok_scratch {
	pcre2_match_data *md;
	char *buf;           /* a normalized or byte-mapped piece */
	size_t buf_cap;
	int32_t *sym, *prev, *next; /* BPE symbols */
	size_t sym_cap;
	uint64_t *heap;      /* (rank << 32 | pos) */
	int32_t *heap_new;
	size_t heap_n, heap_cap;
};

int zn_strmap_put(struct zn_strmap *m, const char *k, uint32_t klen, int32_t v);
int32_t zn_strmap_get(const struct zn_strmap *m, const char *k, size_t klen); /* -1: none */
void zn_strmap_free(struct zn_strmap *m);
int zn_pairmap_put(struct zn_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* the rank (or -1) and *merged of the pair */
int32_t zn_pairmap_get(const struct zn_pairmap *m, int32_t a, int32_t b, int32_t *merged);
void zn_pairmap_free(struct zn_pairmap *m);

/* Merges the n symbol ids in s->sym and appends the result to ids. */
int zn_bpe_merge(const struct zn_tok *tok, struct zn_tok_scratch *s, size_t n,
		 struct zn_ids *ids);
/* tok_config.c: BOS/EOS from the post_processor and tokenizer_config.json (cfg may be
 * NULL); whether splitting Metaspace text before each "▁" changes nothing */
struct cJSON;
const char *zn_tok_json_str(const struct cJSON *o, const char *key);
bool zn_tok_json_true(const struct cJSON *o, const char *key, bool dflt);
/* tok_vocab.c: model.vocab with added_tokens, and model.merges (after the vocab) */
int zn_tok_read_vocab(struct zn_tok *t, const struct cJSON *model, const struct cJSON *added,
		      const char *file);
int zn_tok_read_merges(struct zn_tok *t, const struct cJSON *model, const char *file);
/* tok_pre.c: the normalizer and pre_tokenizer keys */
int zn_tok_read_pre(struct zn_tok *t, const struct cJSON *pre, const char *file);
int zn_tok_read_norm(struct zn_tok *t, const struct cJSON *nm, const char *file);
int zn_tok_read_specials(struct zn_tok *t, const struct cJSON *root, const struct cJSON *cfg,
			 const char *file);
bool zn_tok_spm_split_is_exact(const struct zn_tok *t);
int zn_scratch_reserve(struct zn_tok_scratch *s, size_t nsym, size_t nbuf);

#endif
