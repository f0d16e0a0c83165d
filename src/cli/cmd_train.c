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
#include "cli/flags.h"
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

/* zinc train's options: the run's (train/trainer.h) and the command line's own */
struct train_opts {
	struct zn_train_opts run;
	bool print_config;
	bool steps_given;
	/* who reads the flags, for "unknown option": zinc train, or zinc estimate */
	const char *cmd;
	void (*help)(FILE *f);
	struct zn_train_recipe recipe;    /* how the model is made (train_recipe.h) */
	char run_meta[16384];             /* ... as the checkpoints record it */
	bool ckpt_bad;                    /* --resume could not be opened */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc train [--config ds.json] [flags] --data FILE [--steps N]\n\n"
		"  --data FILE        tokens: an llm.c .bin token file (GPT-2 or Llama 3), or UTF-8\n"
		"                     text, one token per byte (needs --vocab >= 256); other files\n"
		"                     need --data-format text\n"
		"  --seq T            sequence length (default: the model's --seq)\n"
		"  --steps N          optimizer steps (default 20; 0: none, --save-final and\n"
		"                     --save-adapter write the initial model, --data optional)\n"
		"  --warmup-ratio R   warmup steps = ceil(steps x R), as the Hugging Face Trainer's\n"
		"                     (sets warmup_num_steps; not with --warmup-steps)\n"
		"  --dtype fp32|bf16|fp16  bf16/fp16: parameters stored and communicated as\n"
		"                     bf16/fp16, fp32 master weights (same as --bf16, --fp16;\n"
		"                     fp16 adds DeepSpeed's loss scaling); bf16 GEMMs with fp32\n"
		"                     accumulation unless --compute-dtype fp32\n"
		"  --init-from PATH   start from a Hugging Face model directory (config.json and\n"
		"                     model.safetensors or shards + index) or a .safetensors\n"
		"                     file; its config (or shapes) define the model\n"
		"  --save-final PATH  save the final weights (fp32 master): PATH.safetensors one\n"
		"                     file, any other PATH a Hugging Face directory\n"
		"  --save-shard-size SIZE  largest shard of a saved directory (default 5GB;\n"
		"                     500MB, 2GiB, ...)\n"
		"  --save-dtype fp32|bf16  dtype of the saved tensors (default fp32)\n"
		"  --trace FILE       write a Chrome trace-event JSON of the steps (rank 0): one\n"
		"                     track per stream, NVMe direction and CPU AdamW worker; open\n"
		"                     it in ui.perfetto.dev (docs/trace.md)\n"
		"  --trace-steps A-B  trace only steps A to B (A, A-B or A-; default all)\n"
		"  --print-config     check the config as a run does, print it as JSON (stdout)\n"
		"                     and each value with its origin (default, config, flag,\n"
		"                     auto) on stderr, and exit\n"
		"  model: --model NAME  GPT-2: tiny|small|gpt2|gpt2-medium|gpt2-large|gpt2-xl\n"
		"                     (default small); Llama: llama-tiny|tinyllama-1.1b|\n"
		"                     llama-3.2-1b|llama-3.2-3b|llama-3-8b|llama-3-70b|\n"
		"                     llama-2-7b|llama-2-13b\n"
		"         --model-config FILE  a Hugging Face config.json (gpt2, llama, qwen2,\n"
		"                     mistral): its shapes, seeded initialization\n"
		"         GPT-2: --layers N --heads N --d-model N --seq N --vocab N\n"
		"         --padded-vocab N; Llama: --layers --heads --kv-heads --d-model\n"
		"         --head-dim --intermediate --seq --vocab N, --tied-embeddings true|false\n"
		"  LoRA (docs/lora.md): --lora-r R --lora-alpha A (default R) --lora-targets\n"
		"         c_attn,c_proj,c_fc | q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,\n"
		"         down_proj  --lora-dropout P  --use-rslora  --init-adapter DIR\n"
		"         --save-adapter DIR (PEFT files)  --merge-adapter (with --save-final\n"
		"         FILE.safetensors: the merged model)\n");
	zn_train_ckpt_usage(f);
	fputs(zn_train_eval_usage, f);
	fprintf(f, "\n");
	zn_config_print_flags_help(f);
}

