/* mtp.c — the MTP block (spec/model.md §5.14): MTP position t consumes the main model's
 * last-block streams h_t and the token x_{t+1}, runs one full block (layer id n_layers) at
 * RoPE position t with its own window cache, and yields a hidden state that the shared LM
 * head turns into logits for x_{t+2}.
 *
 *   e   = RMSNorm(embed[x_{t+1}]; enorm)
 *   z_k = e e_proj^T + RMSNorm(h_t[k]; hnorm) h_proj^T        per stream k
 *   z   = block(z)
 *   hidden = RMSNorm(hc_head(z; mtp hc_head); mtp norm)
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "hc/hc.h"
#include "kernels/ops.h"
#include "util/err.h"
#include "util/fpenv.h"

/* The call's own buffers for R rows in n_spans spans. */
typedef struct mtp_bufs {
    dsv4_batch_span *bs;  /* (n_spans) */
    int64_t *pos;         /* (R) */
    int32_t *tok;         /* (R) x_{t+1} */
    int *seqs;            /* (n_spans) */
    int64_t *starts;      /* (n_spans) */
    int *counts;          /* (n_spans) */
    float *en;            /* (R, D) normed embeddings */
    float *ep;            /* (R, D) e e_proj^T */
    float *hn;            /* (R, hc, D) normed streams */
    float *z;             /* (R, hc, D) block streams */
    float *y;             /* (D) */
    int *keep;            /* (R) rows whose hidden state is wanted, ascending */
} mtp_bufs;

static int mtp_take(dsv4_arena *a, const dsv4_config *c, int R, int n_spans, mtp_bufs *f) {
    const int64_t D = c->hidden_size, hc = c->hc_mult;
    f->bs = dsv4_arena_take_n(a, n_spans, sizeof *f->bs);
    f->pos = dsv4_arena_take_n(a, R, sizeof *f->pos);
    f->tok = dsv4_arena_take_n(a, R, sizeof *f->tok);
    f->seqs = dsv4_arena_take_n(a, n_spans, sizeof *f->seqs);
    f->starts = dsv4_arena_take_n(a, n_spans, sizeof *f->starts);
    f->counts = dsv4_arena_take_n(a, n_spans, sizeof *f->counts);
    f->en = dsv4_arena_take_n(a, R * D, sizeof(float));
    f->ep = dsv4_arena_take_n(a, R * D, sizeof(float));
    f->hn = dsv4_arena_take_n(a, R * hc * D, sizeof(float));
    f->z = dsv4_arena_take_n(a, R * hc * D, sizeof(float));
    f->y = dsv4_arena_take_n(a, D, sizeof(float));
    f->keep = dsv4_arena_take_n(a, R, sizeof(int));
    return f->bs && f->pos && f->tok && f->seqs && f->starts && f->counts && f->en && f->ep &&
           f->hn && f->z && f->y && f->keep;
}

size_t dsv4_mtp_scratch_bytes(const dsv4_config *c, int R, int n_spans) {
    dsv4_arena m = dsv4_arena_measuring();
    mtp_bufs f;
    mtp_take(&m, c, R, n_spans, &f);
    return m.peak;
}

