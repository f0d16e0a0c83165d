/* Files a run must not leave behind, and what SIGINT, SIGTERM and SIGHUP do about them.
 *
 * Modules that make large scratch files (the nvme swap stores) list them here while they
 * exist: zn_signals_track() names a private directory, zn_signals_track_file() the files
 * in it, zn_signals_untrack() forgets them once the module removed them itself. Code that
 * makes such files holds zn_signals_hold() from before the first one exists until all are
 * tracked, so a signal never falls between "made" and "listed".
 *
 * zn_signals_install() (the zinc command calls it) sets handlers for the three signals
 * that only wake a watcher thread (through a pipe: async-signal-safe on whatever thread
 * the signal lands). The watcher takes the table's lock (so nothing new is made),
 * unlinks every listed file, removes the listed directories (rmdir: only when empty),
 * writes one line to stderr and lets the signal's default action end the process (the
 * exit status still says "killed by SIGTERM"). A signal the process ignored at install
 * (nohup's SIGHUP) stays ignored. The files also go at exit() (atexit), for exit paths
 * that skip their owners' clean-up, and at zn_signals_cleanup(): a rank about to
 * MPI_Abort calls it.
 *
 * Deferring (for "finish the step, save, then exit" on SIGTERM): after
 * zn_signals_defer(SIGTERM, true) a SIGTERM only records itself; the loop polls
 * zn_signals_pending(), finishes its step and exits normally. A second deferred signal
 * acts at once (clean-up, default action), so a stuck run can still be stopped.
 *
 *     zn_signals_install();
 *     zn_signals_hold();
 *     mkdir(dir, 0700);
 *     int slot = zn_signals_track(dir);
 *     zn_signals_track_file(slot, file); // before creating it
 *     fd = open(file, O_CREAT | O_EXCL ...);
 *     zn_signals_release();
 *     ...
 *     unlink(file); rmdir(dir); zn_signals_untrack(slot);
 *
 * Thread-safe: every function from any thread.
 */
#ifndef ZN_CORE_SIGNALS_H
#define ZN_CORE_SIGNALS_H

#include <stdbool.h>

#define ZN_SIGNALS_SLOTS 64       /* directories tracked at once */
#define ZN_SIGNALS_FILES 4        /* files per directory */
#define ZN_SIGNALS_PATH_MAX 1400  /* bytes per path, with the terminating NUL */

/* Starts the watcher and sets the handlers (idempotent). 0 or -errno (logged). */
int zn_signals_install(void);

/* The table's lock (recursive): held, a signal waits until it is released. */
void zn_signals_hold(void);
void zn_signals_release(void);

/* Tracks directory dir (absolute or relative to the working directory at the time of the
 * signal). Returns a slot >= 0, or -ENOSPC (all slots taken) / -ENAMETOOLONG (logged). */
int zn_signals_track(const char *dir);
/* Adds a file to remove before the slot's directory. 0, -ENOSPC or -ENAMETOOLONG. */
int zn_signals_track_file(int slot, const char *path);
/* Forgets a slot (accepts a negative one). */
void zn_signals_untrack(int slot);

/* Removes every tracked file and directory now and forgets them. */
void zn_signals_cleanup(void);

/* With on, sig (SIGINT, SIGTERM or SIGHUP) is recorded instead of acted on (see above). */
void zn_signals_defer(int sig, bool on);
/* The deferred signal received (the first), or 0. */
int zn_signals_pending(void);

/* Tracked directories now (tests). */
int zn_signals_tracked(void);

#endif