/* Takes this command's own flags out of rest; the others stay (in order) for the model. */
static int own_flags(int *n, char **rest, struct train_opts *o, struct zn_config *cfg)
{
	int m = 0, rc = 0;

	for (int i = 0; !rc && i < *n; i++) {
		const char *a = rest[i];
		int ev = zn_train_eval_flag(*n, rest, &i, &o->run.ev);

		if (ev < 0)
			return ev;
		if (ev > 0)
			continue;
		if (!strcmp(a, "--data") || !strcmp(a, "--init-from") ||
		    !strcmp(a, "--save-final") || !strcmp(a, "--model-config")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (a[2] == 'd')
				o->run.data = v;
			else if (a[2] == 'i')
				o->run.init_from = v;
			else if (a[2] == 'm')
				o->run.model_config = v;
			else
				o->run.save_final = v;
		} else if (!strcmp(a, "--steps")) {
			/* 0: no step; what --save-final (--merge-adapter) and --save-adapter
			 * write is the initial model */
			rc = zn_arg_int(*n, rest, &i, 0, 100000000, &o->run.steps);
			o->steps_given = true;
		} else if (!strcmp(a, "--warmup-ratio")) {
			rc = zn_arg_double(*n, rest, &i, 0.0, 1.0, &o->run.warmup_ratio);
		} else if (!strcmp(a, "--seq")) {
			/* the training length; also the model's (wpe rows) unless --init-from */
			rest[m++] = rest[i];
			rc = zn_arg_int(*n, rest, &i, 1, 1 << 20, &o->run.seq);
			rest[m++] = rest[i];
		} else if (!strcmp(a, "--dtype")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (!strcmp(v, "bf16")) {
				cfg->precision.bf16 = true;
				cfg->precision.fp16 = false;
			} else if (!strcmp(v, "fp16")) {
				cfg->precision.fp16 = true;
				cfg->precision.bf16 = false;
			} else if (!strcmp(v, "fp32")) {
				cfg->precision.bf16 = false;
				cfg->precision.fp16 = false;
			} else {
				zn_error("--dtype '%s': use fp32, bf16 or fp16", v);
				return ZN_EUSAGE;
			}
		} else if (!strcmp(a, "--save-dtype")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (strcmp(v, "bf16") && strcmp(v, "fp32")) {
				zn_error("--save-dtype '%s': use fp32 or bf16", v);
				return ZN_EUSAGE;
			}
			o->run.save_dtype = strcmp(v, "bf16") ? ZN_DTYPE_F32 : ZN_DTYPE_BF16;
		} else if (!strcmp(a, "--save-shard-size")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v || zn_hf_parse_size(v, "--save-shard-size", &o->run.shard_bytes))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--trace")) {
			if (!(o->run.trace = zn_arg_value(*n, rest, &i)))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--trace-steps")) {
			const char *v = zn_arg_value(*n, rest, &i);

			if (!v || zn_trace_parse_steps(v, &o->run.trace_first, &o->run.trace_last))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--print-config")) {
			o->print_config = true;
		} else {
			int taken = zn_train_ckpt_flag(*n, rest, &i, &o->run.ck);

			if (taken < 0)
				return taken;
			if (!taken)
				rest[m++] = rest[i];
		}
	}
	*n = m;
	return rc;
}

/* The model (train_model.h): from the flags, or with --resume and none of them the
 * checkpoint's (train_recipe.h); every flag left over is unknown. */
static int model_config(int n, char **rest, struct train_opts *o, struct zn_train_model *tm)
{
	struct zn_train_recipe *r = &o->recipe;
	char **left = calloc((size_t)n + 1, sizeof(*left));
	int k = 0, rc = 0;

	r->flags = calloc((size_t)n + 1, sizeof(*r->flags));
	if (!left || !r->flags) {
		free(left);
		return -ENOMEM;
	}
	memcpy(r->flags, rest, (size_t)n * sizeof(*rest));
	*r = (struct zn_train_recipe){ .init_from = o->run.init_from, .model_config = o->run.model_config,
				       .flag_count = n, .flags = r->flags };
	if (o->run.ck.resume_dir)
		rc = zn_train_recipe_fill(o->run.ck.resume_dir, r, &o->run.lora, &o->run.seq);
	o->run.init_from = r->init_from;
	o->run.model_config = r->model_config;
	if (rc) {
		/* logged */
	} else if (o->run.init_from && o->run.model_config) {
		zn_error("--init-from and --model-config both define the model: give one");
		rc = -EINVAL;
	} else {
		rc = zn_train_model_parse(tm, r->flag_count, r->flags, o->run.init_from,
					  o->run.model_config, left, &k);
	}
	if (!rc && k > 0) {
		zn_cli_unknown_flag(o->cmd, left[0], o->help);
		rc = ZN_EUSAGE;
	}
	free(left);
	return rc ? ZN_EUSAGE : 0;
}

static int parse(int argc, char **argv, struct zn_config *cfg, struct zn_train_model *tm,
		 struct train_opts *o, bool *help, const char *cmd, void (*help_text)(FILE *f))
{
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	int n = 0, rc;

