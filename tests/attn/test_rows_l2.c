/* test_rows_l2.c — the hints that send a decode row's K=V list toward L2 (attn/rows_l2.h).
 * A hint changes no value, so the attention's bit tests cannot see it: here each hint
 * records its line instead, and the test checks that a list of at least DSV4_ROWS_L2_MIN
 * rows names, of the 64-byte lines holding a byte of a listed row (rows at any alignment, so a
 * row may span one line more than its size), its first and every DSV4_ROWS_L2_STRIDE-th after
 * it, and no other line, and that shorter lists and staged rows name none. */
#include <stdint.h>
#include <string.h>

#include "test.h"

enum { MAX_LINES = 1 << 17 };
static uintptr_t lines[MAX_LINES];
static int n_lines;
#define ROWS_L2_TOUCH(a) (n_lines < MAX_LINES ? (void)(lines[n_lines++] = (uintptr_t)(a)) : (void)0)
#include "attn/rows_l2.h"

#define POOL (1 << 22)
static _Alignas(64) char pool[POOL];

/* n rows of row_bytes, row j at pool + off + stride * perm(j) (scattered, in the list's order) */
static void check_list(int n, int64_t row_bytes, int64_t off, int64_t stride, int staged) {
    static const void *rows[4096];
    static unsigned char want[POOL / 64], seen[POOL / 64];
    memset(want, 0, sizeof want);
    memset(seen, 0, sizeof seen);
    for (int j = 0; j < n; j++) {
        const int64_t at = off + stride * ((j * 7919) % n); /* a permutation of [0, n): 7919 is prime */
        rows[j] = pool + at;
        for (int64_t b = at / 64; b <= (at + row_bytes - 1) / 64; b += DSV4_ROWS_L2_STRIDE) want[b] = 1;
    }
    n_lines = 0;
    dsv4_rows_to_l2(rows, n, row_bytes, staged);
    int stray = 0, missing = 0;
    for (int i = 0; i < n_lines; i++) {
        const uintptr_t d = lines[i] - (uintptr_t)pool;
        if (lines[i] < (uintptr_t)pool || d >= POOL || d % 64 || !want[d / 64]) stray++;
        else seen[d / 64] = 1;
    }
    const int hinted = !staged && n >= DSV4_ROWS_L2_MIN;
    for (int64_t b = 0; b < POOL / 64; b++) missing += want[b] && !seen[b];
    if (hinted)
        CHECK_MSG(stray == 0 && missing == 0,
                  "%d rows of %lld bytes from %lld, %lld apart: %d stray lines, %d of the rows' lines not named", n,
                  (long long)row_bytes, (long long)off, (long long)stride, stray, missing);
    else
        CHECK_MSG(n_lines == 0, "%d rows (staged %d): %d lines named, none expected", n, staged, n_lines);
}

int main(void) {
    /* flash's BF16 rows (512 values, 1 KB) at 1 KB apart, aligned: a CSA row's 640 */
    check_list(640, 1024, 0, 1024, 0);
    check_list(DSV4_ROWS_L2_MIN, 1024, 0, 1024, 0);
    check_list(DSV4_ROWS_L2_MIN - 1, 1024, 0, 1024, 0); /* below the threshold: none */
    check_list(640, 1024, 0, 1024, 1);                  /* staged rows: none */
    /* rows that start mid-line and span one line more than their size (1 KB from byte 40), and
     * short rows that share lines (72 BF16 values, 144 bytes, packed) */
    check_list(600, 1024, 40, 1024 + 200, 0);
    check_list(700, 144, 8, 144, 0);
    check_list(1000, 4 * 72 + 4, 100, 4 * 72 + 4, 0); /* F32 rows of 72 values and a scale */
    return test_report();
}
