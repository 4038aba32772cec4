/* forward.c — the forward over a batch of spans (spec/model.md §3; serving.md §b):
 *
 *   h = expand(embed[token])                          (R, hc, D)
 *   for each layer: h = block(h)                      attention + MoE, each inside hc_pre/post
 *   streams = h                                       last-block streams (MTP input)
 *   hidden = RMSNorm(hc_head(h); norm.weight)         only for the rows asked for
 *
 * Everything is validated and every page reserved before the first write, so a failing
 * call leaves every sequence as it was; only running out of memory between layers can
 * leave a half-written cache, and then the call's sequences are marked broken (they must
 * be freed) instead of silently continuing from corrupt state.
 */
#include <math.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/forward_cp.h"
#include "hc/hc.h"
#include "kernels/ops.h"
#include "util/err.h"
#include "util/finite.h"
#include "util/fpenv.h"

/* Checks one span against the engine state; nothing is modified. */
static int validate_span(const dsv4_engine *e, const dsv4_span *sp, int idx, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    if (sp->seq < 0 || sp->seq >= e->opts.max_seqs || !e->seqs[sp->seq].live)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: sequence %d is not live", idx, sp->seq);
    const dsv4_seq_state *s = &e->seqs[sp->seq];
    if (s->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "span %d: sequence %d lost its state in an earlier "
                         "failed call; free it", idx, sp->seq);
    if (s->pending)
        return dsv4_fail(err, DSV4_ERR_STATE, "span %d: sequence %d has a speculative span of %d "
                         "rows awaiting dsv4_seq_commit", idx, sp->seq, s->pending);
    if (sp->start != s->n)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: start %lld != sequence length %lld", idx,
                         (long long)sp->start, (long long)s->n);
    if (sp->n_tokens < 1 || sp->n_tokens > e->opts.c_max)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: %d tokens, must be in [1, c_max = %d]", idx,
                         sp->n_tokens, e->opts.c_max);
    const int d_max = e->opts.mtp ? 1 : 0;
    if (sp->speculative && sp->n_tokens > 1 + d_max)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: speculative span of %d rows exceeds 1 + D_max "
                         "= %d (D_max = 1 needs an engine with MTP caches)", idx, sp->n_tokens, 1 + d_max);
    if (sp->start + sp->n_tokens > e->opts.max_context)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: positions up to %lld exceed max_context %lld",
                         idx, (long long)(sp->start + sp->n_tokens), (long long)e->opts.max_context);
    if (!sp->tokens) return dsv4_fail(err, DSV4_ERR_ARG, "span %d: no tokens", idx);
    for (int j = 0; j < sp->n_tokens; j++)
        if (sp->tokens[j] < 0 || sp->tokens[j] >= c->vocab_size)
            return dsv4_fail(err, DSV4_ERR_ARG, "span %d: token id %d at row %d is outside [0, %d)",
                             idx, sp->tokens[j], j, c->vocab_size);
    if (sp->n_hidden < 0 || sp->n_hidden > sp->n_tokens || sp->n_streams < 0 ||
        sp->n_streams > sp->n_tokens)
        return dsv4_fail(err, DSV4_ERR_ARG, "span %d: n_hidden %d / n_streams %d not in [0, %d]",
                         idx, sp->n_hidden, sp->n_streams, sp->n_tokens);
    for (int j = 0; sp->hidden_rows && j < sp->n_hidden; j++)
        if (sp->hidden_rows[j] < 0 || sp->hidden_rows[j] >= sp->n_tokens)
            return dsv4_fail(err, DSV4_ERR_ARG, "span %d: hidden row %d out of range", idx,
                             sp->hidden_rows[j]);
    for (int j = 0; sp->stream_rows && j < sp->n_streams; j++)
        if (sp->stream_rows[j] < 0 || sp->stream_rows[j] >= sp->n_tokens)
            return dsv4_fail(err, DSV4_ERR_ARG, "span %d: stream row %d out of range", idx,
                             sp->stream_rows[j]);
    return DSV4_OK;
}

/* After a successful call: a plain span commits all its rows (and frees the window pages
 * nobody reads any more); a speculative one waits for dsv4_seq_commit. */
static void commit_span(dsv4_engine *e, const dsv4_span *sp) {
    dsv4_seq_state *s = &e->seqs[sp->seq];
    if (sp->speculative) {
        s->pending = sp->n_tokens;
        return;
    }
    s->n += sp->n_tokens;
    dsv4_engine_trim(e, sp->seq);
}