	if (!rest)
		return -ENOMEM;
	*o = (struct train_opts){ .run = { .steps = 20, .trace_first = 1 }, .cmd = cmd,
				   .help = help_text };
	rc = zn_config_from_args(cfg, argc - 1, argv + 1, rest, &n);
	for (int i = 0; !rc && i < n; i++)
		if (!strcmp(rest[i], "-h") || !strcmp(rest[i], "--help"))
			*help = true;
	if (!rc && !*help)
		rc = own_flags(&n, rest, o, cfg);
	if (!rc && !*help)
		rc = zn_train_lora_flags(&n, rest, &o->run.lora);
	/* every file of the checkpoint verified before anything else runs */
	if (!rc && !*help && o->run.ck.resume) {
		rc = zn_ckpt_open(&o->run.ck.resume_dir, o->run.ck.resume, "--resume");
		o->ckpt_bad = rc != 0; /* a damaged checkpoint is a runtime failure: exit 1 */
	}
	if (!rc && !*help)
		rc = model_config(n, rest, o, tm);
	if (!rc && !*help)
		rc = zn_train_lora_check(&o->run.lora, o->run.save_final);
	if (!rc && !*help && o->run.ck.resume_dir)
		rc = zn_train_recipe_check(o->run.ck.resume_dir, "--resume", &o->recipe, tm, &o->run.lora,
					   cfg->runtime.seed);
	if (!rc && !*help && o->run.ck.save_dir)
		rc = zn_train_recipe_text(&o->recipe, tm, &o->run.lora, cfg->runtime.seed, o->run_meta,
					  sizeof(o->run_meta)) ? ZN_EUSAGE : 0;
	o->run.ck.run_meta = o->run_meta;
	o->run.ck.save_adapter = o->run.lora.save_adapter;
	o->run.ck.argc = argc;
	o->run.ck.argv = argv;
	free(rest);
	return rc;
}

/* The settings of this command every rank must share, as agreement lines; the data files
 * by identity (size and sampled CRC, train_ranks.h), so ranks given different data stop
 * before any step. Returns 0, or a negative code when a data file cannot be read. */
static int own_text(const struct train_opts *o, bool files, char *buf, size_t size)
{
	size_t k;
	int rc = 0;

	snprintf(buf, size, "train.steps=%d\ntrain.seq=%d\ntrain.init_from=%s\n"
		 "train.save_final=%s\ntrain.save_dtype=%s\ntrain.save_shard_size=%llu\n"
		 "train.print_config=%s\n", o->run.steps,
		 o->run.seq, o->run.init_from ? "given" : "none", o->run.save_final ? "given" : "none",
		 o->run.save_dtype == ZN_DTYPE_BF16 ? "bf16" : "fp32",
		 (unsigned long long)o->run.shard_bytes,
		 o->print_config ? "true" : "false");
	k = strlen(buf);
	zn_train_ckpt_text(&o->run.ck, buf + k, size - k);
	k = strlen(buf);
	snprintf(buf + k, size - k, "train.shuffle=%s\ntrain.epochs=%d\n"
		 "train.eval_steps=%d\ntrain.eval_batches=%d\n", o->run.ev.shuffle ? "true" : "false",
		 o->run.ev.epochs, o->run.ev.eval_steps, o->run.ev.eval_batches);
	k = strlen(buf);
	if (files)
		rc = zn_train_ranks_file_line("train.data", "--data", o->run.data, buf + k, size - k);
	k = strlen(buf);
	if (files && !rc)
		rc = zn_train_ranks_file_line("train.val_data", "--val-data", o->run.ev.val_data,
					      buf + k, size - k);
	return rc;
}

