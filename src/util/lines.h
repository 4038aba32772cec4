/* lines.h — internal: the 64-byte cache lines a byte range occupies. The prefetch schedules
 * that name every line of a list of rows (attn/rows_l2.h, kernels/idx_approx_x512.c) share this
 * one rule: a row that starts mid-line takes one line more than its size, an aligned one
 * none twice. */
#ifndef DSV4_UTIL_LINES_H
#define DSV4_UTIL_LINES_H

#include <stdint.h>

/* the line holding byte p */
static inline const char *dsv4_line_of(const void *p) { return (const char *)((uintptr_t)p & ~(uintptr_t)63); }

/* how many lines hold bytes [p, p + n) (n > 0) */
static inline int64_t dsv4_lines_in(const void *p, int64_t n) {
    return (int64_t)((((uintptr_t)p & 63) + (uint64_t)n + 63) / 64);
}

#endif
