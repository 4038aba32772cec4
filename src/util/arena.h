/* arena.h — one block of scratch memory, handed out front to back and given back in stack
 * order (mark, take, ..., release to the mark). An engine sizes one at create time from its
 * limits, so the forward never calls malloc: out of memory can only happen at create.
 *
 * A measuring arena (dsv4_arena_measuring) has no memory: takes only count, so a module can
 * size its scratch by running the very function that carves it (no second formula to keep
 * in step). Its takes return NULL; the bytes needed are in .peak afterwards.
 */
#ifndef DSV4_UTIL_ARENA_H
#define DSV4_UTIL_ARENA_H

#include <stddef.h>

#include "dsv4.h"

#define DSV4_ARENA_ALIGN 64 /* every take starts on a cache line (and an AVX-512 vector) */

typedef struct dsv4_arena {
    unsigned char *base;  /* NULL: a measuring arena */
    size_t cap;           /* bytes at base */
    size_t used;          /* bytes handed out now */
    size_t peak;          /* the most ever handed out at once */
} dsv4_arena;

/* An arena of `bytes` (rounded up to DSV4_ARENA_ALIGN); pages are touched only when used. */
int dsv4_arena_init(dsv4_arena *a, size_t bytes, dsv4_err *err);
/* The same, 2 MB aligned and rounded up to whole 2 MB pages, transparent huge pages asked for;
 * still lazy: dsv4_arena_populate makes it resident. For an arena a forward runs in: first
 * touch inside the forward costs a page fault a 4 KB page (~8 us on a VM: a 104 MB arena's
 * first 512-token prefill paid 17k faults, 0.13-0.24 s of system time), populating costs the
 * arena's size in resident memory from then on. */
int dsv4_arena_init_huge(dsv4_arena *a, size_t bytes, dsv4_err *err);
/* Writes every page of part `part` of n_parts (whole 2 MB pages; the parts' union is the
 * arena): each part can run on its own thread. */
void dsv4_arena_populate(dsv4_arena *a, int part, int n_parts);
void dsv4_arena_free(dsv4_arena *a);

static inline dsv4_arena dsv4_arena_measuring(void) { return (dsv4_arena){NULL, 0, 0, 0}; }

/* Bytes a take of n bytes uses up (n rounded up to the alignment). */
static inline size_t dsv4_arena_round(size_t n) {
    return (n + DSV4_ARENA_ALIGN - 1) & ~(size_t)(DSV4_ARENA_ALIGN - 1);
}

/* n bytes, DSV4_ARENA_ALIGN aligned, contents undefined; NULL when they do not fit (or the
 * arena measures). A take of 0 bytes gives a valid pointer that must not be read. */
void *dsv4_arena_take(dsv4_arena *a, size_t n);

/* n elements of elem bytes; NULL also when n * elem overflows or n < 0. */
void *dsv4_arena_take_n(dsv4_arena *a, long long n, size_t elem);

static inline size_t dsv4_arena_mark(const dsv4_arena *a) { return a->used; }
/* Gives back every take made after mark was read. */
static inline void dsv4_arena_release(dsv4_arena *a, size_t mark) { a->used = mark; }

#endif
