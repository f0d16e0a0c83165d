/* The MPI test programs' nvme directory: mpi_nvme_dir(name, rank) is this rank's own
 * directory under $ZN_TEST_NVME_DIR or the current directory (zn-<name>-r<rank>-XXXXXX,
 * made at the first call), or NULL, said once on stderr, where that base has no O_DIRECT
 * (the nvme variants are skipped). The engines remove their swap files; the program
 * removes the directory. Static: one includer per program. */
#ifndef ZN_TESTS_MPI_NVME_DIR_H
#define ZN_TESTS_MPI_NVME_DIR_H

#include <stdio.h>
#include <stdlib.h>

#include "nvme/aio.h"
#include "zinc.h"

static const char *mpi_nvme_dir(const char *name, int rank)
{
	static char dir[ZN_PATH_MAX];
	static int state; /* 0 unknown, 1 made, -1 unavailable */
	const char *base = getenv("ZN_TEST_NVME_DIR");
	struct zn_nvme_path_probe p;
	char real[ZN_PATH_MAX];

	if (state)
		return state > 0 ? dir : NULL;
	state = -1;
	if (!realpath(base ? base : ".", real) || zn_nvme_path_probe(real, &p) || !p.o_direct) {
		fprintf(stderr, "%s: rank %d: no O_DIRECT under %s: nvme variants skipped\n", name,
			rank, base ? base : ".");
		return NULL;
	}
	if (snprintf(dir, sizeof(dir), "%s/zn-%s-r%d-XXXXXX", real, name, rank) >=
	    (int)sizeof(dir) || !mkdtemp(dir))
		return NULL;
	state = 1;
	return dir;
}

#endif
