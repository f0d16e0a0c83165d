/* comm: backend choice, argument checks, dispatch, the sticky error and fault injection.
 *
 * Every public collective is checked here (dtype, NULL buffers, overlap, root, size
 * overflow) so the backends only move bytes; count 0 is a no-op that reaches no backend.
 * The backends (comm_single.c, comm_mpi.c, comm_nccl.c) do the moving.
 */
#include "comm/comm.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_backends.h"
#include "comm/comm_impl.h"
#include "core/dtype.h"
#include "core/fault.h"
#include "core/log.h"
#include "gpu/device.h"

static const char *const kind_names[] = { "auto", "single", "mpi", "nccl" };

const char *zn_comm_kind_name(enum zn_comm_kind kind)
{
	if ((unsigned)kind < sizeof(kind_names) / sizeof(kind_names[0]))
		return kind_names[kind];
	return "?";
}

int zn_comm_kind_parse(const char *s, enum zn_comm_kind *out)
{
	for (unsigned i = 0; s && i < sizeof(kind_names) / sizeof(kind_names[0]); i++) {
		if (!strcmp(s, kind_names[i])) {
			*out = (enum zn_comm_kind)i;
			return 0;
		}
	}
	zn_error("comm backend '%s' is unknown: use auto, single, mpi or nccl", s ? s : "(null)");
	return -EINVAL;
}

const char *zn_comm_op_name(enum zn_comm_op op)
{
	switch (op) {
	case ZN_COMM_OP_ALL_GATHER:
		return "all_gather";
	case ZN_COMM_OP_REDUCE_SCATTER:
		return "reduce_scatter";
	case ZN_COMM_OP_ALL_REDUCE:
		return "all_reduce";
	case ZN_COMM_OP_BROADCAST:
		return "broadcast";
	}
	return "?";
}

int zn_comm_fail(struct zn_comm *c, int rc)
{
	int none = 0;

	/* first error wins: later ones are usually consequences of it */
	atomic_compare_exchange_strong(&c->error, &none, rc);
	return rc;
}

int zn_comm_fault(struct zn_comm *c, const struct zn_comm_args *a)
{
	uint64_t n = atomic_fetch_add(&c->op_count, 1) + 1;

	if (c->stop_op_index && n == c->stop_op_index) {
		zn_error("comm %s: injected stop in collective #%llu (%s): this rank stops "
			 "(SIGSTOP)", c->ops->name, (unsigned long long)n, zn_comm_op_name(a->op));
		raise(SIGSTOP);
	}
	if (!c->fail_op_index || n != c->fail_op_index)
		return 0;
	zn_error("comm %s: injected fault in collective #%llu (%s)", c->ops->name,
		 (unsigned long long)n, zn_comm_op_name(a->op));
	return zn_comm_fail(c, -EIO);
}

uint64_t zn_comm_src_bytes(const struct zn_comm *c, const struct zn_comm_args *a)
{
	if (a->op == ZN_COMM_OP_BROADCAST)
		return a->count;
	if (a->op == ZN_COMM_OP_REDUCE_SCATTER)
		return a->count * (uint64_t)c->size * zn_dtype_size(a->dtype);
	return a->count * zn_dtype_size(a->dtype);
}

uint64_t zn_comm_dst_bytes(const struct zn_comm *c, const struct zn_comm_args *a)
{
	if (a->op == ZN_COMM_OP_BROADCAST)
		return a->count;
	if (a->op == ZN_COMM_OP_ALL_GATHER)
		return a->count * (uint64_t)c->size * zn_dtype_size(a->dtype);
	return a->count * zn_dtype_size(a->dtype);
}

/* ---- create / destroy ------------------------------------------------------------ */

static int choose_kind(const struct zn_comm_config *cfg, enum zn_comm_kind *kind)
{
	enum zn_device_kind dk = cfg->dev ? zn_device_kind_of(cfg->dev) : ZN_DEVICE_HOST;
	int size = 1;
	int rc;

	if ((unsigned)cfg->kind > ZN_COMM_NCCL) {
		zn_error("comm backend %d is unknown: use auto, single, mpi or nccl",
			 (int)cfg->kind);
		return -EINVAL;
	}
	rc = zn_comm_world_hint(NULL, &size, NULL);
	if (rc)
		return rc;
	*kind = cfg->kind;
	if (*kind == ZN_COMM_AUTO) {
		if (size == 1)
			*kind = ZN_COMM_SINGLE;
		else
			*kind = dk == ZN_DEVICE_CUDA ? ZN_COMM_NCCL : ZN_COMM_MPI;
	}
	if (*kind == ZN_COMM_SINGLE && size > 1 && !cfg->local) {
		zn_error("comm backend single, but the launcher started %d ranks: use auto, mpi "
			 "or nccl, or run without mpirun", size);
		return -EINVAL;
	}
	if (*kind == ZN_COMM_MPI && dk == ZN_DEVICE_CUDA) {
		zn_error("comm backend mpi moves host buffers and cannot use the cuda device's "
			 "memory: use nccl (or auto) with cuda, or the host device with mpi");
		return -EINVAL;
	}
	if (*kind == ZN_COMM_NCCL && dk != ZN_DEVICE_CUDA) {
		zn_error("comm backend nccl needs the cuda device: use mpi (or auto) with the "
			 "host device");
		return -EINVAL;
	}
	return 0;
}

