/* zinc train: data-parallel ZeRO training of a GPT-2 or Llama-family model (src/sched
 * engine, through the model interface src/model/model.h).
 *
 * Config from --config JSON and flags (--print-config prints the effective config and
 * exits); model from --model/--layers/..., --model-config FILE or --init-from PATH
 * (train/train_model.h); tokens from --data FILE; one line per steps_per_print steps
 * on rank 0, a progress bar in between when stdout is a terminal. The run itself is the
 * library's (train/trainer.h): this file is argv -> options -> checks -> those calls ->
 * printing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/train_flags.h"
#include "cli/train_setup.h"
#include "comm/comm.h"
#include "core/args.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/trace.h"
#include "model/hf_dir.h"
#include "sched/ckpt.h"
#include "train/train_hf.h"
#include "train/train_paths.h"
#include "train/train_recipe.h"
#include "train/trainer.h"
#include "zinc.h"

/* The settings of this command every rank must share, as agreement lines; the data files
 * by identity (size and sampled CRC, train_ranks.h), so ranks given different data stop
 * before any step. Returns 0, or a negative code when a data file cannot be read. */
static int own_text(const struct zn_train_cli *o, bool files, char *buf, size_t size)
{
	size_t k;
	int rc = 0;

	snprintf(buf, size, "train.steps=%d\ntrain.seq=%d\ntrain.init_from=%s\n"
		 "train.save_final=%s\ntrain.save_dtype=%s\ntrain.save_shard_size=%llu\n"
		 "train.print_config=%s\n", o->run.steps,
		 o->run.seq, o->run.init_from ? "given" : "none",
		 o->run.save_final ? "given" : "none",
		 o->run.save_dtype == ZN_DTYPE_BF16 ? "bf16" : "fp32",
		 (unsigned long long)o->run.shard_bytes,
		 o->print_config ? "true" : "false");
	k = strlen(buf);
	zn_train_ckpt_text(&o->run.ck, buf + k, size - k);
	k = strlen(buf);
	snprintf(buf + k, size - k, "train.shuffle=%s\ntrain.epochs=%d\n"
		 "train.eval_steps=%d\ntrain.eval_batches=%d\n",
		 o->run.ev.shuffle ? "true" : "false",
		 o->run.ev.epochs, o->run.ev.eval_steps, o->run.ev.eval_batches);
	k = strlen(buf);
	if (files)
		rc = zn_train_ranks_file_line("train.data", "--data", o->run.data, buf + k,
					      size - k);
	k = strlen(buf);
	if (files && !rc)
		rc = zn_train_ranks_file_line("train.val_data", "--val-data", o->run.ev.val_data,
					      buf + k, size - k);
	return rc;
}

/* Every file the run reads or writes, by identity (train_paths.h). */
static int check_paths(const struct zn_train_cli *o, const struct zn_config *cfg, int argc,
		       char **argv)
{
	const struct zn_monitor_config *m = &cfg->monitor;
	char csv[ZN_PATH_MAX + 300];

	snprintf(csv, sizeof(csv), "%s/%s", m->csv_output_path[0] ? m->csv_output_path :
		 "csv_monitor", m->csv_job_name);
	return zn_train_paths_check(&(struct zn_train_paths){
		.data = o->run.data, .val_data = o->run.ev.val_data,
		.model_config = o->run.model_config,
		.init_from = o->run.init_from, .init_adapter = o->run.lora.init_adapter,
		.resume = o->run.ck.resume, .save_final = o->run.save_final,
		.save_adapter = o->run.lora.save_adapter, .trace = o->run.trace,
		.save_dir = o->run.ck.save_dir,
		.csv_dir = m->csv_enabled ? csv : NULL, .save_hf = o->run.ck.save_hf_steps > 0,
		.argc = argc, .argv = argv });
}

/* The header, and why no step runs when none does. */
static void print_start(const struct zn_trainer *t)
{
	zn_train_print_header(stdout, &t->cfg, t->tm, t->e, t->eo.seq_len, t->steps);
	if (zn_engine_rank(t->e) != 0)
		return;
	if (t->ck.resume && t->ck.start >= t->steps)
		printf("the checkpoint is at step %lld, --steps %d: no step to train\n",
		       (long long)t->ck.start, t->steps);
	else if (t->steps == 0)
		printf("--steps 0: no step to train; the initial model is saved as asked\n");
}

/* Runs the steps (train/trainer.h) and prints them; a failure on one of several ranks
 * ends the job (train_ranks.h) before anything waits for the other ranks. */
static int train(const struct zn_config *cfg, const struct zn_train_model *tm,
		 struct zn_train_cli *o, struct zn_train_ranks *ranks)
{
	struct zn_trainer *t = calloc(1, sizeof(*t));
	int rc, code;

	if (!t) {
		zn_train_ranks_fail(ranks, 1);
		return 1;
	}
	/* SIGINT, SIGTERM and SIGHUP remove the swap stores before the process dies;
	 * train_ckpt.c defers SIGTERM to the end of the step */
	rc = zn_signals_install();
	t->exit_code = 1;
	if (!rc)
		rc = zn_train_begin(t, cfg, tm, &o->run, ranks);
	if (rc && !t->e) {
		code = t->exit_code;
		zn_train_end(t);
		free(t);
		zn_train_ranks_fail(ranks, code);
		return code;
	}
	if (!rc)
		print_start(t);
	while (!rc && zn_train_more(t)) {
		struct zn_step_stats st;

		rc = zn_train_step(t, &st);
		if (!rc && zn_engine_rank(t->e) == 0)
			zn_train_print_step(stdout, &st, t->steps, cfg->steps_per_print,
					    isatty(STDOUT_FILENO) && zn_engine_world(t->e) == 1);
		if (!rc)
			rc = zn_train_after_step(t, &st);
	}
	rc = zn_train_finish(t, rc);
	/* last, so its peak RSS covers the save too */
	if (!rc && zn_engine_rank(t->e) == 0) {
		zn_train_print_summary(stdout, &t->tot);
		zn_train_eval_summary(stdout, &t->val);
	}
	if (rc)
		zn_train_ranks_fail(ranks, 1);
	zn_train_end(t);
	free(t);
	return rc ? 1 : 0;
}

