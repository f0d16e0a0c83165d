/* The fault hook of a checkpoint save (ckpt_impl.h zn_ckpt_fault_point): every counted
 * file operation (create, write, fsync, mkdir, rename, copy) calls it; with
 * ZINC_CKPT_FAIL_AT=K (core/fault.h, test builds) the K-th kills the process, or fails
 * with ZINC_CKPT_FAIL_ERRNO's error, so tests can stop a save at every point. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "core/log.h"
#include "sched/ckpt_impl.h"
#include "zinc.h"

static atomic_long fault_count;

/* ZINC_CKPT_FAIL_ERRNO's value (ENOSPC, EIO, EDQUOT), 0 when unset: the K-th operation
 * then fails with it instead of killing the process. */
static int fault_errno(void)
{
	static const struct {
		const char *name;
		int err;
	} known[] = { { "ENOSPC", ENOSPC }, { "EIO", EIO }, { "EDQUOT", EDQUOT } };
	const char *v = zn_fault_value(ZN_FAULT_CKPT_FAIL_ERRNO);

	for (size_t i = 0; v && i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(v, known[i].name))
			return known[i].err;
	return 0;
}

int zn_ckpt_fault_point(const char *op, const char *path)
{
	const char *v = zn_fault_value(ZN_FAULT_CKPT_FAIL_AT);
	long k;
	int err;

	if (!v || !*v)
		return 0; /* counted only while the hook is set */
	k = atomic_fetch_add(&fault_count, 1) + 1;
	if (strtol(v, NULL, 10) != k)
		return 0;
	err = fault_errno();
	if (err) {
		zn_error("ZINC_CKPT_FAIL_AT=%ld: %s %s fails: %s", k, op, path,
			 zn_strerror(-err));
		return -err;
	}
	fprintf(stderr, "ZINC_CKPT_FAIL_AT=%ld: killing the process at %s %s\n", k, op, path);
	fflush(stderr);
	raise(SIGKILL);
	return 0;
}
