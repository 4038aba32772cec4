/* prefetch.h — internal: a prefetch hint the optimizer keeps.
 *
 * GCC 12 at -O2 deletes a loop whose only statements are __builtin_prefetch calls when it
 * can work out the loop's trip count (its tree DCE; -fno-tree-dce keeps them): 77a2bab's
 * rewrite of attention.c's two hint loops (rows_l2.h's list toward L2, row_prefetch_next)
 * in such a form left no prefetch in attention.c's object, with every test passing (a
 * hint changes no value; test_rows_l2 records the lines through its own ROWS_L2_TOUCH).
 * An empty asm taking the address is a side effect the optimizer must keep, and costs no
 * instruction. scripts/check_prefetch_kept.py (test prefetch_kept) checks the objects. */
#ifndef DSV4_UTIL_PREFETCH_H
#define DSV4_UTIL_PREFETCH_H

/* __builtin_prefetch(p, rw, loc) (rw 0 read, 1 write; loc 3 = L1 .. 0 = no reuse), kept */
#if defined(__GNUC__) || defined(__clang__)
#define DSV4_PREFETCH(p, rw, loc)                                                                             \
    do {                                                                                                      \
        const void *dsv4_pf_ = (const void *)(p);                                                             \
        __builtin_prefetch(dsv4_pf_, rw, loc);                                                                \
        __asm__ volatile("" : : "r"(dsv4_pf_));                                                               \
    } while (0)
#else
#define DSV4_PREFETCH(p, rw, loc) ((void)(p))
#endif

#endif
