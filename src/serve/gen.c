/* gen.c — prefill, then sample / stream / stop, on one sequence (see gen.h). */
#include "serve/gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "util/err.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct gen_state {
    dsv4_engine *e;
    int seq;
    int V, D;
    float *hidden;      /* (D) */
    float *logits;      /* (V) */
    unsigned char *ok;  /* (V) 1 where the tokenizer has a token for the id */
} gen_state;

/* Runs n tokens on the sequence; with want_logits the last row's logits land in g->logits,
 * with ids the tokenizer cannot show masked to -inf (a random or untrained head would
 * otherwise pick ids that have no text). */
static int feed(gen_state *g, const int32_t *ids, int n, int want_logits, dsv4_err *err) {
    dsv4_span sp = {.seq = g->seq, .start = dsv4_seq_length(g->e, g->seq), .n_tokens = n,
                    .tokens = ids, .n_hidden = want_logits ? 1 : 0};
    int rc = dsv4_forward(g->e, &sp, 1, g->hidden, NULL, err);
    if (rc || !want_logits) return rc;
    if ((rc = dsv4_lm_head(g->e, g->hidden, 1, g->logits, err))) return rc;
    for (int v = 0; v < g->V; v++)
        if (!g->ok[v]) g->logits[v] = -INFINITY;
    return DSV4_OK;
}

int dsv4_generation_run(dsv4_engine *e, const dsv4_tokenizer *tok, int seq, const int32_t *prompt,
                 int n_prompt, const dsv4_generation_opts *opts, const dsv4_generation_callbacks *cb,
                 dsv4_generation_result *res, dsv4_err *err) {
    memset(res, 0, sizeof *res);
    const dsv4_config *c = e->cfg;
    const int64_t n0 = dsv4_seq_length(e, seq), max_ctx = e->opts.max_context;
    if (n0 < 0) return dsv4_fail(err, DSV4_ERR_ARG, "generate: sequence %d is not live", seq);
    if (n_prompt < 1) return dsv4_fail(err, DSV4_ERR_ARG, "generate: empty prompt");
    if (n0 + n_prompt >= max_ctx)
        return dsv4_fail(err, DSV4_ERR_ARG, "generate: prompt of %d tokens after %lld in the "
                         "sequence leaves no room in max_context %lld", n_prompt, (long long)n0,
                         (long long)max_ctx);
    gen_state g = {e, seq, c->vocab_size, c->hidden_size, NULL, NULL, NULL};
    dsv4_sampler *sampler = NULL;
    dsv4_stop *stop = NULL;
    dsv4_tok_stream *stream = NULL;
    int32_t *ids = NULL;
    int rc = DSV4_OK;
    g.hidden = malloc((size_t)g.D * sizeof(float));
    g.logits = malloc((size_t)g.V * sizeof(float));
    g.ok = malloc((size_t)g.V);
    int64_t cap = opts->max_tokens > 0 ? opts->max_tokens : max_ctx - n0 - n_prompt;
    ids = malloc((size_t)(cap + 1) * sizeof *ids);
    if (!g.hidden || !g.logits || !g.ok || !ids) {
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    for (int v = 0; v < g.V; v++) g.ok[v] = dsv4_tok_id_to_token(tok, v) != NULL;

    int32_t stops[2] = {c->eos_token_id, dsv4_tok_token_to_id(tok, "<｜end▁of▁sentence｜>")};
    int n_stops = stops[1] >= 0 && stops[1] != stops[0] ? 2 : 1;
    if ((rc = dsv4_sampler_create(&opts->sample, g.V, &sampler, err))) goto done;
    if ((rc = dsv4_stop_create(opts->stop_strings, opts->n_stop, stops, n_stops, opts->max_tokens,
                               &stop, err)))
        goto done;
    if ((rc = dsv4_tok_stream_new(tok, 0, &stream, err))) goto done;

    /* prefill in chunks; only the last row's logits are needed */
    double t0 = now_seconds();
    const int chunk = opts->chunk > 0 ? opts->chunk : e->opts.c_max;
    for (int done = 0; done < n_prompt;) {
        int n = n_prompt - done < chunk ? n_prompt - done : chunk;
        if ((rc = feed(&g, prompt + done, n, done + n == n_prompt, err))) goto done;
        done += n;
        if (cb && cb->progress) cb->progress(cb->user, done, n_prompt);
    }
    res->prompt_tokens = n_prompt;
    double t1 = now_seconds();
    res->prefill_seconds = t1 - t0;

    /* decode: sample, show, stop, feed */
    for (;;) {
        dsv4_sample_out so;
        if ((rc = dsv4_sample(sampler, g.logits, ids, (int)res->gen_tokens, &so, err))) break;
        ids[res->gen_tokens++] = so.token;
        if (cb && cb->token) cb->token(cb->user, &so);
        int why = dsv4_stop_token(stop, so.token);
        if (why == DSV4_FINISH_STOP_TOKEN) { res->finish = why; break; }
        const char *piece, *emit;
        size_t piece_len, emit_len;
        if ((rc = dsv4_tok_stream_push(stream, so.token, &piece, &piece_len, err))) break;
        int s = dsv4_stop_feed(stop, piece, piece_len, &emit, &emit_len);
        if (s < 0) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "generate: out of memory"); break; }
        if (emit_len && cb && cb->text && cb->text(cb->user, emit, emit_len)) why = -1;
        if (s == DSV4_FINISH_STOP_STRING) why = s;
        /* the shown token joins the sequence; logits are needed only to go on */
        int go_on = why == DSV4_FINISH_NONE && dsv4_seq_length(e, seq) + 1 < max_ctx;
        if (dsv4_seq_length(e, seq) < max_ctx) {
            if ((rc = feed(&g, &so.token, 1, go_on, err))) break;
            res->last_fed = 1;
        }
        if (!go_on) { res->finish = why > 0 ? why : DSV4_FINISH_NONE; break; }
        res->last_fed = 0;
    }
    res->decode_seconds = now_seconds() - t1;
    if (!rc) {
        const char *emit;
        size_t emit_len;
        const char *piece;
        size_t piece_len;
        dsv4_tok_stream_flush(stream, &piece, &piece_len);
        if (piece_len && dsv4_stop_feed(stop, piece, piece_len, &emit, &emit_len) >= 0 && emit_len &&
            cb && cb->text)
            cb->text(cb->user, emit, emit_len);
        dsv4_stop_flush(stop, &emit, &emit_len);
        if (emit_len && cb && cb->text) cb->text(cb->user, emit, emit_len);
    }
done:
    if (rc) free(ids);
    else res->ids = ids;
    dsv4_tok_stream_free(stream);
    dsv4_stop_free(stop);
    dsv4_sampler_free(sampler);
    free(g.hidden); free(g.logits); free(g.ok);
    return rc;
}
