/* zinc train's LoRA flags (docs/lora.md): --save-adapter writes PEFT's files, which
 * --init-adapter reads back bit for bit; --merge-adapter --save-final gives a model whose
 * loss is the LoRA run's; bad flag combinations are refused naming the flag. */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/safetensors.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_clilora_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_lora, .init = make_dir, .fini = remove_dir, .timeout = 120);

/* Runs zinc in dir with args (stdout and stderr into out). */
static int zinc(char *out, size_t size, const char *fmt, ...)
{
	char args[1024], cmd[1600];
	va_list ap;
	FILE *p;
	size_t n;
	int status;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "cd %s && timeout 60 %s %s 2>&1 </dev/null", dir,
		 ZN_ZINC_EXE, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = 0;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_text(const char *name)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 400; i++)
		fprintf(f, "the quick brown fox %d jumps over the lazy dog. ", i);
	fclose(f);
}

/* dir/sub/adapter_config.json := json */
static void write_config(const char *sub, const char *json)
{
	char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/adapter_config.json", dir, sub);
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(json, f);
	fclose(f);
}

/* the "loss X" of the output's "step 1/" line */
static double step1_loss(const char *out)
{
	const char *s = strstr(out, "step 1/");

	cr_assert_not_null(s, "%s", out);
	s = strstr(s, "loss ");
	cr_assert_not_null(s);
	return atof(s + 5);
}

static int files_equal(const char *a, const char *b)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "cmp -s %s/%s %s/%s", dir, a, dir, b);
	return system(cmd) == 0;
}

#define MODEL "train --model tiny --vocab 256 --data d.txt --seq 32"
#define LORA "--lora-r 4 --lora-alpha 8 --lora-targets c_attn,c_fc"

Test(cli_lora, save_init_round_trip_and_merge)
{
	static char out[1 << 16];
	char path[128];
	struct zn_st_file *f = NULL;
	double l_lora, l_merged;

	write_text("d.txt");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 3 --lr 0.01 " LORA
			  " --save-adapter A1 --merge-adapter --save-final M.safetensors"), 0,
		     "%s", out);
	cr_assert(strstr(out, "saved adapter A1"), "%s", out);
	snprintf(path, sizeof(path), "%s/A1/adapter_model.safetensors", dir);
	cr_assert_eq(zn_st_open(&f, path), 0);
	/* PEFT's names: two layers x (c_attn, c_fc) x (A, B) */
	cr_assert_eq(zn_st_tensor_count(f), 8);
	cr_assert_not_null(zn_st_find(f, "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"));
	cr_assert_not_null(zn_st_find(f, "base_model.model.transformer.h.1.mlp.c_fc.lora_B.weight"));
	cr_assert_eq(zn_st_find(f, "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight")->shape[0], 4);
	zn_st_close(f);
	/* --init-adapter reads them back exactly: with lr 0 the step changes nothing */
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lr 0 " LORA
			  " --init-adapter A1 --save-adapter A2"), 0, "%s", out);
	l_lora = step1_loss(out);
	cr_assert(files_equal("A1/adapter_model.safetensors", "A2/adapter_model.safetensors"));
	cr_assert(files_equal("A1/adapter_config.json", "A2/adapter_config.json"));
	/* the merged model (no LoRA) has the base + adapter's loss */
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lr 0 --init-from M.safetensors"),
		     0, "%s", out);
	l_merged = step1_loss(out);
	cr_assert(fabs(l_lora - l_merged) < 1.5e-4, "LoRA %g vs merged %g", l_lora, l_merged);
}

/* the "lora_params" and the plan's "frozen_bytes" of zinc estimate --json (the engine's
 * plan: the base in its dtype, each layer rounded as allocated: within 1% of params x B) */
