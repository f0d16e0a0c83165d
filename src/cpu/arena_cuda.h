/* CUDA page-locking of arena memory (cudaHostRegister), built only with CUDA.
 *
 * Without CUDA the stubs say "not available" (-ENOSYS) and the arena pins with mlock.
 * With CUDA, a machine without a driver or GPU is not an error: register returns -ENODEV
 * (without logging) and the arena falls back to mlock, so a CUDA build runs anywhere.
 */
#ifndef ZN_CPU_ARENA_CUDA_H
#define ZN_CPU_ARENA_CUDA_H

#include <errno.h>
#include <stddef.h>

#ifdef ZN_HAVE_CUDA
/* Returns 0, -ENODEV (no driver or no GPU), or -ENOMEM/-EIO (logged). */
int zn_arena_cuda_register(void *ptr_h, size_t bytes);
void zn_arena_cuda_unregister(void *ptr_h);
#else
static inline int zn_arena_cuda_register(void *ptr_h, size_t bytes)
{
	return -ENOSYS;
}

static inline void zn_arena_cuda_unregister(void *ptr_h)
{
}
#endif

#endif
