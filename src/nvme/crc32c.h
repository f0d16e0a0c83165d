/* CRC32C (Castagnoli, the iSCSI / ext4 / NVMe checksum), used by the swap store to catch
 * corrupted extents on read.
 *
 * zn_crc32c() uses the SSE4.2 crc32 instruction where the CPU has it (three streams
 * interleaved, about 3 bytes/cycle) and a table otherwise; both give the same value, the
 * standard one: zn_crc32c(0, "123456789", 9) == 0xE3069283. Chain calls by passing the
 * previous result as crc. Thread-safe, no state.
 */
#ifndef ZN_NVME_CRC32C_H
#define ZN_NVME_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t zn_crc32c(uint32_t crc, const void *buf, size_t bytes);
/* The table version, for tests and CPUs without SSE4.2. */
uint32_t zn_crc32c_sw(uint32_t crc, const void *buf, size_t bytes);

#endif
