/* Streaming save (docs/memory.md, "No whole-model buffer"): a model's weights written as
 * Hugging Face tensors one layer at a time, never the whole model in host memory.
 *
 * A stream lists one safetensors entry per tensor of the descriptors given, in layer
 * order; each entry's fill reads its layer (through read_layer, by default the engine's
 * zn_engine_read_layer) into the one buffer of the largest layer when it is not there
 * yet, checks that every weight of it is finite (-ERANGE, naming the file and tensor:
 * the run diverged, nothing is written), and copies the tensor out (transposed as the
 * file stores it; an embedding's padded rows left out). Reading a layer is collective:
 * rank 0 runs the writer over the entries, and zn_save_stream_finish makes every rank
 * read the layers it has not read yet, so all ranks see the same answer.
 *
 *     struct zn_save_stream s;
 *     rc = zn_save_stream_open(&s, e, ld, n, path, NULL, NULL);
 *     if (!rc && rank == 0)
 *             rc = zn_st_write(path, dtype, s.entries, s.count, keys, vals, k);
 *     rc = zn_save_stream_finish(&s, rc);   (closes it)
 */
#ifndef ZN_SCHED_SAVE_STREAM_H
#define ZN_SCHED_SAVE_STREAM_H

#include "model/model.h"
#include "model/safetensors.h"

struct zn_engine;

/* Reads layer l's weights (model layout, ld[l].numel floats) into out_h; collective. */
typedef int (*zn_save_read_layer_fn)(void *ctx, int l, float *out_h);

struct zn_save_stream_ref;

struct zn_save_stream {
	struct zn_engine *e;
	const struct zn_layer_desc *ld;
	int n;
	int have;                 /* the layer in buf (or the last one read); -1 none */
	float *buf;               /* the largest layer's numel floats */
	const char *path;         /* for messages */
	zn_save_read_layer_fn read_layer;
	void *ctx;
	struct zn_st_entry *entries;
	int count;
	struct zn_save_stream_ref *refs;
};

/* The entries for layers 0 .. n-1 of ld; read_layer NULL: zn_engine_read_layer(e, ...).
 * Returns 0 or -ENOMEM. */
int zn_save_stream_open(struct zn_save_stream *s, struct zn_engine *e,
			const struct zn_layer_desc *ld, int n, const char *path,
			zn_save_read_layer_fn read_layer, void *ctx);

/* Every layer not read yet read (collective; finiteness checked on every rank), then the
 * stream freed. Returns rc if it is an error, else the first error of the reads. */
int zn_save_stream_finish(struct zn_save_stream *s, int rc);

/* The engine's own model (e's descriptors) to one .safetensors file with the given
 * metadata; rank 0 writes. */
int zn_engine_save_safetensors(struct zn_engine *e, const char *path, enum zn_dtype dtype,
			       const char *const *meta_keys, const char *const *meta_values,
			       int meta_count);

#endif
