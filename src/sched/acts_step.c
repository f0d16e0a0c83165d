/* The activations' part of the step (acts.h): a micro-batch's tokens up before its
 * forward, its losses down while its backward runs, and the events that order them with
 * the next micro-batch's. Micro-batch and layer-major order (step.c, step_lm.c) and
 * evaluation (eval.c) share these calls. */
#include "model/model.h"
#include "sched/acts.h"
#include "sched/runtime.h"

static uint64_t bt_of(const struct zn_acts *a)
{
	return (uint64_t)a->c.shape.B * (uint64_t)a->c.shape.T;
}

/* the copies enqueued on copy_in are done before the compute goes on */
static int up_then_compute(struct zn_acts *a)
{
	int rc = zn_event_record(a->tok_ready, a->c.rt->copy_in);

	return rc ? rc : zn_stream_wait_event(a->c.rt->compute, a->tok_ready);
}

int zn_acts_tokens_up(struct zn_acts *a, int micro, const int *inputs_h, const int *targets_h)
{
	struct zn_stream *in = a->c.rt->copy_in;
	uint64_t bt = bt_of(a), bytes = bt * sizeof(int), at = (uint64_t)micro * bt;
	int rc = zn_stream_wait_event(in, a->tok_free);

	if (!rc)
		rc = zn_memcpy_async(in, a->tok_d, inputs_h + at, bytes, ZN_COPY_H2D);
	if (!rc)
		rc = zn_memcpy_async(in, a->tgt_d, targets_h + at, bytes, ZN_COPY_H2D);
	if (!rc && a->pred > 0)
		rc = zn_memcpy_async(in, a->pos_d, a->pos_h + at, bytes, ZN_COPY_H2D);
	return rc ? rc : up_then_compute(a);
}

int zn_acts_tokens_up_all(struct zn_acts *a, const int *inputs_h, const int *targets_h)
{
	struct zn_stream *in = a->c.rt->copy_in;
	uint64_t bytes = bt_of(a) * (uint64_t)a->c.shape.gas * sizeof(int);
	int rc = zn_memcpy_async(in, a->lm.tok_d, inputs_h, bytes, ZN_COPY_H2D);

	if (!rc)
		rc = zn_memcpy_async(in, a->lm.tgt_d, targets_h, bytes, ZN_COPY_H2D);
	if (!rc && a->pred > 0)
		rc = zn_memcpy_async(in, a->lm.pos_d, a->pos_h, bytes, ZN_COPY_H2D);
	return rc ? rc : up_then_compute(a);
}

int zn_acts_tokens_done(struct zn_acts *a)
{
	return zn_event_record(a->tok_free, a->c.rt->compute);
}

int zn_acts_losses_into(struct zn_acts *a, struct zn_layer_io *io)
{
	io->losses = a->loss_d;
	return zn_stream_wait_event(a->c.rt->compute, a->loss_done);
}

int zn_acts_aux_zero(struct zn_acts *a)
{
	uint64_t bytes = (uint64_t)a->c.shape.gas * (uint64_t)a->aux_n * 4;

	return a->aux_d ? zn_memset_async(a->c.rt->compute, a->aux_d, 0, bytes) : 0;
}

float *zn_acts_aux(const struct zn_acts *a, int micro)
{
	return a->aux_d ? a->aux_d + (size_t)micro * (size_t)a->aux_n : NULL;
}

int zn_acts_losses_down(struct zn_acts *a, int micro, bool aux)
{
	struct zn_stream *out = a->c.rt->copy_out;
	uint64_t bt = bt_of(a);
	int rc = zn_event_record(a->fwd_done, a->c.rt->compute);

	if (!rc)
		rc = zn_stream_wait_event(out, a->fwd_done);
	if (!rc)
		rc = zn_memcpy_async(out, a->loss_h + (uint64_t)micro * bt, a->loss_d, bt * 4,
				     ZN_COPY_D2H);
	if (!rc && aux && a->aux_d)
		rc = zn_memcpy_async(out, a->aux_h + micro, zn_acts_aux(a, micro), 4, ZN_COPY_D2H);
	if (!rc)
		rc = zn_event_record(a->loss_done, out);
	return rc;
}
