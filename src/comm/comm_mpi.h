/* Inside the comm module, MPI builds only: the bounded wait every MPI collective of zinc
 * goes through (comm_wait_mpi.c), used by comm_mpi.c for the mpi backend's ops and the host
 * ops and barriers the nccl backend runs over MPI.
 *
 * Each collective is issued non-blocking (MPI_Iallreduce, MPI_Ibarrier, ...) and handed to
 * zn_mpi_wait, which polls it (MPI_Test, yielding, then napping) until it completes or the
 * comm's timeout (--comm-timeout) passes since the op began. While a rank polls it answers
 * its peers' arrival queries; when its own wait times out it asks every peer how far it
 * has come, waits a short grace for the answers and logs one line naming the op and the
 * ranks that did not arrive (no answer: stopped, dead or busy outside any collective; or
 * an answer that they are still before the op). The op is then abandoned (MPI cannot
 * cancel a collective) and -ETIMEDOUT returned: the caller ends the job with MPI_Abort,
 * never MPI_Finalize, which would wait for the missing rank.
 *
 * Channels: the ops of one communicator, numbered 1, 2, ... in the order every rank
 * issues them (MPI's rule), so "op k of channel c" is the same op on every rank. Each comm
 * has two (host ops and barriers; stream ops); each may be waited on by its own thread.
 *
 *     struct zn_mpi_watch *w;
 *     rc = zn_mpi_watch_open(&w, MPI_COMM_WORLD, 600.0);
 *     MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm, &req);
 *     rc = zn_mpi_wait(w, ZN_MPI_HOST, "all_reduce", &req);   // 0, -EIO or -ETIMEDOUT
 *     zn_mpi_watch_close(w);
 */
#ifndef ZN_COMM_COMM_MPI_H
#define ZN_COMM_COMM_MPI_H

#include <mpi.h>

enum zn_mpi_channel {
	ZN_MPI_HOST = 0,   /* host ops, barriers, the NCCL id (the calling thread) */
	ZN_MPI_STREAM = 1, /* ops enqueued on streams (the stream's worker thread) */
	ZN_MPI_CHANNELS = 2,
};

struct zn_mpi_watch;

/* Every MPI result goes through this: 0 for MPI_SUCCESS, else logs "call failed: MPI's
 * message" at file:line and returns -EIO. */
int zn_mpi_check(int rc, const char *call, const char *file, int line);

/* Duplicates world for the arrival queries and posts the receive that answers them.
 * timeout_s > 0. Collective over world. Returns 0 or -EIO / -ENOMEM (logged). */
int zn_mpi_watch_open(struct zn_mpi_watch **out, MPI_Comm world, double timeout_s);
/* Accepts NULL. After a timeout nothing is freed that a pending request might use. */
void zn_mpi_watch_close(struct zn_mpi_watch *w);

/* Counts one op on channel ch and waits for *req: 0 when it completed; -EIO when MPI
 * reported an error (logged with call); -ETIMEDOUT after the timeout (logged: op, the
 * ranks that did not arrive). Thread-safe across channels; one thread per channel. */
int zn_mpi_wait(struct zn_mpi_watch *w, enum zn_mpi_channel ch, const char *call,
		MPI_Request *req);

#endif
