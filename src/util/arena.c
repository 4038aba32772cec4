/* arena.c — the scratch arena (arena.h). */
#include "util/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/err.h"

/* cap bytes (a multiple of align) at an align-aligned base; large blocks come from mmap: lazy pages */
static int arena_alloc(dsv4_arena *a, size_t bytes, size_t align, dsv4_err *err) {
    *a = dsv4_arena_measuring();
    const size_t want = bytes ? bytes : 1;
    const size_t cap = (want + align - 1) / align * align;
    if (cap < want) return dsv4_fail(err, DSV4_ERR_NOMEM, "scratch arena: %zu bytes is too many", bytes);
    a->base = aligned_alloc(align, cap);
    if (!a->base) return dsv4_fail(err, DSV4_ERR_NOMEM, "scratch arena: out of memory (%zu bytes)", cap);
    a->cap = cap;
    return DSV4_OK;
}

int dsv4_arena_init(dsv4_arena *a, size_t bytes, dsv4_err *err) {
    return arena_alloc(a, bytes, DSV4_ARENA_ALIGN, err);
}

#define ARENA_HUGE ((size_t)2 << 20)

int dsv4_arena_init_huge(dsv4_arena *a, size_t bytes, dsv4_err *err) {
    const int rc = arena_alloc(a, bytes, ARENA_HUGE, err); /* whole huge pages */
#ifdef MADV_HUGEPAGE
    if (!rc) (void)madvise(a->base, a->cap, MADV_HUGEPAGE); /* a hint: 4 KB pages work too */
#endif
    return rc;
}

/* Every 4 KB page of part `part` written: MADV_POPULATE_WRITE (Linux 5.14) in one call, else a
 * store a page. */
void dsv4_arena_populate(dsv4_arena *a, int part, int n_parts) {
    const size_t n_huge = a->cap / ARENA_HUGE;
    const size_t h0 = n_huge * (size_t)part / (size_t)n_parts, h1 = n_huge * (size_t)(part + 1) / (size_t)n_parts;
    if (!a->base || h1 <= h0) return;
    unsigned char *p = a->base + h0 * ARENA_HUGE;
    const size_t n = (h1 - h0) * ARENA_HUGE;
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (size_t i = 0; i < n; i += 4096) p[i] = 0;
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
