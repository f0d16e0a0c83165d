/* Layer-major gradient accumulation (docs/architecture.md, "Layer-major accumulation"):
 * the buffers of a step that runs each layer for all k micro-batches before the next layer,
 * its use sequence, its bytes (pure), and the choice between it and micro-batch order.
 * The step itself is step_lm.c. State: struct zn_lmajor (field lm of struct zn_acts), given
 * at create the activations' config (acts.h); the decision is the engine's (engine_schedule.c).
 *
 * The forward keeps every micro-batch's boundary activation (the input of each layer
 * 1 .. n-1) in a home: device = (n-1) x k device buffers; host = (n-1) x k pinned buffers
 * with 2 x k device slots for the forward (a layer reads parity l mod 2 and writes the
 * other; each output goes down on the copy-out stream) and two copy-up slots for the
 * backward. The backward of layer l recomputes its inside from that input for micro-batch
 * m and keeps micro-batch m's boundary gradient in the same home: k + 1 device buffers, or
 * k pinned buffers through two read and two write slots on the device.
 *
 * nvme home (--gradient-checkpointing with activation_checkpointing.device nvme, or auto
 * when neither the device nor pinned memory holds them and an nvme path is configured):
 * the host home's device slots, with the boundaries in one swap extent each (keys
 * ZN_SWAP_ACTIVATION (l-1) k + m, the store's tiered home store/home.h: its own swap
 * store and I/O engine)
 * through ZN_RECOMPUTE_STAGES pinned staging buffers, as activation checkpoints on nvme
 * go: each boundary copied down into a staging buffer, written behind (two boundaries
 * later); the forward's last writes are waited once the turn is enqueued; the backward
 * reads each boundary ahead (two ahead of its use) and copies it up into a copy-up slot.
 * Only the boundaries read again go: those of layers 1 .. n-2, and the last layer's of
 * micro-batches 1 .. k-1 when the tied head runs again (the turn reads the last layer's
 * input from its forward slot): written once and read once per step. The k boundary
 * gradients stay in pinned memory as in the host home.
 *
 * A model whose last layer reads layer 0's parameters (GPT-2's tied lm_head) adds into
 * layer 0's gradient; micro-batch order adds head(m) then embedding(m) for each m, so to
 * be bit-identical the head's backward of micro-batches 1 .. k-1 runs again at the end,
 * right before layer 0's backward of the same micro-batch (the first run, at the turn,
 * writes that gradient to a sink; the second writes the head's own gradient, complete
 * since the turn, to a sink): k - 1 extra head passes, on a copy of the head's
 * parameters taken at the turn (its AdamW may run in between), and one more acquisition
 * of the last layer (its frozen base).
 */
#ifndef ZN_SCHED_LMAJOR_H
#define ZN_SCHED_LMAJOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "sched/plan.h"
#include "sched/recompute.h"

struct zn_acts_config;
struct zn_act_shape;
struct zn_runtime;
struct zn_use;

struct zn_lmajor {
	struct zn_runtime *rt;   /* the device, the compute and copy streams */
	int n;                   /* layers */
	/* the decision: the engine's planning's (engine_impl.h zn_lmajor_plan), kept by
	 * destroy */
	bool on;
	int k;                   /* micro-batches */
	bool tied;               /* the last layer ties to layer 0 (the head runs again) */
	bool tie_other;          /* another layer ties to layer 0: layer-major refused */
	enum zn_tier home;       /* of the boundaries: device, host or nvme */
	uint64_t x_bytes;
	float **bnd_d;           /* device: (n-1) k, [(l-1) k + m]; host, nvme: 2k forward slots */
	struct zn_event **down;  /* host: per forward slot, its copy down */
	struct zn_event *all_down;
	float *up_d[2];          /* host: the backward's copy-up slots */
	struct zn_event *up_ready[2], *up_free[2];
	int up_next;             /* copy-up slot of the next boundary */
	/* boundary gradients: device home, k + 1 buffers (micro-batch m's is dx_d[dx_of[m]],
	 * dx_of[k] the spare); host home, 2 read and 2 write slots (dx_d[0..1], [2..3]) and
	 * k pinned buffers, each new gradient copied down, copied up before its next reader */
	float **dx_d;
	int dx_n;
	int *dx_of;
	float **dxh;
	struct zn_event **dx_down; /* host: micro-batch m's last copy down */
	struct zn_event *rd_ready[2], *rd_free[2], *wr_free[2], *dx_made;
	int rd_next, wr_next;
	float *acts_d;           /* one layer's activations */
	float *x_sink_d, *loss_sink_d;
	float *grad_sink_d, *tied_sink_d; /* tied: the head's gradients not kept */
	void *head_p_d;          /* tied: the head's parameters as the turn read them */
	uint64_t head_p_bytes;
	int *tok_d, *tgt_d, *pos_d; /* k x B x T */
	struct zn_event *made;   /* forward: a slot's layer is done */
	/* the boundaries' home (store/home.h): host, (n-1) k pinned buffers ([(l-1) k + m],
	 * bare: the forward slots' events order their copies); nvme, ZN_RECOMPUTE_STAGES
	 * staging buffers and an extent per boundary; boundaries gone down and read this step */
	struct zn_home st;
	int stage_n, down_n, read_n;
};

