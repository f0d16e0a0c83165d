/* Machine topology through hwloc and /proc: NUMA nodes, cores, memory, thread placement.
 * Leaves memory binding to arena.c; this file only finds and places. */
#include "cpu/topo.h"

#include <errno.h>
#include <hwloc.h>
#include <inttypes.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/log.h"

#define ZN_CAP_IPC_LOCK 14 /* linux/capability.h */

static int topo_load(hwloc_topology_t *topo, bool with_pci)
{
	int rc;

	if (hwloc_topology_init(topo) < 0)
		return zn_check_errno(-1, "hwloc_topology_init", __FILE__, __LINE__);
	if (with_pci)
		hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	rc = hwloc_topology_load(*topo);
	if (rc < 0) {
		rc = zn_check_errno(-1, "hwloc_topology_load", __FILE__, __LINE__);
		hwloc_topology_destroy(*topo);
		return rc;
	}
	return 0;
}

/* Value of "key" in a "key<ws>: value" file such as /proc/cpuinfo or /proc/meminfo. */
static bool proc_value(const char *path, const char *key, char *out, size_t out_size)
{
	size_t klen = strlen(key);
	bool found = false;
	char line[4096];
	FILE *f = fopen(path, "r"); /* read-only scan for one key */

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) || (line[klen] != ':' && line[klen] != ' ' &&
						 line[klen] != '\t'))
			continue;
		char *p = strchr(line + klen, ':');

		if (!p)
			continue;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		p[strcspn(p, "\n")] = '\0';
		snprintf(out, out_size, "%s", p);
		found = true;
	}
	fclose(f);
	return found;
}

static uint64_t meminfo_bytes(const char *key)
{
	char v[64];

	if (!proc_value("/proc/meminfo", key, v, sizeof(v)))
		return 0;
	return strtoull(v, NULL, 10) * 1024; /* "NNN kB" */
}

uint64_t zn_mem_available_bytes(void)
{
	return meminfo_bytes("MemAvailable");
}

uint64_t zn_mem_total_bytes(void)
{
	return meminfo_bytes("MemTotal");
}

uint64_t zn_memlock_limit_bytes(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return rl.rlim_cur;
}

const char *zn_memlock_text(uint64_t bytes, char *buf, size_t size)
{
	double b = (double)bytes;

	if (bytes == UINT64_MAX)
		snprintf(buf, size, "unlimited");
	else if (bytes >= (1ull << 30))
		snprintf(buf, size, "%" PRIu64 " KiB (%.2f GiB)", bytes / 1024, b / 1073741824.0);
	else if (bytes >= (1ull << 20))
		snprintf(buf, size, "%" PRIu64 " KiB (%.2f MiB)", bytes / 1024, b / 1048576.0);
	else
		snprintf(buf, size, "%" PRIu64 " KiB", bytes / 1024);
	return buf;
}

bool zn_have_cap_ipc_lock(void)
{
	char v[64];

	if (!proc_value("/proc/self/status", "CapEff", v, sizeof(v)))
		return false;
	return (strtoull(v, NULL, 16) >> ZN_CAP_IPC_LOCK) & 1u;
}

static bool has_flag(const char *flags, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = flags; (p = strstr(p, name)); p += n)
		if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

static void simd_levels(struct zn_cpu_info *info)
{
	char flags[4096] = "";

	/* What the compiler was allowed to emit (-march), widest first. */
#if defined(__AVX512F__)
	snprintf(info->simd_built, sizeof(info->simd_built), "avx512");
#elif defined(__AVX2__)
	snprintf(info->simd_built, sizeof(info->simd_built), "avx2");
#elif defined(__SSE2__)
	snprintf(info->simd_built, sizeof(info->simd_built), "sse2");
#elif defined(__ARM_NEON)
	snprintf(info->simd_built, sizeof(info->simd_built), "neon");
#else
	snprintf(info->simd_built, sizeof(info->simd_built), "none");
#endif
	/* What the CPU has: x86 "flags", arm64 "Features". */
	if (!proc_value("/proc/cpuinfo", "flags", flags, sizeof(flags)))
		proc_value("/proc/cpuinfo", "Features", flags, sizeof(flags));
	const char *level = "none";

	if (has_flag(flags, "avx512f"))
		level = "avx512";
	else if (has_flag(flags, "avx2"))
		level = "avx2";
	else if (has_flag(flags, "sse2"))
		level = "sse2";
	else if (has_flag(flags, "sve"))
		level = "sve";
	else if (has_flag(flags, "asimd"))
		level = "neon";
	snprintf(info->simd_cpu, sizeof(info->simd_cpu), "%s", level);
	info->f16c = has_flag(flags, "f16c") || has_flag(flags, "fphp");
	info->avx512_bf16 = has_flag(flags, "avx512_bf16");
}

