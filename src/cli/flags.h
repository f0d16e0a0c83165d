/* "unknown option" for every zinc command, with the option it most likely meant: the
 * command's own spelling of a Hugging Face TrainingArguments / PEFT name
 * (--learning-rate -> --lr, --per-device-train-batch-size -> --micro-batch, --lora-target
 * -> --lora-targets), the same name with '_' for '-' (--micro_batch), or the closest of
 * the command's options by edit distance. The command's options are read from its own
 * --help text (every "--name" in it), so a flag cannot be accepted and never suggested.
 * Internal to src/cli.
 *
 *     zn_cli_unknown_flag("zinc train", "--learning-rate", usage);
 *     // zinc train: unknown option '--learning-rate' (did you mean --lr? Hugging Face's
 *     // --learning-rate is zinc's --lr)
 */
#ifndef ZN_CLI_FLAGS_H
#define ZN_CLI_FLAGS_H

#include <stddef.h>
#include <stdio.h>

/* Logs the error line for arg (the whole argument as given) of command cmd ("zinc
 * train"); help writes the command's --help text. */
void zn_cli_unknown_flag(const char *cmd, const char *arg, void (*help)(FILE *f));

/* The suggestion alone: writes "--lr" (and, for a Hugging Face name, its HF spelling to
 * hf, else "") and returns 1, or returns 0 when nothing is close. For tests. */
int zn_cli_suggest_flag(const char *arg, void (*help)(FILE *f), char *flag, size_t size,
			char *hf, size_t hf_size);

#endif
