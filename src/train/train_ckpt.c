/* zinc train's checkpoints and SIGTERM stop (train_ckpt.h, docs/checkpoint.md). */
#include "train/train_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/train_io.h"
#include "core/args.h"
#include "core/fault.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/signals.h"
#include "model/data.h"
#include "model/model.h"
#include "sched/ckpt.h"

int zn_train_ckpt_flag(int n, char **rest, int *i, struct zn_train_ckpt_opts *o)
{
	const char *a = rest[*i];

	if (!strcmp(a, "--save-dir") || !strcmp(a, "--resume") ||
	    !strcmp(a, "--resume-from-checkpoint")) {
		const char *v = zn_arg_value(n, rest, i);

		if (!v)
			return ZN_EUSAGE;
		if (!*v) {
			zn_error("%s: give a directory", a);
			return ZN_EUSAGE;
		}
		if (a[2] == 's')
			o->save_dir = v;
		else
			o->resume = v;
		return 1;
	}
	if (!strcmp(a, "--save-steps"))
		return zn_arg_int(n, rest, i, 1, 1 << 30, &o->save_steps) ? ZN_EUSAGE : 1;
	if (!strcmp(a, "--save-hf-steps"))
		return zn_arg_int(n, rest, i, 1, 1 << 30, &o->save_hf_steps) ? ZN_EUSAGE : 1;
	if (!strcmp(a, "--save-total-limit"))
		return zn_arg_int(n, rest, i, 1, 1 << 20, &o->keep) ? ZN_EUSAGE : 1;
	return 0;
}

void zn_train_ckpt_usage(FILE *f)
{
	fprintf(f,
		"  --save-dir DIR     checkpoints (every rank's fp32 master, m, v, the step, data\n"
		"                     position, schedule and config) as DIR/checkpoint-N, written\n"
		"                     atomically, DIR/latest last; after the last step and on\n"
		"                     SIGTERM (which finishes the step, saves and exits 0)\n"
		"  --save-steps N     also every N steps\n"
		"  --save-total-limit K  keep the newest K checkpoints (default all)\n"
		"  --save-hf-steps N  also the gathered weights, as --save-final writes them, in\n"
		"                     DIR/hf-<step> every N steps (not in each checkpoint)\n"
		"  --resume PATH      go on from a checkpoint: PATH is a --save-dir (its latest) or\n"
		"                     one checkpoint-N; --steps stays the total (alias\n"
		"                     --resume-from-checkpoint); other rank counts and stages\n"
		"                     re-shard (docs/checkpoint.md)\n");
}

void zn_train_ckpt_text(const struct zn_train_ckpt_opts *o, char *buf, size_t size)
{
	snprintf(buf, size, "train.save_dir=%s\ntrain.save_steps=%d\ntrain.save_total_limit=%d\n"
		 "train.resume=%s\ntrain.save_hf_steps=%d\n", o->save_dir ? "given" : "none",
		 o->save_steps, o->keep, o->resume ? "given" : "none", o->save_hf_steps);
}

/* An hf-N that will be written and exists already must be a directory, not a link to
 * one (zn_hf_save refuses it again when it writes: one planted during the run). */
