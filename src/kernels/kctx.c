/* kctx.c — kernel context. For now single-threaded and dispatching to the reference
 * kernels; the threaded SIMD paths plug in here. */
#include "kernels/kctx.h"

#include <stdlib.h>

#include "util/err.h"

struct dsv4_kctx {
    int n_threads;
    int64_t max_cols;
    float *scratch; /* (max_cols) */
};

int dsv4_kctx_create(int n_threads, int64_t max_cols, dsv4_kctx **out, dsv4_err *err) {
    dsv4_kctx *k = calloc(1, sizeof *k);
    if (!k) return dsv4_fail(err, DSV4_ERR_NOMEM, "kernel context: out of memory");
    k->n_threads = n_threads > 0 ? n_threads : 1;
    k->max_cols = max_cols > 0 ? max_cols : 1;
    k->scratch = malloc((size_t)k->max_cols * sizeof(float));
    if (!k->scratch) { free(k); return dsv4_fail(err, DSV4_ERR_NOMEM, "kernel scratch: out of memory"); }
    *out = k;
    return DSV4_OK;
}

void dsv4_kctx_free(dsv4_kctx *k) {
    if (!k) return;
    free(k->scratch);
    free(k);
}

int dsv4_kctx_threads(const dsv4_kctx *k) { return k->n_threads; }

void dsv4_linear(dsv4_kctx *k, const dsv4_mat *w, const float *x, int n_rows, float *y) {
    dsv4_linear_ref(w, x, n_rows, y, k->scratch);
}
