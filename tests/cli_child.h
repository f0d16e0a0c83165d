/* Test helpers for tests that run the zinc binary (ZN_ZINC_EXE) as a child process and
 * read the files it writes. Header-only: each test executable includes it once. */
#ifndef ZN_TEST_CLI_CHILD_H
#define ZN_TEST_CLI_CHILD_H

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The whole file at path, NUL-terminated; its length in *len when len is not NULL. */
static inline char *zt_read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data;
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = calloc((size_t)n + 1, 1);
	cr_assert_not_null(data, "out of memory");
	cr_assert_eq(fread(data, 1, (size_t)n, f), (size_t)n, "%s", path);
	fclose(f);
	if (len)
		*len = (size_t)n;
	return data;
}

/* Runs zinc with words (space-separated arguments); its stdout and stderr go to log (NULL:
 * /dev/null), env (NAME=VALUE or NULL) is added to its environment, and as_limit (bytes,
 * 0 = none; ignored under AddressSanitizer, whose shadow needs terabytes of address space)
 * caps its address space, so a run that would allocate far too much fails instead of
 * taking the machine's memory, and its CPU time to 240 s, so one that would run away ends
 * (SIGXCPU). Sets *status (waitpid's) and returns the child's peak RSS in
 * bytes, from the kernel (wait4). ASan's quarantine is off in the child: under ASan freed
 * blocks sit in it (256 MB by default) and count as resident, so a sanitizer build
 * measures what the plain one does; and ASan's allocator returns NULL for a request it
 * cannot serve instead of aborting, as malloc does. */
static inline long long zt_zinc_run(const char *words, const char *log, const char *env,
				    unsigned long long as_limit, int *status)
{
	static char copy[8192];
	char *argv[160], *save = NULL;
	int argc = 0;
	struct rusage ru;
	pid_t pid;

	cr_assert_lt(strlen(words), sizeof(copy), "arguments too long");
	strcpy(copy, words);
	argv[argc++] = (char *)ZN_ZINC_EXE;
	for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		cr_assert_lt(argc, 159, "too many arguments");
		argv[argc++] = w;
	}
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* and a failed malloc returns NULL as in the plain build, so the run's own
		 * message for it is what the test sees */
		setenv("ASAN_OPTIONS", "quarantine_size_mb=0:thread_local_quarantine_size_kb=0:"
		       "allocator_may_return_null=1", 1);
		if (env)
			putenv((char *)env);
#ifndef __SANITIZE_ADDRESS__
		if (as_limit) {
			struct rlimit rl = { as_limit, as_limit };

			if (setrlimit(RLIMIT_AS, &rl))
				_exit(125);
		}
#endif
		if (as_limit) {
			struct rlimit cpu = { 240, 240 };

			if (setrlimit(RLIMIT_CPU, &cpu))
				_exit(125);
		}
		if (!freopen(log ? log : "/dev/null", "w", stdout) || dup2(fileno(stdout), 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(wait4(pid, status, 0, &ru), pid);
	return (long long)ru.ru_maxrss * 1024; /* KiB on Linux */
}

/* zt_zinc_run without a limit, asserting that zinc exits 0; returns its peak RSS. */
static inline long long zt_zinc_rss(const char *words, const char *log, const char *env)
{
	int status = 0;
	long long rss = zt_zinc_run(words, log, env, 0, &status);

	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zinc %s: status %d", words,
		  status);
	return rss;
}

#endif
