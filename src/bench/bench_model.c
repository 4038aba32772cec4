/* bench_model.c — bytes and FLOPs of a forward step (see bench_model.h). */
#include "bench/bench_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "hc/hc.h"
#include "kernels/kv_rows.h"
#include "kernels/ops.h"
#include "model/info.h"
#include "model/inventory.h"
#include "moe/moe.h"
#include "util/err.h"

void dsv4_step_weights_free(dsv4_step_weights *w) {
    free(w->layer_fixed);
    free(w->ape_row);
    free(w->expert);
    free(w->mtp_expert);
    memset(w, 0, sizeof *w);
}

/* The matrix the engine runs for inventory entry s: the engine's blocks are shallow copies
 * of the model's, some with a matrix replaced at load (wo_a as an F32 copy), so a matrix
 * that lives inside a model block is read from the same field of the engine's block.
 * Routed experts live in arrays the two share. */
static const dsv4_mat *engine_mat(const dsv4_engine *e, const dsv4_tensor_spec *s) {
    const dsv4_model *m = e->model;
    const int L = e->cfg->num_hidden_layers;
    if (s->layer >= 0 && s->layer <= L) {
        /* main layer l is blocks[l]; MTP block 0 is blocks[L] */
        const dsv4_block_w *mb = s->layer < L ? &m->layers[s->layer] : (m->mtp ? &m->mtp[0] : NULL);
        const char *base = (const char *)mb, *p = (const char *)s->mat;
        if (mb && p >= base && p < base + sizeof(dsv4_block_w))
            return (const dsv4_mat *)((const char *)&e->blocks[s->layer] + (p - base));
    }
    return s->mat;
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

int dsv4_step_weights_init(const dsv4_engine *e, dsv4_step_weights *w, dsv4_err *err) {
    memset(w, 0, sizeof *w);
    const dsv4_config *c = e->cfg;
    const dsv4_model *m = e->model;
    const int L = c->num_hidden_layers, E = c->n_routed_experts;
    if (!m->specs) return dsv4_fail(err, DSV4_ERR_STATE, "step weights: the model has no tensor list");
    w->n_layers = L;
    w->n_experts = E;
    w->top_k = c->num_experts_per_tok;
    w->layer_fixed = calloc((size_t)L, sizeof *w->layer_fixed);
    w->ape_row = calloc((size_t)L, sizeof *w->ape_row);
    w->expert = calloc((size_t)L * E, sizeof *w->expert);
    w->mtp_expert = calloc((size_t)E, sizeof *w->mtp_expert);
    w->has_mtp = c->num_nextn_predict_layers > 0 && e->opts.mtp;
    if (!w->layer_fixed || !w->ape_row || !w->expert || !w->mtp_expert) {
        dsv4_step_weights_free(w);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "step weights: out of memory");
    }
    for (int i = 0; i < m->n_specs; i++) {
        const dsv4_tensor_spec *s = &m->specs[i];
        if (s->layer > L || (s->layer == L && !w->has_mtp)) continue; /* MTP blocks past 0 */
        if (s->kind == DSV4_TK_TID2EID) continue;  /* K ids per row: negligible */
        int64_t bytes;
        if (s->kind == DSV4_TK_MAT) {
            const dsv4_mat *mat = engine_mat(e, s);
            if (!mat || mat->fmt == DSV4_WF_NONE) continue;
            bytes = dsv4_mat_bytes(mat);
        } else {
            bytes = dsv4_spec_numel(s) * (int64_t)sizeof(float); /* vectors run as F32 */
        }
        if (s->layer < 0) {
            if (!strcmp(s->name, "embed.weight")) w->embed_row = bytes / c->vocab_size;
            else w->global += bytes;
            if (!strcmp(s->name, "head.weight")) w->head = bytes;
        } else if (s->layer == L) {
            /* the MTP block: its ape counts one row, like a one-row main step's */
            if (s->expert >= 0) w->mtp_expert[s->expert] += bytes;
            else w->mtp_fixed += ends_with(s->name, "compressor.ape") ? s->shape[1] * (int64_t)sizeof(float) : bytes;
        } else if (s->expert >= 0) {
            w->expert[(int64_t)s->layer * E + s->expert] += bytes;
        } else if (ends_with(s->name, "compressor.ape")) {
            /* (r, coff*d): a row reads the row of its position mod r */
            const int64_t row = s->shape[1] * (int64_t)sizeof(float);
            w->layer_fixed[s->layer] += row;
            w->ape_row[s->layer] += row;
        } else {
            w->layer_fixed[s->layer] += bytes;
        }
    }
    return DSV4_OK;
}

