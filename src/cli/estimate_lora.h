/* zinc estimate's LoRA adapters for any model family (docs/lora.md): the trainable
 * parameters of --lora-r R --lora-targets LIST on the model zinc train's model flags
 * define, counted from the same placement zinc train uses (src/model/lora). Internal to
 * src/cli. */
#ifndef ZN_CLI_ESTIMATE_LORA_H
#define ZN_CLI_ESTIMATE_LORA_H

#include <stdint.h>

/* argv: model flags only (as zn_train_model_size). Sets *params to sum over the targeted
 * modules of r x (in + out). Returns 0 or -EINVAL (logged: an unknown target or one that
 * matches nothing in this model). */
int zn_estimate_lora_params(int argc, char **argv, int r, const char *targets,
			    uint64_t *params);

#endif
