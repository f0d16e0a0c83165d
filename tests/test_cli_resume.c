/* zinc train --resume as a user re-runs a job (docs/checkpoint.md): a checkpoint records
 * how its model was made, so --resume DIR alone works, the same command line with --resume
 * added works, the hint printed on SIGTERM is a command that works, and flags that differ
 * from the checkpoint are refused naming the difference; zinc generate reads a checkpoint
 * without model flags. LoRA runs (docs/lora.md) save and resume their adapters bit for bit
 * with the base outside the checkpoint, and SIGTERM without --save-dir writes
 * --save-adapter. Host device, Llama-tiny bases written by zinc itself, data/demo.txt. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_child.h"

#define RUN "--device host --micro-batch 2 --grad-accum 2 --deterministic " \
	    "--steps-per-print 1 --lr-schedule WarmupDecayLR --warmup-steps 3 " \
	    "--total-steps 1000 --warmup-max-lr 1e-2 --data " ZN_TEST_SRC_DIR "/data/demo.txt"
#define LORA "--lora-r 4 --lora-alpha 8 --lora-targets q_proj,v_proj --lora-dropout 0.1"
#define STOP_AT_2 "ZINC_TEST_SIGTERM_AT=2 "

static char dir[64];
static char out[1 << 17];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/zn_test_resume_XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(cli_resume, .init = make_dir, .fini = remove_dir, .timeout = 240);

/* a Llama-tiny Hugging Face directory dir/name, one step from the seeded init */
static void make_base(const char *name, int seed)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --model llama-tiny " RUN
				     " --seed %d --steps 1 --save-final %s/%s", seed, dir, name),
		     0, "%s", out);
}

/* dir/a and dir/b hold the same bytes */
static void same_file(const char *a, const char *b)
{
	zt_same_file(dir, a, b);
}

/* The command the SIGTERM stop printed ("go on with:\n  zinc train ..."), run as it is
 * (zinc: the binary under test). Returns its exit status. */
static int run_hint(void)
{
	static char hint[8192];
	const char *h = strstr(out, "go on with:\n  zinc train ");
	size_t n;

	cr_assert_not_null(h, "no resume hint: %s", out);
	h += strlen("go on with:\n  zinc ");
	n = strcspn(h, "\n");
	cr_assert_lt(n, sizeof(hint));
	memcpy(hint, h, n);
	hint[n] = 0;
	return zt_zinc_run(out, sizeof(out), "", "%s", hint);
}

/* "loss X" of the output's "step S/" line, as printed */
static void step_loss(const char *text, int step, char *buf, size_t size)
{
	char key[32];
	const char *s, *l;

	snprintf(key, sizeof(key), "step %d/", step);
	s = strstr(text, key);
	cr_assert_not_null(s, "no %s in %s", key, text);
	l = strstr(s, "loss ");
	cr_assert_not_null(l);
	snprintf(buf, size, "%.*s", (int)strcspn(l, " \n,"), l);
	snprintf(buf + strlen(buf), size - strlen(buf), " %.*s", (int)strcspn(l + 5, " \n,"),
		 l + 5);
}

/* The case: a run from a Hugging Face directory stopped by SIGTERM resumes from
 * the printed hint (the same command with --resume), and from --resume alone, to the bytes
 * of a straight run; another --init-from is refused naming it. */
Test(cli_resume, hf_dir_run_resumes_from_its_hint_and_alone)
{
	make_base("base", 1);
	make_base("other", 2);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " --steps 4 --save-final %s/a.safetensors", dir, dir),
		     0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), STOP_AT_2, "train --init-from %s/base "
				     "--seq 16 " RUN " --steps 4 --save-dir %s/ck --save-final "
				     "%s/b.safetensors", dir, dir, dir), 0, "%s", out);
	cr_assert(strstr(out, "stopped by SIGTERM after step 2"), "%s", out);
	cr_assert_eq(run_hint(), 0, "%s", out);
	cr_assert(strstr(out, "resumed from") && strstr(out, "at step 2"), "%s", out);
	same_file("a.safetensors", "b.safetensors");
	/* --resume alone: the model from the checkpoint, no model flag */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " RUN " --steps 4 --resume "
				     "%s/ck/checkpoint-2 --save-final %s/c.safetensors", dir, dir),
		     0, "%s", out);
	same_file("a.safetensors", "c.safetensors");
	/* another base of the same shapes: refused, naming --init-from */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/other --seq 16 "
				     RUN " --steps 4 --resume %s/ck/checkpoint-2", dir, dir), 2,
		     "%s", out);
	cr_assert(strstr(out, "--init-from") && strstr(out, "is not the base"), "%s", out);
	/* zinc generate: no model flags; a --model-config that agrees is taken */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --init-from %s/ck --device "
				     "host --tokenizer bytes --prompt ab --max-new-tokens 3", dir),
		     0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --init-from %s/ck "
				     "--model-config %s/base/config.json --device host --tokenizer "
				     "bytes --prompt ab --max-new-tokens 3", dir, dir), 0, "%s", out);
}

