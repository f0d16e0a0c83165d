/* Frozen parameters (docs/lora.md): each layer's second flat buffer (zn_layer_desc
 * frozen_numel), read by the compute and never trained. Homed on the plan's frozen_home
 * (frozen_plan.c) in the stored dtype; fetched ahead into fp32 working slots on the
 * device in the sequence of uses given at each begin (forward 1 .. n-1, backward n-1 .. 1,
 * layer 0's slot held for the step; with bf16 compute the stored bf16 values, never
 * widened). No gradient, master, m, v or optimizer I/O exists for them.
 *
 * State: struct zn_frozen (the engine's field fz; zinc generate's own), given its shape
 * before the plan (zn_frozen_prepare: the layer sizes, the 4-bit layouts, the experts) and
 * the device, streams, arena, tracer and plan at create; it reads no other part.
 *
 *     rc = zn_frozen_prepare(&fz, &shape);      // sizes, before the plan
 *     zn_frozen_plan_input(&fz, &pin);          // the plan reads them
 *     rc = zn_frozen_create(&fz, &cfg);         // homes, slots, nvme store
 *     rc = zn_frozen_init_layer(&fz, l, f32_h); // each layer onto its home
 *     rc = zn_frozen_layer0(&fz, use, use_n, &f0);  // a step: layer 0, the sequence
 *     rc = zn_frozen_begin(&fz, use, use_n);
 *     rc = zn_frozen_acquire(&fz, k, use[k].layer, &f); ... zn_frozen_release(&fz, k);
 *     zn_frozen_destroy(&fz);                   // also a half-built or prepared one
 */
#ifndef ZN_SCHED_FROZEN_H
#define ZN_SCHED_FROZEN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "gpu/device.h"
#include "model/moe/moe.h"
#include "nvme/aio.h"
#include "nvme/swap.h"
#include "store/home.h"
#include "store/ring.h"
#include "zinc.h"

struct zn_arena;
struct zn_engine_plan;
struct zn_engine_plan_input;
struct zn_layer_desc;
struct zn_model;
struct zn_q4_layer;
struct zn_tracer;
struct zn_use;

/* What the frozen base's layout is computed from (zn_frozen_prepare, before the plan);
 * borrowed, outliving the part. */
struct zn_frozen_shape {
	int n;                           /* layers */
	const uint64_t *numel;           /* per layer: frozen floats (0: none) */
	enum zn_dtype pdt;               /* the stored dtype */
	const struct zn_model *model;    /* frozen_desc: the frozen buffer's tensors */
	/* the layers' descriptors, or NULL: where a frozen buffer is its layer's own (zinc
	 * generate's streamed layers), the layer's tensors describe it */
	const struct zn_layer_desc *ld;
	const struct zn_q4_layer *q4;    /* a checkpoint's 4-bit layouts, or NULL */
	enum zn_quantize_base quantize_base; /* zinc.quantize_base */
	bool double_quant;
};

/* What the frozen part is given at create (borrowed: they outlive it). */
struct zn_frozen_config {
	struct zn_device *dev;
	struct zn_stream *compute, *copy_in, *copy_out;
	int rank;                        /* the frozen file's name */
	struct zn_tracer *tr;            /* spans of a traced step; NULL: none */
	struct zn_arena *arena;          /* pinned host homes and read buffers */
	const struct zn_engine_plan_input *pin;
	const struct zn_engine_plan *plan; /* frozen_home, slots, depth, read buffers */
	const char *nvme_dir;            /* home on nvme: where the frozen store goes */
	const struct zn_aio_config *aio; /* its aio engines */
};

struct zn_fslot {
	float *f32_d;            /* the fp32 working copy the compute reads (frozen_wide) */
	void *stage_d;           /* 16-bit copy come up from the host (home off the device);
				  * with bf16 compute the working copy itself; a 4-bit base:
				  * the packed extent come up */
	uint16_t *w16_d;         /* a 4-bit base with bf16 compute: the bf16 working copy */
	float *absmax_d;         /* a 4-bit base with nested absmax: a tensor's scales */
	/* frozen experts fetched per routed expert: which of its layer's experts the slot
	 * holds (cleared in stream order by each fetch into the slot; frozen_experts.c) */
	uint8_t *xres;
};

