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

/* dir/name in one of 8 rotating buffers (so a call may take several paths). */
static inline const char *zt_path(const char *dir, const char *name)
{
	static char p[8][4096];
	static int k;

	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

/* dir/name holding line n times (a text to memorize) */
static inline void zt_write_lines(const char *dir, const char *name, const char *line, int n)
{
	FILE *f = fopen(zt_path(dir, name), "w");

	cr_assert_not_null(f, "%s/%s", dir, name);
	for (int i = 0; i < n; i++)
		fputs(line, f);
	fclose(f);
}

/* dir/name's bytes, NUL-terminated (malloc'd) */
static inline char *zt_read_text(const char *dir, const char *name)
{
	size_t n;

	return zt_read_all(zt_path(dir, name), &n);
}

/* Runs the shell command fmt with its two %s as a and b; asserts it exits 0. */
static inline void zt_sh(const char *fmt, const char *a, const char *b)
{
	char cmd[8192];

	snprintf(cmd, sizeof(cmd), fmt, a, b);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* dir/a and dir/b hold the same bytes (asserted, naming a and b). */
static inline void zt_same_file(const char *dir, const char *a, const char *b)
{
	char pa[4096], pb[4096];
	size_t na, nb;
	char *x, *y;

	snprintf(pa, sizeof(pa), "%s/%s", dir, a);
	snprintf(pb, sizeof(pb), "%s/%s", dir, b);
	x = zt_read_all(pa, &na);
	y = zt_read_all(pb, &nb);
	cr_assert(na == nb && !memcmp(x, y, na), "%s and %s differ", a, b);
	free(x);
	free(y);
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
static inline long long zt_zinc_capped(const char *words, const char *log, const char *env,
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

/* zt_zinc_capped without a limit, asserting that zinc exits 0; returns its peak RSS. */
static inline long long zt_zinc_rss(const char *words, const char *log, const char *env)
{
	int status = 0;
	long long rss = zt_zinc_capped(words, log, env, 0, &status);

	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zinc %s: status %d", words,
		  status);
	return rss;
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

/* Runs `zinc args` through the shell, its stdout and stderr into out (NUL-terminated);
 * returns its exit status (-1: killed). No time limit, unlike zt_zinc_run. */
static inline int zt_zinc_out(const char *args, char *out, size_t size)
{
	char cmd[8192];
	size_t n;
	FILE *p;
	int status;

	cr_assert_lt(snprintf(cmd, sizeof(cmd), "%s %s 2>&1 </dev/null", ZN_ZINC_EXE, args),
		     (int)sizeof(cmd), "arguments too long");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The line of text that begins with prefix (at the start of a line) into line; asserts
 * there is one. */
static inline void zt_line(const char *text, const char *prefix, char *line, size_t size)
{
	const char *p = text;
	size_t n;

	while (p && strncmp(p, prefix, strlen(prefix))) {
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	cr_assert_not_null(p, "no line '%s...' in:\n%s", prefix, text);
	n = strcspn(p, "\n");
	cr_assert_lt(n, size);
	memcpy(line, p, n);
	line[n] = 0;
}

#endif
