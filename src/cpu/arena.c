/* The pinned host arena: map, bind to a NUMA node, touch, pin, then hand out aligned views.
 * Leaves the GPU side of pinning to arena_cuda.c and topology questions to topo.c. */
#include "cpu/arena.h"

#include <errno.h>
#include <hwloc.h>
#include <inttypes.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/log.h"
#include "cpu/arena_cuda.h"
#include "cpu/topo.h"

#define HUGE_PAGE_BYTES (2u << 20)
#define PAGE_BYTES 4096u

struct zn_arena {
	uint8_t *map;       /* the mapping, HUGE_PAGE_BYTES-aligned */
	size_t map_bytes;
	uint64_t size;      /* budget: bytes usable by views, from map */
	uint64_t used;      /* bump offset */
	enum zn_arena_pin pin;
	int numa_node;
	double populate_s;
	bool lock_ready;
	pthread_mutex_t lock;
	int fail_left;      /* fault injection: the fail_left-th view from now fails (0 off) */
};

static bool refusal_said; /* "say so once" per process */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t round_down(uint64_t x, uint64_t a)
{
	return x / a * a;
}

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static void format_bytes(char *buf, size_t n, uint64_t b)
{
	if (b == UINT64_MAX)
		snprintf(buf, n, "unlimited");
	else if (b >= (1ull << 30))
		snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
	else if (b >= (1ull << 20))
		snprintf(buf, n, "%.2f MiB", b / 1048576.0);
	else
		snprintf(buf, n, "%" PRIu64 " bytes", b);
}

void zn_arena_config_init(struct zn_arena_config *ac, const struct zn_config *cfg)
{
	memset(ac, 0, sizeof(*ac));
	ac->numa_node = -1;
	ac->pin_required = true;
	ac->huge_pages = true;
	ac->populate = true;
	if (!cfg)
		return;
	ac->bytes = cfg->runtime.pinned_mem_bytes;
	ac->numa_node = cfg->runtime.numa_node;
	ac->pin_required = cfg->zero.offload_optimizer.pin_memory ||
			   cfg->zero.offload_param.pin_memory;
	ac->cuda = cfg->runtime.device == ZN_DEVICE_CUDA;
}

static const char raise_hint[] =
	"raise it with 'ulimit -l unlimited' (memlock in /etc/security/limits.conf, "
	"LimitMEMLOCK=infinity for systemd, --ulimit memlock=-1 for docker) or grant "
	"CAP_IPC_LOCK";

uint64_t zn_arena_default_bytes(const struct zn_arena_config *ac)
{
	uint64_t bytes = round_down(zn_mem_available_bytes() / 2, HUGE_PAGE_BYTES);
	uint64_t limit = zn_memlock_limit_bytes();
	char lim[32], want[32];

	if (!ac->pin_required || ac->cuda || limit >= bytes || zn_have_cap_ipc_lock())
		return bytes;
	format_bytes(lim, sizeof(lim), limit);
	format_bytes(want, sizeof(want), bytes);
	if (!__atomic_exchange_n(&refusal_said, true, __ATOMIC_RELAXED))
		zn_warn("pinned host memory: default budget (half of available memory, %s) capped "
			"at RLIMIT_MEMLOCK = %s; %s, or set --pinned-mem", want, lim, raise_hint);
	return round_down(limit, PAGE_BYTES);
}

