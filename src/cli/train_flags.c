/* zinc train's flags (train_flags.h): its own, LoRA's, the checkpoint's and eval's taken
 * out of argv, the rest the config's and the model's; --help's text. Also zinc estimate's
 * view of the same command line (train_setup.h). */
#include "cli/train_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "cli/train_setup.h"
#include "core/args.h"
#include "core/log.h"
#include "core/trace.h"
#include "model/family.h"
#include "model/hf_dir.h"
#include "sched/ckpt.h"
#include "train/train_hf.h"

/* text's words after 21 columns of indent, lines of at most 79 columns */
static void wrapped(FILE *f, const char *text)
{
	char buf[2048];
	int col = 21;

	snprintf(buf, sizeof(buf), "%s", text);
	fputs("                    ", f);
	for (char *w = strtok(buf, " "); w; w = strtok(NULL, " ")) {
		if (col + 1 + (int)strlen(w) > 79) {
			fputs("\n                    ", f);
			col = 21;
		}
		col += fprintf(f, " %s", w);
	}
	fputc('\n', f);
}

/* the registry's presets, model_types, model flags and LoRA targets (model/family.h) */
static void model_lists(FILE *f)
{
	char list[2048], line[1024];

	zn_family_preset_list(list, sizeof(list));
	wrapped(f, list);
	zn_family_model_types(list, sizeof(list));
	fprintf(f, "         --model-config FILE  a Hugging Face config.json: its shapes,\n"
		"                     seeded initialization; model_type\n");
	wrapped(f, list);
	fprintf(f, "         the model flags and LoRA's --lora-targets names, by family:\n");
	for (int i = 0; i < zn_family_count(); i++) {
		const struct zn_family *fam = zn_family_at(i);
		size_t at = (size_t)snprintf(line, sizeof(line), "%s: %s; LoRA:", fam->name,
					     fam->flags_help);

		for (int k = 0; fam->lora_targets[k] && at < sizeof(line); k++)
			at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s", k ? "," : " ",
					       fam->lora_targets[k]);
		wrapped(f, line);
	}
}

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
		"  model: --model NAME  a preset (default: the first, GPT-2 small), by family:\n");
	model_lists(f);
	fprintf(f,
		"  LoRA (docs/lora.md): --lora-r R --lora-alpha A (default R) --lora-targets\n"
		"         NAMES (PEFT's module names of the family, above)\n"
		"         --lora-dropout P  --use-rslora  --init-adapter DIR\n"

		"         --save-adapter DIR (PEFT files)  --merge-adapter (with --save-final\n"
		"         FILE.safetensors: the merged model)\n"
		"  QLoRA (docs/qlora.md): --quantize-base nf4 [--double-quant] (the base's\n"
		"         linear weights in bitsandbytes' NF4)  --save-quantized DIR (write the\n"
		"         4-bit base as a bitsandbytes checkpoint; --init-from reads one)\n");
	zn_train_ckpt_usage(f);
	fputs(zn_train_eval_usage, f);
	fprintf(f, "\n");
	zn_config_print_flags_help(f);
}

/* Takes this command's own flags out of rest; the others stay (in order) for the model. */
static int own_flags(int *n, char **rest, struct zn_train_cli *o, struct zn_config *cfg)
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
static int model_config(int n, char **rest, struct zn_train_cli *o, struct zn_train_model *tm)
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
	*r = (struct zn_train_recipe){ .init_from = o->run.init_from,
				       .model_config = o->run.model_config,
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

int zn_train_cli_parse(int argc, char **argv, struct zn_config *cfg, struct zn_train_model *tm,
		       struct zn_train_cli *o, bool *help, const char *cmd,
		       void (*help_text)(FILE *f))
{
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));
	int n = 0, rc;

	if (!rest)
		return -ENOMEM;
	*o = (struct zn_train_cli){ .run = { .steps = 20, .trace_first = 1 }, .cmd = cmd,
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
	if (!rc && !*help && cfg->runtime.quantize_base != ZN_QUANTIZE_NONE && !o->run.lora.on) {
		zn_error("--quantize-base nf4 quantizes a frozen base: QLoRA trains LoRA adapters "
			 "on it (add --lora-r R --lora-targets LIST); full fine-tuning keeps the "
			 "weights unquantized (docs/qlora.md)");
		rc = ZN_EUSAGE;
	}
	if (!rc && !*help && o->run.ck.resume_dir)
		rc = zn_train_recipe_check(o->run.ck.resume_dir, "--resume", &o->recipe, tm,
					   &o->run.lora,
					   cfg->runtime.seed);
	if (!rc && !*help && o->run.ck.save_dir)
		rc = zn_train_recipe_text(&o->recipe, tm, &o->run.lora, cfg->runtime.seed,
					  o->run_meta,
					  sizeof(o->run_meta)) ? ZN_EUSAGE : 0;
	o->run.ck.run_meta = o->run_meta;
	o->run.ck.save_adapter = o->run.lora.save_adapter;
	o->run.ck.extra_files = o->run.lora.on ? zn_train_lora_ckpt_files : NULL;
	o->run.ck.extra_ctx = &o->run.lora;
	o->run.ck.argc = argc;
	o->run.ck.argv = argv;
	free(rest);
	return rc;
}

void zn_train_cli_release(struct zn_train_cli *o)
{
	zn_train_lora_release(&o->run.lora);
	zn_train_recipe_release(&o->recipe);
	zn_ckpt_close(o->run.ck.resume_dir);
	o->run.ck.resume_dir = NULL;
}

/* ---- zinc estimate's view (train_setup.h) ------------------------------------------- */

void zn_train_usage(FILE *f)
{
	usage(f);
}

int zn_train_setup_from_args(struct zn_train_setup *s, int argc, char **argv, int world,
			     const char *cmd, void (*help_text)(FILE *f))
{
	struct zn_train_cli *o = calloc(1, sizeof(*o));
	bool help = false;
	int rc;

	memset(s, 0, sizeof(*s));
	if (!o)
		return -ENOMEM;
	/* kept until release: the model and the LoRA settings may point into a --resume
	 * checkpoint's recipe */
	s->opts = o;
	rc = zn_train_cli_parse(argc, argv, &s->cfg, &s->tm, o, &help, cmd, help_text);
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
	struct zn_train_cli *o = s->opts;

	if (!o)
		return;
	zn_train_cli_release(o);
	free(o);
	s->opts = NULL;
}
