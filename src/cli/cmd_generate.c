/* zinc generate: text from a model with a KV cache (docs/generate.md): its options. The
 * model, adapter and tokenizer are loaded by cmd_generate_load.c, the tokens generated and
 * printed by cmd_generate_run.c (cmd_generate.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_generate.h"
#include "core/args.h"
#include "core/log.h"
#include "model/hf_dir.h"
#include "zinc.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zinc generate --init-from PATH --prompt TEXT [options] [model flags]\n"
		"\n"
		"  --init-from PATH        a Hugging Face model directory or .safetensors file (zinc's\n"
		"                          --save-final output too), or a zinc checkpoint directory\n"
		"                          (--save-dir: the model it records, no model flags)\n"
		"  --prompt TEXT           the text to continue (with --template: the user's\n"
		"                          message)\n"
		"  --adapter DIR           a PEFT LoRA adapter (adapter_config.json,\n"
		"                          adapter_model.safetensors) applied unmerged\n"
		"  --template llama3|chatml  wrap the prompt as a chat turn as the model's chat\n"
		"                          template does; stdout gets the reply only\n"
		"  --system TEXT           with --template: a system message first\n"
		"  --stop TEXT             end the text before TEXT (repeatable; not printed)\n"
		"  --tokenizer DIR|FILE    tokenizer.json (default: the model directory's own);\n"
		"                          'bytes' for a byte-level model trained on text (vocab 256)\n"
		"  --max-new-tokens N      tokens to generate (default 64)\n"
		"  --temperature T         0 (default): greedy; > 0: sample from softmax(logits / T)\n"
		"  --top-k K               sample among the K most likely (default 0: all)\n"
		"  --top-p P               ... and the most likely summing to P (default 1: all)\n"
		"  --seed N                the draws' seed (default 0): the same seed, the same text\n"
		"  --ignore-eos            go on past the end-of-text ids (the tokenizer's EOS,\n"
		"                          generation_config.json's eos_token_id, the\n"
		"                          template's end of turn)\n"
		"  --max-seq N             positions in the KV cache (default prompt + new tokens)\n"
		"  --prefill-chunk N       prompt tokens per forward (default 256)\n"
		"  --device auto|host|cuda the compute device (default auto)\n"
		"  --device-mem SIZE       device memory budget (1G, 512M; default: the backend's)\n"
		"  --offload-param none|cpu|nvme  where the layers live: on the device (default), in\n"
		"                          page-locked host memory or in a file under --nvme-path,\n"
		"                          streamed to the device layer by layer (ZeRO-Inference)\n"
		"  --nvme-path DIR         the directory for --offload-param nvme\n"
		"  --quantize-base nf4     layers 1.. in bitsandbytes' NF4, dequantized on the\n"
		"                          device (--double-quant: nested scales; a 4-bit\n"
		"                          checkpoint's layers stay 4-bit anyway; docs/qlora.md)\n"
		"  --prefetch-depth N      streamed layers fetched ahead of the one computing\n"
		"                          (default: as zinc train, lowered to fit --device-mem)\n"
		"  --print-ids             the generated token ids on stderr\n");
}

void zn_generate_usage(FILE *f)
{
	usage(f);
}

static int float_flag(int argc, char **argv, int *i, float lo, float *out)
{
	const char *flag = argv[*i], *v = zn_arg_value(argc, argv, i);
	char *end;
	double x;

	if (!v)
		return ZN_EUSAGE;
	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < lo) {
		zn_error("%s '%s': give a number >= %g", flag, v, (double)lo);
		return ZN_EUSAGE;
	}
	*out = (float)x;
	return 0;
}

static int parse(struct gen_args *a, int argc, char **argv, char **other, int *n_other)
{
	int rc = 0;

	for (int i = 1; i < argc && !rc; i++) {
		const char *f = argv[i], *v;

		if (!strcmp(f, "--init-from")) {
			rc = (a->init_from = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--prompt")) {
			rc = (a->prompt = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--adapter")) {
			rc = (a->adapter = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--system")) {
			rc = (a->system = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--template")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc)
				rc = zn_sft_template_parse(v, &a->tmpl);
		} else if (!strcmp(f, "--stop")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && (!*v || a->n_stops == ZN_GEN_MAX_STOPS)) {
				zn_error("--stop '%s': give a non-empty text, at most %d of them", v,
					 ZN_GEN_MAX_STOPS);
				rc = ZN_EUSAGE;
			}
			if (!rc)
				a->stops[a->n_stops++] = v;
		} else if (!strcmp(f, "--tokenizer")) {
			rc = (a->tokenizer = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--nvme-path")) {
			rc = (a->nvme_path = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
		} else if (!strcmp(f, "--max-new-tokens")) {
			rc = zn_arg_int(argc, argv, &i, 0, 1 << 24, &a->max_new);
		} else if (!strcmp(f, "--max-seq")) {
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 24, &a->max_seq);
		} else if (!strcmp(f, "--prefetch-depth")) {
			rc = zn_arg_int(argc, argv, &i, 0, 1 << 10, &a->depth);
			a->depth = a->depth ? a->depth : -1; /* zn_gen_opts: < 0 is none */
		} else if (!strcmp(f, "--prefill-chunk")) {
			rc = zn_arg_int(argc, argv, &i, 1, 1 << 20, &a->chunk);
		} else if (!strcmp(f, "--top-k")) {
			rc = zn_arg_int(argc, argv, &i, 0, 1 << 30, &a->top_k);
		} else if (!strcmp(f, "--temperature")) {
			rc = float_flag(argc, argv, &i, 0.0f, &a->temperature);
		} else if (!strcmp(f, "--top-p")) {
			rc = float_flag(argc, argv, &i, 0.0f, &a->top_p);
		} else if (!strcmp(f, "--seed")) {
			rc = zn_arg_count(argc, argv, &i, &a->seed);
		} else if (!strcmp(f, "--ignore-eos")) {
			a->ignore_eos = true;
		} else if (!strcmp(f, "--print-ids")) {
			a->print_ids = true;
		} else if (!strcmp(f, "--device-mem")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc)
				rc = zn_hf_parse_size(v, "--device-mem", &a->device_mem);
		} else if (!strcmp(f, "--device")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && !strcmp(v, "auto"))
				a->device = ZN_DEVICE_AUTO;
			else if (!rc && !strcmp(v, "host"))
				a->device = ZN_DEVICE_HOST;
			else if (!rc && !strcmp(v, "cuda"))
				a->device = ZN_DEVICE_CUDA;
			else if (!rc) {
				zn_error("--device '%s': give auto, host or cuda", v);
				rc = ZN_EUSAGE;
			}
		} else if (!strcmp(f, "--quantize-base")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && strcmp(v, "nf4") && strcmp(v, "none")) {
				zn_error("--quantize-base '%s': give nf4 or none", v);
				rc = ZN_EUSAGE;
			}
			a->nf4 = !rc && !strcmp(v, "nf4");
		} else if (!strcmp(f, "--double-quant")) {
			a->double_quant = true;
		} else if (!strcmp(f, "--offload-param")) {
			rc = (v = zn_arg_value(argc, argv, &i)) ? 0 : ZN_EUSAGE;
			if (!rc && !strcmp(v, "none"))
				a->home = ZN_GEN_DEVICE;
			else if (!rc && !strcmp(v, "cpu"))
				a->home = ZN_GEN_CPU;
			else if (!rc && !strcmp(v, "nvme"))
				a->home = ZN_GEN_NVME;
			else if (!rc) {
				zn_error("--offload-param '%s': give none, cpu or nvme", v);
				rc = ZN_EUSAGE;
			}
		} else {
			other[(*n_other)++] = argv[i]; /* a model flag, or its value */
		}
	}
	if (!rc && !a->prompt) {
		zn_error("zinc generate: --prompt TEXT is required");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->double_quant && !a->nf4) {
		zn_error("zinc generate: --double-quant quantizes the 4-bit layers' scales: add "
			 "--quantize-base nf4");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->home == ZN_GEN_NVME && !a->nvme_path) {
		zn_error("zinc generate: --offload-param nvme needs --nvme-path DIR");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->nvme_path && a->home != ZN_GEN_NVME) {
		zn_error("zinc generate: --nvme-path is used only with --offload-param nvme");
		rc = ZN_EUSAGE;
	}
	if (!rc && a->system && a->tmpl == ZN_SFT_NONE) {
		zn_error("zinc generate: --system needs --template llama3|chatml (the chat "
			 "template that places it)");
		rc = ZN_EUSAGE;
	}
	if (!rc && (a->top_p <= 0.0f || a->top_p > 1.0f)) {
		zn_error("--top-p %g: give a probability in (0, 1] (1: no limit)", (double)a->top_p);
		rc = ZN_EUSAGE;
	}
	return rc;
}

int zn_cmd_generate(int argc, char **argv)
{
	struct gen_args a = { .max_new = 64, .chunk = 256, .top_p = 1.0f };
	struct zn_gen_model gm;
	char **other;
	int n_other = 0, rc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
	other = calloc((size_t)argc + 1, sizeof(char *));
	if (!other)
		return 1;
	rc = parse(&a, argc, argv, other, &n_other);
	if (!rc)
		rc = zn_gen_model_open(&gm, a.init_from, a.tokenizer, n_other, other);
	else
		memset(&gm, 0, sizeof(gm));
	if (!rc && a.adapter)
		rc = zn_gen_model_adapter(&gm, a.adapter);
	if (!rc)
		rc = zn_gen_model_stops(&gm, &a);
	if (!rc)
		rc = zn_gen_run(&a, &gm);
	zn_gen_model_close(&gm);
	free(other);
	if (rc == ZN_EUSAGE)
		return ZN_EXIT_USAGE;
	return rc ? 1 : 0;
}
