/* utf8_range.h — a UTF-8 character begun, as the guided-decoding matchers (regex_mask.c,
 * grammar.c) carry it between bytes: u = 0 between characters, else the bytes read (bits
 * 24-25), the bytes left (bits 26-27) and the code point's bits so far (below), and the code
 * points it can still become (well-formed ones only: Unicode's table 3-7). */
#ifndef DSV4_SAMPLE_UTF8_RANGE_H
#define DSV4_SAMPLE_UTF8_RANGE_H

#include <stdint.h>

#define U_READ(u) ((int)((u) >> 24 & 3))
#define U_LEFT(u) ((int)((u) >> 26 & 3))
#define U_CP(u) ((u) & 0x1FFFFFu)
#define U_MAKE(read, left, cp) ((uint32_t)(read) << 24 | (uint32_t)(left) << 26 | (uint32_t)(cp))

/* the code points a character begun (u != 0) can still be: [*lo, *hi], well-formed ones
 * only (the second byte's limits after E0, ED, F0, F4 leave no overlong form, surrogate or
 * code point past U+10FFFF) */
static inline void utf8_range(uint32_t u, uint32_t *lo, uint32_t *hi) {
    const int left = U_LEFT(u), n = U_READ(u) + left;
    const uint32_t cp = U_CP(u);
    *lo = cp << (6 * left);
    *hi = *lo | ((1u << (6 * left)) - 1);
    if (U_READ(u) != 1) return;
    if (n == 3 && cp == 0) *lo = 0x800;
    if (n == 3 && cp == 0xD) *hi = 0xD7FF;
    if (n == 4 && cp == 0) *lo = 0x10000;
    if (n == 4 && cp == 4) *hi = 0x10FFFF;
}

#endif
