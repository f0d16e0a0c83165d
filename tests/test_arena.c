/* The pinned host arena: budget, view alignment, NUMA binding (as far as this machine has
 * nodes), huge pages, and the mlock-refused path.
 *
 * The refused path is the real one, not a fault-injection knob: Criterion runs each test in
 * its own process, where the test lowers RLIMIT_MEMLOCK and, when it runs as root, drops
 * CAP_IPC_LOCK from its effective set with capset(2) (root otherwise ignores the limit). */
#include <criterion/criterion.h>
#include <errno.h>
#include <hwloc.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu/arena.h"
#include "cpu/topo.h"

#define MiB (1ull << 20)

static struct zn_arena *make(uint64_t bytes, int node, bool pin_required)
{
	struct zn_arena_config ac;
	struct zn_arena *a = NULL;

	zn_arena_config_init(&ac, NULL);
	ac.bytes = bytes;
	ac.numa_node = node;
	ac.pin_required = pin_required;
	cr_assert_eq(zn_arena_create(&a, &ac), 0, "arena of %llu bytes", (unsigned long long)bytes);
	cr_assert_not_null(a);
	return a;
}

static bool can_lock(uint64_t bytes)
{
	return zn_have_cap_ipc_lock() || zn_memlock_limit_bytes() >= bytes;
}

Test(arena, views_are_aligned_disjoint_and_within_budget)
{
	struct zn_arena *a = make(8 * MiB, -1, false);
	uint8_t *base = zn_arena_base(a);
	uint64_t aligns[] = { 0, 1, 64, 4096, 65536, 2 * MiB };
	uint8_t *views[6];
	uint64_t sizes[6] = { 1, 4095, 12345, 4096, 100000, 3 };

	cr_expect_eq(zn_arena_size(a), 8 * MiB);
	cr_expect_eq((uintptr_t)base % ZN_ARENA_MIN_ALIGN, 0);
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(zn_arena_alloc(a, sizes[i], aligns[i], (void **)&views[i]), 0);
		uint64_t al = aligns[i] > 4096 ? aligns[i] : 4096;

		cr_expect_eq((uintptr_t)views[i] % al, 0, "view %d at %p not %llu-aligned", i,
			     (void *)views[i], (unsigned long long)al);
		cr_expect(views[i] >= base && views[i] + sizes[i] <= base + zn_arena_size(a));
		if (i)
			cr_expect(views[i] >= views[i - 1] + sizes[i - 1], "view %d overlaps %d", i,
				  i - 1);
		memset(views[i], 0xa0 + i, sizes[i]);
	}
	for (int i = 0; i < 6; i++) /* nothing overwrote an earlier view */
		for (uint64_t j = 0; j < sizes[i]; j += 97)
			cr_assert_eq(views[i][j], 0xa0 + i);
	if (can_lock(8 * MiB))
		cr_expect(zn_arena_pinned(a) != ZN_ARENA_PIN_NONE, "arena not pinned");
	zn_arena_destroy(a);
	zn_arena_destroy(NULL);
}

Test(arena, budget_is_hard)
{
	struct zn_arena *a = make(1 * MiB + 100, -1, false); /* rounds down to whole pages */
	void *p, *q;

	cr_expect_eq(zn_arena_size(a), 1 * MiB);
	cr_assert_eq(zn_arena_alloc(a, 512 * 1024, 0, &p), 0);
	uint64_t used = zn_arena_used_bytes(a);

	cr_expect_eq(zn_arena_alloc(a, 512 * 1024 + 1, 0, &q), -ENOMEM);
	cr_expect_null(q);
	cr_expect_eq(zn_arena_used_bytes(a), used, "a refused view changed the used bytes");
	cr_expect_eq(zn_arena_alloc(a, UINT64_MAX - 100, 0, &q), -ENOMEM, "overflowing size");
	cr_expect_eq(zn_arena_alloc(a, 512 * 1024, 0, &q), 0, "exactly what is left must fit");
	cr_expect_eq(zn_arena_free_bytes(a), 0);
	cr_expect_eq(zn_arena_alloc(a, 1, 0, &q), -ENOMEM);
	zn_arena_reset(a);
	cr_expect_eq(zn_arena_used_bytes(a), 0);
	cr_expect_eq(zn_arena_alloc(a, 1 * MiB, 0, &q), 0, "after reset the whole budget");
	cr_expect_eq(q, zn_arena_base(a));
	zn_arena_destroy(a);
}