int zn_comm_create(struct zn_comm **out, const struct zn_comm_config *cfg)
{
	const char *fault_env;
	struct zn_comm *c;
	int rc;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		zn_error("comm: out of memory");
		return -ENOMEM;
	}
	atomic_init(&c->error, 0);
	atomic_init(&c->op_count, 0);
	c->dev = cfg->dev;
	c->fail_op_index = cfg->fail_op_index;
	/* as the device's ZINC_DEVICE_FAIL_*: a fault for comms created by others (the
	 * engine), which tests cannot configure directly */
	fault_env = zn_fault_value(ZN_FAULT_COMM_FAIL_OP);
	if (!c->fail_op_index && fault_env && *fault_env)
		c->fail_op_index = strtoull(fault_env, NULL, 10);
	c->stop_op_index = cfg->stop_op_index;
	fault_env = zn_fault_value(ZN_FAULT_COMM_STOP_OP);
	if (!c->stop_op_index && fault_env && *fault_env)
		c->stop_op_index = strtoull(fault_env, NULL, 10);
	c->deterministic = cfg->deterministic;
	c->size = 1;
	c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : ZN_COMM_TIMEOUT_DEFAULT_S;
	rc = choose_kind(cfg, &c->kind);
	if (rc)
		goto free_comm;
	if (c->kind == ZN_COMM_SINGLE)
		rc = zn_comm_single_open(c);
	else if (c->kind == ZN_COMM_MPI)
		rc = zn_comm_mpi_open(c);
	else
		rc = zn_comm_nccl_open(c);
	if (rc)
		goto free_comm;
	zn_debug("comm %s: rank %d of %d (local rank %d)", c->ops->name, c->rank, c->size,
		 c->local_rank);
	*out = c;
	return 0;

free_comm:
	zn_comm_destroy(c);
	return rc;
}

void zn_comm_destroy(struct zn_comm *c)
{
	if (!c)
		return;
	if (c->ops)
		c->ops->close(c); /* nccl: an abort ends collectives still queued */
	zn_event_destroy(c->sync_ev);
	free(c);
}

enum zn_comm_kind zn_comm_kind_of(const struct zn_comm *c)
{
	return c->kind;
}

int zn_comm_rank(const struct zn_comm *c)
{
	return c->rank;
}

int zn_comm_size(const struct zn_comm *c)
{
	return c->size;
}

int zn_comm_local_rank(const struct zn_comm *c)
{
	return c->local_rank;
}

int zn_comm_check(struct zn_comm *c)
{
	int rc;

	if (!c) {
		zn_error("check: comm is NULL");
		return -EINVAL;
	}
	rc = atomic_load(&c->error);

	if (rc || !c->ops->poll)
		return rc;
	rc = c->ops->poll(c);
	return rc ? zn_comm_fail(c, rc) : 0;
}

/* ---- argument checks ----------------------------------------------------------- */

static bool overlaps(const void *a, uint64_t a_bytes, const void *b, uint64_t b_bytes)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y + b_bytes && y < x + a_bytes;
}

static int check_dtype(const char *fn, enum zn_dtype dtype)
{
	if (dtype == ZN_DTYPE_F32 || dtype == ZN_DTYPE_BF16 || dtype == ZN_DTYPE_F16)
		return 0;
	zn_error("%s: dtype %d is not fp32, bf16 or fp16 (enum zn_dtype)", fn, (int)dtype);
	return -EINVAL;
}

/* count * size * element must fit in uint64 (and in a pointer offset). */
static int check_count(const char *fn, const struct zn_comm *c, uint64_t count,
		       uint64_t elem_bytes)
{
	if (count <= (UINT64_MAX / 2) / ((uint64_t)c->size * elem_bytes))
		return 0;
	zn_error("%s: count %llu is too large for %d ranks", fn, (unsigned long long)count,
		 c->size);
	return -EINVAL;
}

/* Gather and scatter: src and dst must not overlap unless they are the in-place pair
 * (the small buffer sits at block `rank` of the big one). */
static int check_pair(const char *fn, const struct zn_comm *c, struct zn_comm_args *a)
{
	const void *small = a->op == ZN_COMM_OP_ALL_GATHER ? a->src : a->dst;
	const void *big = a->op == ZN_COMM_OP_ALL_GATHER ? a->dst : a->src;
	uint64_t small_bytes = a->count * zn_dtype_size(a->dtype);

	if (!a->dst || !a->src) {
		zn_error("%s: %s is NULL", fn, a->dst ? "src" : "dst");
		return -EINVAL;
	}
	a->in_place = (uintptr_t)small == (uintptr_t)big + (uint64_t)c->rank * small_bytes;
	if (a->in_place || !overlaps(small, small_bytes, big, small_bytes * c->size))
		return 0;
	zn_error("%s: src and dst overlap; in place needs %s == %s + rank * count_per_rank",
		 fn, a->op == ZN_COMM_OP_ALL_GATHER ? "src" : "dst",
		 a->op == ZN_COMM_OP_ALL_GATHER ? "dst" : "src");
	return -EINVAL;
}

