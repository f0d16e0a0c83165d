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
		/* a stack of experts is parts tensors of rows each (model.h) */
		const int64_t rows = d->parts > 0 ? d->file_shape[0] / d->parts : d->file_shape[0];

		for (int j = 0; !rc && j < zn_tensor_part_count(d); j++) {
			const struct zn_st_tensor *t;
			const struct zn_st_file *f;
			char name[ZN_MODEL_NAME_MAX + 32];

			zn_tensor_part_name(d, j, name, sizeof(name));
			rc = zn_hf_find(s, name, &t, &f);
			if (rc == -ENOENT)
				zn_error("%s: no tensor '%s'", path, name);
			if (!rc && (t->ndim != d->ndim || t->shape[0] != rows ||
				    (d->ndim == 2 && t->shape[1] != d->file_shape[1]))) {
				zn_error("%s: tensor '%s' does not have the shape the model needs",
					 zn_st_path(f), name);
				rc = -EINVAL;
			}
			if (!rc)
				rc = zn_hf_read_rows(s, name, 0, rows, ZN_DTYPE_F32,
						     params_h + d->offset + (uint64_t)j *
						     (uint64_t)rows * (uint64_t)d->file_shape[1]);
		}
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
	char (*names)[ZN_MODEL_NAME_MAX + 32];
	int n = zn_llama_layer_count(cfg), count = 0, total = 0, rc;

	for (int l = 0; l < n; l++) /* a stack of experts is many tensors (model.h) */
		for (int i = 0; i < layers[l].tensor_count; i++)
			total += zn_tensor_part_count(&layers[l].tensors[i]);
	e = calloc((size_t)total, sizeof(*e));
	names = calloc((size_t)total, sizeof(*names));
	if (!e || !names) {
		free(e);
		free(names);
		return -ENOMEM;
	}
	for (int l = 0; l < n; l++) {
		for (int i = 0; i < layers[l].tensor_count; i++) {
			const struct zn_tensor_desc *d = &layers[l].tensors[i];
			const int parts = zn_tensor_part_count(d);
			const uint64_t each = d->numel / (uint64_t)parts;

			for (int j = 0; j < parts; j++, count++) {
				zn_tensor_part_name(d, j, names[count], sizeof(names[count]));
				e[count].name = names[count];
				e[count].ndim = d->ndim;
				e[count].shape[0] = d->file_shape[0] / parts;
				e[count].shape[1] = d->file_shape[1];
				e[count].data_h = params_h[l] + d->offset + (uint64_t)j * each;
			}
		}
	}
	zn_llama_config_to_hf(cfg, &hf);
	rc = zn_hf_save(path, &hf, &o, e, count);
	free(names);
	free(e);
	return rc;
}
