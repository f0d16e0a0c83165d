/* The embedding backward's scatter-add, dw[key[p]] += dout[p] for every row p < BT, as a
 * sorted, segmented reduction: the CPU mirror of kernels/cuda/embed_backward.cu (the CUDA
 * sort is CUB's stable radix sort; this one sorts (key, row) pairs, a total order, so any
 * correct sort gives the same, stable, result). Each segment (the rows of one distinct
 * key, in increasing row order) is added by one thread, row after row: every dw element is
 * summed from its old value in (b, t) order, exactly the serial walk, for any thread
 * count. */
#include <errno.h>
#include <stdlib.h>

#include "ops.h"
#include "par.h"

struct pair {
	int key, row;
};

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->row > y->row) - (x->row < y->row);
}

int zn_cpu_sort_rows_by_key(int *order, const int *key, long n)
{
	struct pair *p;

	if (n < 1)
		return 0;
	if (n > INT32_MAX)
		return -EINVAL;
	p = malloc((size_t)n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (long i = 0; i < n; i++)
		p[i] = (struct pair){ key[i], (int)i };
	qsort(p, (size_t)n, sizeof(*p), cmp_pair);
	for (long i = 0; i < n; i++)
		order[i] = p[i].row;
	free(p);
	return 0;
}

/* the serial walk: without memory for the sort (the same bits) */
static void add_serial(float *dw, const float *dout, const int *key, long BT, int C)
{
	for (long bt = 0; bt < BT; bt++) {
		const float *d = dout + bt * C;
		float *w = dw + (long)key[bt] * C;

		for (int i = 0; i < C; i++)
			w[i] += d[i];
	}
}

void zn_cpu_segment_add_rows(float *dw, const float *dout, const int *key, long BT, int C)
{
	int *order = BT > 0 && BT <= INT32_MAX ? malloc((size_t)BT * sizeof(int)) : NULL;

	if (!order || zn_cpu_sort_rows_by_key(order, key, BT)) {
		add_serial(dw, dout, key, BT, C);
		free(order);
		return;
	}
	/* i is a segment's first sorted index when its key differs from the previous one */
#pragma omp parallel for schedule(dynamic, 16) if (BT * C > ZN_CPU_PAR_MIN)
	for (long i = 0; i < BT; i++) {
		int k = key[order[i]];
		float *w = dw + (long)k * C;

		if (i > 0 && key[order[i - 1]] == k)
			continue;
		for (long j = i; j < BT && key[order[j]] == k; j++) {
			const float *d = dout + (long)order[j] * C;

			for (int c = 0; c < C; c++)
				w[c] += d[c];
		}
	}
	free(order);
}