/* A run from shape flags: --resume alone takes them from the checkpoint; a flag that
 * differs is refused naming it and the run's flags; zinc generate names only its own
 * flags. */
Test(cli_resume, flags_run_resumes_alone_and_names_what_differs)
{
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --model tiny --vocab 256 --seq "
				     "16 " RUN " --steps 2 --save-dir %s/ck", dir), 0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " RUN " --steps 3 --resume "
				     "%s/ck", dir), 0, "%s", out);
	cr_assert(strstr(out, "resumed from") && strstr(out, "step 3/3"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --model tiny --vocab 256 --seq "
				     "16 --layers 5 " RUN " --steps 3 --resume %s/ck/checkpoint-2",
				     dir), 2, "%s", out);
	cr_assert(strstr(out, "layers is 5 in this run") &&
		  strstr(out, "--model tiny --vocab 256 --seq 16"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --init-from %s/ck --device "
				     "host --tokenizer bytes --prompt ab --max-new-tokens 3", dir),
		     0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "generate --init-from %s/ck --layers 5 "
				     "--device host --tokenizer bytes --prompt ab", dir), 2, "%s",
		     out);
	cr_assert(strstr(out, "layers is 5") && !strstr(out, "--resume"), "%s", out);
}

/* LoRA: stopped at step 2 and resumed (from the hint, and with --resume alone), the
 * losses of steps 3 and 4 and the saved adapter are a straight run's, bit for bit; the
 * checkpoint holds the adapter, not the base; another base or r is refused by name. */
Test(cli_resume, lora_resume_is_exact)
{
	static char straight[1 << 17];
	char a[256], b[256];
	struct stat st_base, st_ck;

	make_base("base", 1);
	make_base("other", 2);
	cr_assert_eq(zt_zinc_run(straight, sizeof(straight), "", "train --init-from %s/base "
				     "--seq 16 " RUN " " LORA " --steps 4 --save-adapter %s/A", dir,
				     dir), 0, "%s", straight);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), STOP_AT_2, "train --init-from %s/base "
				     "--seq 16 " RUN " " LORA " --steps 4 --save-dir %s/ck "
				     "--save-adapter %s/B", dir, dir, dir), 0, "%s", out);
	cr_assert(strstr(out, "checkpoint") && strstr(out, "saved (step 2)"), "%s", out);
	snprintf(a, sizeof(a), "%s/base/model.safetensors", dir);
	snprintf(b, sizeof(b), "%s/ck/checkpoint-2/rank-00000-of-00001.bin", dir);
	cr_assert(!stat(a, &st_base) && !stat(b, &st_ck));
	cr_assert_lt(st_ck.st_size * 4, st_base.st_size, "the checkpoint holds the base?");
	cr_assert_eq(run_hint(), 0, "%s", out);
	for (int s = 3; s <= 4; s++) {
		step_loss(straight, s, a, sizeof(a));
		step_loss(out, s, b, sizeof(b));
		cr_assert_str_eq(a, b, "step %d", s);
	}
	same_file("A/adapter_model.safetensors", "B/adapter_model.safetensors");
	/* --resume alone: base, r, alpha, targets and dropout from the checkpoint */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " RUN " --steps 4 --resume "
				     "%s/ck/checkpoint-2 --save-adapter %s/C", dir, dir), 0, "%s",
		     out);
	same_file("A/adapter_model.safetensors", "C/adapter_model.safetensors");
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/other --seq 16 "
				     RUN " " LORA " --steps 4 --resume %s/ck/checkpoint-2", dir,
				     dir), 2, "%s", out);
	cr_assert(strstr(out, "is not the base"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " --lora-r 8 --lora-targets q_proj,v_proj --steps 4 "
				     "--resume %s/ck/checkpoint-2", dir, dir), 2, "%s", out);
	cr_assert(strstr(out, "--lora-r is 8 in this run, 4 in the checkpoint"), "%s", out);
}

