/* Private to kernels/cpu: when to go parallel and how channels are split for reductions. */
#ifndef ZN_KERNELS_CPU_PAR_H
#define ZN_KERNELS_CPU_PAR_H

/* Below this many elements of work an OpenMP team costs more than it saves. */
#define ZN_CPU_PAR_MIN (1L << 15)

/* Channels per thread chunk in weight-gradient reductions (64 floats = one 256-byte run). */
#define ZN_CPU_CHUNK 64

#endif
