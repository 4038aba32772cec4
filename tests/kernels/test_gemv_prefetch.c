/* test_gemv_prefetch.c — the one-row GEMVs' software prefetch schedule (gemv_prefetch.h).
 * Prefetches change no value, so the kernels' bit tests cannot see them: here each prefetch
 * records its line instead, and the test walks a task the way the FP4 GEMV does (4 adjacent
 * rows a block, 16 bytes of each row a 32-column block) and the far-run GEMVs do, and which
 * FP4 tasks take far runs. */
#include <stdint.h>

#include "test.h"

#if defined(__x86_64__) || defined(__i386__)
enum { MAX_LINES = 1 << 16 };
static const char *lines[MAX_LINES];
static int n_lines;
#define GEMV_PF_TOUCH(a) (n_lines < MAX_LINES ? (void)(lines[n_lines++] = (const char *)(a)) : (void)0)
#include "kernels/gemv_prefetch.h"

/* how often each 64-byte line from base + lo up to base + hi was recorded; others: bad */
static void count(const char *base, int64_t lo, int64_t hi, int *seen, int *bad) {
    for (int i = 0; i < n_lines; i++) {
        const int64_t off = lines[i] - base;
        if (off < lo || off >= hi || off % 64) (*bad)++;
        else seen[(off - lo) / 64]++;
    }
}

/* The FP4 GEMV's task over rows [o0, o1) of a cols-column matrix, dist ahead: the burst
 * covers the first dist bytes (of a shorter task, the task), the steps every line from
 * there to dist past the task's end (the run-on into the next task), each line once and
 * exactly dist ahead of the bytes a step consumes. */
static void check_adjacent(const char *w, int64_t cols, int64_t o0, int64_t o1, int64_t dist) {
    const int R = 4;
    const int64_t rb = cols / 2, nsb = cols / 32, lo = o0 * rb, hi = o1 * rb;
    static int seen[MAX_LINES];
    memset(seen, 0, sizeof seen);
    n_lines = 0;
    const gemv_pf pf = pf_start(w + lo, w + hi, dist);
    CHECK(n_lines == (hi - lo < dist ? hi - lo : dist) / 64);
    int ahead_ok = 1;
    for (int64_t o = o0; o < o1; o += R) {
        const char *p = w + o * rb;
        for (int64_t b = 0; b < nsb; b++) {
            const int before = n_lines;
            pf_step(&pf, p, R * b * 16, R * 16);
            /* the lines of this step lie exactly dist past what it consumes */
            for (int i = before; i < n_lines; i++) {
                const int64_t d = lines[i] - (p + R * b * 16);
                ahead_ok &= d >= dist && d < dist + R * 16;
            }
        }
    }
    CHECK(ahead_ok);
    int bad = 0, once = 1;
    count(w, lo, hi + dist, seen, &bad);
    for (int64_t k = 0; k < (hi + dist - lo) / 64; k++) { /* a task shorter than dist: a gap */
        const int64_t off = lo + 64 * k;
        once &= seen[k] == (off < hi || off >= lo + dist);
    }
    CHECK_MSG(bad == 0 && once, "FP4 rows [%lld, %lld) of %lld columns, %lld ahead: %d stray lines, once %d",
              (long long)o0, (long long)o1, (long long)cols, (long long)dist, bad, once);
}

/* The far-run GEMVs' start: each of R runs gets its first min(len, dist) bytes. */
static void check_runs(const char *w) {
    static int seen[MAX_LINES];
    memset(seen, 0, sizeof seen);
    n_lines = 0;
    pf_runs_start(w, 8192, 4, 8192, 1024);
    int bad = 0, ok = n_lines == 4 * 16;
    count(w, 0, 4 * 8192, seen, &bad);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 128; k++) ok &= seen[r * 128 + k] == (k < 16);
    n_lines = 0;
    pf_runs_line(w + 640, 8192, 4, 1024);
    for (int r = 0; r < 4; r++) ok &= lines[r] == w + r * 8192 + 640 + 1024;
    CHECK(ok && bad == 0);
}

/* The FP4 GEMV's far runs (pf_fp4_runs): only a task that is a whole matrix with at least
 * min_q rows a run takes them; its start touches the first dist bytes of each run's weights
 * and the first dist / 16 of each run's scale bytes, nothing else. */
