/* gemv_prefetch.h — internal: the software prefetch of a GEMV task's weight stream,
 * shared by the x86 kernel levels (linear_avx2.c, linear_avx512*.c). Include it only from
 * files compiled with at least SSE (every x86-64 build). */
#ifndef DSV4_KERNELS_GEMV_PREFETCH_H
#define DSV4_KERNELS_GEMV_PREFETCH_H

#include <stdint.h>
#include <xmmintrin.h>

/* Software prefetch of the weight stream. A GEMV task reads rows [o0, o1): one contiguous
 * byte range [lo, hi) of the weights, R rows at a time, the R rows interleaved. Decode
 * matrices are small (256 B .. 4 KB rows, 16..64 rows a task), so the hardware prefetcher
 * gets little run-up per task and stops at every 4 KB page; instead the kernel keeps
 * dist bytes ahead of its position itself: a burst over the first dist bytes when the
 * task starts, then, while it works on the block of rows at base, the line at
 * base + dist + R * (bytes of a row consumed so far): one line per 64 bytes consumed,
 * so the prefetch position advances exactly as fast as the reads. Past the task's end the
 * prefetch runs on into the bytes that follow (dist at most): the pool hands each thread a
 * contiguous range of a job's tasks (threads.c), so those are usually its next task's
 * first rows, which then start warm. Stopping at the task's end, as before, restarted
 * each task's stream cold; with contiguous ranges running on measured 0.6-0.8x the time
 * of a cold 256-512 KB FP4/FP8 GEMV at 2 threads (BENCHMARKS.md, session 10). Prefetches
 * never fault and change no value, so reading past the weights' end is harmless.
 * The distance is per format (measured, bench_linear --decode, one thread: FP8 was best at
 * 4 KB (+7% over 2 KB), BF16 at 8 KB (+15..35% over 2 KB)). FP4, which decodes the slowest
 * per byte, gained nothing past 1..2 KB on one thread; in the batch-1 step, whose MoE items
 * give each thread long FP4 runs (moe_one.c), 4 KB took 0.98x the step's time of 2 KB, and
 * FP8 at 8 KB (2 KB a far run) 0.98x that of 4 KB (BENCHMARKS.md, session 15 ovl). */
#ifndef GEMV_PF_HINT
#define GEMV_PF_HINT _MM_HINT_T0
#endif
/* the prefetch of one line; a test defines it to record the lines instead */
#ifndef GEMV_PF_TOUCH
#define GEMV_PF_TOUCH(a) _mm_prefetch((const char *)(a), GEMV_PF_HINT)
#endif
#ifndef GEMV_PF_FP4
#define GEMV_PF_FP4 4096
#endif
#ifndef GEMV_PF_FP4_RUN
#define GEMV_PF_FP4_RUN 1024 /* a far run of the FP4 GEMV (pf_fp4_runs): 0.99x the step of 512 B, 0.98x of 2 KB */
#endif
#ifndef GEMV_FP4_FAR_NX
#define GEMV_FP4_FAR_NX 4 /* FP4 far runs (pf_fp4_runs) up to this many activation rows */
#endif
#ifndef GEMV_FP4_FAR_ROWS
#define GEMV_FP4_FAR_ROWS 16 /* and from this many rows a run */
#endif
#ifndef GEMV_PF_FP4L
#define GEMV_PF_FP4L GEMV_PF_FP4 /* the lanes layout (linear_avx512.c gemv_fp4l_task) */
#endif
#ifndef GEMV_PF_FP4L_RUN
#define GEMV_PF_FP4L_RUN GEMV_PF_FP4_RUN
#endif
#ifndef GEMV_PF_FP8
#define GEMV_PF_FP8 8192
#endif
#ifndef GEMV_PF_DENSE
#define GEMV_PF_DENSE 8192
#endif

typedef struct {
    int64_t dist; /* prefetch distance in bytes (a constant after inlining) */
} gemv_pf;

static inline __attribute__((always_inline)) gemv_pf pf_start(const void *lo, const void *hi, int64_t dist) {
    const char *a = (const char *)lo, *e = (const char *)hi;
    const char *stop = e - a > dist ? a + dist : e;
    for (; a < stop; a += 64) GEMV_PF_TOUCH(a);
    return (gemv_pf){dist};
}

