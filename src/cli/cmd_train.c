/* zinc train: data-parallel ZeRO training of a GPT-2 or Llama-family model (src/sched
 * engine, through the model interface src/model/model.h).
 *
 * Config from --config JSON and flags (--print-config prints the effective config and
 * exits); model from --model/--layers/..., --model-config FILE or --init-from PATH
 * (cli/train_model.h); tokens from --data FILE; one line per steps_per_print steps
 * on rank 0, a progress bar in between when stdout is a terminal. The batches and the
 * per-step line are in train_io.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/monitor.h"
#include "cli/train_ckpt.h"
#include "cli/train_hf.h"
#include "cli/train_model.h"
#include "cli/train_eval.h"
#include "cli/train_lora.h"
#include "cli/train_io.h"
#include "cli/train_paths.h"
#include "cli/train_ranks.h"
#include "cli/util.h"
#include "comm/comm.h"
#include "core/fsio.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/trace.h"
#include "model/hf_dir.h"
#include "sched/ckpt.h"
#include "zinc.h"

struct train_opts {
	const char *data;
	const char *init_from;
	const char *model_config;
	const char *save_final;
	enum zn_dtype save_dtype; /* fp32 (default) or bf16 */
	uint64_t shard_bytes;     /* --save-shard-size; 0: 5GB */
	int seq;   /* T; 0 = the model's seq */
	int steps;
	bool print_config;
	const char *trace;        /* --trace FILE (rank 0) */
	int64_t trace_first, trace_last; /* --trace-steps (default every step) */
	struct zn_train_lora lora; /* --lora-* (train_lora.h) */
	struct zn_train_ckpt_opts ck; /* train_ckpt.h */
	struct zn_train_eval_opts ev;     /* --shuffle --epochs --val-data --eval-* */
	bool steps_given;
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
		int ev = zn_train_eval_flag(*n, rest, &i, &o->ev);

		if (ev < 0)
			return ev;
		if (ev > 0)
			continue;
		if (!strcmp(a, "--data") || !strcmp(a, "--init-from") ||
		    !strcmp(a, "--save-final") || !strcmp(a, "--model-config")) {
			const char *v = zn_cli_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (a[2] == 'd')
				o->data = v;
			else if (a[2] == 'i')
				o->init_from = v;
			else if (a[2] == 'm')
				o->model_config = v;
			else
				o->save_final = v;
		} else if (!strcmp(a, "--steps")) {
			/* 0: no step; what --save-final (--merge-adapter) and --save-adapter
			 * write is the initial model */
			rc = zn_cli_int(*n, rest, &i, 0, 100000000, &o->steps);
			o->steps_given = true;
		} else if (!strcmp(a, "--seq")) {
			/* the training length; also the model's (wpe rows) unless --init-from */
			rest[m++] = rest[i];
			rc = zn_cli_int(*n, rest, &i, 1, 1 << 20, &o->seq);
			rest[m++] = rest[i];
		} else if (!strcmp(a, "--dtype")) {
			const char *v = zn_cli_value(*n, rest, &i);

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
			const char *v = zn_cli_value(*n, rest, &i);

			if (!v)
				return ZN_EUSAGE;
			if (strcmp(v, "bf16") && strcmp(v, "fp32")) {
				zn_error("--save-dtype '%s': use fp32 or bf16", v);
				return ZN_EUSAGE;
			}
			o->save_dtype = strcmp(v, "bf16") ? ZN_DTYPE_F32 : ZN_DTYPE_BF16;
		} else if (!strcmp(a, "--save-shard-size")) {
			const char *v = zn_cli_value(*n, rest, &i);

			if (!v || zn_hf_parse_size(v, "--save-shard-size", &o->shard_bytes))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--trace")) {
			if (!(o->trace = zn_cli_value(*n, rest, &i)))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--trace-steps")) {
			const char *v = zn_cli_value(*n, rest, &i);

			if (!v || zn_trace_parse_steps(v, &o->trace_first, &o->trace_last))
				return ZN_EUSAGE;
		} else if (!strcmp(a, "--print-config")) {
			o->print_config = true;
		} else {
			int taken = zn_train_ckpt_flag(*n, rest, &i, &o->ck);

			if (taken < 0)
				return taken;
			if (!taken)
				rest[m++] = rest[i];
		}
	}
	*n = m;
	return rc;
}

