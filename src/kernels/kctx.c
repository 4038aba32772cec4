/* kctx.c — kernel context: thread pool, SIMD level, per-thread scratch.
 * dsv4_linear itself lives in linear_fast.c. */
#include "kernels/kctx.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu.h"
#include "kernels/linear_fast.h"
#include "kernels/w8a8.h"
#include "util/err.h"

struct dsv4_kctx {
    int n_threads;
    int simd;             /* dsv4_simd in use */
    int simd_max;         /* best level CPU and build allow */
    dsv4_lin_path lin_path; /* dsv4_linear's path: AUTO unless a bench or test forces one */
    int64_t max_cols;
    int64_t stride;       /* floats per thread in `scratch`, a multiple of 16 */
    float *scratch;       /* (n_threads, stride): the thread's dsv4_lin_xs_key in LIN_SCRATCH_KEY_FLOATS,
                           * LIN_SCRATCH_GEMM_FLOATS, then max_cols */
    _Atomic uint64_t lin_jobs; /* dsv4_kctx_lin_job's last number */
    dsv4_pool *pool;
    dsv4_lin_tables *tables; /* read-only after create */
    void *w8_buf;         /* the W8A8 activation buffer of the calling thread, or NULL */
    size_t w8_bytes;
    int expf_x512;        /* dsv4_expf_x512_agrees() at create */
    int exp_x512;         /* dsv4_exp_x512_agrees() at create */
};

static int64_t round16(int64_t v) { return (v + 15) & ~(int64_t)15; }

int dsv4_kctx_create(int n_threads, int64_t max_cols, dsv4_kctx **out, dsv4_err *err) {
    if (n_threads <= 0) n_threads = dsv4_available_cores();
    if (n_threads > 1024) return dsv4_fail(err, DSV4_ERR_ARG, "kernel context: %d threads is too many", n_threads);
    dsv4_kctx *k = calloc(1, sizeof *k);
    if (!k) return dsv4_fail(err, DSV4_ERR_NOMEM, "kernel context: out of memory");
    k->n_threads = n_threads;
    k->max_cols = max_cols > 0 ? max_cols : 1;
    k->stride = LIN_SCRATCH_KEY_FLOATS + round16(LIN_SCRATCH_GEMM_FLOATS) + round16(k->max_cols);
    const size_t bytes = sizeof(float) * (size_t)k->stride * (size_t)n_threads;
    k->scratch = aligned_alloc(64, bytes); /* bytes is a multiple of 64 */
    if (!k->scratch) {
        free(k);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "kernel scratch: out of memory (%zu bytes)", bytes);
    }
    k->tables = aligned_alloc(64, sizeof *k->tables);
    if (!k->tables) {
        free(k->scratch);
        free(k);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "kernel tables: out of memory");
    }
    dsv4_lin_tables_init(k->tables);
    for (int t = 0; t < n_threads; t++) /* every key empty */
        memset(k->scratch + (int64_t)t * k->stride, 0, LIN_SCRATCH_KEY_FLOATS * sizeof(float));
    atomic_init(&k->lin_jobs, 0);
    int cpu = dsv4_cpu_simd(), build = dsv4_build_simd();
    k->simd_max = cpu < build ? cpu : build;
    k->simd = k->simd_max;
    k->expf_x512 = k->simd_max >= DSV4_SIMD_AVX512 && dsv4_expf_x512_agrees();
    k->exp_x512 = k->simd_max >= DSV4_SIMD_AVX512 && dsv4_exp_x512_agrees();
    /* DSV4_SIMD forces a level; a name it does not know, or a level this CPU or build
     * cannot run, is an error rather than a silent fallback */
    const int want = dsv4_simd_env(k->simd_max, err);
    if (want < 0 || want > k->simd_max) {
        const int rc = want < 0 ? DSV4_ERR_ARG
                                : dsv4_fail(err, DSV4_ERR_ARG, "DSV4_SIMD=%s: this %s runs at most the %s level",
                                            getenv("DSV4_SIMD"), cpu < build ? "CPU" : "build",
                                            dsv4_simd_name((dsv4_simd)k->simd_max));
        free(k->tables);
        free(k->scratch);
        free(k);
        return rc;
    }
    k->simd = want;
    int rc = dsv4_pool_create(n_threads, &k->pool, err);
    if (rc) {
        free(k->tables);
        free(k->scratch);
        free(k);
        return rc;
    }
    *out = k;
    return DSV4_OK;
}

void dsv4_kctx_free(dsv4_kctx *k) {
    if (!k) return;
    dsv4_pool_free(k->pool);
    free(k->w8_buf);
    free(k->tables);
    free(k->scratch);
    free(k);
}

