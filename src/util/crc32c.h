/* crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI, ext4 and
 * SSE4.2's crc32 instruction): the checksum of KV file sections (serving.md §g). */
#ifndef DSV4_UTIL_CRC32C_H
#define DSV4_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC: crc = 0 for a fresh one; dsv4_crc32c(dsv4_crc32c(0, a), b) equals the
 * CRC of a followed by b. dsv4_crc32c(0, "123456789", 9) = 0xE3069283. */
uint32_t dsv4_crc32c(uint32_t crc, const void *data, size_t n);

#endif