static int dispatch(struct zn_comm *c, struct zn_stream *s, const struct zn_comm_args *a)
{
	int rc;

	if (s)
		rc = c->ops->enqueue(c, s, a);
	else
		rc = c->ops->run(c, a);
	if (rc)
		return zn_comm_fail(c, rc);
	/* under cuda the op was issued just now and may already have failed; under the host
	 * device an earlier op may have failed on its worker since the entry check */
	return atomic_load(&c->error);
}

static int gather_scatter(struct zn_comm *c, struct zn_stream *s, struct zn_comm_args *a)
{
	const char *fn = zn_comm_op_name(a->op);
	int rc;

	if (!c) {
		zn_error("%s: comm is NULL", fn);
		return -EINVAL;
	}
	rc = atomic_load(&c->error);
	if (rc)
		return rc;
	rc = check_dtype(fn, a->dtype);
	if (!rc)
		rc = check_count(fn, c, a->count, zn_dtype_size(a->dtype));
	if (rc || !a->count)
		return rc;
	if (c->ops->max_count_per_rank && a->count > c->ops->max_count_per_rank) {
		zn_error("%s: count_per_rank %llu is above the %s backend's limit %llu: split "
			 "the buffer into several collectives", fn, (unsigned long long)a->count,
			 c->ops->name, (unsigned long long)c->ops->max_count_per_rank);
		return -EINVAL;
	}
	rc = check_pair(fn, c, a);
	if (rc)
		return rc;
	return dispatch(c, s, a);
}

int zn_comm_all_gather(struct zn_comm *c, struct zn_stream *s, void *dst, const void *src,
		       uint64_t count_per_rank, enum zn_dtype dtype)
{
	struct zn_comm_args a = { .op = ZN_COMM_OP_ALL_GATHER, .dst = dst, .src = src,
				  .count = count_per_rank, .dtype = dtype };

	return gather_scatter(c, s, &a);
}

int zn_comm_reduce_scatter(struct zn_comm *c, struct zn_stream *s, void *dst,
			   const void *src, uint64_t count_per_rank, enum zn_dtype dtype)
{
	struct zn_comm_args a = { .op = ZN_COMM_OP_REDUCE_SCATTER, .dst = dst, .src = src,
				  .count = count_per_rank, .dtype = dtype };

	return gather_scatter(c, s, &a);
}

int zn_comm_all_reduce(struct zn_comm *c, struct zn_stream *s, void *buf, uint64_t count,
		       enum zn_dtype dtype)
{
	struct zn_comm_args a = { .op = ZN_COMM_OP_ALL_REDUCE, .dst = buf, .src = buf,
				  .count = count, .dtype = dtype, .in_place = true };
	int rc;

	if (!c) {
		zn_error("all_reduce: comm is NULL");
		return -EINVAL;
	}
	rc = atomic_load(&c->error);
	if (rc)
		return rc;
	rc = check_dtype("all_reduce", dtype);
	if (!rc)
		rc = check_count("all_reduce", c, count, zn_dtype_size(dtype));
	if (rc || !count)
		return rc;
	if (!buf) {
		zn_error("all_reduce: buf is NULL");
		return -EINVAL;
	}
	return dispatch(c, s, &a);
}

int zn_comm_broadcast(struct zn_comm *c, struct zn_stream *s, void *buf, uint64_t bytes,
		      int root)
{
	struct zn_comm_args a = { .op = ZN_COMM_OP_BROADCAST, .dst = buf, .src = buf,
				  .count = bytes, .dtype = ZN_DTYPE_F32, .root = root,
				  .in_place = true };
	int rc;

	if (!c) {
		zn_error("broadcast: comm is NULL");
		return -EINVAL;
	}
	rc = atomic_load(&c->error);
	if (rc)
		return rc;
	if (root < 0 || root >= c->size) {
		zn_error("broadcast: root %d is not a rank (0 .. %d)", root, c->size - 1);
		return -EINVAL;
	}
	if (!bytes)
		return 0;
	if (!buf) {
		zn_error("broadcast: buf is NULL");
		return -EINVAL;
	}
	return dispatch(c, s, &a);
}

int zn_comm_barrier(struct zn_comm *c)
{
	int rc;

	if (!c) {
		zn_error("barrier: comm is NULL");
		return -EINVAL;
	}
	rc = atomic_load(&c->error);
	if (rc)
		return rc;
	rc = c->ops->barrier(c);
	return rc ? zn_comm_fail(c, rc) : 0;
}
