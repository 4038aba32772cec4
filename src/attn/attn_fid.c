/* attn_fid.c — attention-side roundings of fidelity mode P3 (spec/model.md §6 F2-F4).
 * Everything is per row or per entry, so prefill/decode/chunk schedules stay bitwise equal. */
#include "attn/attn_fid.h"

#include "kernels/fidelity.h"

void dsv4_fid_attn_rows(const dsv4_attn_ctx *ctx, const dsv4_block_w *b, dsv4_attn_work *w) {
    const unsigned fid = dsv4_kctx_fidelity(ctx->k);
    if (!(fid & (DSV4_FID_F2 | DSV4_FID_F3 | DSV4_FID_F4))) return;
    const dsv4_config *c = ctx->cfg;
    const int R = w->R, H = c->num_attention_heads, hd = c->head_dim, rd = c->qk_rope_head_dim;
    const int nI = c->index_n_heads, dI = c->index_head_dim;
    if (fid & DSV4_FID_F4) dsv4_fid_bf16(w->q, (int64_t)R * H * hd);
    for (int i = 0; i < R; i++) {
        float *kv = w->kv + (size_t)i * hd;
        if (fid & DSV4_FID_F2) dsv4_fid_kv_row(kv, hd, rd); /* includes the BF16 of F4 */
        else if (fid & DSV4_FID_F4) dsv4_fid_bf16(kv, hd);
    }
    if ((fid & DSV4_FID_F3) && b->ratio == 4 && w->qI)
        for (int i = 0; i < R * nI; i++) dsv4_fid_index_row(w->qI + (size_t)i * dI, dI);
}

void dsv4_fid_pooled(const dsv4_attn_ctx *ctx, float *p, int d) {
    if (dsv4_kctx_fidelity(ctx->k) & DSV4_FID_F4) dsv4_fid_bf16(p, d);
}

void dsv4_fid_norm_out(const dsv4_attn_ctx *ctx, float *x, int n) {
    if (dsv4_kctx_fidelity(ctx->k) & DSV4_FID_F4) dsv4_fid_bf16(x, n);
}

void dsv4_fid_entry(const dsv4_attn_ctx *ctx, int indexer, float *entry, int d) {
    const unsigned fid = dsv4_kctx_fidelity(ctx->k);
    if (indexer && (fid & DSV4_FID_F3)) dsv4_fid_index_row(entry, d);
    else if (!indexer && (fid & DSV4_FID_F2)) dsv4_fid_kv_row(entry, d, ctx->cfg->qk_rope_head_dim);
    else if (!indexer && (fid & DSV4_FID_F4)) dsv4_fid_bf16(entry, d);
}
