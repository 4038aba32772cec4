/* attn_output.c — §5.11's grouped output projection of an attention sub-block: v_g = u_g
 * wo_a_g^T for each of the G groups of heads, then y = v wo_b^T, u the rows' head outputs.
 * attention.c's attend writes u straight into the group-major layout the products read
 * when the call goes through copies (dsv4_attn_output_copies), and calls
 * dsv4_attn_output_ug with it; the CP forward and the tests call dsv4_attn_output.
 */
#include <string.h>

#include "attn/attention.h"
#include "util/arena.h"
#include "util/err.h"

/* Scratch of the grouped output projection for R rows. */
typedef struct grouped_bufs {
    float *ug;        /* (G, R, in_g) the slices of u, group-major */
    float *vg;        /* (G, R, o_lora) */
    dsv4_mat *wg;     /* (G) row blocks of w */
    dsv4_lin_op *ops; /* (G) */
} grouped_bufs;

static int grouped_take(dsv4_arena *a, int G, int R, int in_g, int o_lora, grouped_bufs *g) {
    g->ug = dsv4_arena_take_n(a, (long long)G * R * in_g, sizeof(float));
    g->vg = dsv4_arena_take_n(a, (long long)G * R * o_lora, sizeof(float));
    g->wg = dsv4_arena_take_n(a, G, sizeof(dsv4_mat));
    g->ops = dsv4_arena_take_n(a, G, sizeof(dsv4_lin_op));
    return g->ug && g->vg && g->wg && g->ops;
}

/* The grouped projection's copies of row i: its G slices of u to group-major ug, or its
 * G outputs from vg to y. */
typedef struct group_copy_job {
    int G, R, in_g, o_lora;
    const float *u;  /* (R, G*in_g) */
    float *ug;       /* (G, R, in_g) */
    const float *vg; /* (G, R, o_lora) */
    float *y;        /* (R, G*o_lora) */
} group_copy_job;

static void group_in_task(void *arg, int i, int tid) {
    (void)tid;
    const group_copy_job *j = arg;
    for (int g = 0; g < j->G; g++)
        memcpy(j->ug + ((size_t)g * j->R + i) * j->in_g, j->u + ((size_t)i * j->G + g) * j->in_g,
               (size_t)j->in_g * sizeof(float));
}

static void group_out_task(void *arg, int i, int tid) {
    (void)tid;
    const group_copy_job *j = arg;
    for (int g = 0; g < j->G; g++)
        memcpy(j->y + ((size_t)i * j->G + g) * j->o_lora, j->vg + ((size_t)g * j->R + i) * j->o_lora,
               (size_t)j->o_lora * sizeof(float));
}

/* Whether the grouped projection of R rows goes through group-major copies of its input
 * and output (else the products read and write the rows in place: see grouped_linear). */
int dsv4_attn_output_copies(const dsv4_numerics *nm, int R) {
    return R > 1 && !(R >= DSV4_LIN_STRIDED_MIN_ROWS && nm->linear_strided);
}

/* y (R, G*o_lora) = grouped projection: row block g of w (o_lora rows) applied to the g-th
 * contiguous slice (width in_g) of u (R, G*in_g); the G products run as one job. ug_in,
 * when not NULL (and grouped_copies), holds u already group-major (G, R, in_g): the
 * attention's row tasks wrote it there, so there is no copy job. */
