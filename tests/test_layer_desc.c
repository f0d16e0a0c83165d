/* A layer's tensors are a pointer and a count (model.h zn_layer_desc_add): as many as a
 * family needs, owned by the descriptor; the optimizer's spans (sched/optim.h) merge
 * adjacent tensors of one weight-decay flag and refuse a layer that alternates it more
 * often than the kernels' span limit. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>

#include "model/model.h"
#include "sched/optim.h"

/* n tensors of 3 elements each; tensor t decays when decay(t) */
static void layer(struct zn_layer_desc *L, int n, bool (*decay)(int))
{
	*L = (struct zn_layer_desc){ .tied_layer = -1 };
	for (int t = 0; t < n; t++) {
		struct zn_tensor_desc *d = zn_layer_desc_add(L);

		cr_assert_not_null(d);
		snprintf(d->name, sizeof(d->name), "t.%d.weight", t);
		d->ndim = 1;
		d->shape[0] = d->file_shape[0] = 3;
		d->numel = 3;
		d->offset = L->numel;
		d->decay = decay(t);
		L->numel += 3;
	}
	cr_assert_eq(zn_layer_desc_done(L), 0);
}

static bool all(int t)
{
	(void)t;
	return true;
}

static bool alternate(int t)
{
	return t % 2;
}

Test(layer_desc, more_tensors_than_sixteen_keep_their_names)
{
	struct zn_layer_desc L;

	layer(&L, 1000, all);
	cr_assert_eq(L.tensor_count, 1000);
	cr_assert_geq(L.tensor_cap, 1000);
	for (int t = 0; t < 1000; t++) {
		char want[32];

		snprintf(want, sizeof(want), "t.%d.weight", t);
		cr_assert_str_eq(L.tensors[t].name, want);
		cr_assert_eq(L.tensors[t].parts, 0, "an added tensor starts zeroed");
	}
	zn_layer_desc_release(&L);
	cr_assert_null(L.tensors);
	cr_assert_eq(L.tensor_count, 0);
	zn_layer_desc_release(&L); /* twice: nothing */
	zn_layer_desc_release(NULL);
}

Test(layer_desc, optimizer_spans_merge_one_flag)
{
	struct zn_optim_span sp[ZN_OPTIM_MAX_SPANS];
	struct zn_layer_desc L;
	int n;

	layer(&L, 1000, all); /* a LoRA layer of hundreds of adapters: one span */
	n = zn_optim_spans(&L, 0, L.numel, sp);
	cr_assert_eq(n, 1);
	cr_assert(sp[0].i == 0 && sp[0].len == L.numel && sp[0].decay);
	n = zn_optim_spans(&L, 4, 10, sp); /* a rank's slice */
	cr_assert(n == 1 && sp[0].i == 0 && sp[0].len == 10);
	zn_layer_desc_release(&L);

	layer(&L, ZN_OPTIM_MAX_SPANS, alternate); /* every tensor its own span */
	n = zn_optim_spans(&L, 0, L.numel, sp);
	cr_assert_eq(n, ZN_OPTIM_MAX_SPANS);
	for (int s = 0; s < n; s++)
		cr_assert(sp[s].i == (uint64_t)s * 3 && sp[s].len == 3 && sp[s].decay == (s % 2));
	/* a slice from inside tensor 1 to inside tensor 3: 3 spans, cut at the slice */
	n = zn_optim_spans(&L, 4, 6, sp);
	cr_assert_eq(n, 3);
	cr_assert(sp[0].i == 0 && sp[0].len == 2 && sp[0].decay);
	cr_assert(sp[1].i == 2 && sp[1].len == 3 && !sp[1].decay);
	cr_assert(sp[2].i == 5 && sp[2].len == 1 && sp[2].decay);
	zn_layer_desc_release(&L);

	layer(&L, ZN_OPTIM_MAX_SPANS + 1, alternate);
	cr_assert_eq(zn_optim_spans(&L, 0, L.numel, sp), -E2BIG);
	zn_layer_desc_release(&L);
}
