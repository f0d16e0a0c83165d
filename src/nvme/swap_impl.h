/* Private to src/nvme/swap*.c: one nvme path's directory and file, and the helpers of
 * swap_dir.c that make, reserve, clean and remove them. */
#ifndef ZN_NVME_SWAP_IMPL_H
#define ZN_NVME_SWAP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvme/swap.h"

#define ZN_SWAP_PREFIX "zinc-swap-"
#define ZN_SWAP_LOCK_NAME "lock"

struct zn_swap_path {
	char root[ZN_PATH_MAX];     /* the nvme path as given */
	char dir[ZN_PATH_MAX + 160]; /* root/zinc-swap-... */
	char file[ZN_PATH_MAX + 240];
	char file_name[64];
	int dir_fd;
	int lock_fd;
	int fd;
	int sig_slot; /* core/signals.h slot: removed on SIGINT/SIGTERM/SIGHUP; -1 = none */
	uint64_t file_bytes;
	struct zn_aio_file *af;
};

/* A size for messages: "512 bytes", "3.25 MiB", "80.13 GiB" (never "0.00 GiB"). */
const char *zn_swap_fmt_bytes(uint64_t bytes, char *buf, size_t size);

/* Removes stale swap directories under root (logs each). -EBUSY when a live process
 * holds the directory this run id and rank would use. */
int zn_swap_clean_stale(const char *root, const char *run_id, int rank);
/* Fails with -ENOSPC and "need X GiB on PATH, Y GiB free" when paths sharing a filesystem
 * together lack room for their files. */
int zn_swap_check_space(const struct zn_swap_path *paths, int count);
/* Makes p->dir (0700, locked) and p->file (0600, fallocated to p->file_bytes). Cleans up
 * after itself on failure. */
int zn_swap_path_make(struct zn_swap_path *p, const char *run_id, int rank, int index,
		      int count, int inject_fallocate_errno);
/* Closes and removes what zn_swap_path_make made; safe on a half-made path and on one
 * never made (descriptors and sig_slot -1, dir empty). */
void zn_swap_path_remove(struct zn_swap_path *p);

#endif
