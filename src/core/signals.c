/* The tracked scratch files and the SIGINT / SIGTERM / SIGHUP handlers (signals.h).
 *
 * A slot's state is 0 (free), 1 (being edited: the handler skips it) or 2 (live); each
 * file has its own live flag, set after its path is written. The handler reads only live
 * entries, so it never sees a half-written path.
 */
#include "core/signals.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

struct zn_sig_slot {
	atomic_int state;
	atomic_int file_live[ZN_SIGNALS_FILES];
	char dir[ZN_SIGNALS_PATH_MAX];
	char file[ZN_SIGNALS_FILES][ZN_SIGNALS_PATH_MAX];
};

static struct zn_sig_slot slots[ZN_SIGNALS_SLOTS];
static const int handled[] = { SIGINT, SIGTERM, SIGHUP };
static atomic_int deferred[3]; /* by index in handled[] */
static atomic_int pending;
static atomic_int installed;

static int sig_index(int sig)
{
	for (int i = 0; i < 3; i++)
		if (handled[i] == sig)
			return i;
	return -1;
}

/* Unlinks the live files of slot s and removes its directory. Async-signal-safe. */
static void remove_slot(struct zn_sig_slot *s)
{
	for (int f = 0; f < ZN_SIGNALS_FILES; f++)
		if (atomic_load(&s->file_live[f]))
			unlink(s->file[f]);
	rmdir(s->dir);
}

static void write_str(const char *s)
{
	ssize_t r = write(STDERR_FILENO, s, strlen(s));

	(void)r;
}

static void on_signal(int sig)
{
	int saved = errno, idx = sig_index(sig), expected = 0, removed = 0;
	struct sigaction dfl;

	if (idx >= 0 && atomic_load(&deferred[idx]) &&
	    atomic_compare_exchange_strong(&pending, &expected, sig)) {
		errno = saved;
		return; /* the first one: the loop finishes its step and exits */
	}
	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++) {
		if (atomic_load(&slots[i].state) == 2) {
			remove_slot(&slots[i]);
			removed++;
		}
	}
	write_str(sig == SIGINT ? "zinc: interrupted (SIGINT)" :
		  sig == SIGTERM ? "zinc: terminated (SIGTERM)" : "zinc: hung up (SIGHUP)");
	write_str(removed ? ": swap files removed, exiting\n" : ": exiting\n");
	/* The default action, so the parent sees death by this signal. It is blocked while
	 * this handler runs: raised now, it acts as the handler returns. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	raise(sig);
	errno = saved;
}

void zn_signals_cleanup(void)
{
	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++) {
		int live = 2;

		if (atomic_compare_exchange_strong(&slots[i].state, &live, 1)) {
			remove_slot(&slots[i]);
			for (int f = 0; f < ZN_SIGNALS_FILES; f++)
				atomic_store(&slots[i].file_live[f], 0);
			atomic_store(&slots[i].state, 0);
		}
	}
}

int zn_signals_install(void)
{
	struct sigaction sa, old;

	if (atomic_exchange(&installed, 1))
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaddset(&sa.sa_mask, handled[i]);
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
	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++) {
		int free_state = 0, rc;

		if (!atomic_compare_exchange_strong(&slots[i].state, &free_state, 1))
			continue;
		for (int f = 0; f < ZN_SIGNALS_FILES; f++)
			atomic_store(&slots[i].file_live[f], 0);
		rc = copy_path(slots[i].dir, dir);
		if (rc) {
			atomic_store(&slots[i].state, 0);
			return rc;
		}
		atomic_store(&slots[i].state, 2);
		return i;
	}
	zn_error("more than %d swap directories at once: %s would stay behind on a signal",
		 ZN_SIGNALS_SLOTS, dir);
	return -ENOSPC;
}

int zn_signals_track_file(int slot, const char *path)
{
	struct zn_sig_slot *s;

	if (slot < 0 || slot >= ZN_SIGNALS_SLOTS)
		return -EINVAL;
	s = &slots[slot];
	for (int f = 0; f < ZN_SIGNALS_FILES; f++) {
		int rc;

		if (atomic_load(&s->file_live[f]))
			continue;
		rc = copy_path(s->file[f], path);
		if (!rc)
			atomic_store(&s->file_live[f], 1);
		return rc;
	}
	zn_error("more than %d files in %s: %s would stay behind on a signal", ZN_SIGNALS_FILES,
		 s->dir, path);
	return -ENOSPC;
}

void zn_signals_untrack(int slot)
{
	if (slot < 0 || slot >= ZN_SIGNALS_SLOTS)
		return;
	atomic_store(&slots[slot].state, 1);
	for (int f = 0; f < ZN_SIGNALS_FILES; f++)
		atomic_store(&slots[slot].file_live[f], 0);
	atomic_store(&slots[slot].state, 0);
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

	for (int i = 0; i < ZN_SIGNALS_SLOTS; i++)
		n += atomic_load(&slots[i].state) == 2;
	return n;
}