/* Bytes this process has locked already (VmLck), which count against the same limit. */
static uint64_t locked_bytes(void)
{
	char line[256];
	unsigned long kb = 0;
	FILE *f = fopen("/proc/self/status", "r"); /* read VmLck */

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %lu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

static void say_refused(uint64_t bytes, int err, bool required)
{
	char lim[32], req[32], held[32];

	if (__atomic_exchange_n(&refusal_said, true, __ATOMIC_RELAXED))
		return;
	format_bytes(lim, sizeof(lim), zn_memlock_limit_bytes());
	format_bytes(req, sizeof(req), bytes);
	format_bytes(held, sizeof(held), locked_bytes());
	zn_log(required ? ZN_LOG_ERROR : ZN_LOG_WARN, __FILE__, __LINE__,
	       "pinned host memory: mlock of %s refused (%s): RLIMIT_MEMLOCK is %s (%s already "
	       "locked)%s; %s, or lower --pinned-mem%s", req, strerror(err), lim, held,
	       zn_have_cap_ipc_lock() ? "" : " and the process lacks CAP_IPC_LOCK", raise_hint,
	       required ? ", or set pin_memory false to run unpinned (slower copies)"
			: "; continuing with unpinned memory (pin_memory is false)");
}

/* -1 = auto: the GPU's node, else the calling thread's. */
static int pick_node(const struct zn_arena_config *cfg)
{
	if (cfg->numa_node >= 0) {
		if (zn_topo_numa_exists(cfg->numa_node))
			return cfg->numa_node;
		zn_error("--numa-node %d: no such NUMA node (this machine has %d, numbered from "
			 "0; see 'zinc info')", cfg->numa_node, zn_topo_numa_count());
		return -EINVAL;
	}
	if (cfg->gpu_pci_bus_id && cfg->gpu_pci_bus_id[0]) {
		int node = zn_topo_pci_numa_node(cfg->gpu_pci_bus_id);

		if (node >= 0)
			return node;
		zn_debug("arena: hwloc does not place GPU %s on a NUMA node; using this "
			 "thread's node", cfg->gpu_pci_bus_id);
	}
	int node = zn_topo_current_numa_node();

	return node < 0 ? 0 : node;
}

/* Maps bytes rounded up to whole huge pages, at a huge-page-aligned address. */
static int map_region(struct zn_arena *a, uint64_t bytes)
{
	size_t len = round_up(bytes, HUGE_PAGE_BYTES);
	size_t over = len + HUGE_PAGE_BYTES;
	uint8_t *p = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return zn_check_errno(-1, "mmap of the pinned host arena", __FILE__, __LINE__);
	uint8_t *start = (uint8_t *)round_up((uintptr_t)p, HUGE_PAGE_BYTES);

	if (start > p)
		munmap(p, start - p);
	if (p + over > start + len)
		munmap(start + len, p + over - (start + len));
	a->map = start;
	a->map_bytes = len;
	return 0;
}

static void bind_region(struct zn_arena *a)
{
	hwloc_topology_t topo;
	hwloc_bitmap_t set;

	if (hwloc_topology_init(&topo) < 0)
		return;
	if (hwloc_topology_load(topo) < 0)
		goto destroy_topo;
	set = hwloc_bitmap_alloc();
	if (!set)
		goto destroy_topo;
	hwloc_bitmap_only(set, (unsigned)a->numa_node);
	/* BIND, not STRICT: a full node spills over rather than failing the run. */
	if (hwloc_set_area_membind(topo, a->map, a->map_bytes, set, HWLOC_MEMBIND_BIND,
				   HWLOC_MEMBIND_BYNODESET) < 0)
		zn_warn("arena: binding %zu bytes to NUMA node %d failed (%s); pages go where "
			"they are first touched", a->map_bytes, a->numa_node, strerror(errno));
	hwloc_bitmap_free(set);
destroy_topo:
	hwloc_topology_destroy(topo);
}

/* First touch of every 4 KiB page by all threads: the kernel zeroes (and, with THP, fills
 * whole 2 MiB pages) here rather than in the first step that uses a view. */
static void populate(struct zn_arena *a, int thread_count)
{
	volatile uint8_t *p = a->map;
	int64_t pages = (int64_t)(a->size / PAGE_BYTES);
	double t0 = now_s();

	if (thread_count <= 0)
		thread_count = omp_get_max_threads();
#pragma omp parallel for num_threads(thread_count) schedule(static)
	for (int64_t i = 0; i < pages; i++)
		p[i * PAGE_BYTES] = 0;
	a->populate_s = now_s() - t0;
}

/* mlock would be refused for this size: say so now, before minutes of touching pages. */
static bool mlock_will_fail(const struct zn_arena_config *cfg, uint64_t bytes)
{
	return !cfg->cuda && !zn_have_cap_ipc_lock() && zn_memlock_limit_bytes() < bytes;
}

static int pin_region(struct zn_arena *a, const struct zn_arena_config *cfg)
{
	int rc;

	bool cuda_failed = false;

	if (cfg->cuda) {
		rc = zn_arena_cuda_pin(a->map, a->size);
		if (rc == 0) {
			a->pin = ZN_ARENA_PIN_CUDA;
			return 0;
		}
		cuda_failed = rc != -ENODEV && rc != -ENOSYS;
		if (!cuda_failed)
			zn_debug("arena: no CUDA driver or GPU; pinning with mlock");
	}
	int err = ENOMEM;

	if (!mlock_will_fail(cfg, a->size)) {
		if (mlock(a->map, a->size) == 0) {
			a->pin = ZN_ARENA_PIN_MLOCK;
			return 0;
		}
		err = errno;
	}

	if (cuda_failed) {
		/* training goes on: copies from unpinned memory are slower, not wrong */
		zn_warn("pinned host arena: mlock after the failed cudaHostRegister was refused "
			"too (%s); continuing with unpinned memory (slower, unoverlapped copies)",
			strerror(err));
		a->pin = ZN_ARENA_PIN_NONE;
		return 0;
	}
	say_refused(a->size, err, cfg->pin_required);
	if (cfg->pin_required)
		return -ENOMEM;
	a->pin = ZN_ARENA_PIN_NONE;
	return 0;
}

int zn_arena_create(struct zn_arena **out, const struct zn_arena_config *cfg)
{
	struct zn_arena *a;
	uint64_t bytes = cfg->bytes ? cfg->bytes : zn_arena_default_bytes(cfg);
	const char *fault_env;
	double pin_t0;
	int rc;

	*out = NULL;
	if (bytes < PAGE_BYTES) {
		zn_error("pinned host arena of %" PRIu64 " bytes: --pinned-mem must be at least "
			 "4 KiB", bytes);
		return -EINVAL;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->size = round_down(bytes, PAGE_BYTES); /* never above the budget */
	if (cfg->pin_required && mlock_will_fail(cfg, a->size)) {
		say_refused(a->size, ENOMEM, true);
		rc = -ENOMEM;
		goto destroy_arena;
	}
	rc = pick_node(cfg);
	if (rc < 0)
		goto destroy_arena;
	a->numa_node = rc;
	rc = pthread_mutex_init(&a->lock, NULL);
	if (rc) {
		rc = -rc;
		goto destroy_arena;
	}
	a->lock_ready = true;
	fault_env = getenv("ZINC_ARENA_FAIL_ALLOC");
	if (fault_env && *fault_env)
		zn_arena_inject_fault(a, atoi(fault_env));
	rc = map_region(a, a->size);
	if (rc)
		goto destroy_arena;
	if (cfg->huge_pages && madvise(a->map, a->map_bytes, MADV_HUGEPAGE))
		zn_debug("arena: MADV_HUGEPAGE refused (%s); using 4 KiB pages", strerror(errno));
	bind_region(a);
	if (cfg->populate)
		populate(a, cfg->thread_count);
	pin_t0 = now_s();
	rc = pin_region(a, cfg);
	if (rc)
		goto destroy_arena;
	/* the pinning time: scripts/device/gpu-check.sh reports a slow cudaHostRegister */
	zn_debug("arena: %" PRIu64 " bytes on NUMA node %d, %s in %.2f s, touched in %.2f s",
		 a->size, a->numa_node, zn_arena_pin_name(a->pin), now_s() - pin_t0, a->populate_s);
	*out = a;
	return 0;

destroy_arena:
	zn_arena_destroy(a);
	return rc;
}

void zn_arena_destroy(struct zn_arena *a)
{
	if (!a)
		return;
	if (a->pin == ZN_ARENA_PIN_CUDA)
		zn_arena_cuda_unregister(a->map);
	if (a->map) /* munmap also drops an mlock */
		munmap(a->map, a->map_bytes);
	if (a->lock_ready)
		pthread_mutex_destroy(&a->lock);
	free(a);
}

int zn_arena_alloc(struct zn_arena *a, uint64_t bytes, uint64_t align, void **out_h)
{
	char budget[32], req[32], left[32];
	uint64_t off;
	int rc = 0;

	*out_h = NULL;
	if (bytes == 0 || (align & (align - 1))) {
		zn_error("arena view of %" PRIu64 " bytes, alignment %" PRIu64 ": size must be > 0 "
			 "and alignment 0 or a power of two", bytes, align);
		return -EINVAL;
	}
	if (align < ZN_ARENA_MIN_ALIGN)
		align = ZN_ARENA_MIN_ALIGN;
	pthread_mutex_lock(&a->lock);
	off = round_up(a->used, align);
	if (a->fail_left > 0 && --a->fail_left == 0) {
		zn_error("pinned host arena: a view of %" PRIu64 " bytes failed by fault injection "
			 "(ZINC_ARENA_FAIL_ALLOC or zn_arena_inject_fault)", bytes);
		rc = -ENOMEM;
	} else if (off > a->size || bytes > a->size - off) {
		format_bytes(budget, sizeof(budget), a->size);
		format_bytes(req, sizeof(req), bytes);
		format_bytes(left, sizeof(left), a->size - a->used);
		zn_error("pinned host memory budget of %s (--pinned-mem) exceeded: a view of %s "
			 "does not fit in the %s left; raise --pinned-mem or offload less to "
			 "host memory", budget, req, left);
		rc = -ENOMEM;
	} else {
		a->used = off + bytes;
		*out_h = a->map + off;
	}
	pthread_mutex_unlock(&a->lock);
	return rc;
}

void zn_arena_inject_fault(struct zn_arena *a, int nth)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->fail_left = nth > 0 ? nth : 0;
	pthread_mutex_unlock(&a->lock);
}

void zn_arena_reset(struct zn_arena *a)
{
	pthread_mutex_lock(&a->lock);
	a->used = 0;
	pthread_mutex_unlock(&a->lock);
}

void *zn_arena_base(const struct zn_arena *a)
{
	return a->map;
}

uint64_t zn_arena_size(const struct zn_arena *a)
{
	return a->size;
}

uint64_t zn_arena_used_bytes(const struct zn_arena *a)
{
	return a->used;
}

uint64_t zn_arena_free_bytes(const struct zn_arena *a)
{
	return a->size - a->used;
}

enum zn_arena_pin zn_arena_pinned(const struct zn_arena *a)
{
	return a->pin;
}

int zn_arena_numa_node(const struct zn_arena *a)
{
	return a->numa_node;
}

double zn_arena_populate_s(const struct zn_arena *a)
{
	return a->populate_s;
}

uint64_t zn_arena_huge_bytes(const struct zn_arena *a)
{
	uintptr_t lo = (uintptr_t)a->map, hi = lo + a->map_bytes;
	uint64_t total = 0;
	bool inside = false;
	char line[512];
	FILE *f = fopen("/proc/self/smaps", "r"); /* per-mapping page statistics */

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, kb;

		if (sscanf(line, "%lx-%lx ", &start, &end) == 2)
			inside = start < hi && end > lo;
		else if (inside && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
			total += (uint64_t)kb * 1024;
	}
	fclose(f);
	return total;
}

const char *zn_arena_pin_name(enum zn_arena_pin pin)
{
	switch (pin) {
	case ZN_ARENA_PIN_MLOCK:
		return "mlock";
	case ZN_ARENA_PIN_CUDA:
		return "cudaHostRegister";
	case ZN_ARENA_PIN_NONE:
		break;
	}
	return "unpinned";
}
