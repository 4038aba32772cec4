/* scan.c — the full non-finite scan of a model's matrices (see scan.h). */
#include "model/scan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/inventory.h"
#include "util/err.h"

int dsv4_model_scan(const dsv4_model *m, dsv4_scan_report *r, dsv4_err *err) {
    memset(r, 0, sizeof *r);
    int64_t max_cols = 1;
    for (int i = 0; i < m->n_specs; i++)
        if (m->specs[i].kind == DSV4_TK_MAT && m->specs[i].mat && m->specs[i].mat->cols > max_cols)
            max_cols = m->specs[i].mat->cols;
    float *row = malloc((size_t)max_cols * sizeof(float)); /* (cols) one decoded row */
    if (!row) return dsv4_fail(err, DSV4_ERR_NOMEM, "scan: out of memory for a %lld-value row", (long long)max_cols);
    size_t k = 0;
    for (int i = 0; i < m->n_specs; i++) {
        const dsv4_tensor_spec *s = &m->specs[i];
        if (s->kind != DSV4_TK_MAT || !s->mat || !s->mat->w) continue;
        const dsv4_mat *w = s->mat;
        int64_t bad = 0, at = -1;
        float first = 0;
        for (int64_t o = 0; o < w->rows; o++) {
            dsv4_mat_row(w, o, row);
            for (int64_t c = 0; c < w->cols; c++)
                if (!isfinite(row[c])) {
                    if (at < 0) { at = o * w->cols + c; first = row[c]; }
                    bad++;
                }
        }
        r->values += w->rows * w->cols;
        if (!bad) continue;
        r->bad_values += bad;
        r->bad_tensors++;
        if (k < sizeof r->first && r->bad_tensors <= 4)
            k += (size_t)snprintf(r->first + k, sizeof r->first - k, "%s%s: %lld non-finite, first %g at [%lld, %lld]",
                                  k ? "; " : "", s->name, (long long)bad, (double)first,
                                  (long long)(at / w->cols), (long long)(at % w->cols));
    }
    free(row);
    return DSV4_OK;
}
