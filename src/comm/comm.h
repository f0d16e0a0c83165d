/* Collectives between data-parallel ranks: all-gather, reduce-scatter, all-reduce,
 * broadcast, barrier.
 *
 * Three backends sit behind these functions (docs/comm.md):
 *   single: one rank. Gathers and scatters are copies, all-reduce and broadcast do nothing.
 *           Needs no mpirun and never touches MPI.
 *   mpi:    ranks are processes started by `mpirun -np N zinc ...`; buffers are host
 *           memory (the host device's "device" memory is host memory). Enqueued ops run on
 *           the stream's worker thread, so MPI is initialized with MPI_THREAD_MULTIPLE.
 *   nccl:   buffers are device memory of the cuda device; ops are enqueued on the stream's
 *           cudaStream_t. The NCCL unique id is made on rank 0 and broadcast over MPI, so
 *           the same mpirun line works on one node or many.
 * ZN_COMM_AUTO picks single unless a launcher (mpirun, mpiexec, srun) says the world has
 * more than one rank; then nccl for a cuda device, else mpi.
 *
 * Each collective takes a stream:
 *   s != NULL: the op is put on s after the work already queued there (zn_launch or a
 *              device copy) and the call returns at once. Buffers are the device's memory
 *              and must stay valid until the op has run (wait for it with an event).
 *   s == NULL: the op runs now on the calling thread on host buffers and returns when it
 *              is complete (for small host values: a loss to log, a seed, a flag). Under
 *              nccl this goes over MPI.
 * Every rank must issue the same collectives in the same order with the same counts (MPI
 * and NCCL's rule). Ops on streams must be ordered among themselves: put them on one
 * stream (the comm stream) or order them with events. Host ops (s == NULL) and barriers
 * use a communicator of their own, so they may run while stream ops are in flight.
 *
 * Sums: fp32 sums are deterministic run to run for a fixed rank count and count (MPI_SUM
 * and ncclSum over a fixed communicator use a fixed reduction order; rank order can
 * differ from a left-to-right sum, so results differ from a one-rank run by rounding
 * only). bf16 and fp16 sums: mpi converts to fp32, sums, and rounds once to nearest even;
 * nccl sums in the dtype's own arithmetic per step.
 *
 * Errors: argument errors (bad dtype, NULL buffer, bad root, overlapping buffers) return
 * -EINVAL at once and start nothing. A failure of the collective itself (MPI or NCCL
 * error, injected fault) is sticky: it is recorded in the comm, and it and every later
 * call return it (-EIO). An enqueued op that fails on a worker thread cannot report to
 * its caller, so to know that stream ops succeeded: synchronize the stream (or an event
 * after them), then call zn_comm_check(c). After an error, destroy the comm: ranks that
 * did not fail may be waiting in the collective (MPI_Abort or the launcher ends them).
 *
 *     struct zn_comm_config ccfg = { .kind = ZN_COMM_AUTO, .dev = dev };
 *     struct zn_comm *comm;
 *     rc = zn_comm_create(&comm, &ccfg);
 *     if (rc)
 *             goto destroy_device;
 *     // every rank's 4096-float shard -> the full layer, on the comm stream
 *     rc = zn_comm_all_gather(comm, comm_stream, full_d, shard_d, 4096, ZN_DTYPE_F32);
 *     ...
 *     rc = zn_stream_synchronize(comm_stream);
 *     if (!rc)
 *             rc = zn_comm_check(comm);
 *     zn_comm_destroy(comm);
 *
 * Threading: create, destroy and barrier on one thread; collectives on streams follow
 * the stream's rule (one thread at a time); host ops from one thread at a time.
 */
#ifndef ZN_COMM_COMM_H
#define ZN_COMM_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "zinc.h"

struct zn_comm;
struct zn_device;
struct zn_stream;

enum zn_comm_kind {
	ZN_COMM_AUTO = 0,
	ZN_COMM_SINGLE = 1,
	ZN_COMM_MPI = 2,
	ZN_COMM_NCCL = 3,
};

#define ZN_COMM_TIMEOUT_DEFAULT_S 600.0

