/* test_native_formats.c — P1 (weights kept FP8 e4m3 / packed FP4 / BF16 in memory,
 * dequantized inside the SIMD kernels) against P0 (the same weights dequantized once to F32
 * dense matrices, portable scalar kernels), spec/serving.md §f: max-rel <= 1e-5 on hidden
 * states and logits and identical argmax; only summation order differs.
 *
 *   test_native_formats MODEL_DIR   (a checkpoint written with gen-model --dtype fp8)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "model/model.h"
#include "test.h"

enum { N = 160, P = 150 };

static float **owned;
static int n_owned;
static int n_quant; /* matrices that were FP8/FP4 */

/* Replaces w by an exact F32 copy of its dequantized values. */
static void to_f32(dsv4_mat *w) {
    if (w->fmt == DSV4_WF_NONE || w->fmt == DSV4_WF_F32) return;
    n_quant += w->fmt == DSV4_WF_FP8 || w->fmt == DSV4_WF_FP4;
    float *copy = malloc((size_t)(w->rows * w->cols) * sizeof(float));
    for (int64_t o = 0; o < w->rows; o++) dsv4_mat_row(w, o, copy + o * w->cols);
    owned = realloc(owned, (size_t)(n_owned + 1) * sizeof *owned);
    owned[n_owned++] = copy;
    w->fmt = DSV4_WF_F32;
    w->w = copy;
    w->scale = NULL;
    w->scale_is_f32 = 0;
}

static void block_to_f32(const dsv4_config *c, dsv4_block_w *b) {
    dsv4_mat *ms[] = {&b->wq_a, &b->wq_b, &b->wkv, &b->wo_a, &b->wo_b, &b->cmp.wkv, &b->cmp.wgate,
                      &b->idx_wq_b, &b->idx_weights_proj, &b->idx_cmp.wkv, &b->idx_cmp.wgate,
                      &b->gate, &b->sh_w1, &b->sh_w2, &b->sh_w3, &b->e_proj, &b->h_proj};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) to_f32(ms[i]);
    for (int e = 0; e < c->n_routed_experts; e++) {
        to_f32(&b->w1[e]);
        to_f32(&b->w2[e]);
        to_f32(&b->w3[e]);
    }
}

/* hidden (N, D) and logits (N, V) of a prefill of P tokens + N-P decodes. */
static int run(dsv4_model *m, int reference, const int32_t *toks, float *hidden, float *logits) {
    dsv4_engine_opts eo = {.max_context = N, .max_seqs = 1, .reference = reference, .kv_dtype = DSV4_KV_F32};
    dsv4_engine *e;
    dsv4_err err = {0};
    int s, rc = dsv4_engine_create(m, &eo, &e, &err);
    if (!rc) rc = dsv4_seq_create(e, &s, &err);
    dsv4_model_info info = dsv4_model_get_info(m);
    for (int t = 0; !rc && t < N; t += t < P ? P : 1) {
        int n = t < P ? P : 1;
        dsv4_span sp = {.seq = s, .start = t, .n_tokens = n, .tokens = toks + t, .n_hidden = n};
        rc = dsv4_forward(e, &sp, 1, hidden + (size_t)t * info.hidden_size, NULL, &err);
        if (!rc) rc = dsv4_lm_head(e, hidden + (size_t)t * info.hidden_size, n,
                                   logits + (size_t)t * info.vocab_size, &err);
    }
    if (rc) fprintf(stderr, "%s\n", err.msg);
    dsv4_engine_free(e);
    return rc;
}

static void compare(const char *what, const float *a, const float *ref, int rows, int cols) {
    double max_abs = 0, max_ref = 0;
    int top1 = 0;
    for (int r = 0; r < rows; r++) {
        int ia = 0, ib = 0;
        for (int c = 0; c < cols; c++) {
            double d = fabs((double)a[(size_t)r * cols + c] - ref[(size_t)r * cols + c]);
            if (!(d <= max_abs)) max_abs = d;
            if (fabs(ref[(size_t)r * cols + c]) > max_ref) max_ref = fabs(ref[(size_t)r * cols + c]);
            if (a[(size_t)r * cols + c] > a[(size_t)r * cols + ia]) ia = c;
            if (ref[(size_t)r * cols + c] > ref[(size_t)r * cols + ib]) ib = c;
        }
        top1 += ia == ib;
    }
    double rel = max_abs / (max_ref > 0 ? max_ref : 1);
    printf("%-7s max-abs %.3e  max-rel %.3e  top-1 %d/%d\n", what, max_abs, rel, top1, rows);
    CHECK_MSG(rel <= 1e-5, "%s: max-rel %.3e > 1e-5", what, rel);
    CHECK_MSG(top1 == rows, "%s: top-1 %d/%d", what, top1, rows);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_native_formats MODEL_DIR\n"); return 2; }
    dsv4_model *native, *dense;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &native, &err) || dsv4_model_open(argv[1], &dense, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const dsv4_config *c = &dense->cfg;
    to_f32(&dense->embed);
    to_f32(&dense->head);
    for (int l = 0; l < c->num_hidden_layers; l++) block_to_f32(c, &dense->layers[l]);
    for (int l = 0; l < c->num_nextn_predict_layers; l++) block_to_f32(c, &dense->mtp[l]);
    CHECK_MSG(n_quant > 0, "the checkpoint holds no FP8/FP4 matrix");

    const int V = c->vocab_size, D = c->hidden_size;
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    float *h1 = malloc((size_t)N * D * sizeof(float)), *h0 = malloc((size_t)N * D * sizeof(float));
    float *l1 = malloc((size_t)N * V * sizeof(float)), *l0 = malloc((size_t)N * V * sizeof(float));
    CHECK(run(native, 0, toks, h1, l1) == 0);
    CHECK(run(dense, 1, toks, h0, l0) == 0);
    compare("hidden", h1, h0, N, D);
    compare("logits", l1, l0, N, V);
    free(h1); free(h0); free(l1); free(l0);
    dsv4_model_close(native);
    dsv4_model_close(dense);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    return test_report();
}
