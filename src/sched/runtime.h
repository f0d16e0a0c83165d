/* The engine's runtime: the device and its kernel table, the comm, the four streams and
 * the timed wait. Owned by the engine (struct zn_engine.rt); every other part enqueues on
 * these streams from the calling thread.
 *
 * Streams: compute runs the model; copy_in carries host -> device (tokens, offloaded
 * parameter shards, updated shards); copy_out device -> host (gradient shards, losses);
 * comm_s carries every collective, in the same order on every rank (the comm layer's rule),
 * plus the casts and accumulations that belong to a collective's result. Events order
 * them; the host blocks only on an event it needs (zn_runtime_wait, counted in wait_ms).
 */
#ifndef ZN_SCHED_RUNTIME_H
#define ZN_SCHED_RUNTIME_H

#include <stdbool.h>

#include "comm/comm.h"
#include "gpu/device.h"
#include "zinc.h"

struct zn_runtime {
	struct zn_device *dev;
	const struct zn_kernel_table *k;
	struct zn_comm *comm;
	struct zn_stream *compute, *copy_in, *copy_out, *comm_s;
	int rank, world;
	double wait_ms; /* host blocked on events this step */
};

double zn_runtime_now_ms(void);
/* device (cfg->runtime), comm of comm_kind (enum zn_comm_kind), streams */
int zn_runtime_create(struct zn_runtime *rt, const struct zn_config *cfg, int comm_kind);
/* drains and frees what create made (any part may be missing) */
void zn_runtime_destroy(struct zn_runtime *rt);
int zn_runtime_wait(struct zn_runtime *rt, struct zn_event *ev); /* counted in wait_ms */
/* waits for every stream (teardown: errors ignored); after a comm error under nccl it
 * destroys the comm first (zn_runtime_comm_first) */
void zn_runtime_sync(struct zn_runtime *rt);
/* the end of a step: the comm stream through zn_comm_synchronize (bounded by
 * --comm-timeout, asynchronous errors polled), then the other streams, then comm
 * errors. A comm error (sticky) returns at once, leaving the other streams to teardown. */
int zn_runtime_drain(struct zn_runtime *rt);
/* Teardown order: true when the comm must be destroyed before the streams are waited for
 * or destroyed: after a comm error (comm_rc != 0) under nccl, whose abort ends collectives
 * a hung peer left running. The host device's streams run comm ops on worker threads that
 * use the comm, so single and mpi keep the streams-first order. */
bool zn_runtime_comm_first(enum zn_comm_kind kind, int comm_rc);

#endif
