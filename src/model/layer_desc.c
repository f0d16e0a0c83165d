/* A layer descriptor's tensor array (model.h): grown by the family's describe, freed by
 * whoever holds the descriptor. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "model/model.h"

struct zn_tensor_desc *zn_layer_desc_add(struct zn_layer_desc *L)
{
	struct zn_tensor_desc *t;

	if (L->add_failed)
		return NULL;
	if (L->tensor_count == L->tensor_cap) {
		int cap = L->tensor_cap ? 2 * L->tensor_cap : 16;

		t = realloc(L->tensors, (size_t)cap * sizeof(*t));
		if (!t) {
			L->add_failed = true;
			return NULL;
		}
		L->tensors = t;
		L->tensor_cap = cap;
	}
	t = &L->tensors[L->tensor_count++];
	memset(t, 0, sizeof(*t));
	return t;
}

int zn_layer_desc_done(struct zn_layer_desc *L)
{
	if (!L->add_failed)
		return 0;
	zn_error("layer %d's descriptor: out of memory for its tensors", L->index);
	zn_layer_desc_release(L);
	return -ENOMEM;
}

void zn_layer_desc_release(struct zn_layer_desc *L)
{
	if (!L)
		return;
	free(L->tensors);
	L->tensors = NULL;
	L->tensor_count = L->tensor_cap = 0;
	L->add_failed = false;
}

void zn_layer_descs_free(struct zn_layer_desc *ld, int n)
{
	for (int l = 0; ld && l < n; l++)
		zn_layer_desc_release(&ld[l]);
	free(ld);
}