static void estimate_lora(const char *model, const char *lora, uint64_t params,
			  uint64_t frozen_per_param)
{
	double want, got;

	static char out[1 << 17];
	const char *p, *f, *q;

	cr_assert_eq(zinc(out, sizeof(out), "estimate %s %s --json", model, lora), 0, "%s", out);
	p = strstr(out, "\"lora_params\":");
	q = strstr(out, "\"params\":");
	f = strstr(out, "\"frozen_bytes\":");
	cr_assert(p && q && f, "%s", out);
	cr_assert_eq((uint64_t)atof(p + 14), params, "%s %s: adapters", model, lora);
	/* the whole base is frozen, in bf16 (2 B) or fp32 (4 B) */
	want = atof(q + 9) * (double)frozen_per_param;
	got = atof(f + 15);
	cr_assert(got >= want && got < want * 1.01, "%s %s: frozen bytes %.0f, params x %llu = "
		  "%.0f", model, lora, got, (unsigned long long)frozen_per_param, want);
}

/* zinc estimate counts the adapters of every family as PEFT's print_trainable_parameters
 * does (the published counts), the base in bf16 or fp32 (zinc train's default). */
Test(cli_lora, estimate_counts_adapters_of_every_family)
{
	char m[512];

	estimate_lora("--model gpt2 --dtype bf16", "--lora-r 8 --lora-targets c_attn,c_proj,c_fc",
		      1179648, 2);
	estimate_lora("--model llama-3-8b --dtype bf16", "--lora-r 16 --lora-targets "
		      "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", 41943040, 2);
	estimate_lora("--model llama-3-8b", "--lora-r 8 --lora-targets q_proj,v_proj", 3407872,
		      4);
	snprintf(m, sizeof(m), "--model-config %s/tests/hf/qwen2-0.5b.json --bf16",
		 ZN_TEST_SRC_DIR);
	estimate_lora(m, "--lora-r 8 --lora-targets q_proj,v_proj", 540672, 2);
	snprintf(m, sizeof(m), "--model-config %s/tests/hf/mistral-7b-v0.1.json --dtype bf16",
		 ZN_TEST_SRC_DIR);
	estimate_lora(m, "--lora-r 16 --lora-targets q_proj,v_proj", 6815744, 2);
}

Test(cli_lora, bad_flags_are_refused_by_name)
{
	static char out[1 << 14];

	write_text("d.txt");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --lora-alpha 8"), 2, "%s", out);
	cr_assert(strstr(out, "without --lora-r"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --lora-r 4"), 2, "%s", out);
	cr_assert(strstr(out, "--lora-targets"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --lora-r 4 --lora-targets q_proj,foo"), 2,
		     "%s", out);
	cr_assert(strstr(out, "unknown module 'foo'"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " " LORA " --save-final x.safetensors"), 2,
		     "%s", out);
	cr_assert(strstr(out, "--merge-adapter"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " " LORA " --lora-dropout 1.5"), 2, "%s", out);
	cr_assert(strstr(out, "--lora-dropout"), "%s", out);
	/* targets that exist in no module of this model */
	cr_assert_neq(zinc(out, sizeof(out), MODEL " --steps 1 --lora-r 4 --lora-targets q_proj"),
		      0, "%s", out);
	cr_assert(strstr(out, "matches no linear layer"), "%s", out);
	/* an adapter of another rank */
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 " LORA " --save-adapter A"), 0,
		     "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lora-r 8 --lora-alpha 8 "
			  "--lora-targets c_attn,c_fc --init-adapter A"), 2, "%s", out);
	cr_assert(strstr(out, "--lora-r 8 but --init-adapter A has r 4"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lora-alpha 4 --init-adapter A"), 2,
		     "%s", out);
	cr_assert(strstr(out, "--lora-alpha 4 but --init-adapter A has lora_alpha 8"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lora-targets c_attn "
			  "--init-adapter A"), 2, "%s", out);
	cr_assert(strstr(out, "adapters of modules outside --lora-targets c_attn: c_fc"), "%s",
		  out);
}

/* --init-adapter alone takes r, alpha and targets from adapter_config.json, as PEFT's
 * from_pretrained does; the flags that agree with it change nothing: the same first loss
 * as the run that gives them all. */
Test(cli_lora, init_adapter_takes_its_config)
{
	static char out[1 << 14];
	double all, alone, agree;

	write_text("d.txt");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 2 " LORA " --save-adapter A"), 0,
		     "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 " LORA " --init-adapter A"), 0,
		     "%s", out);
	all = step1_loss(out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-adapter A"), 0, "%s", out);
	alone = step1_loss(out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lora-targets c_fc,c_attn "
			  "--init-adapter A"), 0, "%s", out);
	agree = step1_loss(out);
	cr_assert(all == alone && all == agree, "losses %.9g, %.9g, %.9g", all, alone, agree);
	/* the targets as a string (PEFT's regular expression) are refused, naming the file */
	write_config("B", "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, "
		     "\"target_modules\": \"c_attn\"}");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-adapter B"), 2, "%s", out);
	cr_assert(strstr(out, "target_modules is the regular expression 'c_attn'"), "%s", out);
	write_config("B", "{\"peft_type\": \"LORA\", \"r\": 4.5, \"lora_alpha\": 8, "
		     "\"target_modules\": [\"c_attn\"]}");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-adapter B"), 2, "%s", out);
	cr_assert(strstr(out, "is not a rank (an integer 1 .. 65536)"), "%s", out);
}

