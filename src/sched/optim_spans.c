/* The one tensor-span rule of the optimizer (optim.h zn_optim_spans): a layer's span split
 * where the tensors' weight-decay flag changes, so each part takes its tensors' flag
 * (adjacent tensors with the same flag are one span: AdamW is element-wise, so the values
 * are those of one span per tensor, and a layer of hundreds of tensors, LoRA on every
 * expert, still has a few spans). Pure; used by the CPU AdamW (optim.c) and the device's
 * (optim_device.c). */
#include <errno.h>

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
		if (n && out[n - 1].decay == L->tensors[t].decay &&
		    out[n - 1].i + out[n - 1].len == a - first) {
			out[n - 1].len += b - a;
			continue;
		}
		if (n == ZN_OPTIM_MAX_SPANS)
			return -E2BIG;
		out[n++] = (struct zn_optim_span){ .i = a - first, .len = b - a,
						   .decay = L->tensors[t].decay };
	}
	return n;
}
