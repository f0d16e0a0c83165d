/* CUDA page-locking of arena memory (cudaHostRegister), built only with CUDA.
 *
 * Without CUDA the stubs say "not available" (-ENOSYS) and the arena pins with mlock.
 * With CUDA, a machine without a driver or GPU is not an error: register returns -ENODEV
 * (without logging) and the arena falls back to mlock, so a CUDA build runs anywhere. Any
 * other failure (a driver limit, an IOMMU refusal) is not fatal either: a warning, then
 * mlock, then unpinned memory (zn_arena_cuda_pin).
 */
#ifndef ZN_CPU_ARENA_CUDA_H
#define ZN_CPU_ARENA_CUDA_H

#include <errno.h>
#include <stddef.h>

/* The arena's pinning step under cuda: cudaHostRegister, or a failure injected with
 * ZINC_ARENA_FAIL_CUDA_REGISTER=1 (any build, so the fallback is tested without a GPU).
 * Returns 0, -ENODEV/-ENOSYS (no GPU here or no CUDA build: not a failure), or -ENOMEM /
 * -EIO after a warning that says the arena falls back to mlock (arena.c does that, and to
 * unpinned memory when mlock is refused too). */
int zn_arena_cuda_pin(void *ptr_h, size_t bytes);

#ifdef ZN_HAVE_CUDA
/* Returns 0, -ENODEV (no driver or no GPU), or -ENOMEM/-EIO (not logged). */
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
