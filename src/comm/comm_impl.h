/* Inside the comm module: the comm object, the backend table, and helpers the backends
 * share. Only the comm module's .c files include this; other modules use comm.h.
 *
 * comm.c validates every call (so backends see only good arguments, count > 0) and
 * dispatches to the backend's table; a backend records a failure of the collective itself
 * with zn_comm_fail() so that it sticks.
 */
#ifndef ZN_COMM_IMPL_H
#define ZN_COMM_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"

struct zn_event;

enum zn_comm_op {
	ZN_COMM_OP_ALL_GATHER = 0,
	ZN_COMM_OP_REDUCE_SCATTER = 1,
	ZN_COMM_OP_ALL_REDUCE = 2,
	ZN_COMM_OP_BROADCAST = 3,
};

/* One collective, as validated by comm.c. count is per rank for all-gather and
 * reduce-scatter, the whole buffer for all-reduce, and bytes for broadcast (dtype is then
 * unused). all-reduce and broadcast have dst == src (in place). in_place: src and dst
 * are the in-place pair described in comm.h. */
struct zn_comm_args {
	enum zn_comm_op op;
	void *dst;
	const void *src;
	uint64_t count;
	enum zn_dtype dtype;
	int root;
	bool in_place;
};

struct zn_comm_ops {
	const char *name;
	/* largest count_per_rank an all-gather or reduce-scatter takes (MPI counts are
	 * int); 0 = no limit. all-reduce and broadcast have none (backends split them). */
	uint64_t max_count_per_rank;
	/* every op ends within the comm's timeout by itself (mpi: zn_mpi_wait), so
	 * zn_comm_synchronize need not bound the stream's wait */
	bool bounded;
	/* host buffers, on the calling thread; returns when done */
	int (*run)(struct zn_comm *c, const struct zn_comm_args *a);
	/* puts the op on s and returns */
	int (*enqueue)(struct zn_comm *c, struct zn_stream *s, const struct zn_comm_args *a);
	int (*barrier)(struct zn_comm *c);
	/* optional (NULL): asynchronous errors the backend can report, 0 or -EIO */
	int (*poll)(struct zn_comm *c);
	/* frees impl; works on a half-opened backend */
	void (*close)(struct zn_comm *c);
};

struct zn_comm {
	const struct zn_comm_ops *ops; /* NULL until a backend opened */
	void *impl;                    /* the backend's state */
	struct zn_device *dev;         /* may be NULL */
	enum zn_comm_kind kind;
	int rank;
	int size;
	int local_rank;
	atomic_int error;              /* first failure of a collective; 0 = none */
	atomic_uint_least64_t op_count; /* ops that reached the backend (fault injection) */
	uint64_t fail_op_index;
	uint64_t stop_op_index;        /* fault injection: SIGSTOP at this op */
	double timeout_s;              /* a collective's limit (--comm-timeout), > 0 */
	bool deterministic;            /* from the config (nccl: NCCL_ALGO) */
	struct zn_event *sync_ev;      /* zn_comm_synchronize's, made on first use */
};

/* Records rc (< 0) as the sticky error unless one is already there; returns rc. */
int zn_comm_fail(struct zn_comm *c, int rc);

/* Backends call this where an op would run: counts the op and returns -EIO (already
 * recorded with zn_comm_fail and logged) when it is the one chosen to fail, else 0. */
int zn_comm_fault(struct zn_comm *c, const struct zn_comm_args *a);

const char *zn_comm_op_name(enum zn_comm_op op);

/* Bytes of the op's input / output buffers. */
uint64_t zn_comm_src_bytes(const struct zn_comm *c, const struct zn_comm_args *a);
uint64_t zn_comm_dst_bytes(const struct zn_comm *c, const struct zn_comm_args *a);

/* The MPI part shared by the mpi and nccl backends (comm_mpi.c; built only with MPI).
 * zn_mpi_open initializes MPI if needed, requires at least the given thread level
 * (true: MPI_THREAD_MULTIPLE, false: MPI_THREAD_SERIALIZED), and fills c->rank, size and
 * local_rank. run executes a host op on the host communicator (never the stream one). */
struct zn_mpi;
int zn_mpi_open(struct zn_mpi **out, struct zn_comm *c, bool need_multiple);
void zn_mpi_close(struct zn_mpi *m); /* accepts NULL */
int zn_mpi_run_host(struct zn_mpi *m, struct zn_comm *c, const struct zn_comm_args *a);
int zn_mpi_barrier(struct zn_mpi *m);
/* root's buf[bytes] to every rank, on the host communicator (the NCCL id) */
int zn_mpi_broadcast_bytes(struct zn_mpi *m, void *buf, uint64_t bytes, int root);

#endif
