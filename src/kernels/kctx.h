/* kctx.h — the kernel context: threads, SIMD level and scratch that heavy kernels share.
 * One per engine (never global). Kernels know nothing about the model. */
#ifndef DSV4_KERNELS_KCTX_H
#define DSV4_KERNELS_KCTX_H

#include <stdint.h>

#include "dsv4.h"
#include "kernels/linear.h"
#include "kernels/exp_f64.h"
#include "kernels/swiglu.h"
#include "kernels/threads.h"

typedef struct dsv4_kctx dsv4_kctx;

/* n_threads <= 0: the cores this process may use (dsv4_available_cores). max_cols: widest matrix input the engine will use
 * (sizes the per-thread scratch of dsv4_kctx_scratch). The SIMD level is the best the CPU
 * supports, or the one the environment variable DSV4_SIMD forces: "portable" (or 0),
 * "avx2" (1), "avx512" (2) (kernels/cpu.h). An unknown value, or a level the CPU or build
 * cannot run, fails the create with a message. */
int dsv4_kctx_create(int n_threads, int64_t max_cols, dsv4_kctx **out, dsv4_err *err);
void dsv4_kctx_free(dsv4_kctx *k);
int dsv4_kctx_threads(const dsv4_kctx *k);

/* Pins the context's worker threads to the CPUs of the affinity mask (dsv4_pool_pin). */
int dsv4_kctx_pin(dsv4_kctx *k, dsv4_err *err);

/* The kernel level in use (a dsv4_simd from kernels/cpu.h). set_simd asks for a level and
 * returns the one in effect: the request capped by what the CPU and the build support. */
int dsv4_kctx_simd(const dsv4_kctx *k);
int dsv4_kctx_set_simd(dsv4_kctx *k, int level);

/* The MoE's SwiGLU at the level in use (kernels/swiglu.h): the AVX-512 loop only where its
 * expf agreed with libm's when the context was made. */
dsv4_swiglu_fn dsv4_kctx_swiglu(const dsv4_kctx *k);
/* libm's expf over an array at the level in use under the same condition, else NULL */
dsv4_expf_rows_fn dsv4_kctx_expf(const dsv4_kctx *k);
/* The compressor's column pool with glibc's exp eight lanes at a time (exp_f64.h), at the
 * level in use when its exp agreed with libm's at create, else NULL (libm per value) */
dsv4_pool_cols_fn dsv4_kctx_pool_cols(const dsv4_kctx *k);
/* glibc's exp over an array of doubles in lanes (exp_f64.h) under the same condition, else
 * NULL (the caller then calls libm per value): hc_pre's finish */
dsv4_exp_rows_fn dsv4_kctx_exp(const dsv4_kctx *k);

/* Which dsv4_linear path a call takes: chosen per call by the level's row thresholds
 * (AUTO, the default), or forced by benchmarks and tests that compare the paths on one
 * shape. A forced path the level lacks, or whose row limit the call exceeds (the GEMV
 * above LIN_GEMV_MAX_ROWS, small-M above LIN_SMALLM_MAX_ROWS or a panel too wide for the
 * scratch), falls back to AUTO's choice. Never changes a result (linear_fast.h). */
typedef enum { DSV4_LIN_AUTO = 0, DSV4_LIN_GEMV, DSV4_LIN_SMALLM, DSV4_LIN_GEMM } dsv4_lin_path;
void dsv4_kctx_set_lin_path(dsv4_kctx *k, dsv4_lin_path path);
dsv4_lin_path dsv4_kctx_lin_path(const dsv4_kctx *k);

/* Parallel for: fn(arg, task, tid) for every task in [0, n_tasks), spread over the
 * context's threads; returns when all are done. tid in [0, dsv4_kctx_threads) names the
 * running thread, only to pick per-thread scratch: a task's result must not depend on
 * it. Called from inside a task (dsv4_linear in a per-expert task, say), it runs the
 * tasks on the calling thread with its tid. One calling thread at a time per context. */
void dsv4_kctx_parallel(dsv4_kctx *k, int n_tasks, dsv4_task_fn fn, void *arg);

/* A prefetch hint for thread tid of k's pool (dsv4_pool_hint): never changes a result. */
void dsv4_kctx_hint(dsv4_kctx *k, int tid, const void *ptr, int64_t len, int skip);
/* The hint thread tid holds for the job `ahead` pool jobs on (dsv4_pool_hint_get). */
int dsv4_kctx_hint_get(const dsv4_kctx *k, int tid, int ahead, const void **ptr, int64_t *len);

