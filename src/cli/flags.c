/* "did you mean" for the options of every command (flags.h). */
#include "cli/flags.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/edit.h"
#include "core/log.h"

#define FLAG_MAX 64
#define FLAGS_MAX 512

/* Hugging Face TrainingArguments (and PEFT LoraConfig, the example scripts' data and model
 * arguments) as zinc names them; a row is suggested only to a command that has the zinc
 * flag (docs/config.md, "Hugging Face names"). */
static const struct {
	const char *hf, *zinc;
} hf_names[] = {
	{ "learning-rate", "lr" },
	{ "per-device-train-batch-size", "micro-batch" },
	{ "per-gpu-train-batch-size", "micro-batch" },
	{ "batch-size", "micro-batch" },
	{ "gradient-accumulation-steps", "grad-accum" },
	{ "num-train-epochs", "epochs" },
	{ "max-steps", "steps" },
	{ "output-dir", "save-dir" },
	{ "resume-from-checkpoint", "resume" },
	{ "logging-steps", "steps-per-print" },
	{ "max-grad-norm", "grad-clip" },
	{ "adam-beta1", "betas" },
	{ "adam-beta2", "betas" },
	{ "adam-epsilon", "eps" },
	{ "lr-scheduler-type", "lr-schedule" },
	{ "optim", "optimizer" },
	{ "deepspeed", "config" },
	{ "eval-strategy", "eval-steps" },
	{ "evaluation-strategy", "eval-steps" },
	{ "model-name-or-path", "init-from" },
	{ "model-name", "init-from" },
	{ "model", "init-from" },
	{ "config-name", "model-config" },
	{ "torch-dtype", "dtype" },
	{ "max-seq-length", "seq" },
	{ "max-length", "seq" },
	{ "model-max-length", "seq" },
	{ "block-size", "seq" },
	{ "train-file", "data" },
	{ "dataset", "data" },
	{ "validation-file", "val-data" },
	{ "data-seed", "seed" },
	{ "full-determinism", "deterministic" },
	{ "lora-target", "lora-targets" },
	{ "target-modules", "lora-targets" },
	{ "lora-rank", "lora-r" },
	{ "r", "lora-r" },
	{ "adapter-name-or-path", "init-adapter" },
	{ "chat-template", "template" },
};

struct known {
	char name[FLAGS_MAX][FLAG_MAX]; /* without "--" */
	int n;
};

static bool is_flag_char(int c)
{
	return isalnum(c) || c == '-' || c == '_';
}

static void add(struct known *k, const char *s, size_t len)
{
	if (len == 0 || len >= FLAG_MAX || k->n >= FLAGS_MAX)
		return;
	for (int i = 0; i < k->n; i++)
		if (strlen(k->name[i]) == len && !strncmp(k->name[i], s, len))
			return;
	memcpy(k->name[k->n], s, len);
	k->name[k->n++][len] = 0;
}

/* Every "--name" (and "--[no-]name") of the help text. */
static void known_of(void (*help)(FILE *f), struct known *k)
{
	FILE *f = tmpfile();
	char line[1024];

	k->n = 0;
	if (!f)
		return;
	help(f);
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		for (char *p = strstr(line, "--"); p; p = strstr(p, "--")) {
			size_t len;

			p += 2;
			if (!strncmp(p, "[no-]", 5))
				p += 5;
			for (len = 0; is_flag_char((unsigned char)p[len]); len++)
				;
			if (len && isalnum((unsigned char)p[0]))
				add(k, p, len);
			p += len;
		}
	}
	fclose(f);
}

static bool has(const struct known *k, const char *name)
{
	for (int i = 0; i < k->n; i++)
		if (!strcmp(k->name[i], name))
			return true;
	return false;
}

/* The shortest flag that name begins, up to a '-' (a flag cut short: --prefetch for
 * --prefetch-depth), or -1. */
static int prefix_of(const struct known *k, const char *name)
{
	size_t n = strlen(name);
	int best = -1;

	if (n < 3)
		return -1;
	for (int i = 0; i < k->n; i++)
		if (!strncmp(k->name[i], name, n) && k->name[i][n] == '-' &&
		    (best < 0 || strlen(k->name[i]) < strlen(k->name[best])))
			best = i;
	return best;
}

/* arg without its dashes and value, lower case, '_' as '-' ("--Learning_Rate=3" ->
 * "learning-rate"). */
static void normalize(const char *arg, char *out, size_t size)
{
	size_t n = 0;

	while (*arg == '-')
		arg++;
	for (; *arg && *arg != '=' && n + 1 < size; arg++)
		out[n++] = *arg == '_' ? '-' : (char)tolower((unsigned char)*arg);
	out[n] = 0;
}

int zn_cli_suggest_flag(const char *arg, void (*help)(FILE *f), char *flag, size_t size,
			char *hf, size_t hf_size)
{
	struct known *k = malloc(sizeof(*k));
	char name[FLAG_MAX];
	int best = -1, best_d = 1000;

	flag[0] = 0;
	hf[0] = 0;
	if (!k)
		return 0;
	known_of(help, k);
	normalize(arg, name, sizeof(name));
	for (size_t i = 0; name[0] && i < sizeof(hf_names) / sizeof(*hf_names); i++)
		if (!strcmp(name, hf_names[i].hf) && has(k, hf_names[i].zinc) &&
		    strcmp(name, hf_names[i].zinc)) {
			snprintf(flag, size, "--%s", hf_names[i].zinc);
			snprintf(hf, hf_size, "--%s", hf_names[i].hf);
			free(k);
			return 1;
		}
	for (int i = 0; name[0] && i < k->n; i++) {
		int d = zn_edit_distance(name, k->name[i]);

		if (d < best_d) {
			best_d = d;
			best = i;
		}
	}
	/* a typo, not another word: at most 3 edits, and fewer than a third of the name
	 * (rounded up) for short names */
	if (best >= 0 && best_d <= 3 && best_d <= ((int)strlen(name) + 2) / 3)
		snprintf(flag, size, "--%s", k->name[best]);
	else if ((best = prefix_of(k, name)) >= 0)
		snprintf(flag, size, "--%s", k->name[best]);
	free(k);
	return flag[0] != 0;
}

void zn_cli_unknown_flag(const char *cmd, const char *arg, void (*help)(FILE *f))
{
	char flag[FLAG_MAX + 2], hf[FLAG_MAX + 2];

	if (strncmp(arg, "-", 1)) {
		zn_error("%s: unexpected argument '%s' (%s --help lists the options)", cmd, arg,
			 cmd);
		return;
	}
	if (!zn_cli_suggest_flag(arg, help, flag, sizeof(flag), hf, sizeof(hf)))
		zn_error("%s: unknown option '%s' (%s --help lists the options)", cmd, arg, cmd);
	else if (!strncmp(arg, flag, strlen(flag)) &&
		 (arg[strlen(flag)] == 0 || arg[strlen(flag)] == '='))
		/* one of the command's options, but not of this use of it */
		zn_error("%s: option '%s' does not apply here (%s --help says where it does)", cmd,
			 flag, cmd);
	else if (hf[0])
		zn_error("%s: unknown option '%s' (did you mean %s? Hugging Face's %s is zinc's "
			 "%s)", cmd, arg, flag, hf, flag);
	else
		zn_error("%s: unknown option '%s' (did you mean %s?)", cmd, arg, flag);
}
