/* gpu-hold: keeps one CUDA context open while scripts/device/gpu-check.sh runs the GPU tests.
 *
 * Criterion runs every test in a process of its own. Without persistence mode the driver
 * tears the GPU's state down whenever no process holds a context, and the next process
 * pays the whole driver initialisation again; one process holding a context keeps that
 * state up, so each test process pays only for its own context. Prints how long the first
 * initialisation took, then sleeps until it is killed (SIGTERM from the script).
 *
 *     cc -I/usr/local/cuda/include gpu-hold.c -L/usr/local/cuda/lib64 -lcudart -o gpu-hold
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void)
{
	double t0 = now_s();
	cudaError_t e = cudaFree(0); /* creates the primary context on GPU 0 */

	if (e != cudaSuccess) {
		fprintf(stderr, "gpu-hold: cudaFree(0) failed: %s\n", cudaGetErrorString(e));
		return 1;
	}
	printf("gpu-hold: CUDA context up in %.2f s; holding it\n", now_s() - t0);
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}
