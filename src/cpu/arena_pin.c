/* The arena's cuda pinning step with its fault-injection knob (cpu/arena_cuda.h). Built in
 * every configuration, so the fallback after a failed cudaHostRegister is tested on
 * machines without a GPU. */
#include <errno.h>
#include <stdlib.h>

#include "core/fault.h"
#include "core/log.h"
#include "cpu/arena_cuda.h"

int zn_arena_cuda_pin(void *ptr_h, size_t bytes)
{
	const char *inject = zn_fault_value(ZN_FAULT_ARENA_CUDA_REGISTER);
	int rc;

	if (inject && atoi(inject) > 0) {
		zn_warn("cudaHostRegister of %zu bytes failed by fault injection "
			"(ZINC_ARENA_FAIL_CUDA_REGISTER); pinning with mlock instead", bytes);
		return -EIO;
	}
	rc = zn_arena_cuda_register(ptr_h, bytes);
	if (rc && rc != -ENODEV && rc != -ENOSYS)
		zn_warn("pinned host arena: cudaHostRegister failed; pinning with mlock instead "
			"(copies stay correct)");
	return rc;
}