double dsv4_step_weights_bytes(const dsv4_step_weights *w, const dsv4_config *c, int n_rows,
                               const uint8_t *used) {
    const int E = w->n_experts;
    double total = (double)w->global + (double)n_rows * (double)w->embed_row;
    for (int l = 0; l < w->n_layers; l++) {
        const int r = c->compress_ratios[l];
        const int ape_rows = r > 0 ? (n_rows < r ? n_rows : r) : 1;
        total += (double)w->layer_fixed[l] + (double)(ape_rows - 1) * (double)w->ape_row[l];
        for (int x = 0; x < E; x++)
            if (used[(int64_t)l * E + x]) total += (double)w->expert[(int64_t)l * E + x];
    }
    return total;
}

double dsv4_mtp_weights_bytes(const dsv4_step_weights *w, int n_rows, const uint8_t *used) {
    if (!w->has_mtp || n_rows < 1) return 0;
    double total = (double)w->mtp_fixed + (double)n_rows * (double)w->embed_row;
    for (int x = 0; x < w->n_experts; x++)
        if (used[x]) total += (double)w->mtp_expert[x];
    return total;
}

double dsv4_expected_distinct_experts(int n_experts, int top_k, int n_rows) {
    if (n_experts <= 0) return 0;
    return n_experts * (1.0 - pow(1.0 - (double)top_k / n_experts, n_rows));
}

double dsv4_step_weights_expected(const dsv4_step_weights *w, const dsv4_config *c, int n_rows) {
    const int E = w->n_experts;
    const double distinct = dsv4_expected_distinct_experts(E, w->top_k, n_rows);
    double total = (double)w->global + (double)n_rows * (double)w->embed_row;
    for (int l = 0; l < w->n_layers; l++) {
        const int r = c->compress_ratios[l];
        const int ape_rows = r > 0 ? (n_rows < r ? n_rows : r) : 1;
        double sum = 0;
        for (int x = 0; x < E; x++) sum += (double)w->expert[(int64_t)l * E + x];
        total += (double)w->layer_fixed[l] + (double)(ape_rows - 1) * (double)w->ape_row[l];
        if (E > 0) total += distinct * sum / E;
    }
    return total;
}

/* ---- FLOPs ----------------------------------------------------------------------------- */

double dsv4_linear_flops_per_token(const dsv4_config *c) {
    dsv4_param_counts pc;
    if (dsv4_count_params(c, &pc, NULL)) return 0;
    return 2.0 * (double)(pc.active_main - pc.embed - pc.head);
}

double dsv4_head_flops(const dsv4_config *c, int n_rows) {
    return 2.0 * c->vocab_size * (double)c->hidden_size * n_rows;
}

/* Sum over t in [a, b) of min(t + 1, cap): the keys of a capped causal range. */
static double sum_min_t1(int64_t a, int64_t b, int64_t cap) {
    if (b <= a) return 0;
    /* t + 1 < cap for t < cap - 1 */
    const int64_t lo_end = a > cap - 1 ? a : (b < cap - 1 ? b : cap - 1); /* [a, lo_end): t+1 */
    const double n1 = (double)(lo_end - a);
    const double s1 = n1 * (double)(a + 1 + lo_end) / 2.0; /* (a+1) + ... + lo_end */
    return s1 + (double)(b - lo_end) * (double)cap;
}

/* Sum over t in [a, b) of floor((t + 1) / r), by whole periods of r. */
static double sum_floor_div(int64_t a, int64_t b, int64_t r) {
    double s = 0;
    int64_t t = a;
    for (; t < b && (t + 1) % r; t++) s += (double)((t + 1) / r);
    /* now (t+1) % r == 0: blocks of r values q, q, ..., q (r times), q = (t+1)/r, rising */
    const int64_t blocks = (b - t) / r;
    if (blocks > 0) {
        const double q0 = (double)((t + 1) / r);
        s += (double)r * (blocks * q0 + (double)blocks * (blocks - 1) / 2.0);
        t += blocks * r;
    }
    for (; t < b; t++) s += (double)((t + 1) / r);
    return s;
}

/* Sum over t in [a, b) of min(cap, floor((t + 1) / 4)). */
static double sum_min_floor_div(int64_t a, int64_t b, int64_t r, int64_t cap) {
    /* floor((t+1)/r) >= cap iff t + 1 >= cap * r */
    const int64_t split = cap * r - 1;  /* first t with the cap reached */
    const int64_t m = b < split ? b : (a > split ? a : split);
    return sum_floor_div(a, m, r) + (double)(b - m) * (double)cap;
}

