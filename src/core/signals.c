/* The tracked scratch files and the SIGINT / SIGTERM / SIGHUP watcher (signals.h).
 *
 * zn_signals_install() sets a handler for the three signals that only writes the signal's
 * number to a pipe (async-signal-safe, whichever thread it lands on: libraries start
 * threads of their own before main), and starts a watcher thread that reads the pipe. The
 * watcher runs in normal context: it takes the table's mutex, removes every tracked entry
 * and, still holding it, lets the signal's default action end the process. Code that makes tracked files holds the same mutex (zn_signals_hold) from
 * before the first file exists until it is tracked, so a signal never falls between
 * "made" and "listed", and nothing new is made once the watcher has cleaned up.
 */
#include "core/signals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

struct zn_sig_slot {
	bool live;
	bool file_live[ZN_SIGNALS_FILES];
	char dir[ZN_SIGNALS_PATH_MAX];
	char file[ZN_SIGNALS_FILES][ZN_SIGNALS_PATH_MAX];
};

static struct zn_sig_slot slots[ZN_SIGNALS_SLOTS];
static pthread_mutex_t lock;
static pthread_once_t lock_once = PTHREAD_ONCE_INIT;
static const int handled[] = { SIGINT, SIGTERM, SIGHUP };
static atomic_int deferred[3]; /* by index in handled[] */
static atomic_int pending;
static atomic_int installed;
static int wake[2] = { -1, -1 }; /* the handler writes, the watcher reads */

static void lock_init(void)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&lock, &a);
	pthread_mutexattr_destroy(&a);
}

void zn_signals_hold(void)
{
	pthread_once(&lock_once, lock_init);
	pthread_mutex_lock(&lock);
}

void zn_signals_release(void)
{
	pthread_mutex_unlock(&lock);
}

static int sig_index(int sig)
{
	for (int i = 0; i < 3; i++)
		if (handled[i] == sig)
			return i;
	return -1;
}

/* Removes every live slot's files and directory and forgets them; returns how many.
 * Called with the lock held. */
static int remove_all(void)
{
	int n = 0;

	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++) {
		struct zn_sig_slot *s = &slots[i];

		size_t dn = strlen(s->dir);
		int dfd;

		if (!s->live)
			continue;
		/* files inside the directory through its own descriptor: were the directory
		 * swapped for a link, nothing elsewhere is removed (the name is unlinked
		 * itself, rmdir never follows one) */
		dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		for (int f = 0; f < ZN_SIGNALS_FILES; f++) {
			const char *name = s->file[f] + dn + 1;
			bool inside = !strncmp(s->file[f], s->dir, dn) && s->file[f][dn] == '/' &&
				      !strchr(name, '/');

			if (!s->file_live[f])
				continue;
			if (!inside)
				unlink(s->file[f]);
			else if (dfd >= 0)
				unlinkat(dfd, name, 0);
		}
		if (dfd >= 0)
			close(dfd);
		rmdir(s->dir);
		memset(s->file_live, 0, sizeof(s->file_live));
		s->live = false;
		n++;
	}
	return n;
}

static void write_str(const char *s)
{
	ssize_t r = write(STDERR_FILENO, s, strlen(s));

	(void)r;
}

/* Cleans up and ends the process by sig's default action. Does not return. */
static void die_of(int sig)
{
	sigset_t one;
	int removed;

	zn_signals_hold(); /* kept: nothing new is made from here on */
	removed = remove_all();
	write_str(sig == SIGINT ? "zinc: interrupted (SIGINT)" :
		  sig == SIGTERM ? "zinc: terminated (SIGTERM)" : "zinc: hung up (SIGHUP)");
	write_str(removed ? ": swap files removed, exiting\n" : ": exiting\n");
	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig); /* not reached */
}

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t r = write(wake[1], &b, 1);

	(void)r;
	errno = saved;
}

