/* bitsandbytes 4-bit checkpoints (docs/qlora.md): Hugging Face directories transformers
 * saves for a model loaded with BitsAndBytesConfig(load_in_4bit=True), read into a 4-bit
 * frozen base's extents (q4.h) as they are, and written in the same format.
 *
 * config.json's "quantization_config" (BitsAndBytesConfig.to_dict()): quant_method
 * "bitsandbytes", load_in_4bit true, bnb_4bit_quant_type nf4 | fp4,
 * bnb_4bit_use_double_quant, bnb_4bit_compute_dtype, bnb_4bit_quant_storage "uint8",
 * llm_int8_skip_modules; the llm_int8_* settings of 8-bit loading are taken as they are.
 * 8-bit (load_in_8bit), another quant_storage, another method or a key BitsAndBytesConfig
 * does not have is refused naming it.
 *
 * Each linear weight W [out, in] quantized by bitsandbytes is stored (Linear4bit's
 * _save_to_state_dict, QuantState.as_dict(packed=True)) as
 *   W                      U8 [(out*in + 1) / 2, 1]: two codes a byte, the first element
 *                          in the high nibble;
 *   W.absmax               F32 [blocks], or with double quant U8 [blocks];
 *   W.quant_map            F32 [16]: the code table;
 *   W.nested_absmax        F32 [ceil(blocks / 256)]     (double quant)
 *   W.nested_quant_map     F32 [256]                    (double quant)
 *   W.quant_state.bitsandbytes__nf4 (or __fp4): U8, the UTF-8 bytes of json.dumps of
 *                          {"quant_type", "blocksize", "dtype", "shape"[, "nested_blocksize",
 *                          "nested_dtype", "nested_offset"]}.
 * Which weights are quantized is decided per tensor by the checkpoint's own keys (a
 * weight with a quant_state entry is; one without is read as a 16/32-bit tensor), as
 * published files keep some layers unquantized. Every component is checked against the
 * others and the model (sizes, shapes, dtypes, the code table bit for bit, the JSON's keys
 * and values): a mismatch is refused naming the tensor.
 */
#ifndef ZN_MODEL_QUANT_BNB_H
#define ZN_MODEL_QUANT_BNB_H

#include <stdbool.h>
#include <stddef.h> /* before hf_dir.h, whose hf_config.h uses size_t */

#include "model/hf_dir.h"
#include "model/quant/q4.h"

struct zn_bnb_config {
	bool present;               /* config.json has a quantization_config */
	enum zn_q4_type type;
	bool double_quant;
	enum zn_dtype compute_dtype;
};

/* config.json's text (path names it): 0 (out->present false without quantization_config),
 * or -EINVAL (logged, naming the key and value zinc does not implement). */
int zn_bnb_config_parse(const char *config_json, const char *path, struct zn_bnb_config *out);

/* Layer desc's layout (numel floats, the plain part in stored dtype) from the checkpoint's
 * keys, every quantized component checked. 0 or -EINVAL (logged, naming the tensor). */
int zn_bnb_layout(struct zn_hf_src *s, const struct zn_layer_desc *desc, uint64_t numel,
		  enum zn_dtype stored, struct zn_q4_layer *q);
/* The layer's extent (q->bytes, zeroed by the caller) from the checkpoint: the packed codes
 * and scales as stored, the plain tensors converted to the stored dtype. */
int zn_bnb_read_layer(struct zn_hf_src *s, const struct zn_layer_desc *desc,
		      const struct zn_q4_layer *q, enum zn_dtype stored, void *extent);

/* Writes dir/config.json (config_json's keys, torch_dtype the stored dtype, and the
 * quantization_config transformers writes) and dir/model.safetensors (every layer's
 * tensors in order: quantized ones as above, the others in the stored dtype); extent(ctx,
 * l, buf) fills layer l's extent (q[l].bytes). dir is made when missing. 0 or a negative
 * code (logged). */
int zn_bnb_save(const char *dir, const char *config_json, enum zn_dtype stored,
		const struct zn_layer_desc *desc, const struct zn_q4_layer *q, int n,
		int (*extent)(void *ctx, int l, void *buf), void *ctx);

/* Python's repr() of the fp32 value v widened to a double (the shortest text that reads
 * back as it): what json.dumps writes for nested_offset. */
void zn_bnb_float_repr(char *buf, size_t size, float v);

#endif