double dsv4_forward_flops(const dsv4_config *c, int64_t start, int64_t n) {
    if (n <= 0) return 0;
    const int64_t a = start, b = start + n;
    double f = dsv4_linear_flops_per_token(c) * (double)n;
    const double per_key = 4.0 * c->num_attention_heads * (double)c->head_dim;
    const double per_idx = 2.0 * c->index_n_heads * (double)c->index_head_dim;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const int r = c->compress_ratios[l];
        double keys = sum_min_t1(a, b, c->sliding_window);
        if (r == 4) {
            keys += sum_min_floor_div(a, b, 4, c->index_topk);
            /* a row scores its entries only past topk of them (attn_row.c, attention.c's spans):
             * from t = 4 (topk + 1) - 1 on */
            const int64_t s = 4 * ((int64_t)c->index_topk + 1) - 1;
            if (b > s) f += per_idx * sum_floor_div(a > s ? a : s, b, 4);
        } else if (r > 0) {
            keys += sum_floor_div(a, b, r);
        }
        f += per_key * keys;
    }
    return f;
}

double dsv4_decode_cache_bytes(const dsv4_config *c, int64_t t, int kv_dtype) {
    int rf = DSV4_ROW_F32, kf = DSV4_ROW_F32;
    dsv4_err ignored;
    if (dsv4_kv_dtype_codes(kv_dtype, &rf, &kf, &ignored)) rf = kf = DSV4_ROW_F32;
    const double row = (double)dsv4_row_bytes(rf, c->head_dim, c->qk_rope_head_dim);
    const double idx_row = (double)dsv4_row_bytes(kf, c->index_head_dim, 0);
    double bytes = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const int r = c->compress_ratios[l];
        const int64_t win = t + 1 < c->sliding_window ? t + 1 : c->sliding_window;
        bytes += (double)win * row;
        if (r == 4) {
            const int64_t n_c = (t + 1) / 4;
            bytes += (double)(n_c < c->index_topk ? n_c : c->index_topk) * row;
            if (n_c > c->index_topk) bytes += (double)n_c * idx_row; /* scored only past topk */
        } else if (r > 0) {
            bytes += (double)((t + 1) / r) * row;
        }
    }
    return bytes;
}

/* ---- routing census -------------------------------------------------------------------- */

int dsv4_route_from_streams(dsv4_engine *e, int layer, const float *streams,
                            const int32_t *tokens, int n_rows, int *sel, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    if (layer < 0 || layer >= c->num_hidden_layers)
        return dsv4_fail(err, DSV4_ERR_ARG, "route: layer %d outside [0, %d)", layer, c->num_hidden_layers);
    if (n_rows < 1) return dsv4_fail(err, DSV4_ERR_ARG, "route: %d rows", n_rows);
    const dsv4_block_w *b = &e->blocks[layer];
    const int D = c->hidden_size, hc = c->hc_mult, E = c->n_routed_experts, K = c->num_experts_per_tok;
    float *x = malloc((size_t)n_rows * D * sizeof(float));      /* (R, D) FFN input */
    float *post = malloc((size_t)hc * sizeof(float));           /* (hc) unused */
    float *comb = malloc((size_t)hc * hc * sizeof(float));      /* (hc, hc) unused */
    float *w = malloc((size_t)n_rows * K * sizeof(float));      /* (R, K) */
    float *logits = malloc((size_t)n_rows * E * sizeof(float)); /* (R, E) */
    double *s = malloc((size_t)E * sizeof(double));             /* (E) */
    int rc;
    if (!x || !post || !comb || !w || !logits || !s) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "route: out of memory");
    } else {
        for (int i = 0; i < n_rows; i++) {
            float *xi = x + (size_t)i * D;
            dsv4_hc_pre(c, streams + (size_t)i * hc * D, b->hc_ffn_fn, b->hc_ffn_base,
                        b->hc_ffn_scale, xi, post, comb);
            dsv4_rmsnorm(xi, b->ffn_norm, D, (float)c->rms_norm_eps, xi);
        }
        rc = dsv4_moe_gate(e->k, c, b, x, tokens, n_rows, sel, w, logits, s, err);
    }
    free(x); free(post); free(comb); free(w); free(logits); free(s);
    return rc;
}