static void check_fp4_runs(const char *w, const char *sc) {
    const uint8_t *wt = (const uint8_t *)w, *s8 = (const uint8_t *)sc;
    const int64_t rb = 512, nsb = 32, dist = 1024; /* 1024 columns */
    n_lines = 0;
    /* a part of the matrix, too few rows a run, a whole matrix with 15 rows a run: none */
    CHECK(pf_fp4_runs(wt, s8, rb, nsb, 4, 0, 256, 512, 16) == 0);
    CHECK(pf_fp4_runs(wt, s8, rb, nsb, 4, 256, 512, 512, 16) == 0);
    CHECK(pf_fp4_runs(wt, s8, rb, nsb, 4, 0, 63, 63, 16) == 0);
    CHECK(n_lines == 0);
    /* 259 rows: 4 runs of 64, 3 left over */
    CHECK(pf_fp4_runs(wt, s8, rb, nsb, 4, 0, 259, 259, 16) == 64);
    static int seen[MAX_LINES], seen_sc[MAX_LINES];
    memset(seen, 0, sizeof seen);
    memset(seen_sc, 0, sizeof seen_sc);
    int bad = 0, bad_sc = 0, ok = n_lines == 4 * (dist / 64) + 4 * (dist / 16 / 64);
    /* every line is either a weight line or a scale line: count each against its own range */
    const int n = n_lines;
    for (int i = 0; i < n; i++) {
        const int64_t ow = lines[i] - w, os = lines[i] - sc;
        if (ow >= 0 && ow < 259 * rb && ow % 64 == 0) seen[ow / 64]++;
        else if (os >= 0 && os < 259 * nsb && os % 64 == 0) seen_sc[os / 64]++;
        else bad++;
    }
    for (int r = 0; r < 4; r++) {
        for (int64_t k = 0; k < 64 * rb / 64; k++) ok &= seen[r * 64 * rb / 64 + k] == (k < dist / 64);
        for (int64_t k = 0; k < 64 * nsb / 64; k++) bad_sc += seen_sc[r * 64 * nsb / 64 + k] != (k < dist / 16 / 64);
    }
    CHECK_MSG(ok && bad == 0 && bad_sc == 0, "FP4 far runs' start: ok %d, %d stray lines, %d scale lines wrong", ok,
              bad, bad_sc);
}

/* pf_slice: [lo, hi) in nblk slices (small-M's FP8 band: the 128 rows past a band, one slice a
 * register block of 3 rows) covers every line of the range exactly once, none outside it, and
 * no slice takes more than its share rounded up to a line */
static void check_slices(const char *w, int64_t len, int64_t nblk) {
    static int seen[MAX_LINES];
    memset(seen, 0, sizeof seen);
    int bad = 0, big = 0;
    const int64_t share = (len / nblk + 64) & ~(int64_t)63;
    for (int64_t k = 0; k < nblk; k++) {
        const int before = n_lines;
        pf_slice(w, w + len, k, nblk);
        big += (n_lines - before) * 64 > share;
    }
    count(w, 0, len, seen, &bad);
    int once = 1;
    for (int64_t i = 0; i < (len + 63) / 64; i++) once &= seen[i] == 1;
    CHECK_MSG(once && bad == 0 && big == 0, "pf_slice %lld bytes in %lld: once %d, %d stray, %d slices too big",
              (long long)len, (long long)nblk, once, bad, big);
    n_lines = 0;
}

int main(void) {
    static _Alignas(64) char w[1 << 20];
    /* wq_b's 256 columns (42 blocks of 3 rows a band; 43 for a band's odd split), 20 rows at
     * the matrix's end, a range of a few lines over more blocks, one block, an odd length */
    check_slices(w, 32768, 42);
    check_slices(w, 32768, 43);
    check_slices(w, 256 * 20, 42);
    check_slices(w, 192, 42);
    check_slices(w, 32768, 1);
    check_slices(w, 4096 + 64, 7);
    static _Alignas(64) char sc[1 << 16];
    check_fp4_runs(w, sc);
    /* moe_one's FP4 items at 2 threads (Flash-quarter: a thread's half of a 512x1024 W1,
     * of a 1024x512 W2) and a short task */
    check_adjacent(w, 1024, 0, 256, GEMV_PF_FP4);
    check_adjacent(w, 512, 512, 1024, GEMV_PF_FP4);
    check_adjacent(w, 256, 4, 8, GEMV_PF_FP4);
    check_adjacent(w, 1024, 0, 64, 2048);
    check_runs(w);
    return test_report();
}
#else
int main(void) {
    puts("no x86 prefetch: skipped");
    return 0;
}
#endif