/* dsv4_kctx_parallel from min_tasks tasks on; fewer run on the calling thread (short
 * per-row copies: waking the workers costs more than a few of them save). */
void dsv4_kctx_parallel_from(dsv4_kctx *k, int n_tasks, int min_tasks, dsv4_task_fn fn, void *arg);
#define DSV4_KCTX_ROW_COPY_MIN_TASKS 4 /* min_tasks of the per-row copy jobs around kernels */

/* The calling thread's tid: inside a task of this context's job, the tid it runs as;
 * otherwise 0. */
int dsv4_kctx_tid(const dsv4_kctx *k);

/* Per-thread scratch for kernels built on dsv4_kctx_parallel: max_cols floats, 64-byte
 * aligned, contents undefined on entry. */
float *dsv4_kctx_scratch(dsv4_kctx *k, int tid);
int64_t dsv4_kctx_max_cols(const dsv4_kctx *k);

/* y[s, o] = sum_i x[s, i] * W[o, i]: x (n_rows, w->cols), y (n_rows, w->rows); y must not
 * overlap x. The fast path for each format (kernels/linear_fast.h gives its exact
 * summation order); dsv4_linear_ref is its oracle. Results do not depend on the thread
 * count or on n_rows (row s of a batch equals the same row alone). */
void dsv4_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y);

/* One product y = x W^T of a dsv4_linear_batch: x (n_rows, w->cols), y (n_rows, w->rows). */
typedef struct dsv4_lin_op {
    const dsv4_mat *w;
    const float *x;
    int n_rows;
    float *y;
} dsv4_lin_op;

/* Independent products in one parallel job: the tasks of all of them share the threads,
 * so a decode step hands work to the pool once for, say, every expert's W1 and W3 instead
 * of once per matrix (each hand-off costs microseconds; a decode-sized matrix is tens of
 * them). Every y gets exactly dsv4_linear's bits. No y may overlap any x or another y. */
void dsv4_linear_batch(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops);
/* Posts each of k's threads a prefetch hint (dsv4_kctx_hint) for the first `bytes` of weights
 * its share of dsv4_linear_batch(k, ops, n_ops) will read (the planner's split; nothing runs,
 * x and y may be NULL), for the job `skip` pool jobs after the next. Only jobs of one-row
 * products of the planned formats (batch-1 decode, whose serial pieces leave a thread idle
 * and the memory bus quiet) get one. Never changes a result. */
void dsv4_lin_hint(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t bytes, int skip);
/* A thread's hint: a quarter of its L2 (1 MB a core on Zen 4/5), so that the lines are
 * still there when its job reads them, beside what the kernels stream meanwhile */
#define DSV4_LIN_HINT_BYTES (256 * 1024)
/* dsv4_linear_batch's products with x's rows ldx floats apart and y's ldy apart (each at
 * least every op's cols and rows: the ops read and write column slices of wider arrays, in
 * place of copies to and from dense ones; 0: each op's own dense rows, dsv4_linear_batch). Strided products take the GEMM path, which
 * gives every path's bits (linear_fast.h) and is the path of calls of more than
 * DSV4_LIN_STRIDED_MIN_ROWS - 1 rows anyway. */
#define DSV4_LIN_STRIDED_MIN_ROWS 65
void dsv4_linear_batch_strided(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops, int64_t ldx, int64_t ldy);
/* The same products on the calling thread, each in as few kernel calls as its path takes
 * (a GEMV over all its outputs at once): for a task of a caller that cuts the work into its
 * own tasks (the one-row MoE job), where splitting a product again only restarts the
 * weight stream's prefetch. Every y gets exactly dsv4_linear's bits. */
void dsv4_linear_here(dsv4_kctx *k, const dsv4_lin_op *ops, int n_ops);

/* The W8A8 kernel's buffer for quantized activations (kernels/w8a8.h): reserved once for
 * matrices of up to max_cols inputs (an engine does it at create), so that its calls do
 * not allocate. w8a8_buf gives it to the calling thread when it holds at least `bytes`,
 * else NULL (the kernel then allocates for the call). */
int dsv4_kctx_reserve_w8a8(dsv4_kctx *k, dsv4_err *err);
void *dsv4_kctx_w8a8_buf(dsv4_kctx *k, size_t bytes);

#endif
