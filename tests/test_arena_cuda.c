/* The arena under the cuda device when cudaHostRegister fails for a reason other than "no
 * GPU" (issue 16, item 4): the arena warns and pins with mlock, and when mlock is refused
 * too it runs unpinned with a warning, even with pin_memory true. The failure is injected
 * with ZINC_ARENA_FAIL_CUDA_REGISTER=1, which works in every build, so this runs here.
 * Criterion runs each test in its own process, so the environment and rlimit changes stay
 * in the test. */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu/arena.h"
#include "cpu/topo.h"

#define MiB (1ull << 20)

struct made {
	bool pin_required;
	int rc;
	struct zn_arena *a;
};

static void create(void *arg)
{
	struct made *m = arg;
	struct zn_arena_config ac;

	zn_arena_config_init(&ac, NULL);
	ac.bytes = 4 * MiB;
	ac.cuda = true;
	ac.pin_required = m->pin_required;
	ac.populate = true;
	m->rc = zn_arena_create(&m->a, &ac);
}

/* runs create with stderr going to a file; returns what was written (caller frees) */
static char *create_capturing(struct made *m)
{
	FILE *tmp = tmpfile();
	int saved = dup(2);
	char *text = calloc(1, 65536);
	size_t n;

	cr_assert(tmp && saved >= 0 && text);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	create(m);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(text, 1, 65535, tmp);
	text[n] = '\0';
	fclose(tmp);
	return text;
}

static void lose_memlock(void)
{
	struct rlimit rl = { 0, 0 };
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

Test(arena_cuda, failed_register_falls_back_to_mlock)
{
	struct made m = { .pin_required = true };
	char *log;

	if (!zn_have_cap_ipc_lock() && zn_memlock_limit_bytes() < 4 * MiB)
		cr_skip_test("RLIMIT_MEMLOCK below 4 MiB: mlock of the arena would be refused");
	setenv("ZINC_ARENA_FAIL_CUDA_REGISTER", "1", 1);
	log = create_capturing(&m);
	cr_assert_eq(m.rc, 0, "a failed cudaHostRegister must not fail the arena: %s", log);
	cr_assert_eq(zn_arena_pinned(m.a), ZN_ARENA_PIN_MLOCK);
	cr_assert(strstr(log, "ZINC_ARENA_FAIL_CUDA_REGISTER"), "no warning: %s", log);
	cr_assert(strstr(log, "mlock"), "the warning does not say mlock: %s", log);
	zn_arena_destroy(m.a);
	free(log);
}

Test(arena_cuda, mlock_refused_too_runs_unpinned_with_a_warning)
{
	struct made m = { .pin_required = true };
	void *v = NULL;
	char *log;

#ifdef __SANITIZE_ADDRESS__
	cr_skip_test("AddressSanitizer turns mlock into a no-op that succeeds: it cannot be refused");
#endif
	lose_memlock();
	setenv("ZINC_ARENA_FAIL_CUDA_REGISTER", "1", 1);
	log = create_capturing(&m);
	cr_assert_eq(m.rc, 0, "pin_memory true must not stop training here: %s", log);
	cr_assert_eq(zn_arena_pinned(m.a), ZN_ARENA_PIN_NONE);
	cr_assert(strstr(log, "unpinned"), "no warning naming unpinned memory: %s", log);
	/* the memory is usable */
	cr_assert_eq(zn_arena_alloc(m.a, MiB, 0, &v), 0);
	memset(v, 0x5a, MiB);
	cr_assert_eq(((unsigned char *)v)[MiB - 1], 0x5a);
	zn_arena_destroy(m.a);
	free(log);
}

Test(arena_cuda, no_gpu_is_not_a_failure)
{
	struct made m = { .pin_required = false };
	char *log;

	/* without the knob: no CUDA build or no GPU here gives -ENOSYS/-ENODEV, quietly */
	unsetenv("ZINC_ARENA_FAIL_CUDA_REGISTER");
	log = create_capturing(&m);
	cr_assert_eq(m.rc, 0);
	if (zn_arena_pinned(m.a) == ZN_ARENA_PIN_CUDA)
		cr_skip_test("a GPU is here: cudaHostRegister worked");
	cr_assert(!strstr(log, "cudaHostRegister"), "a machine without a GPU was warned: %s", log);
	zn_arena_destroy(m.a);
	free(log);
}