struct zn_frozen {
	struct zn_frozen_shape sh;
	struct zn_frozen_config c;
	/* the layout (zn_frozen_prepare): a 4-bit base's layouts and stored bytes per layer
	 * (frozen_q4.c; NULL: none) and a slot's nested-absmax scratch bytes; a mixture of
	 * experts' frozen experts (frozen_experts.c): per layer the floats of its expert
	 * stacks (the tail of its frozen buffer, 0: none), its experts and the first stack's
	 * floats per expert (gate_up), or NULL */
	struct zn_q4_layer *q4;
	uint64_t *q4_bytes;
	uint64_t q4_scratch;
	uint64_t *x_numel;
	int *x_experts;
	uint64_t *x_first;
	const struct zn_use *use; /* the sequence of uses (zn_frozen_layer0 / begin) */
	void **home;             /* per layer: device or pinned host home (NULL: nvme, none) */
	/* home on nvme (frozen_io.c): a swap store of one extent per layer (ext_bytes[l]
	 * each) and its aio engine (the pinned arena registered as its fixed buffers) */
	struct zn_swap *store;
	struct zn_aio *aio;
	bool arena_registered;
	uint64_t *ext_bytes;
	/* per ring slot its buffers (store/ring.h: the ring has the events and the order of
	 * the fetches), the held slot's (layer 0's) last */
	struct zn_fslot *slot;
	int slot_n;
	struct zn_ring ring;
	int seq_len;             /* the sequence's items */
	bool seq_begun;          /* zn_frozen_layer0 began this micro-batch's sequence */
	/* the held slot has layer 0's working copy (kept across steps: the base never
	 * changes; zn_frozen_init_layer(0) clears it) */
	bool slot0_valid;
	/* home on nvme: the read buffers, a tiered home on the store (store/home.h): buffer
	 * 0 layer 0's, and rd_n (the plan's frozen_read_buffers) for the sequence, item j
	 * reading into buffer 1 + j % rd_n, so reads run up to rd_n items ahead of the copies
	 * up, whatever the working-slot ring */
	struct zn_home io;
	int rd_n;
	int seq_read;            /* home on nvme: the next item whose read is submitted */
	uint64_t bytes_read;     /* nvme bytes read by fetches (the step's figures) */
	/* experts fetched per routed expert (frozen_experts.c), by the compute stream's
	 * thread during a layer's call: the sources handed to the model (one a layer), an
	 * expert's pinned read buffer and device staging, their own aio engine (the reads
	 * come from that thread), the first error, and the counts (read once the compute
	 * stream is drained): experts fetched, their stored bytes, their nvme bytes read;
	 * their engine reads the store through a handle of its own (zn_swap_attach) */
	struct zn_moe_source *xsrc;
	void *xbuf, *xstage_d;
	struct zn_aio *xaio;
	struct zn_swap *xswap;
	int xerr;
	uint64_t x_count, x_bytes, x_read_bytes;
	uint64_t pinned_bytes;   /* pinned host bytes allocated (the plan's host_frozen_bytes) */
};

/* the layout from sh (copied; what it points at borrowed): 0, or -EINVAL (logged) when a
 * 4-bit base is asked for and nothing is frozen or a tensor cannot be quantized, -ENOMEM */
