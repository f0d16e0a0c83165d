/* The checkpoint names of a tensor stored as several (model.h: a stack of experts). */
#include <stdio.h>

#include "model/model.h"

int zn_tensor_part_count(const struct zn_tensor_desc *d)
{
	return d->parts > 0 ? d->parts : 1;
}

void zn_tensor_part_name(const struct zn_tensor_desc *d, int j, char *buf, size_t size)
{
	if (d->parts <= 0) {
		snprintf(buf, size, "%s", d->name);
		return;
	}
	snprintf(buf, size, "%s%d.%s", d->part_prefix, j / d->part_kinds,
		 d->part_suffix[j % d->part_kinds]);
}