/* Every check of a call's arguments; *R_out = its rows. */
static int validate_mtp(const dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans, const int *out,
                        const float *hidden, int *R_out, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    if (!e->opts.mtp)
        return dsv4_fail(err, DSV4_ERR_STATE, "mtp_forward: engine created without MTP (opts.mtp = 0)");
    /* under DP a rank without rows still makes the call: it joins the MoE exchange */
    if (n_spans < (e->dp ? 0 : 1) || (n_spans && !spans))
        return dsv4_fail(err, DSV4_ERR_ARG, "mtp_forward: no spans");
    int R = 0, wanted = 0;
    for (int i = 0; i < n_spans; i++) {
        const dsv4_mtp_span *sp = &spans[i];
        if (sp->seq < 0 || sp->seq >= e->opts.max_seqs || !e->seqs[sp->seq].live)
            return dsv4_fail(err, DSV4_ERR_ARG, "mtp span %d: sequence %d is not live", i, sp->seq);
        const dsv4_seq_state *s = &e->seqs[sp->seq];
        if (s->broken)
            return dsv4_fail(err, DSV4_ERR_STATE, "mtp span %d: sequence %d lost its state in an "
                             "earlier failed call; free it", i, sp->seq);
        if (s->pending)
            return dsv4_fail(err, DSV4_ERR_STATE, "mtp span %d: sequence %d has a speculative span "
                             "awaiting dsv4_seq_commit", i, sp->seq);
        if (s->mtp_off)
            return dsv4_fail(err, DSV4_ERR_STATE, "mtp span %d: sequence %d runs without MTP "
                             "(dsv4_seq_mtp_off)", i, sp->seq);
        if (sp->start != s->m)
            return dsv4_fail(err, DSV4_ERR_ARG, "mtp span %d: start %lld != MTP length %lld", i,
                             (long long)sp->start, (long long)s->m);
        if (sp->n < 1 || sp->n > e->opts.c_max || sp->start + sp->n > s->n)
            return dsv4_fail(err, DSV4_ERR_ARG,
                             "mtp span %d: %d rows from %lld must lie within the %lld committed "
                             "positions (and c_max %d)", i, sp->n, (long long)sp->start,
                             (long long)s->n, e->opts.c_max);
        if (!sp->next_tokens || !sp->streams)
            return dsv4_fail(err, DSV4_ERR_ARG, "mtp span %d: missing tokens or streams", i);
        const int o = out ? out[i] : DSV4_MTP_OUT_ALL;
        if (o < DSV4_MTP_OUT_ALL || o > DSV4_MTP_OUT_NONE)
            return dsv4_fail(err, DSV4_ERR_ARG, "mtp span %d: out = %d is not a DSV4_MTP_OUT_* value", i, o);
        wanted += o == DSV4_MTP_OUT_ALL ? sp->n : o == DSV4_MTP_OUT_LAST;
        for (int j = 0; j < sp->n; j++)
            if (sp->next_tokens[j] < 0 || sp->next_tokens[j] >= c->vocab_size)
                return dsv4_fail(err, DSV4_ERR_ARG, "mtp span %d: token id %d outside [0, %d)", i,
                                 sp->next_tokens[j], c->vocab_size);
        for (int j = 0; j < i; j++)
            if (spans[j].seq == sp->seq)
                return dsv4_fail(err, DSV4_ERR_ARG, "sequence %d appears twice", sp->seq);
        R += sp->n;
    }
    if (R > e->opts.max_rows)
        return dsv4_fail(err, DSV4_ERR_ARG, "mtp_forward: %d rows in one call exceed max_rows = %d",
                         R, e->opts.max_rows);
    if (wanted && !hidden) return dsv4_fail(err, DSV4_ERR_ARG, "mtp_forward: NULL hidden for %d rows", wanted);
    *R_out = R;
    return DSV4_OK;
}

int dsv4_mtp_forward(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans, float *hidden,
                     dsv4_err *err) {
    return dsv4_mtp_forward_out(e, spans, n_spans, NULL, hidden, err);
}

/* The call's buffers from the scratch arena, the batch packed into them (streams normed
 * later in place; the kept rows, *n_keep of them) and every page it writes reserved: what
 * can fail before the first write. */
static int mtp_pack(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans, const int *out, int R,
                    mtp_bufs *f, int *n_keep, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int D = c->hidden_size, hc = c->hc_mult;
    if (!mtp_take(&e->scratch, c, R, n_spans, f))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "mtp_forward: scratch arena too small");
    int row = 0;
    *n_keep = 0;
    for (int i = 0; i < n_spans; i++) {
        const int o = out ? out[i] : DSV4_MTP_OUT_ALL;
        for (int j = 0; j < spans[i].n; j++)
            if (o == DSV4_MTP_OUT_ALL || (o == DSV4_MTP_OUT_LAST && j == spans[i].n - 1)) f->keep[(*n_keep)++] = row + j;
        f->bs[i] = (dsv4_batch_span){spans[i].seq, spans[i].start, spans[i].n, row};
        f->seqs[i] = spans[i].seq;
        f->starts[i] = spans[i].start;
        f->counts[i] = spans[i].n;
        for (int j = 0; j < spans[i].n; j++, row++) {
            f->pos[row] = spans[i].start + j;
            f->tok[row] = spans[i].next_tokens[j];
            memcpy(f->hn + (size_t)row * hc * D, spans[i].streams + (size_t)j * hc * D,
                   (size_t)hc * D * sizeof(float));
        }
    }
    const dsv4_block_w *b = &e->blocks[c->num_hidden_layers];
    return dsv4_cache_reserve(e->cache, n_spans, f->seqs, f->starts, f->counts, b->ratio > 0, err);
}

