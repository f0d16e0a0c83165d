/* Test fault hooks (fault.h): the one table of their environment variables, and the only
 * place that reads them. What a hook's value means is up to the code that fails. */
#include "core/fault.h"

#include <stdlib.h>

static const char *const names[ZN_FAULT_COUNT] = {
	[ZN_FAULT_DEVICE_ALLOC] = "ZINC_DEVICE_FAIL_ALLOC",
	[ZN_FAULT_DEVICE_STREAM] = "ZINC_DEVICE_FAIL_STREAM",
	[ZN_FAULT_DEVICE_EVENT] = "ZINC_DEVICE_FAIL_EVENT",
	[ZN_FAULT_ARENA_ALLOC] = "ZINC_ARENA_FAIL_ALLOC",
	[ZN_FAULT_ARENA_CUDA_REGISTER] = "ZINC_ARENA_FAIL_CUDA_REGISTER",
	[ZN_FAULT_COMM_FAIL_OP] = "ZINC_COMM_FAIL_OP",
	[ZN_FAULT_COMM_STOP_OP] = "ZINC_COMM_STOP_OP",
	[ZN_FAULT_SWAP_FALLOCATE] = "ZINC_SWAP_FAIL_FALLOCATE",
	[ZN_FAULT_CKPT_FAIL_AT] = "ZINC_CKPT_FAIL_AT",
	[ZN_FAULT_CKPT_FAIL_ERRNO] = "ZINC_CKPT_FAIL_ERRNO",
	[ZN_FAULT_CKPT_NO_COPY] = "ZINC_CKPT_NO_COPY",
	[ZN_FAULT_OVERFLOW] = "ZINC_TEST_OVERFLOW",
	[ZN_FAULT_SIGTERM_AT] = "ZINC_TEST_SIGTERM_AT",
	[ZN_FAULT_NO_GNUPLOT] = "ZINC_NO_GNUPLOT",
	[ZN_FAULT_FA2_ONE_STAGE] = "ZINC_TEST_FA2_ONE_STAGE",
	[ZN_FAULT_LATE_EARLY_ADAMW] = "ZINC_TEST_LATE_EARLY_ADAMW",
};

const char *zn_fault_name(enum zn_fault f)
{
	if ((unsigned)f >= ZN_FAULT_COUNT)
		return "ZINC_(unknown fault hook)";
	return names[f];
}

#ifdef ZN_FAULT_HOOKS
bool zn_fault_hooks_built(void)
{
	return true;
}

const char *zn_fault_value(enum zn_fault f)
{
	const char *v;

	if ((unsigned)f >= ZN_FAULT_COUNT)
		return NULL;
	v = getenv(names[f]);
	return v && *v ? v : NULL;
}
#else
bool zn_fault_hooks_built(void)
{
	return false;
}
#endif