static void *watch(void *arg)
{
	(void)arg;
	for (;;) {
		int sig, idx, expected = 0;
		unsigned char b;
		ssize_t r = read(wake[0], &b, 1);

		if (r != 1)
			continue; /* EINTR */
		sig = b;
		idx = sig_index(sig);
		/* deferred: the first one only records itself; the loop finishes its step */
		if (idx >= 0 && atomic_load(&deferred[idx]) &&
		    atomic_compare_exchange_strong(&pending, &expected, sig))
			continue;
		die_of(sig);
	}
	return NULL;
}

void zn_signals_cleanup(void)
{
	zn_signals_hold();
	remove_all();
	zn_signals_release();
}

int zn_signals_install(void)
{
	struct sigaction sa, old;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (atomic_exchange(&installed, 1))
		return 0;
	pthread_once(&lock_once, lock_init);
	if (pipe2(wake, O_CLOEXEC))
		return zn_check_errno(-1, "pipe2 (signal watcher)", __FILE__, __LINE__);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, watch, NULL);
	pthread_attr_destroy(&attr);
	if (rc) {
		zn_error("starting the signal watcher: %s", zn_strerror(-rc));
		return -rc;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++) {
		/* A signal the caller ignores (nohup's SIGHUP) stays ignored. */
		if (sigaction(handled[i], NULL, &old))
			return zn_check_errno(-1, "sigaction", __FILE__, __LINE__);
		if (old.sa_handler == SIG_IGN)
			continue;
		if (sigaction(handled[i], &sa, NULL))
			return zn_check_errno(-1, "sigaction", __FILE__, __LINE__);
	}
	if (atexit(zn_signals_cleanup)) {
		zn_error("atexit failed: swap files may stay behind on an error exit");
		return -ENOMEM;
	}
	return 0;
}

static int copy_path(char *dst, const char *src)
{
	size_t n = strlen(src);

	if (n >= ZN_SIGNALS_PATH_MAX) {
		zn_error("path too long to remove on a signal (%zu bytes, at most %d): %s", n,
			 ZN_SIGNALS_PATH_MAX - 1, src);
		return -ENAMETOOLONG;
	}
	memcpy(dst, src, n + 1);
	return 0;
}

int zn_signals_track(const char *dir)
{
	int rc = -ENOSPC;

	zn_signals_hold();
	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++) {
		if (slots[i].live)
			continue;
		rc = copy_path(slots[i].dir, dir);
		if (!rc) {
			memset(slots[i].file_live, 0, sizeof(slots[i].file_live));
			slots[i].live = true;
			rc = i;
		}
		break;
	}
	zn_signals_release();
	if (rc == -ENOSPC)
		zn_error("more than %d swap directories at once: %s would stay behind on a "
			 "signal", ZN_SIGNALS_SLOTS, dir);
	return rc;
}

int zn_signals_track_file(int slot, const char *path)
{
	struct zn_sig_slot *s;
	int rc = -ENOSPC;

	if (slot < 0 || slot >= ZN_SIGNALS_SLOTS)
		return -EINVAL;
	s = &slots[slot];
	zn_signals_hold();
	for (int f = 0; f < ZN_SIGNALS_FILES; f++) {
		if (s->file_live[f])
			continue;
		rc = copy_path(s->file[f], path);
		if (!rc)
			s->file_live[f] = true;
		break;
	}
	zn_signals_release();
	if (rc == -ENOSPC)
		zn_error("more than %d files in %s: %s would stay behind on a signal",
			 ZN_SIGNALS_FILES, s->dir, path);
	return rc;
}

void zn_signals_untrack(int slot)
{
	if (slot < 0 || slot >= ZN_SIGNALS_SLOTS)
		return;
	zn_signals_hold();
	memset(slots[slot].file_live, 0, sizeof(slots[slot].file_live));
	slots[slot].live = false;
	zn_signals_release();
}

void zn_signals_defer(int sig, bool on)
{
	int idx = sig_index(sig);

	if (idx >= 0)
		atomic_store(&deferred[idx], on ? 1 : 0);
}

int zn_signals_pending(void)
{
	return atomic_load(&pending);
}

int zn_signals_tracked(void)
{
	int n = 0;

	zn_signals_hold();
	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++)
		n += slots[i].live;
	zn_signals_release();
	return n;
}
