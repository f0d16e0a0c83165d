/* The one tensor-span rule of the optimizer (optim.h zn_optim_spans): a layer's span split
 * at tensor boundaries, so each part takes its tensor's weight-decay flag. Pure; used by
 * the CPU AdamW (optim.c) and the device's (optim_device.c). */
#include "sched/optim.h"

#include "model/model.h"

int zn_optim_spans(const struct zn_layer_desc *L, uint64_t first, uint64_t count,
		   struct zn_optim_span *out)
{
	int n = 0;

	for (int t = 0; t < L->tensor_count; t++) {
		uint64_t a = L->tensors[t].offset, b = a + L->tensors[t].numel;

		if (a < first)
			a = first;
		if (b > first + count)
			b = first + count;
		if (a >= b)
			continue;
		out[n++] = (struct zn_optim_span){ .i = a - first, .len = b - a,
						   .decay = L->tensors[t].decay };
	}
	return n;
}
