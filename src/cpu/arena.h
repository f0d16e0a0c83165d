/* The pinned host arena: one pinned, NUMA-bound allocation per process, carved into views.
 *
 * The arena maps its whole size at create: 2 MiB-aligned anonymous memory, MADV_HUGEPAGE,
 * bound with hwloc to one NUMA node, touched once by all OpenMP threads (so the cost of
 * first-touching fresh pages is paid at start-up, not in the first step), then pinned:
 *   - cfg.cuda: cudaHostRegister (the CUDA backend's async copies need page-locked memory);
 *     when that fails because there is no driver or GPU, mlock instead;
 *   - otherwise mlock, which RLIMIT_MEMLOCK bounds unless the process has CAP_IPC_LOCK.
 * When pinning is refused the arena says so once, with the limit and how to raise it, and
 * then fails (cfg.pin_required) or carries on unpinned (warning).
 *
 * NUMA node: cfg.numa_node >= 0 is used as given (an error if the node does not exist);
 * -1 picks the node nearest cfg.gpu_pci_bus_id when that is set and hwloc sees the device,
 * else the node of the calling thread.
 *
 * Views: zn_arena_alloc is a bump allocator; every view starts on a multiple of
 * max(align, 4096) bytes, so any view can be an io_uring fixed buffer and an O_DIRECT
 * target. The arena's size is a hard budget: a request that does not fit returns -ENOMEM
 * and logs the budget, the request and what is left. Views are never freed one by one;
 * zn_arena_reset releases all of them (the engine allocates its views at start-up).
 * zn_arena_base/size give the whole region, e.g. to register it with io_uring once
 * (io_uring takes at most 1 GiB per iovec: register it in 1 GiB pieces).
 *
 *     struct zn_arena_config ac;
 *     struct zn_arena *arena;
 *     float *master_h;
 *     zn_arena_config_init(&ac, &cfg);           // from --pinned-mem, --numa-node, pin_memory
 *     ac.bytes = plan_pinned_bytes;               // what the plan needs (<= the budget)
 *     rc = zn_arena_create(&arena, &ac);
 *     if (!rc) rc = zn_arena_alloc(arena, n * 4, 0, (void **)&master_h);
 *     ...
 *     zn_arena_destroy(arena);                   // unpins and unmaps every view
 *
 * Threading: create/destroy from one thread; zn_arena_alloc takes a lock, the accessors
 * are plain reads.
 */
#ifndef ZN_CPU_ARENA_H
#define ZN_CPU_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinc.h"

#define ZN_ARENA_MIN_ALIGN 4096u

/* How the arena's memory ended up pinned. */
enum zn_arena_pin {
	ZN_ARENA_PIN_NONE = 0,  /* ordinary pageable memory (pinning refused, not required) */
	ZN_ARENA_PIN_MLOCK = 1, /* mlock */
	ZN_ARENA_PIN_CUDA = 2,  /* cudaHostRegister */
};

struct zn_arena_config {
	/* Size of the region and hard budget of its views. 0 = zn_arena_default_bytes(). */
	uint64_t bytes;
	int numa_node;              /* -1 = auto (nearest the GPU, else the calling thread's) */
	bool pin_required;          /* fail when pinning is refused (pin_memory: true) */
	bool cuda;                  /* the CUDA backend is in use: pin with cudaHostRegister */
	const char *gpu_pci_bus_id; /* GPU whose NUMA node to use, or NULL */
	bool huge_pages;            /* MADV_HUGEPAGE (default true) */
	bool populate;              /* touch every page at create (default true) */
	int thread_count;           /* threads that touch the memory; 0 = OpenMP default */
};

struct zn_arena;

/* Defaults from the config: bytes = runtime.pinned_mem_bytes (0 stays 0 = default size),
 * numa_node = runtime.numa_node, pin_required = offload_optimizer.pin_memory ||
 * offload_param.pin_memory, cuda = (runtime.device == ZN_DEVICE_CUDA), huge pages and
 * populate on. The caller sets cuda and gpu_pci_bus_id once it knows the device. cfg may be
 * NULL (then: default size, auto node, pin required). */
void zn_arena_config_init(struct zn_arena_config *ac, const struct zn_config *cfg);

/* The default budget: half of MemAvailable, rounded down to 2 MiB; when pinning by mlock
 * is required and RLIMIT_MEMLOCK is lower (and there is no CAP_IPC_LOCK), the limit instead,
 * with a warning (once) saying how to raise it. */
uint64_t zn_arena_default_bytes(const struct zn_arena_config *ac);

/* Returns 0; -EINVAL for a bad config (e.g. a NUMA node that does not exist: the message
 * lists those that do); -ENOMEM when the mapping fails or pinning is refused and required;
 * another -errno from the system. *out is NULL on failure. */
int zn_arena_create(struct zn_arena **out, const struct zn_arena_config *cfg);
void zn_arena_destroy(struct zn_arena *a); /* accepts NULL */

/* A view of bytes (> 0) starting at a multiple of max(align, 4096); align must be 0 or a
 * power of two. Returns 0, -EINVAL (bad align or bytes), or -ENOMEM when the budget would
 * be exceeded (logged: budget, request, free). The view's contents are unspecified
 * (zeros on first use). */
int zn_arena_alloc(struct zn_arena *a, uint64_t bytes, uint64_t align, void **out_h);

/* Fault injection, for tests that walk their callers' cleanup paths (as the device's
 * zn_device_inject_fault): the nth zn_arena_alloc from now (1 = the next one) fails once
 * with -ENOMEM, uses nothing and logs a line saying it was injected; nth 0 turns it off.
 * The environment variable ZINC_ARENA_FAIL_ALLOC=N does the same for every arena when it
 * is created (counting from its first view).
 *
 *     zn_arena_inject_fault(arena, 2); // the second view from now fails
 */
void zn_arena_inject_fault(struct zn_arena *a, int nth);

/* Releases every view (their memory stays mapped and pinned for the next ones). */
void zn_arena_reset(struct zn_arena *a);

void *zn_arena_base(const struct zn_arena *a);
uint64_t zn_arena_size(const struct zn_arena *a); /* the budget: bytes usable by views */
/* The size zn_arena_create gives an arena asked for bytes (pure: zinc estimate's). */
uint64_t zn_arena_size_for(uint64_t bytes);
uint64_t zn_arena_used_bytes(const struct zn_arena *a);
uint64_t zn_arena_free_bytes(const struct zn_arena *a);
enum zn_arena_pin zn_arena_pinned(const struct zn_arena *a);
int zn_arena_numa_node(const struct zn_arena *a);
double zn_arena_populate_s(const struct zn_arena *a); /* seconds spent touching at create */

/* Bytes of the region backed by transparent huge pages now (from /proc/self/smaps);
 * 0 when none or unknown. */
uint64_t zn_arena_huge_bytes(const struct zn_arena *a);

/* "mlock", "cudaHostRegister" or "unpinned" */
const char *zn_arena_pin_name(enum zn_arena_pin pin);

#endif
