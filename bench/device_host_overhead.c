/* Informal overheads of the host device backend: an empty launch (enqueue + run), an event
 * round trip between two streams, and a host "H2D" copy (memmove). Not built by CMake:
 *   gcc -O2 -D_GNU_SOURCE -Iinclude -Isrc -Ikernels bench/device_host_overhead.c \
 *       build/libzinc.a -lpthread -lm -fopenmp -o /tmp/device_host_overhead
 * Figures: launch_us = wall time of N launches + synchronize / N; roundtrip_us = wall time
 * of R x (record A, B waits, record B, A waits) / R; GBps = 4 x 256 MiB / wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpu/device.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void nop(void *c, void *n, const struct zn_kernel_table *k){ (*(int*)c)++; }
int main(void){
	struct zn_device_config cfg={.kind=ZN_DEVICE_HOST};
	struct zn_device *dev; struct zn_stream *a,*b; struct zn_event *ea,*eb;
	zn_device_create(&dev,&cfg); zn_stream_create(dev,&a); zn_stream_create(dev,&b);
	zn_event_create(dev,&ea); zn_event_create(dev,&eb);
	int cnt=0; const int N=200000;
	double t0=now();
	for(int i=0;i<N;i++) zn_launch(a,nop,&cnt,0);
	zn_stream_synchronize(a);
	double t1=now();
	printf("launch_enqueue_run_us %.3f (count %d)\n",(t1-t0)/N*1e6,cnt);
	const int R=20000;
	t0=now();
	for(int i=0;i<R;i++){ zn_event_record(ea,a); zn_stream_wait_event(b,ea); zn_event_record(eb,b); zn_stream_wait_event(a,eb);}
	zn_stream_synchronize(a);
	t1=now();
	printf("event_pingpong_roundtrip_us %.3f\n",(t1-t0)/R*1e6);
	size_t n=256<<20; void *h=malloc(n),*d; memset(h,1,n); zn_device_alloc(dev,&d,n);
	zn_memcpy_async(a,d,h,n,ZN_COPY_H2D); zn_stream_synchronize(a);
	t0=now(); for(int i=0;i<4;i++) zn_memcpy_async(a,d,h,n,ZN_COPY_H2D); zn_stream_synchronize(a); t1=now();
	printf("h2d_GBps %.2f\n",4.0*n/(t1-t0)/1e9);
	zn_device_free(dev,d); free(h);
	zn_event_destroy(ea); zn_event_destroy(eb); zn_stream_destroy(a); zn_stream_destroy(b); zn_device_destroy(dev);
}
