/* zinc train across ranks: every rank agrees on what it runs before any work, and a rank
 * that fails after that ends the whole job (comm.h's zn_comm_agree and zn_comm_abort).
 * Internal to zinc (src/train).
 *
 *     struct zn_train_ranks r;
 *     if (zn_train_ranks_start(&r, cfg.runtime.comm_timeout_s))
 *             return 2;
 *     if (zn_train_ranks_agree(&r, &cfg, &tm, "train.steps=20\n", ok))
 *             ...  // every rank: exit 2
 *     rc = work();
 *     if (rc)
 *             zn_train_ranks_fail(&r, 1); // world > 1: does not return
 *     zn_train_ranks_end(&r);
 */
#ifndef ZN_TRAIN_RANKS_H
#define ZN_TRAIN_RANKS_H

#include <stdbool.h>
#include <stddef.h>

#include "train/train_model.h"
#include "zinc.h"

struct zn_comm;

struct zn_train_ranks {
	int world;            /* ranks of the launch (1 without a launcher) */
	struct zn_comm *comm; /* world > 1: an mpi comm of host ops, kept to the end */
};

/* The world from the launcher; with more than one rank, an mpi comm (so MPI stays up
 * while engines come and go) whose collectives wait at most timeout_s for the other ranks
 * (--comm-timeout; 0 = the default). Returns 0 or a negative code (logged). */
int zn_train_ranks_start(struct zn_train_ranks *r, double timeout_s);

/* What the ranks must agree on, as "key=value" lines: the effective config (JSON keys,
 * without the per-rank ones: nvme paths, pin_memory, the aio block, zinc.numa_node,
 * zinc.run_id), the model shape (model.*), then extra (lines of the command's own
 * settings). Caller frees; NULL when out of memory. */
char *zn_train_ranks_text(const struct zn_config *cfg, const struct zn_train_model *tm,
			  const char *extra);

/* The agreement line of an input file (--data, --val-data): "key=N bytes, crc32c X" and,
 * after a tab, the path, which is shown in a disagreement but not compared (ranks may hold
 * the same file at different paths); "key=none" for a NULL path. The CRC covers the
 * first and last MiB and 64 evenly spaced 4 KiB pieces (the whole of a small file).
 * Returns 0, or a negative code when the file cannot be read (logged naming flag). */
int zn_train_ranks_file_line(const char *key, const char *flag, const char *path, char *line,
			     size_t size);

/* Every rank compares its text with rank 0's (ok: this rank's own start-up went well).
 * 0 when all agree and are ok; otherwise every rank gets the same negative code and the
 * caller exits 2 (the differing key is logged). One rank: returns 0 when ok. When the
 * exchange itself fails (a rank that never arrives within the timeout), the job ends
 * here (zn_train_ranks_fail, exit 1). */
int zn_train_ranks_agree(struct zn_train_ranks *r, const struct zn_config *cfg,
			 const struct zn_train_model *tm, const char *extra, bool ok);

/* A failure after agreement: with more than one rank, removes this rank's swap files and
 * ends the job (MPI_Abort) with exit_code; with one rank, returns. */
void zn_train_ranks_fail(struct zn_train_ranks *r, int exit_code);

void zn_train_ranks_end(struct zn_train_ranks *r);

#endif
