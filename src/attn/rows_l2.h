/* rows_l2.h — internal: a decode row's K=V list toward L2 before its heads (attention.c,
 * row_heads). Hints only: no value is read or changed.
 *
 * Why: a decode row's K=V rows are cold (the step's weights streamed through the caches since
 * the last step read them) and scattered over the pool; the scores' own prefetch, two rows
 * ahead, keeps few lines in flight, and in step the value sum, which re-reads the rows, then
 * still found some outside L2. One loop of hints over the whole list, issued before the
 * scores, lets the memory system work on all of it at once, and both passes find it in L2
 * (640 rows of 1 KB in a 1 MB L2). Zen 5, flash_quarter, one process alternating blocks of 32
 * calls with and without: batch 16 at 4K, a CSA row's 16 heads 148.6 -> 125.4 us a call
 * (scores 66.6 -> 63.6, value sum 78.8 -> 58.6); batch 1 at 32K, 8 heads 114.4 -> 103.3.
 * Lists of 256-511 rows at batch 1 took ~1.7 us a call longer with them, hence the threshold
 * (BENCHMARKS.md, session 36 heads).
 *
 * Every DSV4_ROWS_L2_STRIDE-th line of a row, not every line: the core's own misses are what
 * the loop waits on (a burst of 10K hints took 30-40 us, ~4 ns a line, and the same lines
 * hinted from inside the previous row's value sum instead slowed that by as much), while the
 * hardware prefetcher brings a hinted line's neighbours without holding the core. Zen 5,
 * flash_quarter, batch 16 at 4K, one process with strides 1 and k on alternate steps, a CSA
 * row task (640 rows of 1 KB, 16 heads): k = 2 241.6 -> 219.7 us, 4 242.3 -> 211.4, 8 228.1 ->
 * 211.8, 16 244.5 -> 223.9; A/A 236.9 / 232.2 (BENCHMARKS.md, session 38 hv). */
#ifndef DSV4_ATTN_ROWS_L2_H
#define DSV4_ATTN_ROWS_L2_H

#include <stdint.h>

#include "util/lines.h"
#include "util/prefetch.h"

/* lists shorter than this are left to the scores' own prefetch */
#define DSV4_ROWS_L2_MIN 512
/* the hinted lines of a row: its first, then every this many (256 bytes apart) */
#define DSV4_ROWS_L2_STRIDE 4

/* the hint for one line; a test defines it to record the lines instead */
#ifndef ROWS_L2_TOUCH
#define ROWS_L2_TOUCH(a) DSV4_PREFETCH(a, 0, 2)
#endif

/* Lines 0, S, 2S, .. (S = DSV4_ROWS_L2_STRIDE) of the 64-byte lines holding rows[0, n_kv)
 * (row_bytes each, at any alignment; line 0 the one holding a row's first byte), toward L2,
 * when the list has at least DSV4_ROWS_L2_MIN rows and its rows are read in place (staged:
 * the rows are unpacked to F32 first, which reads them anyway: none). */
static inline void dsv4_rows_to_l2(const void *const *rows, int n_kv, int64_t row_bytes, int staged) {
    if (staged || n_kv < DSV4_ROWS_L2_MIN) return;
    for (int j = 0; j < n_kv; j++) {
        const char *l = dsv4_line_of(rows[j]);
        for (int64_t k = 0, m = dsv4_lines_in(rows[j], row_bytes); k < m; k += DSV4_ROWS_L2_STRIDE)
            ROWS_L2_TOUCH(l + 64 * k);
    }
}

#endif