/* NaN or Inf in a call's outputs (hidden [sum n_hidden, D], streams [sum n_streams, hc, D])
 * means bad weights or a numeric fault: the caches those rows came from are not to be
 * trusted, so the call's sequences are marked broken and the call fails. */
static int check_finite(dsv4_engine *e, const dsv4_span *spans, int n_spans, const float *hidden,
                        const float *streams, dsv4_err *err) {
    const int D = e->cfg->hidden_size, hc = e->cfg->hc_mult;
    int64_t oh = 0, os = 0;
    for (int i = 0; i < n_spans; i++) {
        const dsv4_span *sp = &spans[i];
        const int64_t nh = (int64_t)sp->n_hidden * D, ns = (int64_t)sp->n_streams * hc * D;
        const float *bad = NULL;
        const char *what = "hidden";
        /* the common case in one branch-free pass each; the element loops find the first
         * bad value only when there is one */
        if (!((nh == 0 || dsv4_all_finite(hidden + oh, nh)) && (ns == 0 || dsv4_all_finite(streams + os, ns)))) {
            for (int64_t k = 0; k < nh && !bad; k++)
                if (!isfinite(hidden[oh + k])) bad = hidden + oh + k;
            for (int64_t k = 0; k < ns && !bad; k++)
                if (!isfinite(streams[os + k])) { bad = streams + os + k; what = "stream"; }
        }
        oh += nh;
        os += ns;
        if (!bad) continue;
        for (int j = 0; j < n_spans; j++) e->seqs[spans[j].seq].broken = 1;
        const int64_t off = what[0] == 'h' ? bad - hidden - (oh - nh) : bad - streams - (os - ns);
        const int width = what[0] == 'h' ? D : hc * D, j = (int)(off / width);
        const int n_w = what[0] == 'h' ? sp->n_hidden : sp->n_streams;
        const int *rows = what[0] == 'h' ? sp->hidden_rows : sp->stream_rows;
        return dsv4_fail(err, DSV4_ERR_NUMERIC, "forward: the %s output of sequence %d at position %lld is %g "
                         "(not finite): the weights or the computation produce NaN/Inf (`dsv4 info --check` "
                         "scans the weights); the call's sequences are broken and must be freed", what, sp->seq,
                         (long long)(sp->start + dsv4_wanted_row(rows, n_w, sp->n_tokens, j)), (double)*bad);
    }
    return DSV4_OK;
}

/* Every check of a call's arguments; *R = its rows. */
static int validate_call(const dsv4_engine *e, const dsv4_span *spans, int n_spans, const float *hidden,
                         const float *streams, int *R, dsv4_err *err) {
    /* under DP a rank without rows still makes the call: it joins the MoE exchanges */
    if (n_spans < (e->dp ? 0 : 1) || (n_spans && !spans))
        return dsv4_fail(err, DSV4_ERR_ARG, "forward: no spans");
    int want_h = 0, want_s = 0;
    *R = 0;
    for (int i = 0; i < n_spans; i++) {
        int rc = validate_span(e, &spans[i], i, err);
        if (rc) return rc;
        for (int j = 0; j < i; j++)
            if (spans[j].seq == spans[i].seq)
                return dsv4_fail(err, DSV4_ERR_ARG, "sequence %d appears in spans %d and %d",
                                 spans[i].seq, j, i);
        *R += spans[i].n_tokens;
        want_h += spans[i].n_hidden;
        want_s += spans[i].n_streams;
    }
    if ((want_h && !hidden) || (want_s && !streams))
        return dsv4_fail(err, DSV4_ERR_ARG, "forward: output buffer missing");
    if (*R > e->opts.max_rows)
        return dsv4_fail(err, DSV4_ERR_ARG, "forward: %d rows in one call exceed max_rows = %d", *R,
                         e->opts.max_rows);
    return DSV4_OK;
}

/* The call's own buffers: the reservation of all its spans, then the packed batch and the
 * streams of the R rows it runs here (under DP|CP, without its CP span's, taken after the
 * CP prefills so that both never hold the arena together). */
typedef struct forward_bufs {
    int *seqs;            /* (n_spans) */
    int64_t *starts;      /* (n_spans) */
    int *counts;          /* (n_spans) */
    dsv4_span *rest;      /* (n_spans) the spans that run here, in call order */
    dsv4_batch_span *bs;  /* (n_spans) */
    int64_t *pos;         /* (R) */
    int32_t *tok;         /* (R) */
    float *h;             /* (R, hc, D) streams */
} forward_bufs;

