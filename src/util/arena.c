/* arena.c — the scratch arena (arena.h). */
#include "util/arena.h"

#include <stdint.h>
#include <stdlib.h>

#include "util/err.h"

int dsv4_arena_init(dsv4_arena *a, size_t bytes, dsv4_err *err) {
    *a = dsv4_arena_measuring();
    const size_t cap = dsv4_arena_round(bytes ? bytes : 1);
    if (cap < bytes) return dsv4_fail(err, DSV4_ERR_NOMEM, "scratch arena: %zu bytes is too many", bytes);
    a->base = aligned_alloc(DSV4_ARENA_ALIGN, cap); /* large blocks come from mmap: lazy pages */
    if (!a->base) return dsv4_fail(err, DSV4_ERR_NOMEM, "scratch arena: out of memory (%zu bytes)", cap);
    a->cap = cap;
    return DSV4_OK;
}

void dsv4_arena_free(dsv4_arena *a) {
    free(a->base);
    *a = dsv4_arena_measuring();
}

void *dsv4_arena_take(dsv4_arena *a, size_t n) {
    const size_t r = dsv4_arena_round(n);
    if (r < n || r > SIZE_MAX - a->used) {
        if (!a->base) a->peak = SIZE_MAX; /* a measurement that overflows sizes nothing */
        return NULL;
    }
    if (a->base && a->used + r > a->cap) return NULL;
    void *p = a->base ? a->base + a->used : NULL;
    a->used += r;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

void *dsv4_arena_take_n(dsv4_arena *a, long long n, size_t elem) {
    if (n < 0 || (elem && (unsigned long long)n > SIZE_MAX / elem)) {
        if (!a->base) a->peak = SIZE_MAX;
        return NULL;
    }
    return dsv4_arena_take(a, (size_t)n * elem);
}