/* The model (train_model.h); every flag left over is unknown. */
static int model_config(int n, char **rest, const struct train_opts *o,
			struct zn_train_model *tm)
{
	char **left = calloc((size_t)n + 1, sizeof(*left));
	int k = 0, rc;

	if (!left)
		return -ENOMEM;
	if (o->init_from && o->model_config) {
		zn_error("--init-from and --model-config both define the model: give one");
		rc = -EINVAL;
	} else {
		rc = zn_train_model_parse(tm, n, rest, o->init_from, o->model_config, left, &k);
	}
	if (!rc && k > 0) {
		zn_config_report_unknown_flag(left[0]);
		rc = ZN_EUSAGE;
	}
	free(left);
	return rc ? ZN_EUSAGE : 0;
}

static int parse(int argc, char **argv, struct zn_config *cfg, struct zn_train_model *tm,
		 struct train_opts *o, bool *help)
{
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	int n = 0, rc;

	if (!rest)
		return -ENOMEM;
	*o = (struct train_opts){ .steps = 20, .trace_first = 1 };
	rc = zn_config_from_args(cfg, argc - 1, argv + 1, rest, &n);
	for (int i = 0; !rc && i < n; i++)
		if (!strcmp(rest[i], "-h") || !strcmp(rest[i], "--help"))
			*help = true;
	if (!rc && !*help)
		rc = own_flags(&n, rest, o, cfg);
	if (!rc && !*help)
		rc = zn_train_lora_flags(&n, rest, &o->lora);
	if (!rc && !*help)
		rc = zn_train_lora_check(&o->lora, o->save_final);
	if (!rc && !*help)
		rc = model_config(n, rest, o, tm);
	free(rest);
	return rc;
}

/* The settings of this command every rank must share, as agreement lines. */
static void own_text(const struct train_opts *o, char *buf, size_t size)
{
	size_t k;

	snprintf(buf, size, "train.steps=%d\ntrain.seq=%d\ntrain.init_from=%s\n"
		 "train.save_final=%s\ntrain.save_dtype=%s\ntrain.save_shard_size=%llu\n"
		 "train.print_config=%s\n", o->steps,
		 o->seq, o->init_from ? "given" : "none", o->save_final ? "given" : "none",
		 o->save_dtype == ZN_DTYPE_BF16 ? "bf16" : "fp32",
		 (unsigned long long)o->shard_bytes,
		 o->print_config ? "true" : "false");
	k = strlen(buf);
	zn_train_ckpt_text(&o->ck, buf + k, size - k);
	k = strlen(buf);
	snprintf(buf + k, size - k, "train.shuffle=%s\ntrain.epochs=%d\ntrain.val_data=%s\n"
		 "train.eval_steps=%d\ntrain.eval_batches=%d\n", o->ev.shuffle ? "true" : "false",
		 o->ev.epochs, o->ev.val_data ? "given" : "none", o->ev.eval_steps,
		 o->ev.eval_batches);
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
		.data = o->data, .val_data = o->ev.val_data, .model_config = o->model_config,
		.init_from = o->init_from, .init_adapter = o->lora.init_adapter,
		.resume = o->ck.resume, .save_final = o->save_final,
		.save_adapter = o->lora.save_adapter, .trace = o->trace, .save_dir = o->ck.save_dir,
		.csv_dir = m->csv_enabled ? csv : NULL, .save_hf = o->ck.save_hf_steps > 0,
		.argc = argc, .argv = argv });
}

/* Runs the steps; a failure on one of several ranks ends the job (train_ranks.h) before
 * anything waits for the other ranks. */