Test(arena, bad_requests)
{
	struct zn_arena *a = make(64 * 1024, -1, false);
	struct zn_arena_config ac;
	struct zn_arena *b = (struct zn_arena *)1;
	void *p;

	cr_expect_eq(zn_arena_alloc(a, 0, 0, &p), -EINVAL);
	cr_expect_eq(zn_arena_alloc(a, 16, 3000, &p), -EINVAL, "alignment not a power of two");
	zn_arena_destroy(a);
	zn_arena_config_init(&ac, NULL);
	ac.bytes = 100;
	cr_expect_eq(zn_arena_create(&b, &ac), -EINVAL, "budget below one page");
	cr_expect_null(b);
	ac.bytes = 64 * 1024;
	ac.numa_node = zn_topo_numa_count() + 5;
	cr_expect_eq(zn_arena_create(&b, &ac), -EINVAL, "nonexistent NUMA node");
	cr_expect_null(b);
}

/* Which NUMA node holds the arena's pages, by asking the kernel (move_pages via hwloc). */
static int pages_node(void *p, size_t bytes)
{
	hwloc_topology_t topo;
	hwloc_bitmap_t set;
	int node = -1;

	cr_assert_eq(hwloc_topology_init(&topo), 0);
	cr_assert_eq(hwloc_topology_load(topo), 0);
	set = hwloc_bitmap_alloc();
	if (hwloc_get_area_memlocation(topo, p, bytes, set, HWLOC_MEMBIND_BYNODESET) == 0 &&
	    hwloc_bitmap_weight(set) == 1)
		node = hwloc_bitmap_first(set);
	hwloc_bitmap_free(set);
	hwloc_topology_destroy(topo);
	return node;
}

Test(arena, bound_to_the_requested_numa_node)
{
	int count = zn_topo_numa_count();

	cr_assert(count >= 1);
	for (int node = 0; node < count && node < 4; node++) {
		if (!zn_topo_numa_exists(node))
			continue;
		struct zn_arena *a = make(4 * MiB, node, false);

		cr_expect_eq(zn_arena_numa_node(a), node);
		cr_expect_eq(pages_node(zn_arena_base(a), zn_arena_size(a)), node,
			     "pages of an arena bound to node %d are elsewhere", node);
		zn_arena_destroy(a);
	}
	struct zn_arena *a = make(4 * MiB, -1, false);

	cr_expect_eq(zn_arena_numa_node(a), zn_topo_current_numa_node(),
		     "auto node is not the calling thread's");
	zn_arena_destroy(a);
	if (count < 2)
		cr_log_info("one NUMA node here: binding to other nodes not exercised");
}

Test(arena, unknown_gpu_bus_id_falls_back_to_this_threads_node)
{
	struct zn_arena_config ac;
	struct zn_arena *a;

	zn_arena_config_init(&ac, NULL);
	ac.bytes = 64 * 1024;
	ac.pin_required = false;
	ac.gpu_pci_bus_id = "0000:ff:1f.7";
	ac.cuda = true; /* no GPU here (or no CUDA build): must fall back to mlock, not fail */
	cr_assert_eq(zn_arena_create(&a, &ac), 0);
	cr_expect_eq(zn_arena_numa_node(a), zn_topo_current_numa_node());
	if (can_lock(64 * 1024))
		cr_expect(zn_arena_pinned(a) != ZN_ARENA_PIN_NONE);
	zn_arena_destroy(a);
}

Test(arena, huge_pages_back_the_region)
{
	struct zn_cpu_info info;
	struct zn_arena *a;

	cr_assert_eq(zn_cpu_info_get(&info), 0);
	if (strcmp(info.thp, "always") && strcmp(info.thp, "madvise"))
		cr_skip_test("transparent huge pages are '%s' on this machine", info.thp);
	a = make(16 * MiB, -1, false);
	cr_expect_gt(zn_arena_huge_bytes(a), 0, "no huge page in a 16 MiB MADV_HUGEPAGE arena");
	cr_log_info("16 MiB arena: %llu bytes in huge pages, touched in %.3f s",
		    (unsigned long long)zn_arena_huge_bytes(a), zn_arena_populate_s(a));
	zn_arena_destroy(a);
}

