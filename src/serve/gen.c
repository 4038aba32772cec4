/* gen.c — the blocking generation loop over one sequence (see dsv4_text.h): prefill the
 * new prompt tokens in chunks, then step dsv4_gen row by row; with a dsv4_spec each step
 * verifies the pending token and the MTP draft in one span (serving.md §e) and emits one
 * or two tokens. Uses only the public API. */
#include "serve/gen.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One generation's buffers; with spec, MTP speculative decoding (serving.md §e). */
typedef struct run {
    dsv4_engine *e;
    int seq, V, D, hc;
    dsv4_spec *spec;
    float *hidden;       /* (2, D) */
    float *logits;       /* (2, V) */
    float *streams;      /* (max(chunk, 2), hc, D) with spec, else (1, hc, D) */
    float *mtp_hidden;   /* (1, D) with spec: the drafting row */
    float *draft_logits; /* (V) with spec */
} run;

/* The MTP rows that are ready; when the last one is n - 1 its argmax is the next draft
 * (the span then yields that row's hidden state alone, DSV4_MTP_OUT_LAST). */
static int run_mtp(run *r, dsv4_err *err) {
    dsv4_mtp_span ms;
    int drafts;
    dsv4_spec_mtp_span(r->spec, &ms, &drafts);
    if (!ms.n) return DSV4_OK;
    const int out = drafts ? DSV4_MTP_OUT_LAST : DSV4_MTP_OUT_NONE;
    int rc = dsv4_mtp_forward_out(r->e, &ms, 1, &out, r->mtp_hidden, err);
    if (rc) return rc;
    int32_t d = -1;
    if (drafts) {
        if ((rc = dsv4_lm_head(r->e, r->mtp_hidden, 1, r->draft_logits, err)))
            return rc;
        d = dsv4_argmax(r->draft_logits, r->V);
    }
    dsv4_spec_mtp_done(r->spec, d);
    return DSV4_OK;
}

/* Runs n tokens as a plain span on seq; with want_logits the last row's logits land in
 * r->logits. With a spec the streams of every row go to it and its MTP rows run. With
 * keep the last row's hidden and streams are handed to cb->keep. */
static int feed(run *r, const int32_t *ids, int n, int want_logits, const dsv4_generation_callbacks *keep,
                dsv4_err *err) {
    dsv4_span sp = {.seq = r->seq, .start = dsv4_seq_length(r->e, r->seq), .n_tokens = n,
                    .tokens = ids, .n_hidden = want_logits || keep ? 1 : 0,
                    .n_streams = r->spec ? n : keep ? 1 : 0};
    int rc = dsv4_forward(r->e, &sp, 1, r->hidden, r->streams, err);
    if (!rc && r->spec && !(rc = dsv4_spec_fed(r->spec, ids, n, r->streams, err))) rc = run_mtp(r, err);
    if (!rc && keep)
        keep->keep(keep->user, r->seq, r->hidden, r->streams + (size_t)(sp.n_streams - 1) * r->hc * r->D);
    if (rc || !want_logits) return rc;
    return dsv4_lm_head(r->e, r->hidden, 1, r->logits, err);
}

/* A decoding step with MTP: x_n (pending in spec) and its draft in one verify span. Leaves
 * the logits of its rows in r->logits and returns the rows committed in *k. */
static int verify(run *r, dsv4_gen *g, dsv4_gen_token *y, int *k, dsv4_err *err) {
    dsv4_span sp;
    int rc = run_mtp(r, err);
    if (!rc) rc = dsv4_spec_verify_span(r->spec, &sp, err);
    if (!rc) rc = dsv4_forward(r->e, &sp, 1, r->hidden, r->streams, err);
    if (!rc) rc = dsv4_lm_head(r->e, r->hidden, sp.n_tokens, r->logits, err);
    if (!rc) rc = dsv4_gen_next(g, r->logits, y, err);
    if (!rc) rc = dsv4_spec_verify_done(r->spec, y->token, y->feed, r->streams, k, err);
    return rc;
}

static int show(const dsv4_generation_callbacks *cb, const char *text, size_t len) {
    return len && cb && cb->text ? cb->text(cb->user, text, len) : 0;
}

/* Reports a sampled token; returns 1 when the caller cancelled. */
static int emit(const dsv4_generation_callbacks *cb, const dsv4_gen_token *t, dsv4_generation_result *res) {
    res->gen_tokens++;
    if (cb && cb->token) cb->token(cb->user, &t->sample);
    return show(cb, t->text, t->text_len) != 0;
}

