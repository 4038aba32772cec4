/* fp4_lanes.c — natural <-> lanes FP4 layout (see fp4_lanes.h). Load-time code: the unpack
 * one nibble at a time, written for clarity; the pack, which the engine runs over every FP4
 * weight at create with --weights-memory lanes (~150 GB in Flash), a line at a time in SSE2
 * registers, with the portable form (8 bytes at a time) as its reference and the fallback
 * where there is no SSE2. */
#include "kernels/fp4_lanes.h"

#include <string.h>

/* line of 128 codes: natural bytes -> lanes bytes. Natural bytes 8k .. 8k+7 hold, as a
 * little-endian 64-bit value, column 16k + i in nibble i; lanes word i byte p holds columns
 * 16(2p) + i (low nibble) and 16(2p+1) + i (high). So for each p the two values a (k = 2p)
 * and c (k = 2p + 1) give byte p of every word: of word 2j the bytes j of
 * (a & M) | (c & M) << 4, of word 2j + 1 the bytes j of (a >> 4 & M) | (c & ~M), M selecting
 * low nibbles. With even_p and odd_p as the rows of an 8 x 8 byte matrix (even_0..3, odd_0..3),
 * the line's 64-bit word j is that matrix's column j: a byte transpose. The same bytes as the
 * definition, one nibble at a time (test_fp4_lanes). */
#if defined(__SSE2__)
/* SSE2 (every x86-64): the rows in registers, the transpose by three rounds of unpacks, four
 * 16-byte stores. The scalar form below stores a byte at a time (64 a line): the engine's
 * create with --weights-memory lanes repacked flash_quarter's 768 MB at ~1.9 GB/s a thread,
 * ~0.2 s on top of the copy's ~0.45 s (BENCHMARKS.md, session 30 lanes). */
#include <emmintrin.h>

static void pack_line(uint8_t dst[64], const uint8_t src[64]) {
    const __m128i m = _mm_set1_epi8(0x0F);
    __m128i ev[4], od[4]; /* low 8 bytes: even_p, odd_p */
    for (int p = 0; p < 4; p++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(src + 16 * p)); /* a_p | c_p */
        const __m128i c = _mm_srli_si128(v, 8);                                /* c_p in the low half */
        const __m128i lo = _mm_and_si128(v, m);
        /* nibbles shifted within their bytes: each 16-bit lane's two bytes hold at most 0x0F */
        ev[p] = _mm_or_si128(lo, _mm_slli_epi16(_mm_and_si128(c, m), 4));
        od[p] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_andnot_si128(m, c));
    }
    const __m128i x0 = _mm_unpacklo_epi8(ev[0], ev[1]), x1 = _mm_unpacklo_epi8(ev[2], ev[3]);
    const __m128i x2 = _mm_unpacklo_epi8(od[0], od[1]), x3 = _mm_unpacklo_epi8(od[2], od[3]);
    const __m128i y0 = _mm_unpacklo_epi16(x0, x1), y1 = _mm_unpackhi_epi16(x0, x1);
    const __m128i y2 = _mm_unpacklo_epi16(x2, x3), y3 = _mm_unpackhi_epi16(x2, x3);
    _mm_storeu_si128((__m128i *)dst, _mm_unpacklo_epi32(y0, y2));        /* words 0, 1 */
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi32(y0, y2)); /* 2, 3 */
    _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi32(y1, y3)); /* 4, 5 */
    _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi32(y1, y3)); /* 6, 7 */
}
#endif

/* the little-endian 64-bit value of p[0..8) */
static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = v << 8 | p[b];
    return v;
}

/* the portable form of pack_line (the same bytes; its reference in test_fp4_lanes) */
static void pack_line_portable(uint8_t dst[64], const uint8_t src[64]) {
    const uint64_t M = 0x0F0F0F0F0F0F0F0Full;
    for (int p = 0; p < 4; p++) {
        const uint64_t a = le64(src + 16 * p), c = le64(src + 16 * p + 8);
        const uint64_t even = (a & M) | (c & M) << 4, odd = (a >> 4 & M) | (c & ~M);
        for (int j = 0; j < 8; j++) {
            dst[8 * j + p] = (uint8_t)(even >> 8 * j);
            dst[8 * j + 4 + p] = (uint8_t)(odd >> 8 * j);
        }
    }
}

#if !defined(__SSE2__)
#define pack_line pack_line_portable
#endif

static void unpack_line(uint8_t dst[64], const uint8_t src[64]) {
    memset(dst, 0, 64);
    for (int c = 0; c < DSV4_FP4L_COLS; c++)
        dst[c >> 1] |= (uint8_t)(dsv4_fp4l_code(src, c) << ((c & 1) * 4));
}

void dsv4_fp4l_pack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t l = 0; l < cols / DSV4_FP4L_COLS; l++) pack_line(dst + l * 64, src + l * 64);
}

void dsv4_fp4l_pack_row_portable(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t l = 0; l < cols / DSV4_FP4L_COLS; l++) pack_line_portable(dst + l * 64, src + l * 64);
}

void dsv4_fp4l_unpack_row(uint8_t *dst, const uint8_t *src, int64_t cols) {
    for (int64_t l = 0; l < cols / DSV4_FP4L_COLS; l++) unpack_line(dst + l * 64, src + l * 64);
}

void dsv4_fp4l_pack_inplace(uint8_t *w, int64_t rows, int64_t cols) {
    const int64_t lines = rows * (cols / DSV4_FP4L_COLS); /* rows are whole lines: contiguous */
    uint8_t tmp[64];
    for (int64_t l = 0; l < lines; l++) {
        memcpy(tmp, w + l * 64, 64);
        pack_line(w + l * 64, tmp);
    }
}