static int train(const struct zn_config *cfg, const struct zn_train_model *tm,
		 struct train_opts *o, struct zn_train_ranks *ranks)
{
	struct zn_engine_options eo = { .seq_len = o->seq ? o->seq : zn_train_model_seq(tm) };
	struct zn_train_data data = { 0 };
	struct zn_train_eval val = { 0 };
	int steps = o->steps;
	struct zn_monitor mon = { .on = false };
	struct zn_train_totals tot = { 0 };
	struct zn_engine *e = NULL;
	struct zn_model model;
	struct zn_train_hf_loader *init = NULL;
	struct zn_trace *trace = NULL;
	struct zn_train_ckpt ck = { 0 };
	char hf[ZN_PATH_MAX + 32];
	bool stop = false;
	int rc;

	/* SIGINT, SIGTERM and SIGHUP remove the swap stores before the process dies;
	 * train_ckpt.c defers SIGTERM to the end of the step */
	model = zn_train_model_get(tm);
	if (zn_signals_install() ||
	    (o->init_from && zn_train_hf_loader_open(&init, o->init_from, tm)) ||
	    zn_train_ckpt_begin(&ck, &o->ck, cfg, &model, ranks->comm, ranks->world,
				eo.seq_len)) {
		zn_train_ckpt_end(&ck);
		zn_train_hf_loader_close(init);
		zn_train_ranks_fail(ranks, 1);
		return 1;
	}
	/* the checkpoint goes in one layer at a time, through the engine's buffer */
	eo.init_layer = init ? zn_train_hf_load_layer : ck.resume ? zn_ckpt_init_layer : NULL;
	eo.init_ctx = init ? (void *)init : (void *)ck.resume;
	rc = zn_train_lora_setup(&o->lora, &model, &eo, cfg->runtime.seed, o->init_from);
	if (!rc)
		rc = zn_engine_create(&e, cfg, &model, &eo);
	zn_train_hf_loader_close(init);
	if (rc) {
		zn_train_ckpt_end(&ck);
		rc = rc == ZN_EUSAGE || rc == -ENOMEM ? ZN_EXIT_USAGE : 1;
		zn_train_ranks_fail(ranks, rc);
		return rc;
	}
	/* --steps 0 without --data: nothing to read */
	rc = !o->data ? 0 :
	     zn_train_data_open(&data, o->data, cfg->runtime.data_format,
				zn_train_model_vocab(tm), e,
				eo.seq_len, cfg->runtime.seed, o->ev.shuffle,
				cfg->runtime.packing == ZN_PACKING_DOCUMENTS);
	if (!rc && cfg->runtime.packing == ZN_PACKING_DOCUMENTS && o->ev.shuffle) {
		zn_error("--shuffle with --packing documents: packed rows keep the file's order "
			 "(docs/packing.md); drop --shuffle");
		rc = -EINVAL;
	}
	if (!rc && o->data && cfg->runtime.packing == ZN_PACKING_DOCUMENTS)
		rc = zn_train_data_pack(&data, e, NULL);
	if (!rc && o->ev.epochs) {
		/* an epoch is steps_per_epoch data steps, grad_accum of them per step */
		steps = (int)(zn_train_data_steps_per_epoch(&data) * (uint64_t)o->ev.epochs /
			      (uint64_t)data.gas);
		if (steps < 1)
			steps = 1;
	}
	if (!rc)
		rc = zn_train_ckpt_resumed(&ck, e, &data);
	if (!rc)
		rc = zn_train_eval_open(&val, &o->ev, cfg->runtime.data_format,
					zn_train_model_vocab(tm), e, eo.seq_len, cfg->runtime.seed,
					cfg->runtime.packing == ZN_PACKING_DOCUMENTS);
	for (int i = 0; i < ZN_MONITOR_FIGURES; i++)
		mon.fd[i] = -1;
	if (!rc && zn_engine_rank(e) == 0)
		rc = zn_monitor_open(&mon, cfg);
	if (!rc && o->trace && zn_engine_rank(e) == 0) {
		rc = zn_trace_open(&trace, o->trace, o->trace_first, o->trace_last, 0);
		if (!rc)
			rc = zn_engine_set_trace(e, trace);
	}
	if (!rc)
		zn_train_print_header(stdout, cfg, tm, e, eo.seq_len, steps);
	if (!rc && ck.resume && ck.start >= steps && zn_engine_rank(e) == 0)
		printf("the checkpoint is at step %lld, --steps %d: no step to train\n",
		       (long long)ck.start, steps);
	else if (!rc && steps == 0 && zn_engine_rank(e) == 0)
		printf("--steps 0: no step to train; the initial model is saved as asked\n");
	for (int s = (int)ck.start; !rc && !stop && s < steps; s++) {
		struct zn_step_stats st;

		rc = zn_train_data_next(&data);
		if (!rc)
			rc = zn_engine_step_pos(e, data.inputs, data.targets, data.pos, &st);
		if (!rc)
			zn_train_totals_add(&tot, &st);
		if (!rc && zn_engine_rank(e) == 0)
			zn_train_print_step(stdout, &st, steps, cfg->steps_per_print,
					    isatty(STDOUT_FILENO) && zn_engine_world(e) == 1);
		if (!rc && zn_engine_rank(e) == 0)
			rc = zn_monitor_step(&mon, &st, (int64_t)(s + 1) * cfg->train_batch_size);
		if (!rc)
			rc = zn_train_eval_after_step(&val, e, s + 1, steps, stdout);
		if (!rc)
			rc = zn_train_ckpt_after_step(&ck, e, &data, s + 1, steps, &stop);
		if (!rc && zn_train_ckpt_hf_due(&ck, s + 1, hf, sizeof(hf))) {
			rc = zn_train_hf_save(e, tm, hf, "--save-hf-steps", o->save_dtype,
					      o->shard_bytes, o->init_from);
			if (!rc && zn_engine_rank(e) == 0)
				printf("saved %s\n", hf);
		}
	}
	/* the last step's NVMe write-behind: a failed write fails the run */
	{
		int r = zn_engine_flush(e);

		if (!rc)
			rc = r;
	}
	if (!rc && o->lora.on && !stop) {
		/* --save-adapter, and the merged model for --save-final */
		struct zn_train_lora_out lo = { o->save_final, o->save_dtype, o->shard_bytes, tm,
						o->init_from };

		rc = zn_train_lora_save(&o->lora, e, &lo);
		if (!rc && o->save_final && zn_engine_rank(e) == 0)
			printf("saved %s\n", o->save_final);
	} else if (!rc && o->save_final && !stop) {
		/* streamed layer by layer, a file or a directory */
		rc = zn_train_hf_save(e, tm, o->save_final, "--save-final", o->save_dtype,
				      o->shard_bytes, o->init_from);
		if (!rc && zn_engine_rank(e) == 0)
			printf("saved %s\n", o->save_final);
	}
	/* the trace is put in place even after a failure: it shows the steps before it */
	if (trace) {
		int r = zn_engine_set_trace(e, NULL);

		if (!rc)
			rc = r;
		r = zn_trace_close(trace);

		if (!r && !rc)
			printf("trace %s\n", o->trace);
		if (!rc)
			rc = r;
	}
	/* last, so its peak RSS covers the save too */
	if (!rc && zn_engine_rank(e) == 0) {
		zn_train_print_summary(stdout, &tot);
		zn_train_eval_summary(stdout, &val);
	}
	if (rc)
		zn_train_ranks_fail(ranks, 1);
	zn_monitor_close(&mon);
	zn_train_data_close(&data);
	zn_train_eval_close(&val);
	zn_engine_destroy(e); /* removes the swap files (also after a SIGTERM stop) */
	zn_train_ckpt_end(&ck);
	return rc ? 1 : 0;
}

