/* The Llama family's optional model ops: one layer from, every layer into a Hugging Face
 * directory or .safetensors file (model/hf_dir.h). Weights are [out, in] in memory and in
 * the file, with no vocabulary padding: a tensor is read or written as it is. */
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "model/hf_dir.h"
#include "model/llama/llama.h"

int zn_llama_load_layer(const struct zn_llama_config *cfg, const struct zn_layer_desc *L,
			const char *path, float *params_h)
{
	struct zn_hf_src *s = NULL;
	int rc = zn_hf_open(&s, path);

	(void)cfg;
	for (int i = 0; !rc && i < L->tensor_count; i++) {
		const struct zn_tensor_desc *d = &L->tensors[i];
		const struct zn_st_tensor *t;
		const struct zn_st_file *f;

		rc = zn_hf_find(s, d->name, &t, &f);
		if (rc == -ENOENT)
			zn_error("%s: no tensor '%s'", path, d->name);
		if (!rc && (t->ndim != d->ndim || t->shape[0] != d->file_shape[0] ||
			    (d->ndim == 2 && t->shape[1] != d->file_shape[1]))) {
			zn_error("%s: tensor '%s' does not have the shape the model needs",
				 zn_st_path(f), d->name);
			rc = -EINVAL;
		}
		if (!rc)
			rc = zn_hf_read_rows(s, d->name, 0, d->file_shape[0], ZN_DTYPE_F32,
					     params_h + d->offset);
	}
	zn_hf_close(s);
	return rc;
}

int zn_llama_save(const struct zn_llama_config *cfg, const struct zn_layer_desc *layers,
		  const float *const *params_h, const char *path, enum zn_dtype dtype)
{
	struct zn_hf_save_opts o = { dtype, 0, NULL, NULL };
	struct zn_hf_config hf;
	struct zn_st_entry *e;
	int n = zn_llama_layer_count(cfg), count = 0, rc;

	e = calloc((size_t)n * ZN_MODEL_MAX_TENSORS, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (int l = 0; l < n; l++) {
		for (int i = 0; i < layers[l].tensor_count; i++, count++) {
			const struct zn_tensor_desc *d = &layers[l].tensors[i];

			e[count].name = d->name;
			e[count].ndim = d->ndim;
			e[count].shape[0] = d->file_shape[0];
			e[count].shape[1] = d->file_shape[1];
			e[count].data_h = params_h[l] + d->offset;
		}
	}
	zn_llama_config_to_hf(cfg, &hf);
	rc = zn_hf_save(path, &hf, &o, e, count);
	free(e);
	return rc;
}