Test(arena, config_from_zn_config)
{
	struct zn_config cfg;
	struct zn_arena_config ac;

	memset(&cfg, 0, sizeof(cfg));
	cfg.runtime.pinned_mem_bytes = 123 * MiB;
	cfg.runtime.numa_node = 1;
	cfg.runtime.device = ZN_DEVICE_CUDA;
	cfg.zero.offload_param.pin_memory = true;
	zn_arena_config_init(&ac, &cfg);
	cr_expect_eq(ac.bytes, 123 * MiB);
	cr_expect_eq(ac.numa_node, 1);
	cr_expect(ac.pin_required && ac.cuda && ac.huge_pages && ac.populate);
	cfg.zero.offload_param.pin_memory = false;
	zn_arena_config_init(&ac, &cfg);
	cr_expect(!ac.pin_required);
}

/* ---- mlock refused --------------------------------------------------------------- */

static void lose_memlock(rlim_t limit)
{
	struct rlimit rl = { limit, limit };
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0, "setrlimit: %s", strerror(errno));
	cr_assert_eq(syscall(SYS_capget, &hdr, data), 0, "capget: %s", strerror(errno));
	data[0].effective &= ~(1u << CAP_IPC_LOCK);
	data[0].permitted &= ~(1u << CAP_IPC_LOCK);
	cr_assert_eq(syscall(SYS_capset, &hdr, data), 0, "capset: %s", strerror(errno));
	if (zn_have_cap_ipc_lock())
		cr_skip_test("could not drop CAP_IPC_LOCK, so mlock cannot be refused");
}

/* Runs fn with stderr going to a file; returns what was written (caller frees). */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
	FILE *tmp = tmpfile();
	int saved = dup(2);
	char *text = calloc(1, 65536);

	cr_assert(tmp && saved >= 0 && text);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	size_t n = fread(text, 1, 65535, tmp);

	text[n] = '\0';
	fclose(tmp);
	return text;
}

struct refused {
	int rc_required, rc_optional;
	struct zn_arena *optional;
};

