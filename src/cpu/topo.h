/* The machine as the CPU tier sees it: NUMA nodes, cores, memory, SIMD level, memlock limit.
 *
 * Everything here goes through hwloc (topology, NUMA distances, binding) or /proc, and none
 * of it needs a GPU or the CUDA runtime: "nearest the GPU" is found from the GPU's PCI bus id
 * (cudaDeviceGetPCIBusId's string, e.g. "0000:17:00.0"), which the caller supplies.
 *
 *     struct zn_cpu_info info;
 *     if (zn_cpu_info_get(&info) == 0)
 *             zn_cpu_info_print(stdout, &info);   // for `zinc info`
 *
 * Each call loads its own hwloc topology (a few ms) and frees it: call these at start-up,
 * not per step. Thread-safe.
 */
#ifndef ZN_CPU_TOPO_H
#define ZN_CPU_TOPO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define ZN_CPU_MAX_NUMA 64

struct zn_cpu_info {
	char model[128];        /* "AMD EPYC 9654 96-Core Processor" */
	int core_count;         /* physical cores */
	int cpu_count;          /* logical CPUs (hwloc PUs) */
	char simd_built[32];    /* widest SIMD the build targets: "avx512", "avx2", "sse2", "neon" */
	char simd_cpu[32];      /* widest SIMD this CPU has, same names */
	bool f16c;              /* hardware fp16 conversion (x86 F16C; always on aarch64) */
	bool avx512_bf16;       /* x86 AVX512_BF16 */
	int numa_count;
	int numa_os_index[ZN_CPU_MAX_NUMA];
	uint64_t numa_mem_bytes[ZN_CPU_MAX_NUMA]; /* local memory per node */
	int numa_core_count[ZN_CPU_MAX_NUMA];
	uint64_t mem_total_bytes;     /* MemTotal */
	uint64_t mem_available_bytes; /* MemAvailable */
	uint64_t memlock_soft_bytes;  /* RLIMIT_MEMLOCK; UINT64_MAX = unlimited */
	uint64_t memlock_hard_bytes;
	bool cap_ipc_lock;            /* CAP_IPC_LOCK in effect: mlock ignores RLIMIT_MEMLOCK */
	char thp[16];                 /* transparent huge pages: "always", "madvise", "never", "?" */
};

/* Fills info. Returns 0, or -errno when hwloc cannot load the topology (logged). */
int zn_cpu_info_get(struct zn_cpu_info *info);

/* Prints info as "key: value" lines (the CPU part of `zinc info`). */
void zn_cpu_info_print(FILE *f, const struct zn_cpu_info *info);

/* Physical memory available now (MemAvailable), 0 if /proc/meminfo cannot be read. */
uint64_t zn_mem_available_bytes(void);
/* The machine's physical memory (MemTotal), 0 if /proc/meminfo cannot be read. */
uint64_t zn_mem_total_bytes(void);

/* RLIMIT_MEMLOCK soft limit (UINT64_MAX = unlimited) and whether CAP_IPC_LOCK is in effect,
 * i.e. how many bytes mlock may lock. */
uint64_t zn_memlock_limit_bytes(void);
/* A memlock limit in ulimit -l's unit, KiB, and from 1 MiB up in a larger one too: "64
 * KiB", "8192 KiB (8.00 MiB)", "unlimited". Returns buf. */
const char *zn_memlock_text(uint64_t bytes, char *buf, size_t size);
bool zn_have_cap_ipc_lock(void);

/* OS index of the NUMA node nearest the PCI device pci_bus_id ("0000:17:00.0"), i.e. the
 * first node of its closest non-I/O ancestor. Returns the node (>= 0), -ENOENT when hwloc
 * does not see the device, or another -errno. */
int zn_topo_pci_numa_node(const char *pci_bus_id);

/* OS index of the NUMA node of the CPU the calling thread runs on (0 on one-node machines). */
int zn_topo_current_numa_node(void);

/* Number of NUMA nodes, and whether node os_index exists (for validating --numa-node). */
int zn_topo_numa_count(void);
bool zn_topo_numa_exists(int os_index);

/* Binds the OpenMP team of thread_count threads (0 = omp_get_max_threads()) one per
 * physical core of NUMA node numa_node (-1 = all cores), round-robin when there are more
 * threads than cores; thread 0 is the calling thread, so its binding changes too. libgomp
 * keeps its pool, so later teams of up to thread_count threads keep these bindings.
 * Returns 0, or -errno when hwloc refuses (logged as a warning: binding is a hint). */
int zn_topo_bind_omp_threads(int numa_node, int thread_count);

#endif