int zn_frozen_prepare(struct zn_frozen *fz, const struct zn_frozen_shape *sh);
/* the plan input's frozen fields (sizes, 4-bit extents, experts) from the layout */
void zn_frozen_plan_input(const struct zn_frozen *fz, struct zn_engine_plan_input *pin);
/* the plan's buffers (none without frozen) */
int zn_frozen_create(struct zn_frozen *fz, const struct zn_frozen_config *c);
void zn_frozen_destroy(struct zn_frozen *fz); /* and the layout; accepts a zeroed part */
/* layer l's initial frozen parameters (fp32, frozen_numel floats) onto the home */
int zn_frozen_init_layer(struct zn_frozen *fz, int l, const float *f32_h);
/* layer l's frozen parameters as fp32 into out_h (frozen_numel floats), from the home */
int zn_frozen_read_layer(struct zn_frozen *fz, int l, float *out_h);

/* As prefetch.h's layer-0 and sequence calls; *f32_d NULL for a layer without frozen
 * parameters; with bf16 compute (plan frozen_wide false) it points at bf16 values. The
 * sequence of uses (acts.h) is given at layer 0 (it begins there, its first reads behind
 * layer 0's) and at each begin, and kept until the next. */
int zn_frozen_layer0(struct zn_frozen *fz, const struct zn_use *use, int use_n,
		     const float **f32_d);
const float *zn_frozen_layer0_params(struct zn_frozen *fz);
int zn_frozen_layer0_wait(struct zn_frozen *fz);
int zn_frozen_layer0_release(struct zn_frozen *fz);
int zn_frozen_begin(struct zn_frozen *fz, const struct zn_use *use, int use_n);
int zn_frozen_acquire(struct zn_frozen *fz, int item, int layer, const float **f32_d);
int zn_frozen_release(struct zn_frozen *fz, int item);

/* Pinned host bytes the frozen part allocated (homes, read buffers): the plan's
 * host_frozen_bytes, which tests compare. */
uint64_t zn_frozen_pinned_bytes(const struct zn_frozen *fz);
/* the frozen store's aio engine (NULL: the home is not nvme); tests inject faults in it */
struct zn_aio *zn_frozen_aio(struct zn_frozen *fz);

/* whether the base is 4-bit (its layers stored as extents: zn_frozen_init_layer_q4), and
 * its layers' layouts (NULL: not 4-bit) */
bool zn_frozen_quantized(const struct zn_frozen *fz);
const struct zn_q4_layer *zn_frozen_layouts(const struct zn_frozen *fz);
/* nvme bytes read so far: the layers' fetches and the experts' (the step's figures) */
uint64_t zn_frozen_read_bytes(const struct zn_frozen *fz);
/* Layer l's stored bytes on its home: numel x the stored dtype, or its 4-bit extent. */
uint64_t zn_frozen_stored_bytes(const struct zn_frozen *fz, int l);
/* layer l's 4-bit extent as stored (a bitsandbytes checkpoint's, zero-padded), onto the
 * home */
int zn_frozen_init_layer_q4(struct zn_frozen *fz, int l, const void *extent);
/* layer l's extent as stored, from the home, into extent (stored bytes) */
int zn_frozen_read_layer_q4(struct zn_frozen *fz, int l, void *extent);

/* frozen_q4.c: a 4-bit base (docs/qlora.md), internal to frozen*.c.
 * prepare: after the layer sizes, fz->q4 and fz->q4_bytes from the shape's layouts or
 * quantize_base (-EINVAL, logged, when nothing is frozen or a tensor cannot be
 * quantized); expand: enqueues on copy_in slot s's working copy of layer l from its
 * extent src_d on the device (plain parts copied or cast, tensors dequantized). */
int zn_frozen_q4_prepare(struct zn_frozen *fz);
void zn_frozen_q4_free(struct zn_frozen *fz);
int zn_frozen_q4_expand(struct zn_frozen *fz, int l, struct zn_fslot *s, const void *src_d);

/* frozen_experts.c: a mixture of experts' frozen experts fetched per routed expert
 * (plan.h frozen_experts). prepare: after the layer sizes, fz->x_numel and fz->x_experts
 * from the frozen buffers' descriptors (two expert stacks, the tail of the buffer, else
 * none); create/destroy: the sources and buffers; source: layer l's for the model's call
 * (NULL: fetched whole); fetch_bytes: what a use's fetch moves of layer l (the rest of a
 * streamed layer); pack / unpack: a layer's stored bytes (natural order) to and from its
 * nvme extent (zn_plan_frozen_extent bytes). */