/* The step's bytes of the layer-major buffers for k micro-batches with boundaries in home
 * (pure): device (boundaries or slots, activations, gradients, sinks, tokens), pinned host
 * and the tied sinks given as layer 0's and the last layer's padded gradient bytes (0
 * untied). */
struct zn_lmajor_bytes {
	uint64_t device, host;
	uint64_t nvme;           /* nvme home: every boundary's extent */
	uint64_t nvme_step;      /* nvme home: written and read once per step each */
};
void zn_lmajor_bytes_of(const struct zn_act_shape *s, int k, enum zn_tier home,
			uint64_t tied_sink_bytes, bool tied_again, struct zn_lmajor_bytes *out);
/* nvme home: boundaries that go to nvme (read again), and the p-th one the backward reads
 * (its extent (l-1) k + m); pure */
bool zn_lmajor_stored(int n, int k, bool tied_again, int l, int m);
int zn_lmajor_stored_count(int n, int k, bool tied_again);
int zn_lmajor_read_id(int n, int k, int p);
/* The use sequence (acts.h): forward 1 .. n-2, the turn n-1 (forward and backward), the
 * backward n-2 .. 1 (recompute and backward), and with a tied head n-1 again. */
int zn_lmajor_schedule(int n, bool tied_again, struct zn_use *use);

/* the tied head's sinks (acts.h: the config's gradient and head bytes, rounded) or 0 */
uint64_t zn_lmajor_tied_sink_bytes(const struct zn_acts_config *c);

/* The buffers of lm's decision (on, k, tied, home) for c's shape; destroy accepts a
 * half-built one and keeps the decision. */
int zn_lmajor_create(struct zn_lmajor *lm, const struct zn_acts_config *c);
void zn_lmajor_destroy(struct zn_lmajor *lm);
/* nvme home: every staging buffer settled (end of step, errors, destroy) */
int zn_lmajor_quiesce(struct zn_lmajor *lm);
/* the device buffer of layer l's input for micro-batch m in the forward (l >= 1) */
float *zn_lmajor_fwd_x(struct zn_lmajor *lm, int l, int m);

/* lmajor_home.c, the step's homes (step_lm.c calls them in its order):
 *   slot_before / slot_after   forward slot (l, m) free to overwrite; boundary (l, m) made
 *                              (pinned: copied down; nvme: into staging, written behind)
 *   reads_begin                nvme: the forward's writes waited, the first reads ahead
 *   boundary / up_done         the backward's input of layer l for micro-batch m on the
 *                              device (*slot a copy-up slot, -1 none), and its release
 *   dx_read / dx_read_done     micro-batch m's boundary gradient to read (dx_out), release
 *   dx_write / dx_written      where a backward writes m's new one (dx_in); it is m's now
 * Each returns 0 or a negative code (a failed nvme read or write logged naming the file). */
int zn_lmajor_slot_before(struct zn_lmajor *lm, int l, int m);
int zn_lmajor_slot_after(struct zn_lmajor *lm, int l, int m);
int zn_lmajor_reads_begin(struct zn_lmajor *lm);
int zn_lmajor_boundary(struct zn_lmajor *lm, int l, int m, float **x, int *slot);
int zn_lmajor_up_done(struct zn_lmajor *lm, int slot);
int zn_lmajor_dx_read(struct zn_lmajor *lm, int m, float **dx, int *slot);
int zn_lmajor_dx_read_done(struct zn_lmajor *lm, int slot);
int zn_lmajor_dx_write(struct zn_lmajor *lm, float **dx, int *slot);
int zn_lmajor_dx_written(struct zn_lmajor *lm, int m, int slot);

#endif