static void cpu_model(struct zn_cpu_info *info, hwloc_topology_t topo)
{
	if (proc_value("/proc/cpuinfo", "model name", info->model, sizeof(info->model)))
		return;
	hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
	const char *m = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;

	snprintf(info->model, sizeof(info->model), "%s", m ? m : "unknown");
}

int zn_cpu_info_get(struct zn_cpu_info *info)
{
	hwloc_topology_t topo;
	struct rlimit rl;
	int rc;

	memset(info, 0, sizeof(*info));
	rc = topo_load(&topo, false);
	if (rc)
		return rc;
	cpu_model(info, topo);
	info->core_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
	info->cpu_count = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	simd_levels(info);
	int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);

	for (int i = 0; i < nodes && i < ZN_CPU_MAX_NUMA; i++) {
		hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);

		info->numa_os_index[i] = (int)node->os_index;
		info->numa_mem_bytes[i] = node->attr->numanode.local_memory;
		info->numa_core_count[i] = hwloc_get_nbobjs_inside_cpuset_by_type(
			topo, node->cpuset, HWLOC_OBJ_CORE);
		info->numa_count++;
	}
	hwloc_topology_destroy(topo);
	info->mem_total_bytes = meminfo_bytes("MemTotal");
	info->mem_available_bytes = meminfo_bytes("MemAvailable");
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
		info->memlock_soft_bytes = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
		info->memlock_hard_bytes = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max;
	}
	info->cap_ipc_lock = zn_have_cap_ipc_lock();
	char thp[128] = "?";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r"); /* "[madvise]" */

	if (f) {
		if (fgets(thp, sizeof(thp), f)) {
			char *a = strchr(thp, '['), *b = a ? strchr(a, ']') : NULL;

			if (a && b) {
				*b = '\0';
				memmove(thp, a + 1, strlen(a + 1) + 1);
			}
		}
		fclose(f);
	}
	snprintf(info->thp, sizeof(info->thp), "%s", thp);
	return 0;
}

static void print_bytes(FILE *f, const char *key, uint64_t b)
{
	if (b == UINT64_MAX)
		fprintf(f, "%s: unlimited\n", key);
	else
		fprintf(f, "%s: %.1f GiB (%" PRIu64 " bytes)\n", key, b / 1073741824.0, b);
}

void zn_cpu_info_print(FILE *f, const struct zn_cpu_info *info)
{
	char lim[64];

	fprintf(f, "cpu: %s\n", info->model);
	fprintf(f, "cores: %d physical, %d logical\n", info->core_count, info->cpu_count);
	fprintf(f, "simd: cpu %s, build %s%s%s\n", info->simd_cpu, info->simd_built,
		info->f16c ? ", f16c" : "", info->avx512_bf16 ? ", avx512_bf16" : "");
	fprintf(f, "numa nodes: %d\n", info->numa_count);
	for (int i = 0; i < info->numa_count; i++)
		fprintf(f, "  node %d: %.1f GiB, %d cores\n", info->numa_os_index[i],
			info->numa_mem_bytes[i] / 1073741824.0, info->numa_core_count[i]);
	print_bytes(f, "memory total", info->mem_total_bytes);
	print_bytes(f, "memory available", info->mem_available_bytes);
	fprintf(f, "memlock limit (ulimit -l): %s\n",
		zn_memlock_text(info->memlock_soft_bytes, lim, sizeof(lim)));
	fprintf(f, "CAP_IPC_LOCK: %s\n", info->cap_ipc_lock ? "yes (memlock limit ignored)" : "no");
	fprintf(f, "transparent huge pages: %s\n", info->thp);
}