static int forward_take_spans(dsv4_arena *a, int n_spans, forward_bufs *f) {
    f->seqs = dsv4_arena_take_n(a, n_spans, sizeof *f->seqs);
    f->starts = dsv4_arena_take_n(a, n_spans, sizeof *f->starts);
    f->counts = dsv4_arena_take_n(a, n_spans, sizeof *f->counts);
    f->rest = dsv4_arena_take_n(a, n_spans, sizeof *f->rest);
    return f->seqs && f->starts && f->counts && f->rest;
}

static int forward_take_rows(dsv4_arena *a, const dsv4_config *c, int R, int n_spans, forward_bufs *f) {
    f->bs = dsv4_arena_take_n(a, n_spans, sizeof *f->bs);
    f->pos = dsv4_arena_take_n(a, R, sizeof *f->pos);
    f->tok = dsv4_arena_take_n(a, R, sizeof *f->tok);
    f->h = dsv4_arena_take_n(a, (int64_t)R * c->hc_mult * c->hidden_size, sizeof(float));
    return f->bs && f->pos && f->tok && f->h;
}

size_t dsv4_forward_scratch_bytes(const dsv4_config *c, int R, int n_spans, size_t *held) {
    dsv4_arena m = dsv4_arena_measuring();
    forward_bufs f;
    forward_take_spans(&m, n_spans, &f);
    *held = m.peak;
    forward_take_rows(&m, c, R, n_spans, &f);
    return m.peak;
}

/* Every page the call writes reserved (all or nothing): what can fail before the first
 * write. The buffers stay taken for the rest of the call. */
static int forward_reserve(dsv4_engine *e, const dsv4_span *spans, int n_spans, forward_bufs *f,
                           dsv4_err *err) {
    if (!forward_take_spans(&e->scratch, n_spans, f))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "forward: scratch arena too small");
    for (int i = 0; i < n_spans; i++) {
        f->seqs[i] = spans[i].seq;
        f->starts[i] = spans[i].start;
        f->counts[i] = spans[i].n_tokens;
    }
    return dsv4_cache_reserve(e->cache, n_spans, f->seqs, f->starts, f->counts, 1, err);
}

/* The spans that run here (all but span skip, -1 = none) into f->rest, their R rows
 * packed into the batch buffers. */
static int forward_pack(dsv4_engine *e, const dsv4_span *spans, int n_spans, int skip, int *n_rest,
                        forward_bufs *f, dsv4_err *err) {
    int R = 0, n = 0;
    for (int i = 0; i < n_spans; i++)
        if (i != skip) {
            f->rest[n++] = spans[i];
            R += spans[i].n_tokens;
        }
    *n_rest = n;
    if (!forward_take_rows(&e->scratch, e->cfg, R, n, f))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "forward: scratch arena too small");
    int row = 0;
    for (int i = 0; i < n; i++) {
        const dsv4_span *sp = &f->rest[i];
        f->bs[i] = (dsv4_batch_span){sp->seq, sp->start, sp->n_tokens, row};
        for (int j = 0; j < sp->n_tokens; j++, row++) {
            f->pos[row] = sp->start + j;
            f->tok[row] = sp->tokens[j];
        }
    }
    return DSV4_OK;
}

/* Row i of the streams from its token's embedding row: a prefill's 512 rows write 8 MB
 * of h (hc copies of each), which the main thread alone did while the workers waited. */
typedef struct embed_job {
    const dsv4_mat *embed;
    const int32_t *tok; /* (R) */
    float *h;           /* (R, hc, D) */
    int D, hc;
} embed_job;

static void embed_row(void *arg, int i, int tid) {
    (void)tid;
    const embed_job *j = arg;
    float *hi = j->h + (size_t)i * j->hc * j->D;
    dsv4_mat_row(j->embed, j->tok[i], hi);
    for (int s = 1; s < j->hc; s++) memcpy(hi + (size_t)s * j->D, hi, (size_t)j->D * sizeof(float));
}

/* The hidden outputs: hidden row t = RMSNorm(hc_head(h of its row); norm) (§5.13), a row a
 * task (a batched decode step's 16 rows took ~63 us on the calling thread alone). The
 * head's mix goes into the output row and is normalized in place (dsv4_rmsnorm reads each
 * value before it writes it): the bits of a row do not depend on the task. */
typedef struct {
    const dsv4_engine *e;
    const dsv4_span *spans;
    const dsv4_batch_span *bs;
    int n_spans, simd;
    int gap, gap_h; /* spans from gap on: their rows come gap_h rows later (a CP span's) */
    const float *h; /* (R, hc * D) */
    float *hidden;  /* (n_hidden rows over all spans of the call, D) */
} head_out_job;