/* dir/ck/checkpoint-2's metadata with key set to value, its CRC line recomputed (from the
 * file as saved, kept beside it) */
static void set_recorded(const char *key, const char *value)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "cd %s/ck/checkpoint-2 && { [ -f meta.orig ] || "
		 "cp zinc-checkpoint.txt meta.orig; } && python3 -c \"import sys, zlib; "
		 "k, v = sys.argv[1:]; lines = [l if not l.startswith(k + '=') else k + '=' + v "
		 "for l in open('meta.orig').read().splitlines() if not l.startswith('crc32=')]; "
		 "d = ('\\n'.join(lines) + '\\n').encode(); open('zinc-checkpoint.txt', 'wb')"
		 ".write(d + b'crc32=%%08x\\n' %% (zlib.crc32(d) & 0xffffffff))\" '%s' '%s'",
		 dir, key, value);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* A recorded setting that is not a number in range (a metadata file edited by hand, its
 * CRC recomputed) is refused naming the key: atoi and strtod read "8x" as 8 and "x" as 0 */
Test(cli_resume, recorded_settings_are_checked)
{
	static const char *const cases[][2] = {
		{ "run.lora.alpha", "8x" }, { "run.lora.alpha", "x" }, { "run.lora.r", "0" },
		{ "run.lora.r", "4.5" },    { "run.lora.dropout", "nan" },
		{ "run.lora.rslora", "2" }, { "run.model.flags", "-1" },
	};
	char want[128];

	make_base("base", 1);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " " LORA " --steps 2 --save-dir %s/ck", dir, dir), 0, "%s",
		     out);
	set_recorded("run.lora.alpha", "0x1p+3"); /* 8 as saved: the edit itself is sound */
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " RUN " --steps 3 --resume "
				     "%s/ck/checkpoint-2", dir), 0, "%s", out);
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		set_recorded(cases[i][0], cases[i][1]);
		cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train " RUN " --steps 3 --resume "
					     "%s/ck/checkpoint-2", dir), 2, "%s=%s: %s", cases[i][0],
			     cases[i][1], out);
		snprintf(want, sizeof(want), "%s '%s' in its metadata is not a", cases[i][0],
			 cases[i][1]);
		cr_assert(strstr(out, want), "want '%s' in:\n%s", want, out);
	}
}

/* LoRA without --save-dir: SIGTERM writes --save-adapter, says so, exits 0; the adapter
 * is a straight 2-step run's. */
Test(cli_resume, lora_sigterm_writes_the_adapter)
{
	make_base("base", 1);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), STOP_AT_2, "train --init-from %s/base "
				     "--seq 16 " RUN " " LORA " --steps 100 --save-adapter %s/S", dir,
				     dir), 0, "%s", out);
	cr_assert(strstr(out, "stopped by SIGTERM after step 2: writing the adapter to") &&
		  strstr(out, "saved adapter") && !strstr(out, "nothing saved"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " " LORA " --steps 2 --save-adapter %s/T", dir, dir), 0,
		     "%s", out);
	same_file("S/adapter_model.safetensors", "T/adapter_model.safetensors");
}

/* --init-adapter given again at a resume is checked against the recorded one: the same
 * adapter resumes, another is refused naming it. */
Test(cli_resume, lora_init_adapter_is_checked_on_resume)
{
	make_base("base", 1);
	/* X1 after one step, X4 after four (WarmupDecayLR's first steps barely move it) */
	for (int s = 1; s <= 4; s += 3)
		cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base "
					     "--seq 16 " RUN " " LORA " --steps %d --save-adapter "
					     "%s/X%d", dir, s, dir, s), 0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " " LORA " --init-adapter %s/X1 --steps 2 --save-dir %s/ck",
				     dir, dir, dir), 0, "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " " LORA " --init-adapter %s/X1 --steps 3 --save-dir %s/ck "
				     "--resume %s/ck", dir, dir, dir, dir), 0, "%s", out);
	cr_assert(strstr(out, "resumed from"), "%s", out);
	cr_assert_eq(zt_zinc_run(out, sizeof(out), "", "train --init-from %s/base --seq 16 "
				     RUN " " LORA " --init-adapter %s/X4 --steps 3 --resume "
				     "%s/ck/checkpoint-2", dir, dir, dir), 2, "%s", out);
	cr_assert(strstr(out, "--init-adapter") && strstr(out, "is not the adapter the run "
							    "started from"), "%s", out);
}
