/* zinc train's command line (train_flags.c): the flags into the config, the model and the
 * run's options (train/trainer.h), with the checkpoint a --resume names opened and checked
 * against the model. zinc train (cmd_train.c) and zinc estimate's plan (train_setup.h)
 * read it the same way. Internal to src/cli.
 *
 *     struct zn_train_cli o;
 *     rc = zn_train_cli_parse(argc, argv, &cfg, &tm, &o, &help, "zinc train", usage);
 *     ... o.run is what zn_train_begin takes ...
 *     zn_train_cli_release(&o);
 */
#ifndef ZN_CLI_TRAIN_FLAGS_H
#define ZN_CLI_TRAIN_FLAGS_H

#include <stdbool.h>
#include <stdio.h>

#include "train/train_model.h"
#include "train/train_recipe.h"
#include "train/trainer.h"
#include "zinc.h"

/* zinc train's options: the run's (train/trainer.h) and the command line's own */
struct zn_train_cli {
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

/* argv[0] is the command ("train"). cmd and help_text name the command for "unknown
 * option" (zinc train or zinc estimate). *help: -h or --help was given (nothing else is
 * read). Returns 0, or ZN_EUSAGE / a negative code (logged); o->ckpt_bad: --resume could
 * not be opened. o must not move afterwards (the checkpoint options point into it). */
int zn_train_cli_parse(int argc, char **argv, struct zn_config *cfg, struct zn_train_model *tm,
		       struct zn_train_cli *o, bool *help, const char *cmd,
		       void (*help_text)(FILE *f));
/* Frees what parse allocated: the LoRA settings, the recipe, the --resume checkpoint. */
void zn_train_cli_release(struct zn_train_cli *o);

#endif