static int grouped_linear(const dsv4_numerics *nm, dsv4_kctx *k, dsv4_arena *a, const dsv4_mat *w,
                          int G, const float *u, const float *ug_in, int R, int in_g, int o_lora, float *y,
                          dsv4_err *err) {
    const size_t mark = dsv4_arena_mark(a);
    grouped_bufs gb;
    int rc = DSV4_OK;
    if (!grouped_take(a, G, R, in_g, o_lora, &gb)) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "output projection: scratch arena too small (%d rows)", R);
        goto done;
    }
    /* one row (decode): its g-th slice of u and of y are already group g's rows, so the
     * products read and write them in place; so do many rows (a prefill) where the mode
     * takes strided rows (their GEMM path anyway): the 16 MB of u a 512-row Flash-quarter
     * prefill copied per layer, and the 4 MB of y. Other row counts go through group-major
     * copies */
    const int strided = R >= DSV4_LIN_STRIDED_MIN_ROWS && nm->linear_strided;
    const int direct = !dsv4_attn_output_copies(nm, R);
    const float *ug = ug_in && !direct ? ug_in : gb.ug;
    for (int g = 0; g < G; g++) {
        if (dsv4_mat_rows(w, (int64_t)g * o_lora, o_lora, &gb.wg[g]) != 0) {
            rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "wo_a: cannot slice group %d", g);
            goto done;
        }
        gb.ops[g] = direct ? (dsv4_lin_op){&gb.wg[g], u + (size_t)g * in_g, R, y + (size_t)g * o_lora}
                           : (dsv4_lin_op){&gb.wg[g], ug + (size_t)g * R * in_g, R, gb.vg + (size_t)g * R * o_lora};
    }
    if (strided) {
        nm->linear_strided(nm, k, gb.ops, G, (int64_t)G * in_g, (int64_t)G * o_lora);
        goto done;
    }
    if (direct) {
        nm->linear(nm, k, gb.ops, G);
        goto done;
    }
    /* the slices in, the products, the outputs back: the copies by rows over the pool */
    group_copy_job cj = {G, R, in_g, o_lora, u, gb.ug, gb.vg, y};
    if (ug != ug_in) dsv4_kctx_parallel_from(k, R, DSV4_KCTX_ROW_COPY_MIN_TASKS, group_in_task, &cj);
    nm->linear(nm, k, gb.ops, G);
    dsv4_kctx_parallel_from(k, R, DSV4_KCTX_ROW_COPY_MIN_TASKS, group_out_task, &cj);
done:
    dsv4_arena_release(a, mark);
    return rc;
}

/* Batch-1 decode: the pool's threads' hints for the one-row product of w (wo_a, wo_b), the
 * job after the next (dsv4_lin_hint). */
void dsv4_attn_hint_out(dsv4_kctx *k, const dsv4_mat *w) {
    const dsv4_lin_op op = {w, NULL, 1, NULL};
    dsv4_lin_hint(k, &op, 1, DSV4_LIN_HINT_BYTES, 1);
}

int dsv4_attn_output_take(dsv4_arena *a, const dsv4_config *cfg, int R) {
    const int G = cfg->o_groups;
    grouped_bufs g;
    const float *v = dsv4_arena_take_n(a, (long long)R * G * cfg->o_lora_rank, sizeof(float));
    const int ok = grouped_take(a, G, R, cfg->num_attention_heads * cfg->head_dim / G, cfg->o_lora_rank, &g);
    return v && ok; /* both taken even when the first fails: a measuring arena counts them */
}

int dsv4_attn_output_ug(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const float *o, const float *ug, int R,
                       float *y, dsv4_err *err) {
    const dsv4_config *cfg = ctx->cfg;
    const int G = cfg->o_groups, ol = cfg->o_lora_rank, in_g = cfg->num_attention_heads * cfg->head_dim / G;
    const size_t mark = dsv4_arena_mark(ctx->scratch);
    float *v = dsv4_arena_take_n(ctx->scratch, (long long)R * G * ol, sizeof(float)); /* (R, G*o_lora) */
    /* batch-1 decode: wo_b's weights behind wo_a's job (at one row the groups' products are
     * one job, read in place) */
    if (R == 1) dsv4_attn_hint_out(ctx->k, &b->wo_b);
    int rc = v ? grouped_linear(ctx->num, ctx->k, ctx->scratch, &b->wo_a, G, o, ug, R, in_g, ol, v, err)
               : dsv4_fail(err, DSV4_ERR_NOMEM, "output projection: scratch arena too small (%d rows)", R);
    if (!rc) dsv4_num_linear(ctx->num, ctx->k, &b->wo_b, v, R, y);
    dsv4_arena_release(ctx->scratch, mark);
    return rc;
}

int dsv4_attn_output(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, const float *o, int R, float *y,
                     dsv4_err *err) {
    return dsv4_attn_output_ug(ctx, b, o, NULL, R, y, err);
}
