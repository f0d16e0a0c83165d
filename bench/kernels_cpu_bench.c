/* CPU kernel timings (not a test): matmul forward+backward through the tiled OpenBLAS path,
 * the plain loops, and one untiled cblas_sgemm with OpenBLAS's own threads, on GPT-2 small
 * shapes; plus attention and layernorm. GFLOP/s = 2*BT*C*OC per GEMM / seconds.
 *
 * Build (from the repo root, after building build/):
 *   gcc -O2 -fopenmp -march=native bench/kernels_cpu_bench.c -Ikernels -Isrc -Iinclude \
 *       build/libzinc.a $(pkg-config --cflags --libs openblas) -lm -o /tmp/kbench
 * Run: /tmp/kbench [BT] [C] [OC]
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/ops.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *rnd(size_t n)
{
	float *p = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		p[i] = (float)rand() / RAND_MAX - 0.5f;
	return p;
}

int main(int argc, char **argv)
{
	int BT = argc > 1 ? atoi(argv[1]) : 1024, C = argc > 2 ? atoi(argv[2]) : 768;
	int OC = argc > 3 ? atoi(argv[3]) : 2304, reps = 3, NH = 12, T = 256;
	float *x = rnd((size_t)BT * C), *w = rnd((size_t)OC * C), *b = rnd(OC);
	float *y = rnd((size_t)BT * OC), *dx = rnd((size_t)BT * C), *dw = rnd((size_t)OC * C);
	float *db = rnd(OC);
	double gf = 2.0 * BT * C * OC * 1e-9, t;

	printf("# zinc kernels/cpu bench: OpenMP threads %d, OpenBLAS %s\n", omp_get_max_threads(),
	       openblas_get_config());
	printf("# %-28s %8s %8s %8s %12s %10s\n", "op", "BT", "C", "OC", "time_ms", "GFLOP/s");
	t = now();
	for (int r = 0; r < reps; r++)
		zn_cpu_matmul_forward(y, x, w, b, BT / 8, 8, C, OC);
	t = (now() - t) / reps;
	printf("  %-28s %8d %8d %8d %12.2f %10.1f\n", "matmul_forward (tiled)", BT, C, OC, t * 1e3,
	       gf / t);
	t = now();
	for (int r = 0; r < reps; r++)
		zn_cpu_matmul_backward(dx, dw, db, y, x, w, BT / 8, 8, C, OC);
	t = (now() - t) / reps;
	printf("  %-28s %8d %8d %8d %12.2f %10.1f\n", "matmul_backward (tiled)", BT, C, OC,
	       t * 1e3, 2 * gf / t);
	openblas_set_num_threads(omp_get_max_threads());
	t = now();
	for (int r = 0; r < reps; r++)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, x, C, w, C,
			    0.0f, y, OC);
	t = (now() - t) / reps;
	printf("  %-28s %8d %8d %8d %12.2f %10.1f\n", "cblas_sgemm untiled, threaded", BT, C, OC,
	       t * 1e3, gf / t);
	t = now();
	zn_cpu_matmul_forward_loop(y, x, w, b, BT / 8, 8, C, OC);
	t = now() - t;
	printf("  %-28s %8d %8d %8d %12.2f %10.1f\n", "matmul_forward_loop", BT, C, OC, t * 1e3,
	       gf / t);
	int B = BT / T;
	float *qkv = rnd((size_t)BT * 3 * C), *pre = rnd((size_t)B * NH * T * T);
	float *att = rnd((size_t)B * NH * T * T), *datt = rnd((size_t)B * NH * T * T);
	float *dpre = rnd((size_t)B * NH * T * T), *dqkv = rnd((size_t)BT * 3 * C);

	t = now();
	zn_cpu_attention_forward(x, pre, att, qkv, B, T, C, NH);
	t = now() - t;
	printf("  %-28s %8d %8d %8d %12.2f %10s\n", "attention_forward (T 256)", BT, C, NH,
	       t * 1e3, "-");
	t = now();
	zn_cpu_attention_backward(dqkv, dpre, datt, x, qkv, att, B, T, C, NH);
	t = now() - t;
	printf("  %-28s %8d %8d %8d %12.2f %10s\n", "attention_backward (T 256)", BT, C, NH,
	       t * 1e3, "-");
	return 0;
}
