/* The tensors of a Hugging Face checkpoint for a zn_hf_config (its family's hf_layout,
 * model/family.h, emitting them through zn_hf_emit), their count, and the parameter count. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/family.h"
#include "model/hf_config.h"
#include "model/hf_family.h"

struct zn_hf_emit {
	struct zn_hf_tensor_spec *out; /* NULL: count only */
	int n;
};

void zn_hf_emit(struct zn_hf_emit *e, int layer, int ndim, int64_t d0, int64_t d1,
		const char *fmt, ...)
{
	struct zn_hf_tensor_spec *t;
	va_list ap;

	if (e->out) {
		t = &e->out[e->n];
		va_start(ap, fmt);
		vsnprintf(t->name, sizeof(t->name), fmt, ap);
		va_end(ap);
		t->ndim = ndim;
		t->shape[0] = d0;
		t->shape[1] = ndim == 2 ? d1 : 0;
		t->layer = layer;
	}
	e->n++;
}

static int walk(const struct zn_hf_config *cfg, struct zn_hf_tensor_spec *out)
{
	struct zn_hf_emit e = { out, 0 };

	cfg->family->hf_layout(cfg, &e);
	return e.n;
}

int zn_hf_layout_count(const struct zn_hf_config *cfg)
{
	return walk(cfg, NULL);
}

void zn_hf_layout(const struct zn_hf_config *cfg, struct zn_hf_tensor_spec *out)
{
	walk(cfg, out);
}

uint64_t zn_hf_param_count(const struct zn_hf_config *c)
{
	return c->family->hf_param_count(c);
}
