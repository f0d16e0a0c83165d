/* zinc estimate's LoRA adapters (estimate_lora.h): the model from the flags, wrapped as
 * zinc train wraps it, its adapters summed. No weights are allocated. */
#include "cli/estimate_lora.h"

#include "cli/train_model.h"
#include "model/lora/lora.h"

int zn_estimate_lora_params(int argc, char **argv, int r, const char *targets,
			    uint64_t *params)
{
	struct zn_train_model tm;
	struct zn_lora_config lc = { .r = r, .alpha = (float)r };
	int rc = zn_train_model_from_flags(argc, argv, &tm);

	*params = 0;
	if (!rc) {
		lc.base = zn_train_model_get(&tm);
		rc = zn_lora_add_targets(&lc, targets);
	}
	if (!rc)
		rc = zn_lora_prepare(&lc);
	for (int l = 0; !rc && l < lc.layers; l++)
		for (int i = 0; i < lc.lay[l].count; i++)
			*params += (uint64_t)r *
				   (uint64_t)(lc.lay[l].ad[i].in + lc.lay[l].ad[i].out);
	zn_lora_release(&lc);
	return rc;
}