/* the lines at base + dist + off .. + nbytes (nbytes consumed this step) */
static inline __attribute__((always_inline)) void pf_step(const gemv_pf *pf, const void *base, int64_t off, int nbytes) {
    const char *a = (const char *)base + pf->dist + off;
    for (int k = 0; k < nbytes; k += 64, a += 64)
        if (pf->dist > 0) GEMV_PF_TOUCH(a);
}

/* The software prefetch of a one-row GEMV that reads its task's rows as R far-apart runs
 * (linear_avx512.c gemv1_dense): run r is one sequential stream from base + r * step, and
 * each stream is prefetched dist bytes ahead of its own reads (dist: the format's distance
 * above over R, the same bytes in flight). Zen 5's hardware prefetchers follow such
 * streams once trained; the software prefetch covers their ramp-up at a task's start and
 * hands on to the same thread's next task (the last run's prefetch runs into it). */
static inline __attribute__((always_inline)) void pf_runs_start(const void *base, int64_t step, int R, int64_t len,
                                                                 int64_t dist) {
    const int64_t m = len < dist ? len : dist;
    for (int r = 0; r < R; r++)
        for (int64_t k = 0; k < m; k += 64) GEMV_PF_TOUCH((const char *)base + r * step + k);
}

/* one line of each run at pos + r * step + dist (call once per 64 bytes a run consumes) */
static inline __attribute__((always_inline)) void pf_runs_line(const void *pos, int64_t step, int R, int64_t dist) {
    for (int r = 0; r < R; r++) GEMV_PF_TOUCH((const char *)pos + r * step + dist);
}

/* The far runs of an FP4 GEMV task [o0, o1) of a matrix of `rows` rows (linear_avx512.c
 * gemv_fp4_task; level avx2 keeps adjacent rows: runs read 1.00x there): R runs of
 * q = (o1 - o0) / R rows, or none (0: adjacent rows) unless the task is the whole matrix
 * and q >= min_q (runs of 4-8 KB read no faster than adjacent rows: session 11 "cold"). A whole-matrix task is one
 * call of dsv4_linear_here (moe_one's row views: each thread's half of an expert matrix,
 * 128 KB, then another matrix; the runs took 0.98-0.99x the batch-1 step's time of 4
 * adjacent rows, in step, BENCHMARKS.md session 16 far4) or a pool task that the planner
 * gives a whole FP4 matrix (linear_fast.c dsv4_lin_gemv_per: batch 16's routed experts,
 * 272 KB each; 0.96-0.98x the step's time, session 17 fp4g). A pool task of part of a
 * matrix keeps adjacent rows: the same thread's next task then holds the following rows,
 * and one linear stream runs on into them, where runs restart 4 streams a task (batch 16's
 * expert matrices cut in tasks of 128 KB: the runs took 1.04x the step's time). With runs, the first
 * GEMV_PF_FP4_RUN bytes of each run's weights (rb bytes a row from wt) and as many rows'
 * scale bytes (nsb a row from sc; NULL: F32 scales, not prefetched) are prefetched. */
static inline __attribute__((always_inline)) int64_t pf_fp4_runs(const uint8_t *wt, const uint8_t *sc, int64_t rb,
                                                                  int64_t nsb, int R, int64_t o0, int64_t o1,
                                                                  int64_t rows, int64_t min_q) {
    const int64_t q = (o1 - o0) / R;
    if (o0 != 0 || o1 != rows || q < min_q) return 0;
    pf_runs_start(wt, q * rb, R, q * rb, GEMV_PF_FP4_RUN);
    if (sc) pf_runs_start(sc, q * nsb, R, q * nsb, GEMV_PF_FP4_RUN / 16);
    return q;
}

/* The bytes [lo, hi) prefetched in nblk slices, slice k (0 <= k < nblk) while the caller works
 * on its k-th block: slice k covers the 64-byte lines from lo + k * ceil(len / nblk) rounded up
 * to a line (each line of [lo, hi) once over the nblk slices, none past hi's line).
 * Small-M's FP8 bit decode (linear_avx512_vbmi_smallm.c) spreads the 128 rows past a scale band of
 * at most 32 KB over the band's first pass this way. */
static inline __attribute__((always_inline)) void pf_slice(const char *lo, const char *hi, int64_t k, int64_t nblk) {
    const int64_t step = ((hi - lo) / nblk + 64) & ~(int64_t)63;
    const char *a = lo + k * step, *e = a + step < hi ? a + step : hi;
    for (; a < e; a += 64) GEMV_PF_TOUCH(a);
}

#endif