int dsv4_generation_run(dsv4_engine *e, const dsv4_tokenizer *tok, int seq,
                        const int32_t *prompt, int n_prompt, const dsv4_generation_opts *opts,
                        const dsv4_generation_callbacks *cb, dsv4_generation_result *res,
                        dsv4_err *err) {
    memset(res, 0, sizeof *res);
    const dsv4_engine_opts eo = dsv4_engine_get_opts(e);
    const dsv4_model_info info = dsv4_model_get_info(dsv4_engine_model(e));
    const int64_t n0 = dsv4_seq_length(e, seq), max_ctx = eo.max_context;
    if (n0 < 0) return dsv4_fail(err, DSV4_ERR_ARG, "generate: sequence %d is not live", seq);
    if (n_prompt < 1) return dsv4_fail(err, DSV4_ERR_ARG, "generate: empty prompt");
    if (n0 + n_prompt >= max_ctx)
        return dsv4_fail(err, DSV4_ERR_ARG, "generate: prompt of %d tokens after %lld in the "
                         "sequence leaves no room in max_context %lld", n_prompt, (long long)n0,
                         (long long)max_ctx);
    dsv4_gen_params gp = {.sample = opts->sample, .max_tokens = opts->max_tokens,
                          .stop_strings = opts->stop_strings, .n_stop = opts->n_stop,
                          .bias_ids = opts->bias_ids, .bias = opts->bias, .n_bias = opts->n_bias,
                          .json_schema = opts->json_schema, .json_after_think = opts->json_after_think,
                          .regex = opts->regex, .choices = opts->choices, .n_choices = opts->n_choices,
                          .grammar = opts->grammar};
    /* at most the largest call the engine takes: c_max rows a span, max_rows a call */
    const int most = eo.c_max < eo.max_rows ? eo.c_max : eo.max_rows;
    const int chunk = opts->chunk > 0 && opts->chunk < most ? opts->chunk : most;
    const size_t D = (size_t)info.hidden_size, V = (size_t)info.vocab_size;
    const dsv4_spec_stats st0 = opts->spec ? dsv4_spec_get_stats(opts->spec) : (dsv4_spec_stats){0};
    run r = {e, seq, (int)V, (int)D, info.hc_mult, opts->spec, NULL, NULL, NULL, NULL, NULL};
    dsv4_gen *g = NULL;
    int rc = DSV4_OK;
    r.hidden = malloc(2 * D * sizeof(float));
    r.logits = malloc(2 * V * sizeof(float));
    if (r.spec) {
        r.streams = malloc((size_t)(chunk > 2 ? chunk : 2) * info.hc_mult * D * sizeof(float));
        r.mtp_hidden = malloc(D * sizeof(float));
        r.draft_logits = malloc(V * sizeof(float));
    } else {
        r.streams = malloc((size_t)info.hc_mult * D * sizeof(float));  /* for cb->keep */
    }
    if (!r.hidden || !r.logits || !r.streams || (r.spec && (!r.mtp_hidden || !r.draft_logits))) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    if ((rc = dsv4_gen_create(dsv4_engine_model(e), tok, &gp, &g, err))) goto done;
    /* an engine with MTP caches frees a sequence's window pages only behind its MTP rows */
    if (!r.spec && eo.mtp && (rc = dsv4_seq_mtp_off(e, seq, err))) goto done;

    /* prefill in chunks; only the last row's logits are needed */
    double t0 = now_seconds();
    const int64_t keep_at = cb && cb->keep && cb->keep_at > n0 && cb->keep_at < n0 + n_prompt
                            ? cb->keep_at - n0 : 0;  /* in prompt rows */
    for (int done = 0; done < n_prompt;) {
        int n = n_prompt - done < chunk ? n_prompt - done : chunk;
        if (done < keep_at && done + n >= keep_at) n = (int)(keep_at - done);
        if ((rc = feed(&r, prompt + done, n, done + n == n_prompt, done + n == keep_at ? cb : NULL, err)))
            goto done;
        done += n;
        if (cb && cb->progress) cb->progress(cb->user, done, n_prompt);
    }
    res->prompt_tokens = n_prompt;
    double t1 = now_seconds();
    res->prefill_seconds = t1 - t0;

    /* decode: t is the token just sampled for position n, not yet run */
    dsv4_gen_token t;
    if ((rc = dsv4_gen_next(g, r.logits, &t, err))) goto decoded;
    for (;;) {
        int cancelled = emit(cb, &t, res);
        res->last_fed = 0;
        if (!t.feed) break;  /* a stop token stays out of the sequence */
        const int64_t n = dsv4_seq_length(e, seq);
        if (t.finish || cancelled || n + 1 >= max_ctx) {
            /* the shown token joins the sequence; no logits needed */
            if ((rc = feed(&r, &t.token, 1, 0, NULL, err))) break;
            res->last_fed = 1;
            res->context_full = !t.finish && !cancelled;
            break;
        }
        if (!r.spec) {
            if ((rc = feed(&r, &t.token, 1, 1, NULL, err)) || (rc = dsv4_gen_next(g, r.logits, &t, err))) break;
            continue;
        }
        dsv4_spec_set_next(r.spec, t.token);
        int k;
        if ((rc = verify(&r, g, &t, &k, err))) break;
        if (k == 1) continue;
        /* the draft was t: it already sits at position n + 1, row 1 gives the next token */
        cancelled = emit(cb, &t, res);
        res->last_fed = 1;
        if (t.finish || cancelled) break;
        if (n + 2 >= max_ctx) { res->context_full = 1; break; }
        if ((rc = dsv4_gen_next(g, r.logits + V, &t, err))) break;
    }
decoded:
    res->finish = dsv4_gen_finished(g);
    res->decode_seconds = now_seconds() - t1;
    if (r.spec) {
        const dsv4_spec_stats st = dsv4_spec_get_stats(r.spec);
        res->spec = (dsv4_spec_stats){st.steps - st0.steps, st.drafts - st0.drafts,
                                      st.accepted - st0.accepted, st.tokens - st0.tokens};
    }
    if (!rc) {
        const char *text;
        size_t len;
        dsv4_gen_end(g, &text, &len);
        show(cb, text, len);
        int n;
        const int32_t *ids = dsv4_gen_tokens(g, &n);
        if (!(res->ids = malloc(((size_t)n + 1) * sizeof *res->ids)))
            rc = dsv4_fail(err, DSV4_ERR_NOMEM, "generate: out of memory");
        else memcpy(res->ids, ids, (size_t)n * sizeof *ids);
    }
done:
    dsv4_gen_free(g);
    free(r.hidden); free(r.logits); free(r.streams); free(r.mtp_hidden); free(r.draft_logits);
    return rc;
}