int zn_cmd_train(int argc, char **argv)
{
	struct zn_train_ranks ranks;
	struct zn_train_model tm;
	struct train_opts o = { 0 };
	struct zn_config cfg;
	char own[1024];
	bool help = false, ok;
	int rc, rank = 0, save_lock = -1;

	memset(&tm, 0, sizeof(tm));
	ok = !parse(argc, argv, &cfg, &tm, &o, &help);
	if (ok && help) {
		usage(stdout);
		return 0;
	}
	if (zn_train_ranks_start(&ranks))
		return ZN_EXIT_USAGE;
	/* --steps 0 runs no step, so no schedule is evaluated: an "auto" total_num_steps
	 * of 1 keeps a decay schedule valid */
	if (ok)
		zn_config_resolve_auto(&cfg, &(struct zn_config_derive){ .hidden = zn_train_model_width(&tm),
									 .steps = o.steps ? o.steps : 1 });
	ok = ok && !zn_config_validate(&cfg, ranks.world);
	if (ok && !o.data && !o.print_config && (o.steps > 0 || o.ck.resume || o.ev.epochs)) {
		zn_error("zinc train: give the training tokens with --data FILE (e.g. "
			 "--data data/demo.txt)");
		ok = false;
	}
	if (ok && o.lora.merge && o.lora.init_adapter && !o.steps_given && !o.ev.epochs)
		zn_warn("--merge-adapter --init-adapter: zinc train trains --steps %d (the "
			"default) before it merges; to merge the adapter as it is: zinc merge "
			"--init-from BASE --adapter DIR --output OUT, or --steps 0", o.steps);
	if (ok && o.steps == 0 && !o.save_final && !o.lora.save_adapter && !o.print_config) {
		zn_error("zinc train --steps 0 trains nothing: give --save-final PATH (or "
			 "--save-adapter DIR) to write the initial model");
		ok = false;
	}
	if (ok && o.ev.epochs && o.steps_given) {
		zn_error("--epochs and --steps both set the run's length: give one");
		ok = false;
	}
	/* rank 0 writes --save-final: its destination is checked before any step, so no
	 * training is lost to a missing directory or a read-only mount */
	if (ok && o.save_final && !o.print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    rank == 0 && zn_train_hf_output_check(o.save_final))
		ok = false;
	if (ok && o.trace && !o.print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    rank == 0 && zn_output_check(o.trace, "--trace"))
		ok = false;
	if (ok && o.lora.save_adapter && !o.print_config &&
	    zn_comm_world_hint(&rank, NULL, NULL) == 0 && rank == 0 &&
	    zn_output_check_dir(o.lora.save_adapter, "--save-adapter"))
		ok = false;
	/* no output may be an input or another output (by identity), before anything is
	 * made; then the save directory is made and locked */
	if (ok && !o.print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 && rank == 0 &&
	    check_paths(&o, &cfg, argc, argv))
		ok = false;
	if (ok && !o.print_config && zn_comm_world_hint(&rank, NULL, NULL) == 0 &&
	    zn_train_ckpt_check_opts(&o.ck, o.init_from != NULL, rank, &save_lock))
		ok = false;
	if (ok && o.lora.on && (o.ck.save_dir || o.ck.resume)) {
		zn_error("--save-dir and --resume do not take LoRA runs yet: save the adapters "
			 "with --save-adapter and start again with --init-adapter");
		ok = false;
	}
	/* Every rank checks it runs what rank 0 runs (and that all started) before any
	 * work: a rank that differs would hang or crash the job later. */
	own_text(&o, own, sizeof(own));
	rc = zn_train_ranks_agree(&ranks, &cfg, &tm, own, ok);
	if (rc) {
		zn_train_ranks_end(&ranks);
		if (save_lock >= 0)
			close(save_lock);
		return ZN_EXIT_USAGE;
	}
	if (o.print_config) {
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
	rc = train(&cfg, &tm, &o, &ranks);
	zn_train_ranks_end(&ranks);
	zn_train_lora_release(&o.lora);
	if (save_lock >= 0)
		close(save_lock); /* after the last save */
	return rc;
}
