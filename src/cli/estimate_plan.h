/* zinc estimate with a model (estimate_plan.c): the memory zinc train plans for the same
 * flags, from the same code (zn_engine_plan_memory over zn_train_setup_from_args), so its
 * "memory plan:" line is the run's; the same plan for every ZeRO stage and offload
 * choice; the activations per layer. Internal to src/cli. */
#ifndef ZN_CLI_ESTIMATE_PLAN_H
#define ZN_CLI_ESTIMATE_PLAN_H

#include <stdbool.h>
#include <stdio.h>

/* Whether argv (zinc estimate's, argv[0] "estimate") is for the plan: a model is given
 * (--model, --model-config, --init-from or a shape flag) and neither --fit nor --params,
 * --largest-layer, --lora-params (the ZeRO paper's table). */
bool zn_estimate_plan_wanted(int argc, char **argv);
/* Runs it: the process exit status (0, ZN_EXIT_USAGE). */
int zn_estimate_plan(int argc, char **argv);
/* zinc estimate --help's text and zinc train's (cmd_estimate.c): the options "did you
 * mean" chooses from. */
void zn_estimate_help(FILE *f);

#endif
