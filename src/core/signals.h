/* Files a run must not leave behind, and what SIGINT, SIGTERM and SIGHUP do about them.
 *
 * Modules that make large scratch files (the nvme swap stores) list them here while they
 * exist: zn_signals_track() names a private directory, zn_signals_track_file() the files
 * in it, zn_signals_untrack() forgets them once the module removed them itself. The list
 * lives in fixed static slots, so the signal handler can walk it without allocating.
 *
 * zn_signals_install() (the zinc command calls it once) sets handlers for SIGINT, SIGTERM
 * and SIGHUP that unlink every listed file, remove the listed directories (only when
 * empty: rmdir), write one line to stderr and then let the signal's default action end
 * the process (so the exit status still says "killed by SIGTERM"). Everything in the
 * handler is async-signal-safe (unlink, rmdir, write, sigaction, raise). It also removes
 * them at exit() (atexit), for exit paths that skip the owners' clean-up.
 * zn_signals_cleanup() does the same from normal code: a rank about to MPI_Abort calls it.
 *
 * Deferring (for "finish the step, save, then exit" on SIGTERM): after
 * zn_signals_defer(SIGTERM, true) a SIGTERM only records itself; the loop polls
 * zn_signals_pending(), finishes its step and exits normally. A second deferred signal
 * acts at once (clean-up, default action), so a stuck run can still be stopped.
 *
 *     zn_signals_install();
 *     int slot = zn_signals_track("/nvme/zinc-swap-x");
 *     zn_signals_track_file(slot, "/nvme/zinc-swap-x/stripe-0-of-1.bin");
 *     ...
 *     zn_signals_untrack(slot); // after removing them
 *
 * Thread-safe: track/untrack from any thread; the handler may run on any thread.
 */
#ifndef ZN_CORE_SIGNALS_H
#define ZN_CORE_SIGNALS_H

#include <stdbool.h>

#define ZN_SIGNALS_SLOTS 64       /* directories tracked at once */
#define ZN_SIGNALS_FILES 4        /* files per directory */
#define ZN_SIGNALS_PATH_MAX 1400  /* bytes per path, with the terminating NUL */

/* Installs the handlers (idempotent). Returns 0 or -errno (logged). */
int zn_signals_install(void);

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
