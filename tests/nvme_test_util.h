/* Shared by the nvme tests: a scratch directory that supports O_DIRECT, seeded random
 * fill, and aligned buffers. Test-only code, included by one test file each. */
#ifndef ZN_TESTS_NVME_TEST_UTIL_H
#define ZN_TESTS_NVME_TEST_UTIL_H

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "nvme/aio.h"

/* Makes a private directory on a filesystem that takes O_DIRECT: $ZN_TEST_NVME_DIR, the
 * current directory (ctest runs in the build tree) or /var/tmp. Skips the test with the
 * reason when none does. */
static inline void nvme_test_dir(char *out, size_t n)
{
	const char *cands[] = { getenv("ZN_TEST_NVME_DIR"), ".", "/var/tmp", "/tmp" };
	char reasons[4 * (ZN_PATH_MAX + 64)] = "";
	size_t i;

	for (i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		struct zn_nvme_path_probe p;
		char base[ZN_PATH_MAX];

		if (!cands[i] || !realpath(cands[i], base))
			continue;
		if (zn_nvme_path_probe(base, &p) || !p.o_direct) {
			size_t len = strlen(reasons);

			snprintf(reasons + len, sizeof(reasons) - len, " %s: %s;", base,
				 zn_strerror(p.o_direct_err));
			continue;
		}
		if ((size_t)snprintf(out, n, "%s/zn-test-XXXXXX", base) >= n)
			continue;
		cr_assert_not_null(mkdtemp(out), "mkdtemp %s", out);
		return;
	}
	cr_skip_test("no directory with O_DIRECT support:%s", reasons);
}

/* Removes dir and the plain files and directories directly below it. */
static inline void nvme_test_rmdir(const char *dir)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	char path[ZN_PATH_MAX + 300];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
			continue;
		if (e->d_type == DT_DIR)
			nvme_test_rmdir(path);
		else
			unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static inline uint64_t nvme_test_rand(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void nvme_test_fill(void *buf, size_t bytes, uint64_t seed)
{
	uint64_t *w = buf;
	size_t i;

	for (i = 0; i < bytes / 8; i++)
		w[i] = nvme_test_rand(&seed) | 1; /* never zero */
}

static inline void *nvme_test_alloc(size_t bytes)
{
	void *p = NULL;

	cr_assert_eq(posix_memalign(&p, ZN_AIO_ALIGN, bytes), 0);
	memset(p, 0xee, bytes);
	return p;
}

/* Asserts a == b over bytes, printing the first mismatching 8-byte word. */
static inline void nvme_test_compare(const void *a, const void *b, size_t bytes,
				     const char *what)
{
	const uint64_t *x = a, *y = b;
	size_t i;

	for (i = 0; i < bytes / 8; i++)
		if (x[i] != y[i])
			cr_assert_fail("%s: first mismatch at byte %zu: got %016llx, want %016llx",
				       what, i * 8, (unsigned long long)x[i],
				       (unsigned long long)y[i]);
}

/* Opens (creating) an O_DIRECT scratch file of `bytes` under dir. */
static inline int nvme_test_open(const char *dir, const char *name, uint64_t bytes,
				 char *path, size_t n)
{
	int fd;

	snprintf(path, n, "%s/%s", dir, name);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "open %s", path);
	if (bytes)
		cr_assert_eq(fallocate(fd, 0, 0, (off_t)bytes), 0, "fallocate %s", path);
	return fd;
}

/* Whether one line of the redirected stderr (cr_redirect_stderr; read once, on the first
 * call) holds both a and b (b NULL: a alone). */
static inline bool nvme_test_stderr_has(const char *a, const char *b)
{
	static char log[1 << 16];
	static size_t len;
	char *line, *save, copy[sizeof(log)];

	if (!len) {
		FILE *f = cr_get_redirected_stderr();

		fflush(stderr);
		len = fread(log, 1, sizeof(log) - 1, f);
		log[len] = 0;
	}
	memcpy(copy, log, len + 1);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strstr(line, a) && (!b || strstr(line, b)))
			return true;
	return false;
}

#endif
