/* The comm backends' entry points, with stubs for those not built (so comm.c carries no
 * #ifdef). Each open fills c->ops, c->impl, rank, size and local_rank, or returns a
 * negative code having logged why; c->ops->close then undoes what was done.
 */
#ifndef ZN_COMM_BACKENDS_H
#define ZN_COMM_BACKENDS_H

#include <errno.h>

#include "comm/comm_impl.h"
#include "core/log.h"

int zn_comm_single_open(struct zn_comm *c);

#ifdef ZN_HAVE_MPI
int zn_comm_mpi_open(struct zn_comm *c);
#else
static inline int zn_comm_mpi_open(struct zn_comm *c)
{
	zn_error("comm backend mpi: zinc was built without MPI; install an MPI (apt-get "
		 "install libopenmpi-dev) and rebuild, or run one rank without mpirun");
	return -ENOTSUP;
}
#endif

/* MPI_Abort(MPI_COMM_WORLD, code) when MPI is initialized and not finalized; returns
 * otherwise (and without MPI). */
#ifdef ZN_HAVE_MPI
void zn_comm_mpi_abort(int code);
#else
static inline void zn_comm_mpi_abort(int code)
{
	(void)code;
}
#endif

#ifdef ZN_HAVE_NCCL
int zn_comm_nccl_open(struct zn_comm *c);
#else
static inline int zn_comm_nccl_open(struct zn_comm *c)
{
	zn_error("comm backend nccl: zinc was built without CUDA + NCCL + MPI; rebuild with "
		 "all three, or use the host device (--device host) with the mpi backend");
	return -ENOTSUP;
}
#endif

#endif
