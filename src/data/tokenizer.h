/* Hugging Face tokenizers (tokenizer.json) in C: the BPE models of GPT-2, Llama 3, Qwen2
 * (byte-level, split regexes through PCRE2 with UTF + UCP) and of Llama 2, TinyLlama and
 * Mistral (SentencePiece-style: Metaspace or the Prepend/Replace normalizer, byte
 * fallback), with added/special tokens and BOS/EOS from tokenizer_config.json.
 *
 *     struct zn_tok *tok;
 *     if (zn_tok_load(&tok, "models/llama3"))       // a dir with tokenizer.json, or the file
 *             return 1;
 *     struct zn_tok_scratch *s = zn_tok_scratch_new(tok);   // one per thread
 *     struct zn_ids ids = { 0 };
 *     zn_tok_encode(tok, s, text, len, &ids);      // appends; no BOS/EOS
 *     ... ids.v[0 .. ids.n)
 *     zn_ids_free(&ids); zn_tok_scratch_free(s); zn_tok_free(tok);
 *
 * What is read: model.type "BPE" (vocab, merges as "a b" strings or [a, b] pairs,
 * byte_fallback, unk_token, fuse_unk, ignore_merges); pre_tokenizer null, ByteLevel,
 * Metaspace, or a Sequence of Split (regex or string, behavior Isolated) and ByteLevel;
 * normalizer null, NFC (the input is taken as already NFC: see docs/data.md), or a
 * Sequence of Prepend and Replace; added_tokens (split out of the text before anything
 * else, longest first, as tokenizers does by default); the post_processor's
 * TemplateProcessing and tokenizer_config.json's add_bos_token / add_eos_token /
 * bos_token / eos_token. Anything else is refused naming the key. Invalid UTF-8 in the
 * text is read as U+FFFD, as Python's errors="replace" decodes it.
 *
 * A zn_tok is read-only once loaded: any number of threads encode with it at once, each
 * with its own scratch.
 */
#ifndef ZN_DATA_TOKENIZER_H
#define ZN_DATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct zn_tok;
struct zn_tok_scratch;

struct zn_ids {
	int32_t *v;
	size_t n, cap;
};

/* 0, or a negative code with a line naming the file and the key that is wrong. */
int zn_tok_load(struct zn_tok **out, const char *path);
void zn_tok_free(struct zn_tok *tok); /* accepts NULL */

struct zn_tok_scratch *zn_tok_scratch_new(const struct zn_tok *tok); /* NULL: no memory */
void zn_tok_scratch_free(struct zn_tok_scratch *s);

/* Appends the ids of text[0..len) to *ids (no BOS/EOS). 0 or -ENOMEM. */
int zn_tok_encode(const struct zn_tok *tok, struct zn_tok_scratch *s, const char *text,
		  size_t len, struct zn_ids *ids);
/* Appends the text of id (byte-level and byte-fallback tokens as their bytes, the
 * Metaspace replacement as a space) to buf; returns its length or -1 for a bad id. */
int zn_tok_decode_one(const struct zn_tok *tok, int32_t id, char *buf, size_t size);

/* The text of ids[0 .. n) (tok_decode.c) in a new NUL-terminated buffer *out (free it), its
 * length in *len: special added tokens left out when skip_special; with at_start (ids
 * begin the text) a SentencePiece tokenizer's prepended space is dropped, as Hugging
 * Face's decoders do. 0, -EINVAL for an id outside the vocabulary, or -ENOMEM. */
int zn_tok_decode(const struct zn_tok *tok, const int32_t *ids, size_t n, bool skip_special,
		  bool at_start, char **out, size_t *len);
bool zn_tok_is_special(const struct zn_tok *tok, int32_t id); /* a special added token */
int64_t zn_tok_vocab(const struct zn_tok *tok);   /* largest id + 1 */
int32_t zn_tok_bos(const struct zn_tok *tok);     /* -1 when none */
int32_t zn_tok_eos(const struct zn_tok *tok);     /* -1 when none */
bool zn_tok_adds_bos(const struct zn_tok *tok);
bool zn_tok_adds_eos(const struct zn_tok *tok);
/* The id of a token string (added or in the vocab), or -1. */
int32_t zn_tok_id(const struct zn_tok *tok, const char *s);
const char *zn_tok_kind(const struct zn_tok *tok); /* "byte-level BPE" / "sentencepiece BPE" */

int zn_ids_push(struct zn_ids *ids, int32_t id); /* 0 or -ENOMEM */
void zn_ids_free(struct zn_ids *ids);

#endif