/* An adapter on c_attn and c_fc: a run on c_attn alone is refused naming c_fc (its tensors
 * would be dropped and lost at --save-adapter); without --lora-targets the adapter's
 * target_modules are taken and --save-adapter writes back every tensor, bit for bit. */
Test(cli_lora, adapter_tensors_outside_the_targets_are_refused_or_taken)
{
	static char out[1 << 16];

	write_text("d.txt");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 2 --lr 0.01 " LORA
			  " --save-adapter A1"), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lr 0 --lora-r 4 --lora-alpha 8 "
			  "--lora-targets c_attn --init-adapter A1 --save-adapter A2"), 2, "%s",
		     out);
	cr_assert(strstr(out, "adapters of modules outside --lora-targets c_attn: c_fc"), "%s",
		  out);
	{
		char a2[128];

		snprintf(a2, sizeof(a2), "%s/A2", dir);
		cr_assert(access(a2, F_OK) != 0, "refused, yet %s was written", a2);
	}
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --lr 0 --lora-r 4 --lora-alpha 8 "
			  "--init-adapter A1 --save-adapter A2"), 0, "%s", out);
	cr_assert(strstr(out, "--lora-targets c_attn,c_fc taken from its target_modules"), "%s",
		  out);
	cr_assert(files_equal("A1/adapter_model.safetensors", "A2/adapter_model.safetensors"));
	cr_assert(files_equal("A1/adapter_config.json", "A2/adapter_config.json"));
}

/* Sets key to the JSON value in ADIR/adapter_config.json (a line after the first "{"). */
static void config_add(const char *adir, const char *key, const char *value)
{
	char path[128], cmd[512];

	snprintf(path, sizeof(path), "%s/%s/adapter_config.json", dir, adir);
	snprintf(cmd, sizeof(cmd), "sed -i '1s/{/{ \"%s\": %s,/' %s", key, value, path);
	cr_assert_eq(system(cmd), 0);
}

/* A PEFT field that changes the model is refused with exit 2 naming it; an adapter of
 * another base model gets a warning line (the same model spelled otherwise does not). */
Test(cli_lora, peft_fields_and_base_model_are_checked)
{
	static char out[1 << 16];

	write_text("d.txt");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --save-final B.safetensors"), 0,
		     "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-from B.safetensors " LORA
			  " --save-adapter A"), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-from ./B.safetensors " LORA
			  " --init-adapter A"), 0, "%s", out);
	cr_assert(!strstr(out, "base_model_name_or_path"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --save-final C.safetensors "
			  "--seed 7"), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --init-from C.safetensors " LORA
			  " --init-adapter A"), 0, "%s", out);
	cr_assert(strstr(out, "warning: --init-adapter A: its base_model_name_or_path is "
			 "'B.safetensors', but --init-from is C.safetensors"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 " LORA " --init-adapter A"), 0, "%s",
		     out);
	cr_assert(strstr(out, "seeded initialization (no --init-from)"), "%s", out);
	config_add("A", "use_dora", "true");
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 " LORA " --init-adapter A"), 2, "%s",
		     out);
	cr_assert(strstr(out, "use_dora is true, which adds DoRA's magnitude vectors"), "%s", out);
}