/* a step's figures: fetches and bytes (the step's own), and the plan's for every expert */
struct zn_step_stats;
void zn_frozen_expert_stats(const struct zn_frozen *fz, uint64_t fetches, uint64_t bytes,
			    struct zn_step_stats *st);
/* layer l's experts (0: none) */
int zn_frozen_expert_count(const struct zn_frozen *fz, int l);
/* the first error of an expert's fetch during a layer's call (0: none), and the figures
 * so far: experts fetched, their stored bytes, their nvme bytes read */
int zn_frozen_expert_error(const struct zn_frozen *fz);
void zn_frozen_expert_figures(const struct zn_frozen *fz, uint64_t *count, uint64_t *bytes,
			      uint64_t *read_bytes);
int zn_frozen_experts_prepare(struct zn_frozen *fz);
void zn_frozen_experts_free(struct zn_frozen *fz);
int zn_frozen_experts_create(struct zn_frozen *fz);
void zn_frozen_experts_destroy(struct zn_frozen *fz);
const struct zn_moe_source *zn_frozen_experts_source(const struct zn_frozen *fz, int l);
bool zn_frozen_streams(const struct zn_frozen *fz, int l);
/* enqueued on copy_in by a fetch into slot s (before its ready): its experts are gone */
int zn_frozen_experts_clear(struct zn_frozen *fz, struct zn_fslot *s);
uint64_t zn_frozen_fetch_bytes(const struct zn_frozen *fz, int l);
/* layer l's rest (zn_frozen_fetch_bytes) from src_h up into dst_d on copy_in: a home's
 * extent (packed false: the stacks left out) or the file's rest (packed: as it is) */
int zn_frozen_rest_up(struct zn_frozen *fz, int l, void *dst_d, const void *src_h, bool packed);
/* for a 4-bit base's expansion: the stacks' stored bytes missing before the quantized
 * tensors in what came up (0: none), and *layout_end the floats to fill from it */
uint64_t zn_frozen_stack_shift(const struct zn_frozen *fz, int l, uint64_t *layout_end);
uint64_t zn_frozen_file_extent(const struct zn_frozen *fz, int l);
void zn_frozen_experts_pack(const struct zn_frozen *fz, int l, void *ext, const void *stored);
void zn_frozen_experts_unpack(const struct zn_frozen *fz, int l, void *stored, const void *ext);

/* frozen_seq.c: the ring of working slots over the sequence (at create) */
int zn_frozen_ring_create(struct zn_frozen *fz);

/* frozen_io.c: the frozen store on nvme and its reads ahead (internal to frozen*.c) */
int zn_frozen_io_open(struct zn_frozen *fz);   /* the store, its aio engine, read buffers */
void zn_frozen_io_close(struct zn_frozen *fz); /* waits for reads in flight; a half-open */
int zn_frozen_io_rw(struct zn_frozen *fz, int l, void *buf, bool write); /* whole extent */
/* item's layer l read complete in its buffer (item -1: layer 0's), blocking as needed;
 * *src the pinned bytes to copy up */
int zn_frozen_io_take(struct zn_frozen *fz, int item, int l, const void **src);
int zn_frozen_io_copied(struct zn_frozen *fz, int item); /* its copy up enqueued on copy_in */
bool zn_frozen_io_ready(struct zn_frozen *fz, int item); /* its read done (never blocks) */
int zn_frozen_io_pump(struct zn_frozen *fz);           /* reads ahead, never blocking */
/* a step's start: layer 0's read (with read0), then the sequence's first ones */
int zn_frozen_io_start0(struct zn_frozen *fz, bool read0);
/* whether this step is traced (the tracer given, and on) */
bool zn_frozen_traced(const struct zn_frozen *fz);

#endif
