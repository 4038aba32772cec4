/* geom.h — the position rules the planner checks and the pools apply (serving.md §a.2–a.4).
 *
 * Internal to src/cache. The write range, the page range and the free-behind rule live here
 * once, so that the planner's startup enumeration (check 2) tests exactly the predicate that
 * dsv4_cache_trim uses, and dsv4_cache_reserve allocates exactly the range the plan sized.
 * The check functions are exported (not static) so that tests can feed them deliberately
 * wrong inputs and watch them fire; a real plan can never make them fail.
 */
#ifndef DSV4_CACHE_GEOM_H
#define DSV4_CACHE_GEOM_H

#include <stdint.h>

#include "dsv4.h"

/* Floor division for possibly negative positions (history of a span near position 0). */
static inline int64_t dsv4_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Window rows a span [s, s+C) writes to WIN (§a.4): the last win-1 positions of the span,
 * [max(s, s+C-win+1), s+C). Earlier rows of the span are never read from WIN by anyone. */
static inline void dsv4_win_write_range(int64_t s, int64_t C, int win, int64_t *lo, int64_t *hi) {
    int64_t a = s + C - win + 1;
    *lo = a > s ? a : s;
    *hi = s + C;
}

/* Window rows a later call reads of a sequence at length len: [len - this, len) (§a.4). */
static inline int64_t dsv4_win_rows_read(int win, int64_t len) {
    return len < win - 1 ? len : win - 1;
}

/* Compressor ring rows a later call reads of a sequence at length len (ratio r, overlap
 * coff): positions p >= r*floor(len/r) - (coff-1)*r, i.e. the last len mod r + (coff-1)*r
 * (the open window's rows and the A candidates of the next window). At a compression-
 * aligned len: 4 for a CSA compressor, 0 for HCA. */
static inline int64_t dsv4_ring_rows_read(int r, int coff, int64_t len) {
    const int64_t need = len % r + (int64_t)(coff - 1) * r;
    return need < len ? need : len;
}

/* Free-behind rule (§a.3): after a commit to min(n, m) = keep_from, WIN page b is dead when
 * every position it holds, [b*B_w, (b+1)*B_w), is below keep_from - win + 1. */
static inline int dsv4_win_page_dead(int64_t page, int64_t keep_from, int win, int win_block) {
    return (page + 1) * (int64_t)win_block <= keep_from - win + 1;
}

/* Check 2 of §a.2. Enumerates every span start s mod B_w and size C <= c_max (sizes beyond
 * win + 2 B_w + delta repeat earlier cases) and counts the distinct WIN pages one sequence
 * holds during a call: the history [s-win+1-delta, s) plus the rows the call writes and,
 * with MTP (delta = 1), the rows the MTP call that follows it writes (the same span one
 * position behind). Fails when the count exceeds `bound` (the closed form), or when the
 * free-behind rule applied at keep_from = s - keep_lag (the plan passes keep_lag = delta:
 * the engine trims at min(n, m)) would free a page that the call reads. */
int dsv4_cache_check_w_live(int win, int win_block, int c_max, int delta, int keep_lag,
                            int bound, int *w_live, dsv4_err *err);

/* Closed-form W_live bound: history of win-1+delta positions plus a tail of win-1+delta
 * positions, each covering at most floor((L + B_w - 2) / B_w) + 1 pages. serving.md gives
 * the tail as win-1 positions; with MTP the MTP call writes one position further back
 * (its span is the main span shifted by one), which the tail term must cover: the two
 * agree unless delta = 1 and win % B_w == 2 % B_w (never for Flash or the golden configs). */
int dsv4_cache_w_live_bound(int win, int win_block, int delta);

/* Check 3 of §a.2 for one compressor (ratio r, overlap coff, ring length ring_len): for
 * every span start, span size and accepted count, every position a later call reads from
 * the ring is still in slot p mod ring_len after the span wrote its last ring_len rows. */
int dsv4_cache_check_ring(int r, int coff, int ring_len, int c_max, int d_max, dsv4_err *err);

#endif
