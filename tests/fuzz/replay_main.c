/* Corpus replay: feeds every file of the given folders (or the given files) to the fuzz
 * target's zn_fuzz_one, in name order, so each seed and each crash the fuzzers found is a
 * regression test of the normal suite. A file named ok-* must be accepted, bad-* refused;
 * other names (fuzzer finds, crash-*) must only not crash. Exits 1 on a wrong verdict or
 * when there is nothing to replay.
 *
 *     replay_safetensors tests/fuzz/corpus/safetensors
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "fuzz.h"

static int replay_file(const char *path, const char *name, int *count)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;
	int accepted, rc = 1;

	if (!f) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		return 1;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		goto out;
	accepted = zn_fuzz_one(buf, (size_t)n);
	(*count)++;
	if (!strncmp(name, "ok-", 3) && !accepted)
		fprintf(stderr, "replay: %s was refused but must be accepted\n", path);
	else if (!strncmp(name, "bad-", 4) && accepted)
		fprintf(stderr, "replay: %s was accepted but must be refused\n", path);
	else
		rc = 0;
	printf("replay: %-60s %s\n", name, accepted ? "accepted" : "refused");
out:
	if (rc && !buf)
		fprintf(stderr, "replay: cannot read %s\n", path);
	free(buf);
	fclose(f);
	return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_dir(const char *dir, int *count)
{
	struct dirent **list;
	int n = scandir(dir, &list, NULL, by_name), bad = 0;

	if (n < 0) {
		fprintf(stderr, "replay: cannot list %s\n", dir);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
		if (list[i]->d_name[0] != '.' && !stat(path, &st) && S_ISREG(st.st_mode))
			bad += replay_file(path, list[i]->d_name, count);
		free(list[i]);
	}
	free(list);
	return bad;
}

int main(int argc, char **argv)
{
	int bad = 0, count = 0;

	zn_log_set_level(ZN_LOG_ERROR);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		const char *base = strrchr(argv[i], '/');

		if (!stat(argv[i], &st) && S_ISDIR(st.st_mode))
			bad += replay_dir(argv[i], &count);
		else
			bad += replay_file(argv[i], base ? base + 1 : argv[i], &count);
	}
	if (!count) {
		fprintf(stderr, "replay: no input files given (usage: %s DIR|FILE...)\n", argv[0]);
		return 1;
	}
	printf("replay: %d files, %d wrong verdicts\n", count, bad);
	return bad ? 1 : 0;
}
