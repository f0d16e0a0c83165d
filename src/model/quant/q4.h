/* A layer's frozen buffer with its linear weights in 4 bits (docs/qlora.md): which tensors
 * are quantized, where their packed codes and scales lie in the layer's stored extent, and
 * the host's packing and unpacking of that extent. Pure: no device, no file.
 *
 * The extent (what the frozen base's home holds for the layer, and what is read from nvme
 * and copied up as it is) is, byte offsets 16-aligned:
 *   plain    every float of the layer that is not quantized, in the layout's order, in the
 *            stored dtype (elem_bytes 2 or 4): norms, biases, embeddings, the lm_head;
 *   per quantized tensor: packed codes (numel / 2 bytes, bitsandbytes' nibble order), then
 *            its absmax: fp32[nb], or nested: uint8[nb], then fp32 offset and fp32
 *            absmax2[ceil(nb / 256)];
 *   map      nested only: the 256-entry fp32 map the 8-bit absmax codes index.
 * Which tensors: transformers' bitsandbytes integration replaces every nn.Linear (and
 * Conv1D) but the output embedding and tied weights; so a 2-D "<path>.weight" that is not
 * an embedding (embed_tokens, wte, wpe) nor lm_head, and whose module is not in skip
 * (llm_int8_skip_modules: a name matches the module's last component or the whole path, or
 * is a prefix of it followed by '.').
 *
 *     struct zn_q4_layer q;
 *     rc = zn_q4_layout(&q, desc, frozen_numel, 2, true, NULL);  // bf16 base, double quant
 *     zn_q4_pack(&q, extent, f32);       // quantize (q.bytes)
 *     zn_q4_unpack(&q, f32, extent);     // dequantize to fp32, as the device does
 */
#ifndef ZN_MODEL_QUANT_Q4_H
#define ZN_MODEL_QUANT_Q4_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "model/quant/nf4.h"

/* quantized tensors of one layer: a Llama block has 7 linear weights (3 with experts) */
#define ZN_Q4_MAX_SEGS 16

struct zn_q4_seg {
	int tensor;              /* index into the layout's descriptor */
	uint64_t offset, numel;  /* floats in the layer's layout */
	uint64_t blocks;         /* numel / blocksize */
	uint64_t packed_off;     /* bytes into the extent */
	uint64_t absmax_off;     /* fp32[blocks], or nested uint8[blocks] */
	uint64_t nest_off;       /* nested: fp32 offset, then fp32 absmax2[ceil(blocks/256)] */
	int blocksize;
	enum zn_q4_type type;
	enum zn_dtype qdtype;    /* the quant state's dtype: dequantized values round to it */
	bool nested;
};

struct zn_q4_layer {
	int count;
	struct zn_q4_seg seg[ZN_Q4_MAX_SEGS];
	uint64_t numel;          /* the layer's floats (frozen_numel) */
	uint64_t plain_numel;    /* floats not quantized (at byte 0) */
	unsigned elem_bytes;     /* the plain part's stored dtype: 2 (bf16 / fp16) or 4 */
	uint64_t map_off;        /* nested: 256 fp32 */
	bool nested;             /* some tensor is */
	uint64_t max_blocks;     /* the largest tensor's blocks (a nested dequant's scratch) */
	uint64_t bytes;          /* the whole extent */
};

/* Is tensor d a linear weight bitsandbytes quantizes (skip: comma-separated module names,
 * or NULL)? */
bool zn_q4_is_linear(const struct zn_tensor_desc *d, const char *skip);

/* Starts an empty layout of numel floats (all plain); add tensors, then finish. */
void zn_q4_begin(struct zn_q4_layer *q, uint64_t numel, unsigned elem_bytes);
/* Tensor t (offset, numel in the layout) quantized with type, blocksize, nested, qdtype;
 * tensors must come in ascending offset. -EINVAL (logged, naming name) when numel is not a
 * multiple of blocksize or the tensors overlap. */
int zn_q4_add(struct zn_q4_layer *q, int t, const char *name, uint64_t offset, uint64_t numel,
	      enum zn_q4_type type, int blocksize, bool nested, enum zn_dtype qdtype);
void zn_q4_finish(struct zn_q4_layer *q);

/* --quantize-base nf4: every linear weight of desc (zn_q4_is_linear) in NF4, blocks of 64,
 * nested when nested; qdtype the stored dtype (elem_bytes 2: bf16, or fp16 when f16). */
int zn_q4_layout(struct zn_q4_layer *q, const struct zn_layer_desc *desc, uint64_t numel,
		 enum zn_dtype stored, bool nested, const char *skip);

/* f32 (numel floats) into extent (q->bytes, zeroed first): plain floats cast to the stored
 * dtype (round to nearest even), tensors quantized (NF4 only). 0 or -ENOMEM. */
int zn_q4_pack(const struct zn_q4_layer *q, void *extent, const float *f32,
	       enum zn_dtype stored);
/* extent back to numel fp32 floats: the plain part widened, tensors dequantized as the
 * device does (code x absmax, rounded to qdtype). 0 or -ENOMEM. */
int zn_q4_unpack(const struct zn_q4_layer *q, float *f32, const void *extent,
		 enum zn_dtype stored);

/* The segment of tensor t, or -1 when it is not quantized. */
int zn_q4_find(const struct zn_q4_layer *q, int t);
/* Where the layer's float at offset (not quantized) lies in the plain part, in elements. */
uint64_t zn_q4_plain_index(const struct zn_q4_layer *q, uint64_t offset);

/* The plain runs of the layout in order: run i covers floats [*first, *end) of the layer
 * and starts at plain element *plain_at; false past the last run. */
bool zn_q4_plain_run(const struct zn_q4_layer *q, int i, uint64_t *first, uint64_t *end,
		     uint64_t *plain_at);

#endif