struct zn_comm_config {
	enum zn_comm_kind kind;
	/* The device whose streams and memory the ops use. NULL: host buffers only (stream
	 * ops still work under single and mpi; nccl needs a cuda device). */
	struct zn_device *dev;
	/* Fault injection for tests: the collective with this 1-based index (counted over
	 * all ops that reach the backend) fails with -EIO where it would run. 0 = off; then
	 * the environment variable ZINC_COMM_FAIL_OP=N, read at create, sets it. */
	uint64_t fail_op_index;
	/* Fault injection for tests: the collective with this index stops the process
	 * (SIGSTOP) where it would run, as a rank that stops responding. 0 = off; then
	 * ZINC_COMM_STOP_OP=N, read at create, sets it. */
	uint64_t stop_op_index;
	/* Seconds a collective may wait for the other ranks (--comm-timeout,
	 * zinc.comm_timeout); 0 = ZN_COMM_TIMEOUT_DEFAULT_S. mpi: every collective and barrier
	 * is bounded by it and a timeout names the ranks that did not arrive; nccl: the end of
	 * a step's wait for the comm stream (zn_comm_synchronize) and its MPI host ops. */
	double timeout_s;
	/* single only: a process-local comm of one rank even when the launcher started more
	 * (a rank computing a one-rank reference in-process, as the engine's MPI tests do).
	 * Without it, single under a multi-rank launch is refused as a likely mistake. */
	bool local;
	/* nccl only: pin NCCL's algorithm (NCCL_ALGO=Ring, unless the environment sets
	 * NCCL_ALGO) so sums do not change bits with the topology NCCL detects. The engine
	 * sets it from --deterministic. */
	bool deterministic;
};

/* The world as the launcher's environment describes it, before anything is created
 * (config validation needs the world size before the device exists). Reads Open MPI's
 * OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK}, MPICH/Intel's PMI_{SIZE,RANK} +
 * MPI_LOCALRANKID, MVAPICH's MV2_COMM_WORLD_*, and srun's SLURM_STEP_NUM_TASKS +
 * SLURM_{PROCID,LOCALID}; none set: rank 0 of 1. A missing local rank is taken as the
 * rank. Outputs may be NULL. Returns 0, or -EINVAL (logged, naming the variable) when a
 * value is not a number or the rank is not below the size. */
int zn_comm_world_hint(int *rank, int *size, int *local_rank);

/* "auto", "single", "mpi", "nccl" <-> kind. parse returns 0 or -EINVAL (logged). */
int zn_comm_kind_parse(const char *s, enum zn_comm_kind *out);
const char *zn_comm_kind_name(enum zn_comm_kind kind);

/* Creates the comm: for mpi and nccl initializes MPI if nobody has (MPI_Init_thread;
 * destroy finalizes it when the last such comm goes; MPI cannot be initialized twice in
 * one process, so a comm created after that fails with a message saying so), and for nccl
 * the NCCL communicator on the device current on this thread. Returns 0; -EINVAL for a
 * kind that contradicts the launch (single under mpirun with N > 1, nccl on the host
 * device, mpi on a cuda device); -ENOTSUP for a backend not built in; -EIO for an MPI or
 * NCCL failure. *out is NULL on error. */
int zn_comm_create(struct zn_comm **out, const struct zn_comm_config *cfg);
/* Accepts NULL. Does not wait for streams: synchronize those that carry its ops first. */
void zn_comm_destroy(struct zn_comm *c);

enum zn_comm_kind zn_comm_kind_of(const struct zn_comm *c); /* never AUTO */
int zn_comm_rank(const struct zn_comm *c);
int zn_comm_size(const struct zn_comm *c);
int zn_comm_local_rank(const struct zn_comm *c); /* rank among the ranks on this node */

/* dst[size * count_per_rank] = every rank's src[count_per_rank], in rank order.
 * In place: src == dst + rank * count_per_rank (elements); any other overlap is -EINVAL. */
int zn_comm_all_gather(struct zn_comm *c, struct zn_stream *s, void *dst, const void *src,
		       uint64_t count_per_rank, enum zn_dtype dtype);

/* dst[count_per_rank] = sum over ranks of block `rank` of src[size * count_per_rank].
 * In place: dst == src + rank * count_per_rank (the rest of src is then clobbered). */
int zn_comm_reduce_scatter(struct zn_comm *c, struct zn_stream *s, void *dst,
			   const void *src, uint64_t count_per_rank, enum zn_dtype dtype);

