/* Private to src/sched/generate*.c: struct zn_gen and the layer streaming. */
#ifndef ZN_SCHED_GENERATE_IMPL_H
#define ZN_SCHED_GENERATE_IMPL_H

#include "gpu/device.h"
#include "sched/generate.h"

struct zn_gen {
	struct zn_model m;
	struct zn_gen_opts o;
	int n, width, vocab, pos;
	struct zn_layer_desc *L;
	struct zn_device *dev;
	struct zn_stream *compute, *copy;
	/* parameters: params_d[l] for resident layers (all with ZN_GEN_DEVICE, layer 0
	 * otherwise); streamed layers in params_h[l] (CPU) or at file_off[l] of fd (NVMe) */
	float **params_d, **params_h;
	uint64_t *file_off;
	int fd;
	/* the ring of streamed layers: layer l >= 1 runs from slot l % 2 */
	float *slot_d[2];
	float *stage_h[2];              /* NVMe: pread lands here, then the copy */
	struct zn_event *ready[2], *free_[2];
	uint64_t slot_numel;
	/* the rest, on the device */
	float **kv_d;
	float *x_d[2], *scratch_d, *logits_d;
	int *tokens_d, *pos_d;
	int *tokens_h, *pos_h;          /* page-locked staging of the inputs */
	uint64_t streamed_bytes;
};

int zn_gen_stream_create(struct zn_gen *g);   /* params of layers >= 1 to host or file */
void zn_gen_stream_destroy(struct zn_gen *g);
/* enqueues the copy of streamed layer l into its slot (after the slot's previous layer) */
int zn_gen_stream_issue(struct zn_gen *g, int l);
/* the compute stream waits for layer l; its params on the device */
int zn_gen_stream_acquire(struct zn_gen *g, int l, const float **params_d);
int zn_gen_stream_release(struct zn_gen *g, int l); /* compute is done with layer l */
int zn_gen_streamed(const struct zn_gen *g, int l);

#endif