static void head_out_row(void *arg, int t, int tid) {
    (void)tid;
    const head_out_job *j = arg;
    const dsv4_config *c = j->e->cfg;
    const dsv4_model *m = j->e->model;
    const int D = c->hidden_size, hc = c->hc_mult;
    int i = 0, k = t; /* span i's k-th hidden row */
    while (k >= j->spans[i].n_hidden) k -= j->spans[i++].n_hidden;
    const dsv4_span *sp = &j->spans[i];
    const int r = j->bs[i].row0 + dsv4_wanted_row(sp->hidden_rows, sp->n_hidden, sp->n_tokens, k);
    float *out = j->hidden + (size_t)(t + (i >= j->gap ? j->gap_h : 0)) * D;
    dsv4_hc_head_at(c, j->simd, j->h + (size_t)r * hc * D, m->hc_head_fn, m->hc_head_base, m->hc_head_scale, out);
    dsv4_rmsnorm(out, m->norm, D, (float)c->rms_norm_eps, out);
    j->e->num->round(j->e->num, DSV4_ACT_NORM, out, D);
}

/* Under DP|CP: every rank's CP span, in rank order, as a CP prefill with that rank as its
 * home; this rank's (spans[cpi]) writes its outputs where the call's order puts them, the
 * others' come as the agreement shared them. *mine: this rank's began. */
static int dp_cp_prefills(dsv4_engine *e, const dsv4_span *spans, int cpi, float *hidden, float *streams,
                          int *mine, dsv4_err *err) {
    const int D = e->cfg->hidden_size, hcD = e->cfg->hc_mult * D;
    for (int r = 0; r < dsv4_dist_size(e->group); r++) {
        dsv4_dp_cp p;
        /* the agreement checked every rank's span (dsv4_engine_agree_dp); every rank reads
         * the same shared values, so a bad one stops every rank here alike */
        if (!dsv4_engine_dp_cp(e, r, &p))
            return dsv4_fail(err, DSV4_ERR_STATE, "forward: rank %d's CP span is not one this engine can run", r);
        if (!p.n_tokens) continue;
        int rc;
        if (r == e->rank) {
            size_t oh = 0, os = 0;
            for (int i = 0; i < cpi; i++) {
                oh += (size_t)spans[i].n_hidden;
                os += (size_t)spans[i].n_streams;
            }
            *mine = 1;
            rc = dsv4_forward_cp_at(e, &spans[cpi], r, hidden ? hidden + oh * D : NULL,
                                    streams ? streams + os * hcD : NULL, err);
        } else {
            const dsv4_span sp = {.seq = p.seq, .start = p.start, .n_tokens = p.n_tokens,
                                  .n_hidden = p.n_hidden, .n_streams = p.n_streams};
            rc = dsv4_forward_cp_at(e, &sp, r, NULL, NULL, err);
        }
        if (rc) return rc;
    }
    return DSV4_OK;
}