/* buf[count] = sum over ranks of buf[count], in place. */
int zn_comm_all_reduce(struct zn_comm *c, struct zn_stream *s, void *buf, uint64_t count,
		       enum zn_dtype dtype);

/* buf[bytes] on every rank = root's buf. */
int zn_comm_broadcast(struct zn_comm *c, struct zn_stream *s, void *buf, uint64_t bytes,
		      int root);

/* Blocks the calling thread until every rank has called it. Does not wait for streams. */
int zn_comm_barrier(struct zn_comm *c);

/* 0, or the sticky error of a failed collective (also asks NCCL for asynchronous errors). */
int zn_comm_check(struct zn_comm *c);

/* ---- ranks that agree, ranks that fail (comm_agree.c) ----------------------------------
 *
 * zn_comm_agree: every rank checks that it runs what rank 0 runs before any work. text is
 * this rank's description of the run as "key=value" lines (the effective config, the
 * model shape, ...; per-rank values such as paths left out; "key=value<TAB>note" compares
 * key=value and shows "value (note)" in a disagreement); ok says whether this rank's
 * own start-up succeeded. Rank 0's text is broadcast and every rank compares it line by
 * line, then every rank learns every other's verdict (an all-gather), so all of them
 * return the same answer: 0 when every rank is ok and agrees; -EINVAL (ZN_EUSAGE) when
 * some rank differs, each differing rank logging "ranks disagree on KEY: VALUE here on
 * rank r, VALUE on rank 0" and rank 0 "rank r disagrees on KEY" (the first such rank and
 * its first differing key); -ECANCELED when some rank was not ok (it logged why; the
 * others log which rank); -EIO when the collective itself fails. Collective: every rank
 * of c, host ops on the calling thread.
 *
 * zn_comm_abort: ends every rank of the launch at once with exit_code: MPI_Abort(
 * MPI_COMM_WORLD) when MPI is up in this process, else exit(). For a rank that fails
 * after start-up while the others may be waiting in a collective: the launcher sends
 * them SIGTERM (core/signals.h removes their swap files). Flushes stdout and stderr. */
int zn_comm_agree(struct zn_comm *c, const char *text, bool ok);
void zn_comm_abort(int exit_code);

/* For the MPI backend's timeout line and its tests (pure): this rank timed out in op seq
 * (1-based) of channel (0 host ops, 1 stream ops); answered[r] says whether rank r answered
 * the arrival query and reached[r][c] how many ops of channel c it had begun. Writes
 * "rank 1 did not arrive (no answer: ...)" and "rank 3 did not arrive (it is at host op 4,
 * stream op 17)" parts, or that every rank arrived, into buf; returns how many ranks did
 * not arrive. */
int zn_comm_missing_text(char *buf, size_t size, int rank, int world, int channel,
			 int64_t seq, const bool *answered, const int64_t (*reached)[2]);

/* Waits for the work queued on s so far (the comm stream's collectives) like
 * zn_stream_synchronize, but polls the backend for asynchronous errors meanwhile and gives
 * up after the comm's timeout (zn_comm_config.timeout_s; fractions allowed): a peer that
 * died or hangs must not make the end of a step wait forever. Under mpi each op is bounded
 * by the timeout itself (and names the missing ranks), so this waits without a limit of
 * its own. Returns 0 once the work is done and no error was seen; an asynchronous error
 * (-EIO) as soon as the backend reports it; -ETIMEDOUT after the limit, logged with what
 * to do. Both are sticky: destroy the comm then (nccl aborts its communicator instead of
 * waiting for the others). The stream's work may still be queued after an error. */
int zn_comm_synchronize(struct zn_comm *c, struct zn_stream *s);

/* For tests and the implementation: one decision of zn_comm_synchronize's loop. */
enum zn_comm_wait {
	ZN_COMM_WAIT_AGAIN = 0, /* not done, no error, time left: poll again */
	ZN_COMM_WAIT_DONE = 1,
	ZN_COMM_WAIT_ERROR = 2,
	ZN_COMM_WAIT_TIMEOUT = 3,
};
enum zn_comm_wait zn_comm_wait_next(bool done, int poll_rc, double waited_s, double timeout_s);
/* The NCCL_ALGO value to set before NCCL initialises, or NULL to leave it: "Ring" when
 * deterministic and the environment does not choose one already (current NULL or ""). */
const char *zn_comm_nccl_algo(bool deterministic, const char *current);

#endif
