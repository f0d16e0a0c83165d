/* comm backend single: one rank. With N = 1 an all-gather or reduce-scatter is a copy of
 * src to dst (nothing when in place), and all-reduce and broadcast leave the buffer as it
 * is. Stream ops are device-to-device copies on the stream, so this backend works under
 * both devices and never touches MPI.
 */
#include <string.h>

#include "comm/comm_backends.h"
#include "comm/comm_impl.h"
#include "gpu/device.h"

static bool needs_copy(const struct zn_comm_args *a)
{
	return (a->op == ZN_COMM_OP_ALL_GATHER || a->op == ZN_COMM_OP_REDUCE_SCATTER) &&
	       !a->in_place;
}

static int single_run(struct zn_comm *c, const struct zn_comm_args *a)
{
	int rc = zn_comm_fault(c, a);

	if (rc)
		return rc;
	if (needs_copy(a))
		memcpy(a->dst, a->src, zn_comm_dst_bytes(c, a));
	return 0;
}

static int single_enqueue(struct zn_comm *c, struct zn_stream *s, const struct zn_comm_args *a)
{
	int rc = zn_comm_fault(c, a);

	if (rc)
		return rc;
	if (!needs_copy(a))
		return 0;
	return zn_memcpy_async(s, a->dst, a->src, zn_comm_dst_bytes(c, a), ZN_COPY_D2D);
}

static int single_barrier(struct zn_comm *c)
{
	return 0;
}

static void single_close(struct zn_comm *c)
{
}

static const struct zn_comm_ops single_ops = {
	.name = "single",
	.run = single_run,
	.enqueue = single_enqueue,
	.barrier = single_barrier,
	.close = single_close,
};

int zn_comm_single_open(struct zn_comm *c)
{
	c->ops = &single_ops;
	c->rank = 0;
	c->size = 1;
	c->local_rank = 0;
	return 0;
}
