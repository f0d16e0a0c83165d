/* Test helpers for tests that run the zinc binary (ZN_ZINC_EXE) as a child process and
 * read the files it writes. Header-only: each test executable includes it once. */
#ifndef ZN_TEST_CLI_CHILD_H
#define ZN_TEST_CLI_CHILD_H

#include <criterion/criterion.h>

#include <fcntl.h>
#include <stdarg.h>
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

/* Runs zinc with words (space-separated arguments) and asserts it exits 0; its stdout and
 * stderr go to log (NULL: /dev/null), env (NAME=VALUE or NULL) is added to its
 * environment. Returns its peak RSS in bytes, from the kernel (wait4). ASan's quarantine
 * is off in the child: under ASan freed blocks sit in it (256 MB by default) and count as
 * resident, so a sanitizer build measures what the plain one does. */
static inline long long zt_zinc_rss(const char *words, const char *log, const char *env)
{
	static char copy[8192];
	char *argv[160], *save = NULL;
	int argc = 0, status = 0;
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
		setenv("ASAN_OPTIONS", "quarantine_size_mb=0:thread_local_quarantine_size_kb=0", 1);
		if (env)
			putenv((char *)env);
		if (!freopen(log ? log : "/dev/null", "w", stdout) || dup2(fileno(stdout), 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zinc %s: status %d", words,
		  status);
	return (long long)ru.ru_maxrss * 1024; /* KiB on Linux */
}

/* Runs "env timeout 60 zinc <args>" through the shell (env: "VAR=value " prefixes or "";
 * args: printf format), stdin from /dev/null; stdout and stderr together in out. Returns
 * the exit code (124: cut at 60 s), or -1 when killed by a signal. */
static inline __attribute__((format(printf, 4, 5))) int zt_zinc_run(char *out, size_t size,
								      const char *env,
								      const char *fmt, ...)
{
	char args[4096], cmd[4600];
	va_list ap;
	size_t n;
	FILE *p;
	int status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%stimeout 60 %s %s 2>&1 </dev/null", env, ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs zinc with the NULL-terminated arguments from first on; its stdout goes to the file
 * out and its stderr to err (the same path: one file, both streams in the order written,
 * as 2>&1; NULL: /dev/null). Returns its exit status, 128 + the signal if one killed it. */
static inline int zt_zinc(const char *out, const char *err, const char *first, ...)
{
	char *argv[96];
	int argc = 0, status = 0;
	va_list ap;
	pid_t pid;

	argv[argc++] = (char *)ZN_ZINC_EXE;
	argv[argc++] = (char *)first;
	va_start(ap, first);
	for (char *a = va_arg(ap, char *); a; a = va_arg(ap, char *)) {
		cr_assert_lt(argc, 95, "too many arguments");
		argv[argc++] = a;
	}
	va_end(ap);
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fo = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644), fe;

		setenv("ASAN_OPTIONS", "quarantine_size_mb=0:thread_local_quarantine_size_kb=0", 1);
		fe = out && err && !strcmp(out, err) ? fo :
		     open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