int zn_topo_pci_numa_node(const char *pci_bus_id)
{
	hwloc_topology_t topo;
	int rc = topo_load(&topo, true);

	if (rc)
		return rc;
	rc = -ENOENT;
	hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, pci_bus_id);
	hwloc_obj_t anc = dev ? hwloc_get_non_io_ancestor_obj(topo, dev) : NULL;

	if (anc && anc->nodeset) {
		int first = hwloc_bitmap_first(anc->nodeset);

		if (first >= 0)
			rc = first;
	}
	hwloc_topology_destroy(topo);
	return rc;
}

int zn_topo_current_numa_node(void)
{
	hwloc_topology_t topo;
	hwloc_bitmap_t cpus, nodes;
	int rc = topo_load(&topo, false);

	if (rc)
		return rc;
	cpus = hwloc_bitmap_alloc();
	nodes = hwloc_bitmap_alloc();
	rc = 0;
	if (cpus && nodes && hwloc_get_last_cpu_location(topo, cpus, HWLOC_CPUBIND_THREAD) == 0) {
		hwloc_cpuset_to_nodeset(topo, cpus, nodes);
		int first = hwloc_bitmap_first(nodes);

		if (first >= 0)
			rc = first;
	}
	hwloc_bitmap_free(nodes);
	hwloc_bitmap_free(cpus);
	hwloc_topology_destroy(topo);
	return rc;
}

int zn_topo_numa_count(void)
{
	hwloc_topology_t topo;
	int rc = topo_load(&topo, false);

	if (rc)
		return rc;
	rc = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
	hwloc_topology_destroy(topo);
	return rc;
}

bool zn_topo_numa_exists(int os_index)
{
	hwloc_topology_t topo;
	bool found;

	if (os_index < 0 || topo_load(&topo, false))
		return false;
	found = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)os_index) != NULL;
	hwloc_topology_destroy(topo);
	return found;
}

/* Cores to place threads on: those of node numa_node, or all of them. */
static int cores_of(hwloc_topology_t topo, int numa_node, hwloc_obj_t *cores, int max)
{
	hwloc_const_cpuset_t set = hwloc_topology_get_topology_cpuset(topo);
	int n = 0;

	if (numa_node >= 0) {
		hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)numa_node);

		if (!node)
			return -ENOENT;
		set = node->cpuset;
	}
	int total = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);

	for (int i = 0; i < total && n < max; i++)
		cores[n++] = hwloc_get_obj_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE, i);
	return n;
}

int zn_topo_bind_omp_threads(int numa_node, int thread_count)
{
	hwloc_topology_t topo;
	hwloc_obj_t cores[1024];
	int failed = 0, rc;

	rc = topo_load(&topo, false);
	if (rc)
		return rc;
	int ncores = cores_of(topo, numa_node, cores, 1024);

	if (ncores <= 0) {
		zn_warn("thread placement: NUMA node %d has no cores; threads left unbound",
			numa_node);
		hwloc_topology_destroy(topo);
		return ncores < 0 ? ncores : -ENOENT;
	}
	if (thread_count <= 0)
		thread_count = omp_get_max_threads();
#pragma omp parallel num_threads(thread_count) reduction(+ : failed)
	{
		hwloc_obj_t core = cores[omp_get_thread_num() % ncores];

		/* One PU per thread, not the whole core, so SMT siblings don't share a thread. */
		hwloc_bitmap_t pu = hwloc_bitmap_dup(core->cpuset);

		if (!pu) {
			failed++;
		} else {
			hwloc_bitmap_singlify(pu);
			if (hwloc_set_cpubind(topo, pu, HWLOC_CPUBIND_THREAD) < 0)
				failed++;
			hwloc_bitmap_free(pu);
		}
	}
	hwloc_topology_destroy(topo);
	if (failed) {
		zn_warn("thread placement: hwloc could not bind %d of %d threads; they run unbound",
			failed, thread_count);
		return -EPERM;
	}
	return 0;
}