static int command(int argc, char **argv, struct zn_train_cli *o)
{
	struct zn_train_ranks ranks;
	struct zn_train_model tm;
	struct zn_config cfg;
	char own[2048];
	bool help = false, ok;
	int rc, rank = 0, save_lock = -1;

	memset(&tm, 0, sizeof(tm));
	ok = !zn_train_cli_parse(argc, argv, &cfg, &tm, o, &help, "zinc train", zn_train_usage);
	if (ok && help) {
		zn_train_usage(stdout);
		return 0;
	}
	/* a config that did not parse still agrees, within the default timeout */
	if (zn_train_ranks_start(&ranks, ok ? cfg.runtime.comm_timeout_s : 0))
		return ZN_EXIT_USAGE;
	/* --steps 0 runs no step, so no schedule is evaluated: an "auto" total_num_steps
	 * of 1 keeps a decay schedule valid */
	ok = ok && !zn_config_resolve_auto(&cfg, &(struct zn_config_derive){
				   .hidden = zn_train_model_width(&tm),
				   .steps = o->run.steps ? o->run.steps : 1,
				   .warmup_ratio = o->run.warmup_ratio });
	ok = ok && !zn_config_validate(&cfg, ranks.world);
	if (ok && !o->run.data && !o->print_config &&
	    (o->run.steps > 0 || o->run.ck.resume || o->run.ev.epochs)) {
		zn_error("zinc train: give the training tokens with --data FILE (e.g. "
			 "--data data/demo.txt)");
		ok = false;
	}
	if (ok && o->run.lora.merge && o->run.lora.init_adapter && !o->steps_given &&
	    !o->run.ev.epochs)
		zn_warn("--merge-adapter --init-adapter: zinc train trains --steps %d (the "
			"default) before it merges; to merge the adapter as it is: zinc merge "
			"--init-from BASE --adapter DIR --output OUT, or --steps 0", o->run.steps);
	if (ok && o->run.steps == 0 && !o->run.save_final && !o->run.lora.save_adapter &&
	    !o->run.lora.save_quantized && !o->print_config) {
		zn_error("zinc train --steps 0 trains nothing: give --save-final PATH (or "
			 "--save-adapter DIR, --save-quantized DIR) to write the initial model");
		ok = false;
	}
	if (ok && o->run.ev.epochs && o->steps_given) {
		zn_error("--epochs and --steps both set the run's length: give one");
		ok = false;
	}
	/* rank 0 writes --save-final: its destination is checked before any step, so no
	 * training is lost to a missing directory or a read-only mount */
	if (ok && o->run.save_final && !o->print_config &&
	    zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    rank == 0 && zn_train_hf_output_check(o->run.save_final))
		ok = false;
	if (ok && o->run.trace && !o->print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    rank == 0 && zn_output_check(o->run.trace, "--trace"))
		ok = false;
	if (ok && o->run.lora.save_adapter && !o->print_config &&
	    zn_comm_world_hint(&rank, NULL, NULL) == 0 && rank == 0 &&
	    zn_output_check_dir(o->run.lora.save_adapter, "--save-adapter"))
		ok = false;
	/* no output may be an input or another output (by identity), before anything is
	 * made; then the save directory is made and locked */
	if (ok && !o->print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 && rank == 0 &&
	    check_paths(o, &cfg, argc, argv))
		ok = false;
	if (ok && !o->print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    zn_train_ckpt_check_opts(&o->run.ck, o->run.init_from != NULL &&
				     !o->recipe.from_checkpoint &&
				     !(o->run.ck.resume_dir &&
				       zn_train_recipe_recorded(o->run.ck.resume_dir)), rank,
				     &save_lock))
		ok = false;
	/* Every rank checks it runs what rank 0 runs (and that all started) before any
	 * work: a rank that differs would hang or crash the job later. */
	if (own_text(o, ok && !o->print_config && ranks.world > 1, own, sizeof(own)))
		ok = false;
	rc = zn_train_ranks_agree(&ranks, &cfg, &tm, own, ok);
	if (rc) {
		zn_train_ranks_end(&ranks);
		if (save_lock >= 0)
			close(save_lock);
		return o->ckpt_bad ? 1 : ZN_EXIT_USAGE;
	}
	if (o->print_config) {
		char *json = zn_config_to_json(&cfg);

		zn_train_ranks_end(&ranks);
		if (!json)
			return 1;
		/* the JSON (a config a run accepts) on stdout; each value's origin on stderr */
		printf("%s\n", json);
		free(json);
		fprintf(stderr, "%-54s %-24s %s\n", "key", "value", "origin");
		zn_config_print_origins(stderr, &cfg);
		return 0;
	}
	rc = train(&cfg, &tm, o, &ranks);
	zn_train_ranks_end(&ranks);
	if (save_lock >= 0)
		close(save_lock); /* after the last save */
	return rc;
}

int zn_cmd_train(int argc, char **argv)
{
	struct zn_train_cli *o = calloc(1, sizeof(*o));
	int rc;

	if (!o)
		return 1;
	rc = command(argc, argv, o);
	zn_train_cli_release(o);
	free(o);
	return rc;
}
