/* gen_step.c — dsv4_gen, the per-sequence generation step state (see dsv4_text.h): one
 * logits row in, one token and the text it releases out. A batched scheduler and the
 * blocking loop (gen.c) both drive it, so sampling, stop conditions and streaming text
 * exist once. */
#include "serve/gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

struct dsv4_gen {
    int V;                  /* vocabulary of the model's head */
    dsv4_sampler *sampler;
    dsv4_stop *stop;
    dsv4_tok_stream *stream;
    float *row;             /* (V) logits after the mask and the bias */
    float *add;             /* (V) what is added to every row: 0, a bias, or -inf for ids
                             * without text */
    int32_t *tokens;        /* (cap) sampled so far */
    int n, cap;
    int finish;             /* DSV4_FINISH_* once finished */
    int ended;              /* held-back text released: nothing more comes out */
    char *text;             /* (text_cap) text released by the last call */
    size_t text_len, text_cap;
};

static int append_text(dsv4_gen *g, const char *s, size_t n) {
    if (!n) return 0;
    if (g->text_len + n + 1 > g->text_cap) {
        size_t cap = 2 * (g->text_len + n + 1);
        char *t = realloc(g->text, cap);
        if (!t) return -1;
        g->text = t, g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, s, n);
    g->text_len += n;
    g->text[g->text_len] = 0;
    return 0;
}

int dsv4_gen_create(const dsv4_model *m, const dsv4_tokenizer *tok, const dsv4_gen_params *p,
                    dsv4_gen **out, dsv4_err *err) {
    *out = NULL;
    if (!m || !tok || !p) return dsv4_fail(err, DSV4_ERR_ARG, "gen: NULL model, tokenizer or params");
    const dsv4_model_info info = dsv4_model_get_info(m);
    const int V = info.vocab_size;
    if (p->n_bias < 0 || (p->n_bias && (!p->bias_ids || !p->bias)))
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: bad logit bias list");
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= V)
            return dsv4_fail(err, DSV4_ERR_ARG, "gen: logit bias for token %d outside the "
                             "vocabulary [0, %d)", p->bias_ids[i], V);
        if (isnan(p->bias[i]) || p->bias[i] == INFINITY)
            return dsv4_fail(err, DSV4_ERR_ARG, "gen: logit bias %g for token %d is not finite "
                             "(only -inf, which bans the token, is allowed)", p->bias[i],
                             p->bias_ids[i]);
    }
    if (p->n_stop_tokens < 0 || (p->n_stop_tokens && !p->stop_tokens))
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: bad stop token list");
    dsv4_gen *g = calloc(1, sizeof *g);
    int32_t *stops = malloc(((size_t)p->n_stop_tokens + 1) * sizeof *stops);
    int rc = DSV4_OK;
    if (!g || !stops) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory"); goto fail; }
    g->V = V;
    g->row = malloc((size_t)V * sizeof *g->row);
    g->add = malloc((size_t)V * sizeof *g->add);
    g->cap = 64;
    g->tokens = malloc((size_t)g->cap * sizeof *g->tokens);
    if (!g->row || !g->add || !g->tokens) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory"); goto fail; }
    for (int v = 0; v < V; v++) g->add[v] = dsv4_tok_id_to_token(tok, v) ? 0.0f : -INFINITY;
    for (int i = 0; i < p->n_bias; i++) g->add[p->bias_ids[i]] += p->bias[i];

    /* The model's EOS ends every generation; the caller may add more stop tokens. */
    int n_stops = 0;
    if (info.eos_token_id >= 0) stops[n_stops++] = info.eos_token_id;
    for (int i = 0; i < p->n_stop_tokens; i++) stops[n_stops++] = p->stop_tokens[i];
    if ((rc = dsv4_sampler_create(&p->sample, V, &g->sampler, err))) goto fail;
    if ((rc = dsv4_stop_create(p->stop_strings, p->n_stop, stops, n_stops, p->max_tokens, &g->stop,
                               err)))
        goto fail;
    if ((rc = dsv4_tok_stream_new(tok, 0, &g->stream, err))) goto fail;
    free(stops);
    *out = g;
    return DSV4_OK;
fail:
    free(stops);
    dsv4_gen_free(g);
    return rc;
}

void dsv4_gen_free(dsv4_gen *g) {
    if (!g) return;
    dsv4_sampler_free(g->sampler);
    dsv4_stop_free(g->stop);
    dsv4_tok_stream_free(g->stream);
    free(g->row);
    free(g->add);
    free(g->tokens);
    free(g->text);
    free(g);
}

/* Releases everything held back: the stream's incomplete character, then what the stop
 * strings held. */
static int release_held(dsv4_gen *g) {
    const char *piece, *emit;
    size_t piece_len, emit_len;
    g->ended = 1;
    dsv4_tok_stream_flush(g->stream, &piece, &piece_len);
    if (piece_len) {
        int s = dsv4_stop_feed(g->stop, piece, piece_len, &emit, &emit_len);
        if (s < 0 || append_text(g, emit, emit_len)) return -1;
    }
    dsv4_stop_flush(g->stop, &emit, &emit_len);
    return append_text(g, emit, emit_len);
}

int dsv4_gen_next(dsv4_gen *g, const float *logits, dsv4_gen_token *out, dsv4_err *err) {
    memset(out, 0, sizeof *out);
    if (g->finish || g->ended)
        return dsv4_fail(err, DSV4_ERR_STATE, "gen: the generation has ended");
    if (g->n == g->cap) {
        int32_t *t = realloc(g->tokens, (size_t)g->cap * 2 * sizeof *t);
        if (!t) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
        g->tokens = t, g->cap *= 2;
    }
    for (int v = 0; v < g->V; v++) g->row[v] = logits[v] + g->add[v];
    g->text_len = 0;
    int rc = dsv4_sample(g->sampler, g->row, g->tokens, g->n, &out->sample, err);
    if (rc) return rc;
    const int32_t tok = out->sample.token;
    g->tokens[g->n++] = tok;
    out->token = tok;

    int why = dsv4_stop_token(g->stop, tok);
    if (why != DSV4_FINISH_STOP_TOKEN) {
        /* the token joins the text: show what it completes, minus any stop string */
        const char *piece, *emit;
        size_t piece_len, emit_len;
        if ((rc = dsv4_tok_stream_push(g->stream, tok, &piece, &piece_len, err))) return rc;
        int s = dsv4_stop_feed(g->stop, piece, piece_len, &emit, &emit_len);
        if (s < 0 || append_text(g, emit, emit_len))
            return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
        if (s == DSV4_FINISH_STOP_STRING) why = s;
        out->feed = 1;
    }
    if (why != DSV4_FINISH_NONE) {
        g->finish = why;
        if (release_held(g)) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    }
    out->finish = why;
    out->text = g->text ? g->text : "";
    out->text_len = g->text_len;
    return DSV4_OK;
}

void dsv4_gen_end(dsv4_gen *g, const char **text, size_t *len) {
    g->text_len = 0;
    /* out of memory here can only lose the held-back tail, never corrupt the state */
    if (!g->ended) (void)release_held(g);
    *text = g->text ? g->text : "";
    *len = g->text_len;
}

const int32_t *dsv4_gen_tokens(const dsv4_gen *g, int *n) {
    *n = g->n;
    return g->tokens;
}

int dsv4_gen_finished(const dsv4_gen *g) { return g->finish; }