static int check_hf_dirs(const struct zn_train_ckpt_opts *o)
{
	int dir_fd = open(o->save_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd, rc = 0;
	DIR *d;
	struct dirent *de;

	fd = dir_fd >= 0 ? dup(dir_fd) : -1;
	d = fd >= 0 ? fdopendir(fd) : NULL;
	while (d && !rc && (de = readdir(d))) {
		char *end, path[ZN_PATH_MAX + 300];
		long long k;

		if (strncmp(de->d_name, "hf-", 3))
			continue;
		k = strtoll(de->d_name + 3, &end, 10);
		if (*end || end == de->d_name + 3 || k <= 0 || k % o->save_hf_steps)
			continue;
		snprintf(path, sizeof(path), "%s/%s", o->save_dir, de->d_name);
		rc = zn_output_check_dir(path, "--save-hf-steps");
	}
	if (d)
		closedir(d);
	else if (fd >= 0)
		close(fd);
	if (dir_fd >= 0)
		close(dir_fd);
	return rc;
}

int zn_train_ckpt_check_opts(const struct zn_train_ckpt_opts *o, bool init_from, int rank,
			     int *lock_fd)
{
	*lock_fd = -1;
	if (o->resume && init_from) {
		zn_error("--resume and --init-from both give the starting weights: use one");
		return ZN_EUSAGE;
	}
	if ((o->save_steps || o->keep || o->save_hf_steps) && !o->save_dir) {
		zn_error("%s needs --save-dir DIR (where the checkpoints go)",
			 o->save_steps ? "--save-steps" : o->keep ? "--save-total-limit" :
			 "--save-hf-steps");
		return ZN_EUSAGE;
	}
	if (!o->save_dir || rank != 0)
		return 0;
	/* made now and locked for the run's life: a second run on it is refused here, before
	 * any work, instead of sharing .tmp-checkpoint-N with this one (rank 0 holds the
	 * lock for the job: its ranks share the directory by design) */
	if (zn_output_check_dir(o->save_dir, "--save-dir") ||
	    zn_output_dir_make(o->save_dir, "--save-dir") ||
	    zn_dir_lock(o->save_dir, "--save-dir", lock_fd))
		return ZN_EUSAGE;
	if (o->save_hf_steps && check_hf_dirs(o)) {
		close(*lock_fd);
		*lock_fd = -1;
		return ZN_EUSAGE;
	}
	return 0;
}

int zn_train_ckpt_begin(struct zn_train_ckpt *t, const struct zn_train_ckpt_opts *o,
			const struct zn_config *cfg, const struct zn_model *model,
			struct zn_comm *comm, int world, int seq)
{
	int rc;

	*t = (struct zn_train_ckpt){ .o = o, .comm = comm, .seq = seq };
	t->global_micro = (int64_t)world * cfg->train_micro_batch_size_per_gpu;
	t->config_json = zn_config_to_json(cfg);
	if (!t->config_json)
		return -ENOMEM;
	/* SIGTERM finishes the step (and saves); a second one, or SIGINT, stops at once.
	 * Several ranks without --save-dir keep the immediate clean-up: a rank that fails
	 * ends the job with MPI_Abort, whose SIGTERM reaches ranks blocked in a collective
	 * that would never finish their step (docs/checkpoint.md) */
	t->deferred = world == 1 || o->save_dir;
	if (t->deferred)
		zn_signals_defer(SIGTERM, true);
	if (!o->resume)
		return 0;
	/* every file verified before the engine exists: a bad checkpoint changes nothing */
	t->borrowed = o->resume_dir != NULL;
	t->resume = o->resume_dir;
	rc = t->resume ? 0 : zn_ckpt_open(&t->resume, o->resume, "--resume");
	if (!rc)
		rc = zn_ckpt_check(t->resume, model, t->global_micro, seq, t->config_json);
	if (!rc)
		rc = zn_ckpt_check_states(t->resume, cfg->optimizer.states);
	if (!rc)
		t->start = zn_ckpt_info(t->resume)->step;
	return rc;
}

int zn_train_ckpt_resumed(struct zn_train_ckpt *t, struct zn_engine *e,
			  struct zn_train_data *d)
{
	const struct zn_ckpt_info *in;
	int rc;

	/* the data file's identity: recorded with every save, compared on resume */
	if (t->o->save_dir || t->resume) {
		t->data_path = zn_data_path(d->d);
		rc = zn_ckpt_data_id(t->data_path, &t->data_id);
		if (rc)
			return rc;
	}
	if (!t->resume)
		return 0;
	in = zn_ckpt_info(t->resume);
	if (zn_engine_rank(e) == 0)
		zn_ckpt_check_data(in, t->data_path, &t->data_id);
	rc = zn_ckpt_restore(e, t->resume);
	if (!rc)
		zn_data_seek(d->d, (uint64_t)in->data_step);
	if (!rc && zn_engine_rank(e) == 0)
		printf("resumed from %s at step %" PRId64 " (saved by %d rank%s at ZeRO stage %d)\n",
		       in->path, in->step, in->world, in->world == 1 ? "" : "s", in->stage);
	return rc;
}

int zn_train_ckpt_save(struct zn_train_ckpt *t, struct zn_engine *e, struct zn_train_data *d,
		       const char *dir, char *where, size_t n)
{
	struct zn_ckpt_save_args a = {
		.dir = dir, .keep = t->o->keep,
		.data_step = (int64_t)zn_data_step(d->d), .global_micro = t->global_micro,
		.seq = t->seq, .config_json = t->config_json, .run_meta = t->o->run_meta,
		.data_path = t->data_path, .data_id = t->data_path ? &t->data_id : NULL,
		.extra_files = t->o->extra_files, .extra_ctx = t->o->extra_ctx,
	};

	return zn_ckpt_save(e, t->comm, &a, where, n);
}

/* an argument as the shell reads it back */
static size_t quoted(char *buf, size_t n, const char *a)
{
	size_t k = 0;
	bool plain = *a != 0;

	for (const char *p = a; *p; p++)
		plain = plain && (strchr("_./=:,+-@%", *p) || (*p >= '0' && *p <= '9') ||
				  (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'));
	if (plain)
		return (size_t)snprintf(buf, n, " %s", a);
	k = (size_t)snprintf(buf, n, " '");
	for (const char *p = a; *p && k < n; p++) {
		if (*p == '\'')
			k += (size_t)snprintf(buf + k, n - k, "'\\''");
		else
			k += (size_t)snprintf(buf + k, n - k, "%c", *p);
	}
	return k < n ? k + (size_t)snprintf(buf + k, n - k, "'") : k;
}

/* "zinc train <this run's arguments but --resume> --resume DIR": a command that goes on */
static void resume_hint(const struct zn_train_ckpt_opts *o, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "zinc train");

	for (int i = 1; i < o->argc && k < n; i++) {
		const char *a = o->argv[i];

		if (!strcmp(a, "--resume") || !strcmp(a, "--resume-from-checkpoint")) {
			i++;
			continue;
		}
		if (!strncmp(a, "--resume=", 9) || !strncmp(a, "--resume-from-checkpoint=", 25))
			continue;
		k += quoted(buf + k, n - k, a);
	}
	if (k < n)
		k += (size_t)snprintf(buf + k, n - k, " --resume");
	if (k < n)
		quoted(buf + k, n - k, o->save_dir);
}

static void stopped(const struct zn_train_ckpt *t, int64_t step, const char *where)
{
	char cmd[8192];

	if (t->o->save_dir) {
		resume_hint(t->o, cmd, sizeof(cmd));
		printf("stopped by %s after step %" PRId64 ": checkpoint %s; go on with:\n  %s\n",
		       t->stop_sig, step, where, cmd);
	} else if (t->o->save_adapter) {
		printf("stopped by %s after step %" PRId64 ": writing the adapter to %s "
		       "(--save-adapter; without --save-dir the optimizer state and data position "
		       "are not saved: go on from it with --init-adapter)\n", t->stop_sig, step,
		       t->o->save_adapter);
	} else {
		printf("stopped by %s after step %" PRId64 ": nothing saved (no --save-dir)\n",
		       t->stop_sig, step);
	}
}

int zn_train_ckpt_after_step(struct zn_train_ckpt *t, struct zn_engine *e,
			     struct zn_train_data *d, int64_t step, int steps, bool *stop)
{
	char where[ZN_PATH_MAX + 100];
	bool due;
	int rc;

	/* test hook: ZINC_TEST_SIGTERM_AT=STEP sends this process SIGTERM after that step
	 * (under mpirun to one rank: the agreement below stops every rank there) */
	const char *hook = zn_fault_value(ZN_FAULT_SIGTERM_AT);

	if (hook && *hook && strtoll(hook, NULL, 10) == step && t->deferred) {
		raise(SIGTERM);
		/* the signal watcher records it: wait for that (bounded) */
		for (int i = 0; i < 5000 && !zn_signals_pending(); i++)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	/* every rank stops after the same step: the first that saw SIGTERM decides */
	*stop = false;
	rc = t->deferred ? zn_ckpt_any(t->comm, zn_signals_pending() != 0, stop) : 0;
	if (rc)
		return rc;
	if (*stop)
		t->stop_sig = "SIGTERM";
	due = t->o->save_dir && (*stop || step >= steps ||
				 (t->o->save_steps && step % t->o->save_steps == 0));
	if (due) {
		rc = zn_train_ckpt_save(t, e, d, t->o->save_dir, where, sizeof(where));
		if (rc)
			return rc;
		if (zn_engine_rank(e) == 0)
			printf("checkpoint %s saved (step %" PRId64 ")\n", where, step);
	}
	if (*stop && zn_engine_rank(e) == 0)
		stopped(t, step, where);
	fflush(stdout);
	return 0;
}

bool zn_train_ckpt_hf_due(const struct zn_train_ckpt *t, int64_t step, char *buf, size_t n)
{
	if (!t->o || !t->o->save_hf_steps || step % t->o->save_hf_steps)
		return false;
	snprintf(buf, n, "%s/hf-%" PRId64, t->o->save_dir, step);
	/* before the first checkpoint the save directory may not exist yet (its parent was
	 * checked at start); any other problem is the save's to report */
	(void)mkdir(t->o->save_dir, 0777);
	return true;
}

void zn_train_ckpt_end(struct zn_train_ckpt *t)
{
	if (!t->borrowed)
		zn_ckpt_close(t->resume);
	t->resume = NULL;
	free(t->config_json);
	t->config_json = NULL;
}
