/* The embedding backward's scatter-add, dw[key[p]] += dout[p] for every row p < BT, on
 * CUDA as a sorted, segmented reduction (the token embedding's dwte, GPT-2's dwte, and
 * dwpe with packed documents' positions):
 *
 *   1. (key[p], p) pairs sorted by key with CUB's radix sort, which is stable: equal keys
 *      keep their rows in increasing p, the (b, t) order;
 *   2. one block per (sorted index i, 128 channels); only a segment's first index (the
 *      first row of each distinct key) works: each thread adds its channel of the
 *      segment's rows, in order, to dw[key] (one load, one store).
 *
 * Every dw element is summed by one thread starting from its old value in (b, t) order,
 * exactly the CPU's serial walk: bit-identical to kernels/cpu, no atomics. The parallelism
 * is distinct keys x channels instead of channels alone; the longest segment (the most
 * frequent token) bounds the time.
 *
 * Scratch: 3 x BT ints and CUB's temporary storage, from cudaMallocAsync on the op's
 * stream and freed behind the kernels in stream order (the CUDA default pool, outside the
 * zinc device budget: 12 bytes a token, 98 KiB at 8192 tokens). A failure is noted (the
 * sticky error) and nothing is added.
 */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

extern "C" {
#include "core/log.h"
}

#define SEG_THREADS 128

static __global__ void iota_kernel(int *v, long n)
{
	for (size_t i = first_index(); i < (size_t)n; i += grid_step())
		v[i] = (int)i;
}

/* blockIdx.x: sorted index i; blockIdx.y: a chunk of SEG_THREADS channels */
static __global__ void segment_add_kernel(float *dw, const float *dout, const int *key_s,
					  const int *row_s, long BT, int C)
{
	long i = blockIdx.x;
	int c = (int)(blockIdx.y * blockDim.x + threadIdx.x);
	int key;
	float acc;

	if (i >= BT || c >= C)
		return;
	key = key_s[i];
	if (i > 0 && key_s[i - 1] == key)
		return; /* not the segment's first row: its head sums it */
	acc = dw[(size_t)key * C + c];
	for (long j = i; j < BT && key_s[j] == key; j++)
		acc += dout[(size_t)row_s[j] * C + c];
	dw[(size_t)key * C + c] = acc;
}

static bool note(cudaError_t err, const char *op, const char *what, int line)
{
	if (err == cudaSuccess)
		return false;
	zn_error("%s: %s failed at %s:%d: %s", op, what, __FILE__, line, cudaGetErrorString(err));
	zn_cuda_note_error();
	return true;
}

static size_t align256(size_t n)
{
	return (n + 255) / 256 * 256;
}

void zn_cuda_segment_add_rows(cudaStream_t s, const char *op, float *dw,
					 const float *dout, const int *key, long BT, int C)
{
	size_t temp_bytes = 0, ints, total;
	char *buf = NULL;
	int *key_s, *row, *row_s;
	void *temp;

	if (BT < 1 || C < 1)
		return;
	if (BT > INT32_MAX) { /* CUB's item count and the row ids are int */
		zn_error("%s: %ld rows: the sorted backward takes at most 2^31 - 1", op, BT);
		zn_cuda_note_error();
		return;
	}
	if (note(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, key, (int *)NULL,
						 (const int *)NULL, (int *)NULL, (int)BT, 0,
						 (int)(sizeof(int) * 8), s),
		 op, "cub::DeviceRadixSort::SortPairs (size query)", __LINE__))
		return;
	ints = align256((size_t)BT * sizeof(int));
	total = 3 * ints + align256(temp_bytes);
	if (note(cudaMallocAsync((void **)&buf, total, s), op, "cudaMallocAsync", __LINE__))
		return;
	key_s = (int *)buf;
	row = (int *)(buf + ints);
	row_s = (int *)(buf + 2 * ints);
	temp = buf + 3 * ints;
	iota_kernel<<<zn_cuda_blocks((size_t)BT, ZN_CUDA_THREADS), ZN_CUDA_THREADS, 0, s>>>(row,
											   BT);
	zn_cuda_note_launch(op, __FILE__, __LINE__);
	if (!note(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, key, key_s, row, row_s,
						  (int)BT, 0, (int)(sizeof(int) * 8), s),
		  op, "cub::DeviceRadixSort::SortPairs", __LINE__)) {
		dim3 grid((unsigned)BT, zn_cuda_grid(C, SEG_THREADS));

		segment_add_kernel<<<grid, SEG_THREADS, 0, s>>>(dw, dout, key_s, row_s, BT, C);
		zn_cuda_note_launch(op, __FILE__, __LINE__);
	}
	note(cudaFreeAsync(buf, s), op, "cudaFreeAsync", __LINE__);
}