static int mtp_forward_body(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans, const int *out,
                            float *hidden, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int D = c->hidden_size, hc = c->hc_mult;
    const float eps = (float)c->rms_norm_eps;
    int R = 0;
    int rc = validate_mtp(e, spans, n_spans, out, hidden, &R, err);
    const size_t mark = dsv4_arena_mark(&e->scratch);
    mtp_bufs f;
    int packed = 0, n_keep = 0; /* f filled and the call's pages reserved */
    if (e->dp) {
        /* this rank's own spans: agree on the kind and status only (see dsv4_forward) */
        if (!rc && R > 0) packed = !(rc = mtp_pack(e, spans, n_spans, out, R, &f, &n_keep, err));
        rc = dsv4_engine_agree_dp(e, rc, DSV4_DP_CALL_MTP, NULL, err);
        if (rc && packed) dsv4_engine_unreserve(e, f.seqs, n_spans);
    } else if (e->group) {
        /* the group agrees on the call first (see dsv4_forward); out is the home rank's own
         * business: the group does not agree on it */
        rc = dsv4_engine_agree_mtp(e, rc, spans, n_spans, err);
    }
    if (rc) goto done;

    if (e->idle || R == 0) {
        /* no rows here (a non-home rank, or a DP rank without spans): only the MTP block's
         * MoE exchange (see forward.c) */
        int changed;
        rc = dsv4_engine_idle_layers(e, c->num_hidden_layers, c->num_hidden_layers + 1, &changed, err);
        for (int i = 0; i < n_spans; i++) {
            if (rc && changed) e->seqs[spans[i].seq].broken = 1;
            else if (!rc) e->seqs[spans[i].seq].m += spans[i].n;
        }
        goto done;
    }

    const dsv4_block_w *b = &e->blocks[c->num_hidden_layers];
    if (!packed && (rc = mtp_pack(e, spans, n_spans, out, R, &f, &n_keep, err))) {
        dsv4_engine_fail_collective(e, rc, 1);
        goto done;
    }
    const int32_t *tok = f.tok;
    const int *keep = f.keep;
    float *en = f.en, *ep = f.ep, *hn = f.hn, *z = f.z, *y = f.y;
    dsv4_batch batch = {R, n_spans, f.bs, f.pos, f.tok};

    /* z_k = RMSNorm(embed[x_{t+1}]; enorm) e_proj^T + RMSNorm(h_t[k]; hnorm) h_proj^T */
    for (int i = 0; i < R; i++) {
        dsv4_mat_row(&e->model->embed, tok[i], en + (size_t)i * D);
        dsv4_rmsnorm(en + (size_t)i * D, b->enorm, D, eps, en + (size_t)i * D);
    }
    dsv4_num_linear(e->num, e->k, &b->e_proj, en, R, ep);
    for (int i = 0; i < R * hc; i++) dsv4_rmsnorm(hn + (size_t)i * D, b->hnorm, D, eps, hn + (size_t)i * D);
    dsv4_num_linear(e->num, e->k, &b->h_proj, hn, R * hc, z);
    for (int i = 0; i < R; i++)
        for (int k = 0; k < hc; k++)
            for (int d = 0; d < D; d++) z[((size_t)i * hc + k) * D + d] += ep[(size_t)i * D + d];

    const dsv4_block_step local = dsv4_engine_local_step(e);
    /* rows nobody reads only make their cache writes: no queries, heads, MoE */
    if ((rc = dsv4_engine_block_keep(e, b, &batch, &local, z, n_keep < R ? keep : NULL, n_keep, err))) {
        for (int i = 0; i < n_spans; i++) e->seqs[spans[i].seq].broken = 1;
        goto done;
    }

    for (int i = 0; i < n_keep; i++) { /* z: the kept rows, compacted */
        dsv4_hc_head(c, z + (size_t)i * hc * D, b->hc_head_fn, b->hc_head_base, b->hc_head_scale, y);
        dsv4_rmsnorm(y, b->norm, D, eps, hidden + (size_t)i * D);
        e->num->round(e->num, DSV4_ACT_NORM, hidden + (size_t)i * D, D);
    }
    for (int i = 0; i < n_spans; i++) {
        e->seqs[spans[i].seq].m += spans[i].n;
        dsv4_engine_trim(e, spans[i].seq);
    }
done:
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

int dsv4_mtp_forward_out(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans, const int *out,
                         float *hidden, dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = mtp_forward_body(e, spans, n_spans, out, hidden, err);
    dsv4_fpenv_leave(f);
    return rc;
}