static void create_both(void *arg)
{
	struct refused *r = arg;
	struct zn_arena_config ac;
	struct zn_arena *a = (struct zn_arena *)1;

	zn_arena_config_init(&ac, NULL);
	ac.bytes = 4 * MiB;
	ac.pin_required = true;
	r->rc_required = zn_arena_create(&a, &ac);
	cr_expect_null(a);
	ac.pin_required = false;
	r->rc_optional = zn_arena_create(&r->optional, &ac);
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

Test(arena, mlock_refused_fails_or_falls_back)
{
	struct refused r = { 0 };
	char *err;

	lose_memlock(64 * 1024);
	err = capture_stderr(create_both, &r);
	cr_expect_eq(r.rc_required, -ENOMEM, "pin_memory true and mlock refused must fail");
	cr_expect_eq(r.rc_optional, 0, "pin_memory false must fall back to unpinned");
	cr_assert_not_null(r.optional);
	cr_expect_eq(zn_arena_pinned(r.optional), ZN_ARENA_PIN_NONE);
	void *p;

	cr_expect_eq(zn_arena_alloc(r.optional, 4 * MiB, 0, &p), 0, "unpinned arena still works");
	cr_expect_eq(count_of(err, "RLIMIT_MEMLOCK"), 1, "the refusal must be said once:\n%s", err);
	cr_expect(strstr(err, "RLIMIT_MEMLOCK is 64 KiB ("), "the message names the limit in "
		  "ulimit -l's unit:\n%s", err);
	cr_expect(strstr(err, "ulimit -l"), "the message says how to raise it:\n%s", err);
	zn_arena_destroy(r.optional);
	free(err);
}

Test(arena, default_budget_capped_by_memlock_limit)
{
	struct zn_arena_config ac;

	lose_memlock(4 * MiB); /* below the hard limit: no CAP_SYS_RESOURCE needed */
	zn_arena_config_init(&ac, NULL);
	ac.pin_required = true;
	cr_expect_eq(zn_arena_default_bytes(&ac), 4 * MiB);
	ac.pin_required = false; /* unpinned fallback allowed: half of available memory */
	uint64_t half = zn_mem_available_bytes() / 2;

	cr_expect(zn_arena_default_bytes(&ac) <= half &&
		  zn_arena_default_bytes(&ac) + 4 * MiB >= half);
}

/* The limit is per process: memory locked elsewhere leaves less than the limit, so the
 * up-front check passes and mlock itself refuses (the kernel's own answer). */
Test(arena, mlock_refused_by_the_kernel)
{
	static uint8_t other[48 * 1024] __attribute__((aligned(4096)));
	struct zn_arena_config ac;
	struct zn_arena *a;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("AddressSanitizer turns mlock into a no-op, so the kernel never refuses");
#endif
	lose_memlock(64 * 1024);
	cr_assert_eq(mlock(other, sizeof(other)), 0, "mlock of 48 KiB under a 64 KiB limit");
	zn_arena_config_init(&ac, NULL);
	ac.bytes = 32 * 1024;
	ac.pin_required = true;
	cr_expect_eq(zn_arena_create(&a, &ac), -ENOMEM);
	ac.pin_required = false;
	cr_assert_eq(zn_arena_create(&a, &ac), 0);
	cr_expect_eq(zn_arena_pinned(a), ZN_ARENA_PIN_NONE);
	zn_arena_destroy(a);
}

/* ---- topology ------------------------------------------------------------------- */

Test(topo, cpu_info_is_sane)
{
	struct zn_cpu_info info;
	char buf[4096];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	cr_assert_eq(zn_cpu_info_get(&info), 0);
	cr_expect(info.core_count >= 1 && info.cpu_count >= info.core_count,
		  "cores %d, cpus %d", info.core_count, info.cpu_count);
	cr_expect(info.numa_count >= 1 && info.numa_count == zn_topo_numa_count());
	cr_expect(info.mem_total_bytes > 0 && info.mem_available_bytes <= info.mem_total_bytes);
	cr_expect(strlen(info.model) > 0 && strcmp(info.simd_cpu, "") != 0);
	cr_expect(info.memlock_soft_bytes <= info.memlock_hard_bytes);
	cr_expect_eq(info.memlock_soft_bytes, zn_memlock_limit_bytes());
	zn_cpu_info_print(f, &info);
	fclose(f);
	cr_expect(strstr(buf, "numa nodes:") && strstr(buf, "memlock limit"), "%s", buf);
}

/* The memlock limit in ulimit -l's unit (KiB) and a human one; a small limit was "0.0 GiB". */
Test(topo, memlock_limit_in_its_unit)
{
	struct zn_cpu_info info;
	char buf[4096], t[64];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	cr_expect_str_eq(zn_memlock_text(UINT64_MAX, t, sizeof(t)), "unlimited");
	cr_expect_str_eq(zn_memlock_text(3ull << 30, t, sizeof(t)), "3145728 KiB (3.00 GiB)");
	lose_memlock(4 * MiB);
	cr_assert_eq(zn_cpu_info_get(&info), 0);
	zn_cpu_info_print(f, &info);
	fclose(f);
	cr_expect(strstr(buf, "memlock limit (ulimit -l): 4096 KiB (4.00 MiB)\n"), "%s", buf);
}

Test(topo, binds_openmp_threads_to_cores)
{
	cr_expect_eq(zn_topo_bind_omp_threads(-1, 2), 0);
	cr_expect_eq(zn_topo_bind_omp_threads(zn_topo_current_numa_node(), 3), 0,
		     "more threads than cores wrap round");
	cr_expect_neq(zn_topo_bind_omp_threads(zn_topo_numa_count() + 3, 1), 0,
		      "nonexistent node");
	cr_expect_eq(zn_topo_pci_numa_node("0000:ff:1f.7"), -ENOENT);
}
