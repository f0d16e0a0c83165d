/* Supervised fine-tuning data: a conversation ({"messages": [{"role": "...", "content":
 * "..."}, ...]}, one JSONL line) rendered with a built-in chat template into token ids and
 * a loss mask (1: the token is a label, 0: Hugging Face's -100). docs/data.md.
 *
 * Templates (Hugging Face's, written out; the Jinja chat_template of tokenizer_config.json
 * is not interpreted):
 *   llama3: bos_token, then per message
 *           <|start_header_id|>ROLE<|end_header_id|>\n\n CONTENT(stripped) <|eot_id|>
 *   chatml: per message <|im_start|>ROLE\n CONTENT <|im_end|>\n  (Qwen2's default system
 *           message is not added), after the document delimiter (zn_sft_delimiter)
 * The rendered text is tokenized whole (exactly the ids the tokenizer gives for that text)
 * and a token counts when any of its bytes lies in an assistant message's content or in
 * that message's end-of-turn token (<|eot_id|>, <|im_end|>), as transformers'
 * return_assistant_tokens_mask marks tokens from its offset mapping. Byte offsets come
 * from decoding each id, so the tokenizer must spell the text back byte for byte: byte-level
 * BPE (Llama 3, Qwen2, GPT-2); SentencePiece tokenizers are refused.
 */
#ifndef ZN_DATA_SFT_H
#define ZN_DATA_SFT_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

enum zn_sft_template {
	ZN_SFT_NONE = 0,
	ZN_SFT_LLAMA3,
	ZN_SFT_CHATML,
};

/* "llama3" / "chatml": 0, else ZN_EUSAGE naming --template and the choices */
int zn_sft_template_parse(const char *name, enum zn_sft_template *t);
const char *zn_sft_template_name(enum zn_sft_template t);
/* The tokenizer has the template's special tokens and is byte-level: 0, or ZN_EUSAGE with
 * a line naming what is missing (tok_path for the message). */
int zn_sft_check(const struct zn_tok *tok, enum zn_sft_template t, const char *tok_path);
/* The token each conversation starts with, which zinc tokenize records as the document
 * delimiter (--packing documents): llama3 its bos_token; chatml the tokenizer's BOS when
 * it adds one, else its EOS, except that an EOS which is <|im_end|> (Qwen2-Instruct's
 * tokenizer_config.json) would also end every turn, so <|endoftext|> is taken instead when
 * the tokenizer has it. */
int32_t zn_sft_delimiter(const struct zn_tok *tok, enum zn_sft_template t);

/* The template's end-of-turn token (<|eot_id|>, <|im_end|>), or -1. */
int32_t zn_sft_end_of_turn(const struct zn_tok *tok, enum zn_sft_template t);
/* A prompt for generation (zinc generate --template): what Hugging Face's
 * apply_chat_template(messages, add_generation_prompt=True) renders for a system message
 * (when system is not NULL) and a user message, with the templates above (contents as in
 * training, llama3 trimmed), then the assistant's open turn:
 *   llama3: <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYSTEM<|eot_id|>
 *           <|start_header_id|>user<|end_header_id|>\n\nUSER<|eot_id|>
 *           <|start_header_id|>assistant<|end_header_id|>\n\n
 *   chatml: <|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n
 *           <|im_start|>assistant\n
 * (no delimiter before a chatml prompt: that is zinc tokenize's). The special tokens are
 * their text, which the tokenizer splits out: encode it without adding a BOS. *out is a
 * new NUL-terminated string (free it), *len its length. 0, -EINVAL (no BOS for llama3) or
 * -ENOMEM. */
int zn_sft_render_prompt(const struct zn_tok *tok, enum zn_sft_template t,
			 const char *system, const char *user, char **out, size_t *len);

/* One conversation: json[0..len) is a JSONL line. Appends its ids to *ids and as many 0/1
 * to *mask (same indexing). Errors (-EINVAL) name file:line and the field. */
int zn_sft_encode(const struct zn_tok *tok, struct zn_tok_scratch *s, enum zn_sft_template t,
		  const char *json, size_t len, const char *file, uint64_t line,
		  struct zn_ids *ids, struct zn_ids *mask);

#endif
