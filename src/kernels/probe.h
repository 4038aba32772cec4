/* probe.h — this machine's own rooflines, measured with the threads of a kernel context:
 * the streaming read bandwidth from memory and the FP32 FMA peak.
 *
 * Benchmarks compare what the engine reaches against these two numbers taken in the same
 * run (a shared machine's figures drift between runs, so a published constant would not
 * do). Both return the best of several passes: the least disturbed one is the closest to
 * what the hardware can do.
 */
#ifndef DSV4_KERNELS_PROBE_H
#define DSV4_KERNELS_PROBE_H

#include <stddef.h>

#include "dsv4.h"
#include "kernels/kctx.h"

typedef struct dsv4_probe_result {
    double best;      /* GB/s (bandwidth) or GFLOP/s (FMA): the best pass */
    double median;    /* the median pass */
    int passes;
    int threads;
    int simd;         /* dsv4_simd level of the code that ran (FMA probe) */
} dsv4_probe_result;

/* Read-only streaming sum over a buffer of `bytes` (0: 512 MiB; at least 1 MiB), spread
 * over every thread of k in chunks, `passes` timed passes (0: 8) after one untimed one
 * that maps the pages. Make bytes many times the last-level cache, or the figure is the
 * cache's. Fails only when the buffer cannot be allocated. */
int dsv4_probe_bandwidth(dsv4_kctx *k, size_t bytes, int passes, dsv4_probe_result *out,
                         dsv4_err *err);

/* Independent FP32 multiply-add chains in registers on every thread of k, `passes` timed
 * passes (0: 5) of about `seconds` each (0: 0.1), at k's kernel level: AVX-512 (16 chains
 * of 16 lanes), AVX2+FMA (12 chains of 8 lanes: enough in flight to cover the FMA latency
 * on both pipes), else a portable loop, which measures the peak of the scalar kernels
 * instead. FLOPs count a multiply-add as 2. */
int dsv4_probe_fma(dsv4_kctx *k, double seconds, int passes, dsv4_probe_result *out,
                   dsv4_err *err);

/* A probe prepared once and run pass by pass, for benchmarks that alternate probe passes
 * with the kernels they measure so both see the same machine load. stream_bytes 0: no
 * stream buffer; fma_seconds: the length of one FMA pass (0: 0.1 s). */
typedef struct dsv4_probe dsv4_probe;
int dsv4_probe_create(dsv4_kctx *k, size_t stream_bytes, double fma_seconds, dsv4_probe **out,
                      dsv4_err *err);
double dsv4_probe_stream(dsv4_probe *p);      /* GB/s of one streaming pass (0 without buffer) */
double dsv4_probe_fma_pass(dsv4_probe *p);    /* GFLOP/s of one FMA pass */
size_t dsv4_probe_stream_bytes(const dsv4_probe *p);
int dsv4_probe_simd(const dsv4_probe *p);     /* the level the FMA pass runs at */
void dsv4_probe_free(dsv4_probe *p);

#endif