/* Every file the run reads or writes, by identity (train_paths.h). */
static int check_paths(const struct train_opts *o, const struct zn_config *cfg, int argc,
		       char **argv)
{
	const struct zn_monitor_config *m = &cfg->monitor;
	char csv[ZN_PATH_MAX + 300];

	snprintf(csv, sizeof(csv), "%s/%s", m->csv_output_path[0] ? m->csv_output_path :
		 "csv_monitor", m->csv_job_name);
	return zn_train_paths_check(&(struct zn_train_paths){
		.data = o->run.data, .val_data = o->run.ev.val_data, .model_config = o->run.model_config,
		.init_from = o->run.init_from, .init_adapter = o->run.lora.init_adapter,
		.resume = o->run.ck.resume, .save_final = o->run.save_final,
		.save_adapter = o->run.lora.save_adapter, .trace = o->run.trace, .save_dir = o->run.ck.save_dir,
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
		 struct train_opts *o, struct zn_train_ranks *ranks)
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

static int command(int argc, char **argv, struct train_opts *o)
{
	struct zn_train_ranks ranks;
	struct zn_train_model tm;
	struct zn_config cfg;
	char own[2048];
	bool help = false, ok;
	int rc, rank = 0, save_lock = -1;

	memset(&tm, 0, sizeof(tm));
	ok = !parse(argc, argv, &cfg, &tm, o, &help, "zinc train", usage);
	if (ok && help) {
		usage(stdout);
		return 0;
	}
	/* a config that did not parse still agrees, within the default timeout */
	if (zn_train_ranks_start(&ranks, ok ? cfg.runtime.comm_timeout_s : 0))
		return ZN_EXIT_USAGE;
	/* --steps 0 runs no step, so no schedule is evaluated: an "auto" total_num_steps
	 * of 1 keeps a decay schedule valid */
	ok = ok && !zn_config_resolve_auto(&cfg, &(struct zn_config_derive){
				   .hidden = zn_train_model_width(&tm), .steps = o->run.steps ? o->run.steps : 1,
				   .warmup_ratio = o->run.warmup_ratio });
	ok = ok && !zn_config_validate(&cfg, ranks.world);
	if (ok && !o->run.data && !o->print_config && (o->run.steps > 0 || o->run.ck.resume || o->run.ev.epochs)) {
		zn_error("zinc train: give the training tokens with --data FILE (e.g. "
			 "--data data/demo.txt)");
		ok = false;
	}
	if (ok && o->run.lora.merge && o->run.lora.init_adapter && !o->steps_given && !o->run.ev.epochs)
		zn_warn("--merge-adapter --init-adapter: zinc train trains --steps %d (the "
			"default) before it merges; to merge the adapter as it is: zinc merge "
			"--init-from BASE --adapter DIR --output OUT, or --steps 0", o->run.steps);
	if (ok && o->run.steps == 0 && !o->run.save_final && !o->run.lora.save_adapter && !o->print_config) {
		zn_error("zinc train --steps 0 trains nothing: give --save-final PATH (or "
			 "--save-adapter DIR) to write the initial model");
		ok = false;
	}
	if (ok && o->run.ev.epochs && o->steps_given) {
		zn_error("--epochs and --steps both set the run's length: give one");
		ok = false;
	}
	/* rank 0 writes --save-final: its destination is checked before any step, so no
	 * training is lost to a missing directory or a read-only mount */
	if (ok && o->run.save_final && !o->print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
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
	    zn_train_ckpt_check_opts(&o->run.ck, o->run.init_from != NULL && !o->recipe.from_checkpoint &&
				     !(o->run.ck.resume_dir &&
				       zn_train_recipe_recorded(o->run.ck.resume_dir)), rank, &save_lock))
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
	struct train_opts *o = calloc(1, sizeof(*o));
	int rc;

	if (!o)
		return 1;
	rc = command(argc, argv, o);
	zn_train_lora_release(&o->run.lora);
	zn_train_recipe_release(&o->recipe);
	zn_ckpt_close(o->run.ck.resume_dir);
	free(o);
	return rc;
}

/* ---- zinc estimate's view (train_setup.h) ------------------------------------------- */

void zn_train_usage(FILE *f)
{
	usage(f);
}

int zn_train_setup_from_args(struct zn_train_setup *s, int argc, char **argv, int world,
			     const char *cmd, void (*help_text)(FILE *f))
{
	struct train_opts *o = calloc(1, sizeof(*o));
	bool help = false;
	int rc;

	memset(s, 0, sizeof(*s));
	if (!o)
		return -ENOMEM;
	/* kept until release: the model and the LoRA settings may point into a --resume
	 * checkpoint's recipe */
	s->opts = o;
	rc = parse(argc, argv, &s->cfg, &s->tm, o, &help, cmd, help_text);
	if (rc || help)
		return ZN_EUSAGE;
	if (zn_config_resolve_auto(&s->cfg, &(struct zn_config_derive){
					   .hidden = zn_train_model_width(&s->tm),
					   .steps = o->run.steps ? o->run.steps : 1,
					   .warmup_ratio = o->run.warmup_ratio }) ||
	    zn_config_validate(&s->cfg, world))
		return ZN_EUSAGE;
	s->eo = (struct zn_engine_options){ .seq_len = o->run.seq ? o->run.seq :
							   zn_train_model_seq(&s->tm) };
	s->model = zn_train_model_get(&s->tm);
	s->lora = o->run.lora.on;
	return zn_train_lora_setup(&o->run.lora, &s->model, &s->eo, s->cfg.runtime.seed,
				   o->run.init_from);
}

void zn_train_setup_release(struct zn_train_setup *s)
{
	struct train_opts *o = s->opts;

	if (!o)
		return;
	zn_train_lora_release(&o->run.lora);
	zn_train_recipe_release(&o->recipe);
	zn_ckpt_close(o->run.ck.resume_dir);
	free(o);
	s->opts = NULL;
}
