/* zinc train's command line as a run reads it, for zinc estimate (cmd_train.c): the
 * config (its "auto" values resolved and validated for the ranks, as the run does), the
 * model (wrapped by LoRA as the run wraps it) and the engine options, built by the same
 * code as the run's, so a plan made from them is the run's plan. Internal to zinc (src/train).
 *
 *     struct zn_train_setup *s = calloc(1, sizeof(*s));
 *     rc = zn_train_setup_from_args(s, argc, argv, world, "zinc estimate", help);
 *     ... zn_engine_plan_memory(&s->cfg, &s->model, &s->eo, world, budget, ...)
 *     zn_train_setup_release(s);
 */
#ifndef ZN_TRAIN_SETUP_H
#define ZN_TRAIN_SETUP_H

#include <stdbool.h>
#include <stdio.h>

#include "train/train_lora.h"
#include "train/train_model.h"
#include "zinc.h"

struct zn_train_cli;

struct zn_train_setup {
	struct zn_config cfg;
	struct zn_train_model tm;   /* the model as the flags give it (the base, with LoRA) */
	struct zn_model model;      /* what the engine is given: tm, or LoRA's wrapping */
	struct zn_engine_options eo; /* seq_len as the run's */
	bool lora;                  /* a LoRA run: model wraps tm */
	struct zn_train_cli *opts;    /* zinc train's parsed options (cmd_train.c): the LoRA
				     * settings model points into, a --resume checkpoint */
};

/* s must not move afterwards (model points into it). An unknown flag is reported as cmd's
 * ("zinc estimate"), with a suggestion from help_text. 0 or ZN_EUSAGE (logged; -h/--help:
 * ZN_EUSAGE too, with nothing logged). */
int zn_train_setup_from_args(struct zn_train_setup *s, int argc, char **argv, int world,
			     const char *cmd, void (*help_text)(FILE *f));
void zn_train_setup_release(struct zn_train_setup *s);
/* zinc train --help's text. */
void zn_train_usage(FILE *f);

#endif
