/* gen.c — the blocking generation loop over one sequence (see dsv4_text.h): prefill the
 * new prompt tokens in chunks, then step dsv4_gen row by row. Uses only the public API. */
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

/* Runs n tokens on seq; with logits != NULL the last row's logits land there. */
static int feed(dsv4_engine *e, int seq, const int32_t *ids, int n, float *hidden, float *logits,
                dsv4_err *err) {
    dsv4_span sp = {.seq = seq, .start = dsv4_seq_length(e, seq), .n_tokens = n, .tokens = ids,
                    .n_hidden = logits ? 1 : 0};
    int rc = dsv4_forward(e, &sp, 1, hidden, NULL, err);
    if (rc || !logits) return rc;
    return dsv4_lm_head(e, hidden, 1, logits, err);
}

static int show(const dsv4_generation_callbacks *cb, const char *text, size_t len) {
    return len && cb && cb->text ? cb->text(cb->user, text, len) : 0;
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
                          .stop_strings = opts->stop_strings, .n_stop = opts->n_stop};
    dsv4_gen *g = NULL;
    float *hidden = malloc((size_t)info.hidden_size * sizeof *hidden);   /* (D) */
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);    /* (V) */
    int rc = DSV4_OK;
    if (!hidden || !logits) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "generate: out of memory"); goto done; }
    if ((rc = dsv4_gen_create(dsv4_engine_model(e), tok, &gp, &g, err))) goto done;

    /* prefill in chunks; only the last row's logits are needed */
    double t0 = now_seconds();
    const int chunk = opts->chunk > 0 ? opts->chunk : eo.c_max;
    for (int done = 0; done < n_prompt;) {
        int n = n_prompt - done < chunk ? n_prompt - done : chunk;
        if ((rc = feed(e, seq, prompt + done, n, hidden, done + n == n_prompt ? logits : NULL, err)))
            goto done;
        done += n;
        if (cb && cb->progress) cb->progress(cb->user, done, n_prompt);
    }
    res->prompt_tokens = n_prompt;
    double t1 = now_seconds();
    res->prefill_seconds = t1 - t0;

    /* decode: sample, show, feed the shown token; logits only when going on */
    for (;;) {
        dsv4_gen_token t;
        if ((rc = dsv4_gen_next(g, logits, &t, err))) break;
        res->gen_tokens++;
        if (cb && cb->token) cb->token(cb->user, &t.sample);
        int cancelled = show(cb, t.text, t.text_len) != 0;
        res->last_fed = 0;
        if (t.feed) {
            int64_t n = dsv4_seq_length(e, seq);
            int go_on = !t.finish && !cancelled && n + 1 < max_ctx;
            if ((rc = feed(e, seq, &t.token, 1, hidden, go_on ? logits : NULL, err))) break;
            res->last_fed = 1;
            if (!t.finish && !cancelled && !go_on) res->context_full = 1;
            if (!go_on) break;
        }
        if (t.finish || cancelled) break;
    }
    res->finish = dsv4_gen_finished(g);
    res->decode_seconds = now_seconds() - t1;
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
    free(hidden);
    free(logits);
    return rc;
}