int dsv4_kctx_threads(const dsv4_kctx *k) { return k->n_threads; }

int dsv4_kctx_pin(dsv4_kctx *k, dsv4_err *err) { return dsv4_pool_pin(k->pool, err); }

int dsv4_kctx_simd(const dsv4_kctx *k) { return k->simd; }

int dsv4_kctx_set_simd(dsv4_kctx *k, int level) {
    k->simd = level < 0 ? 0 : level > k->simd_max ? k->simd_max : level;
    return k->simd;
}

dsv4_swiglu_fn dsv4_kctx_swiglu(const dsv4_kctx *k) { return dsv4_swiglu_at(k->simd, k->expf_x512); }

dsv4_expf_rows_fn dsv4_kctx_expf(const dsv4_kctx *k) { return dsv4_expf_at(k->simd, k->expf_x512); }

dsv4_pool_cols_fn dsv4_kctx_pool_cols(const dsv4_kctx *k) {
    return k->simd >= DSV4_SIMD_AVX512 && k->exp_x512 ? dsv4_pool_cols_x512() : NULL;
}

dsv4_exp_rows_fn dsv4_kctx_exp(const dsv4_kctx *k) {
    return k->simd >= DSV4_SIMD_AVX512 && k->exp_x512 ? dsv4_exp_x512() : NULL;
}

void dsv4_kctx_set_lin_path(dsv4_kctx *k, dsv4_lin_path path) { k->lin_path = path; }

dsv4_lin_path dsv4_kctx_lin_path(const dsv4_kctx *k) { return k->lin_path; }

void dsv4_kctx_parallel(dsv4_kctx *k, int n_tasks, dsv4_task_fn fn, void *arg) {
    dsv4_pool_run(k->pool, n_tasks, fn, arg);
}

void dsv4_kctx_parallel_from(dsv4_kctx *k, int n_tasks, int min_tasks, dsv4_task_fn fn, void *arg) {
    if (n_tasks >= min_tasks) {
        dsv4_pool_run(k->pool, n_tasks, fn, arg);
        return;
    }
    const int tid = dsv4_pool_tid(k->pool);
    for (int t = 0; t < n_tasks; t++) fn(arg, t, tid);
}

int dsv4_kctx_tid(const dsv4_kctx *k) { return dsv4_pool_tid(k->pool); }

void dsv4_kctx_hint(dsv4_kctx *k, int tid, const void *ptr, int64_t len, int skip) {
    dsv4_pool_hint(k->pool, tid, ptr, len, skip);
}

int dsv4_kctx_hint_get(const dsv4_kctx *k, int tid, int ahead, const void **ptr, int64_t *len) {
    return dsv4_pool_hint_get(k->pool, tid, ahead, ptr, len);
}

float *dsv4_kctx_lin_scratch(dsv4_kctx *k, int tid) {
    return k->scratch + (int64_t)tid * k->stride + LIN_SCRATCH_KEY_FLOATS;
}

uint64_t dsv4_kctx_lin_job(dsv4_kctx *k) { return atomic_fetch_add_explicit(&k->lin_jobs, 1, memory_order_relaxed) + 1; }

float *dsv4_kctx_scratch(dsv4_kctx *k, int tid) {
    return k->scratch + (int64_t)tid * k->stride + LIN_SCRATCH_KEY_FLOATS + round16(LIN_SCRATCH_GEMM_FLOATS);
}

const dsv4_lin_tables *dsv4_kctx_lin_tables(const dsv4_kctx *k) { return k->tables; }

int64_t dsv4_kctx_max_cols(const dsv4_kctx *k) { return k->max_cols; }


int dsv4_kctx_reserve_w8a8(dsv4_kctx *k, dsv4_err *err) {
    const size_t bytes = dsv4_w8a8_call_bytes(k->max_cols);
    if (k->w8_bytes >= bytes) return DSV4_OK;
    void *buf = aligned_alloc(64, bytes); /* a multiple of 64 */
    if (!buf) return dsv4_fail(err, DSV4_ERR_NOMEM, "w8a8 activation buffer: out of memory (%zu bytes)", bytes);
    free(k->w8_buf);
    k->w8_buf = buf;
    k->w8_bytes = bytes;
    return DSV4_OK;
}

/* Only the thread that called into the context (tid 0) uses it: a task that called
 * dsv4_linear itself would run beside other tasks. */
void *dsv4_kctx_w8a8_buf(dsv4_kctx *k, size_t bytes) {
    return bytes <= k->w8_bytes && dsv4_kctx_tid(k) == 0 ? k->w8_buf : NULL;
}
