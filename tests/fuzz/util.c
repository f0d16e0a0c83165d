/* Shared by every fuzz target: the temporary input file and the invariant check. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

static char file_path[4096];
static int file_fd = -1;

static void remove_file(void)
{
	if (file_fd >= 0)
		unlink(file_path);
}

const char *zn_fuzz_file(const uint8_t *data, size_t n)
{
	size_t done = 0;

	if (file_fd < 0) {
		const char *dir = getenv("TMPDIR");

		snprintf(file_path, sizeof(file_path), "%s/zinc-fuzz-XXXXXX",
			 dir && *dir ? dir : "/tmp");
		file_fd = mkstemp(file_path);
		if (file_fd < 0) {
			fprintf(stderr, "fuzz: cannot create %s: %s (set TMPDIR)\n", file_path,
				strerror(errno));
			abort();
		}
		atexit(remove_file);
	}
	if (ftruncate(file_fd, 0)) {
		fprintf(stderr, "fuzz: ftruncate %s: %s\n", file_path, strerror(errno));
		abort();
	}
	while (done < n) {
		ssize_t w = pwrite(file_fd, data + done, n - done, (off_t)done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fprintf(stderr, "fuzz: write %s: %s\n", file_path, strerror(errno));
			abort();
		}
		done += (size_t)w;
	}
	return file_path;
}

void zn_fuzz_check(int cond, const char *what, const char *file, int line)
{
	if (cond)
		return;
	fprintf(stderr, "fuzz: invariant broken at %s:%d: %s\n", file, line, what);
	abort();
}