/* The outside check (scripts/lora_check.py): an independent float64 PyTorch Llama (adapter
 * on q_proj, v_proj) and GPT-2 (c_attn, c_fc) with a PEFT adapter, 3 AdamW steps, against zinc train --init-from --init-adapter
 * --save-adapter: losses within 1e-4, adapters within 1e-3. Skipped without torch. */
Test(cli_lora, torch_outside_check)
{
	static char out[1 << 14];
	char cmd[1024];
	FILE *p;
	size_t n;
	int status;

	if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1"))
		cr_skip_test("python3-torch is not installed: scripts/lora_check.py skipped");
	for (int f = 0; f < 2; f++) {
		const char *family = f ? "gpt2" : "llama";

		snprintf(cmd, sizeof(cmd), "timeout 300 /usr/bin/python3 %s/scripts/lora_check.py "
			 "--zinc %s --family %s --keep %s/check-%s 2>&1", ZN_TEST_SRC_DIR,
			 ZN_ZINC_EXE, family, dir, family);
		p = popen(cmd, "r");
		cr_assert_not_null(p);
		n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = 0;
		status = pclose(p);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: %s", family, out);
		cr_assert(strstr(out, "ok: losses within 1e-4"), "%s: %s", family, out);
	}
}

/* the loss of step s (1-based) in out */
static double step_loss(const char *out, int s)
{
	char key[32];
	const char *p;

	snprintf(key, sizeof(key), "step %d/", s);
	p = strstr(out, key);
	cr_assert_not_null(p, "no '%s' in: %s", key, out);
	p = strstr(p, "loss ");
	cr_assert_not_null(p);
	return atof(p + 5);
}

/* QLoRA (docs/qlora.md): --save-quantized writes a bitsandbytes 4-bit directory that a
 * run from it trains on with the losses of the run that quantized at load; refusals */
Test(cli_lora, qlora_save_quantized_round_trip)
{
	static char out[1 << 16], ref[1 << 16];

	write_text("d.txt");
	cr_assert_eq(zinc(ref, sizeof(ref), MODEL " --steps 2 --steps-per-print 1 --dtype bf16 "
			  LORA " --quantize-base nf4 --double-quant"), 0, "%s", ref);
	cr_assert(strstr(ref, "frozen base: linear weights in 4 bits"), "%s", ref);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 0 --dtype bf16 " LORA
			  " --quantize-base nf4 --double-quant --save-quantized Q"), 0, "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), "train --init-from Q --data d.txt --seq 32 --steps 2 "
			  "--steps-per-print 1 --dtype bf16 " LORA), 0, "%s", out);
	for (int s = 1; s <= 2; s++)
		cr_assert_eq(step_loss(out, s), step_loss(ref, s), "step %d", s);
	/* full fine-tuning on a 4-bit base, --double-quant alone, --save-quantized without a
	 * 4-bit base: usage errors */
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 --quantize-base nf4"), 2, "%s", out);
	cr_assert(strstr(out, "--lora-r"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), "train --init-from Q --data d.txt --seq 32 --steps 1"),
		     2, "%s", out);
	cr_assert(strstr(out, "4-bit bitsandbytes checkpoint"), "%s", out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 1 " LORA " --double-quant"), 2, "%s",
		     out);
	cr_assert_eq(zinc(out, sizeof(out), MODEL " --steps 0 " LORA " --save-quantized Q2"), 2,
		     "%s", out);
}
