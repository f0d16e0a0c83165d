/* zn_comm_world_hint: rank, size and local rank from the launcher's environment, without
 * initializing MPI (config validation runs before any comm or device exists). The MPI
 * backends check the hint against MPI's own answer once MPI is up.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "core/log.h"

/* One launcher's variables; local may be NULL (then the rank is taken). */
struct launcher_env {
	const char *size;
	const char *rank;
	const char *local;
};

static const struct launcher_env launchers[] = {
	{ "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK" },
	{ "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID" },         /* MPICH hydra, Intel MPI */
	{ "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK" },
	/* srun sets the step's task count only inside a step, not in a batch script */
	{ "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID" },
};

/* Reads a non-negative int. Returns 0 (found or not: *found says), or -EINVAL. */
static int env_int(const char *name, int *out, bool *found)
{
	const char *s = name ? getenv(name) : NULL;
	char *end;
	long v;

	*found = s && *s;
	if (!*found)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > INT_MAX) {
		zn_error("environment %s=%s is not a rank count or rank number; unset it or "
			 "launch with mpirun", name, s);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

static int read_launcher(const struct launcher_env *l, int *rank, int *size, int *local,
			 bool *found)
{
	bool have_rank, have_local;
	int rc;

	rc = env_int(l->size, size, found);
	if (rc || !*found)
		return rc;
	rc = env_int(l->rank, rank, &have_rank);
	if (!rc)
		rc = env_int(l->local, local, &have_local);
	if (rc)
		return rc;
	if (!have_rank) {
		zn_error("environment %s=%d is set but %s is not: the launcher is incomplete; "
			 "launch with mpirun -np N", l->size, *size, l->rank);
		return -EINVAL;
	}
	if (*size < 1 || *rank >= *size) {
		zn_error("environment %s=%d and %s=%d: the rank must be below the size",
			 l->size, *size, l->rank, *rank);
		return -EINVAL;
	}
	if (!have_local)
		*local = *rank;
	return 0;
}

int zn_comm_world_hint(int *rank, int *size, int *local_rank)
{
	int r = 0, n = 1, l = 0;
	bool found = false;
	int rc;

	for (unsigned i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
		rc = read_launcher(&launchers[i], &r, &n, &l, &found);
		if (rc)
			return rc;
		if (found)
			break;
	}
	if (!found) {
		r = 0;
		n = 1;
		l = 0;
	}
	if (rank)
		*rank = r;
	if (size)
		*size = n;
	if (local_rank)
		*local_rank = l;
	return 0;
}