static int forward_body(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden,
                        float *streams, dsv4_err *err) {
    const dsv4_config *c = e->cfg;
    const int D = c->hidden_size, hc = c->hc_mult;
    int R = 0;
    int rc = validate_call(e, spans, n_spans, hidden, streams, &R, err);
    const size_t mark = dsv4_arena_mark(&e->scratch);
    forward_bufs f;
    int reserved = 0; /* the call's pages reserved (f's span arrays taken) */
    int cpi = -1;     /* under DP|CP: this rank's span that ran as a CP prefill over the group */
    if (e->dp) {
        /* data-parallel attention: the spans are this rank's own, so the group agrees on the
         * call's kind and every rank's status; a rank's pages are reserved before that, so a
         * rank short of pages refuses the call on every rank before any rank writes a cache
         * (its reservation then goes back). Under CP every rank's longest prefill span also
         * travels in that agreement, and each runs first as a CP prefill over the group. */
        if (!rc) cpi = dsv4_cp_pick(e, spans, n_spans);
        if (!rc && R > 0) reserved = !(rc = forward_reserve(e, spans, n_spans, &f, err));
        rc = dsv4_engine_agree_dp(e, rc, DSV4_DP_CALL_FORWARD, cpi >= 0 ? &spans[cpi] : NULL, err);
        if (rc && reserved) dsv4_engine_unreserve(e, f.seqs, n_spans);
        int mine = 0;
        if (!rc && (rc = dp_cp_prefills(e, spans, cpi, hidden, streams, &mine, err))) {
            /* the group stopped together (the CP prefill's agreements): the other spans were
             * not written, this rank's CP span may have been */
            if (mine) e->seqs[spans[cpi].seq].broken = 1;
            if (reserved) dsv4_engine_unreserve(e, f.seqs, n_spans);
            goto done;
        }
    } else if (e->group) {
        /* a group agrees on the call (every rank valid, the same spans) before anything
         * collective, so a refusal or a mismatch is the same clean error on every rank */
        rc = dsv4_engine_agree_spans(e, rc, spans, n_spans, err);
    }
    if (rc) goto done;

    /* a long prompt over a CP group: every rank runs its segments (dist/cp.h); a
     * speculative span is never long enough to qualify */
    if (dsv4_cp_eligible(e, spans, n_spans) && !spans[0].speculative) {
        rc = dsv4_forward_cp(e, spans, n_spans, hidden, streams, err);
        /* the outputs are on the home rank */
        if (!rc && !e->idle) rc = check_finite(e, spans, n_spans, hidden, streams, err);
        goto done;
    }

    const int R_here = R - (cpi >= 0 ? spans[cpi].n_tokens : 0);
    if (e->idle || R_here == 0) {
        /* no rows here: a non-home rank (rank 0 computes these spans and keeps their caches),
         * or a DP rank without spans this call (or only its CP span, already done) */
        int changed;
        rc = dsv4_engine_idle_layers(e, 0, c->num_hidden_layers, &changed, err);
        for (int i = 0; i < n_spans; i++) {
            if (rc && (changed || i == cpi)) e->seqs[spans[i].seq].broken = 1;
            else if (!rc && i != cpi) commit_span(e, &spans[i]);
        }
        if (!rc && cpi >= 0) rc = check_finite(e, spans, n_spans, hidden, streams, err);
        goto done;
    }

    int n_run = 0; /* the spans that run here: f.rest */
    if ((!reserved && (rc = forward_reserve(e, spans, n_spans, &f, err))) ||
        (rc = forward_pack(e, spans, n_spans, cpi, &n_run, &f, err))) {
        if (reserved) dsv4_engine_unreserve(e, f.seqs, n_spans);
        if (cpi >= 0) e->seqs[spans[cpi].seq].broken = 1;
        dsv4_engine_fail_collective(e, rc, cpi < 0);
        goto done;
    }
    const dsv4_span *run = f.rest;
    const dsv4_batch_span *bs = f.bs;
    float *h = f.h;
    dsv4_batch batch = {R_here, n_run, f.bs, f.pos, f.tok};

    /* h[i][j] = embed[token_i] for every stream j (§5.1), rows over the pool */
    embed_job ej = {&e->model->embed, f.tok, h, D, hc};
    dsv4_kctx_parallel_from(e->k, R_here, DSV4_KCTX_ROW_COPY_MIN_TASKS, embed_row, &ej);
    const dsv4_block_step local = dsv4_engine_local_step(e);
    for (int l = 0; l < c->num_hidden_layers; l++)
        if ((rc = dsv4_engine_block(e, &e->blocks[l], &batch, &local, h, err))) {
            for (int i = 0; i < n_spans; i++) e->seqs[spans[i].seq].broken = 1;
            goto done;
        }

    /* outputs: streams as they are, hidden = RMSNorm(hc_head(h); norm) (§5.13), each at
     * its place in the call's order (after a CP span's, gap) */
    const int gap = cpi >= 0 ? cpi : n_run;
    int oh = 0, os = 0;
    for (int i = 0; i < n_run; i++) {
        const dsv4_span *sp = &run[i];
        if (i == gap) os += spans[cpi].n_streams;
        for (int j = 0; j < sp->n_streams; j++, os++) {
            const int r = bs[i].row0 + dsv4_wanted_row(sp->stream_rows, sp->n_streams, sp->n_tokens, j);
            memcpy(streams + (size_t)os * hc * D, h + (size_t)r * hc * D, (size_t)hc * D * sizeof(float));
        }
        oh += sp->n_hidden;
    }
    head_out_job hj = {e, run, bs, n_run, dsv4_kctx_simd(e->k), gap, cpi >= 0 ? spans[cpi].n_hidden : 0, h,
                       hidden};
    dsv4_kctx_parallel_from(e->k, oh, DSV4_KCTX_ROW_COPY_MIN_TASKS, head_out_row, &hj);
    if ((rc = check_finite(e, spans, n_spans, hidden, streams, err))) goto done;
    for (int i = 0; i < n_run; i++) commit_span(e, &run[i]);
done:
    dsv4_arena_release(&e->scratch, mark);
    return rc;
}

int dsv4_forward(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden, float *streams,
                 dsv4_err *err) {
    const dsv4_fpenv f = dsv4_fpenv_enter(); /* util/fpenv.h */
    const int rc = forward_body(e, spans, n_spans, hidden, streams, err);
    dsv4_fpenv_leave(f);
    return rc;
}
