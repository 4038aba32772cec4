/* gen_step.c — dsv4_gen, the per-sequence generation step state (see dsv4_text.h): one
 * logits row in, one token and the text it releases out. A batched scheduler and the
 * blocking loop (gen.c) both drive it, so sampling, stop conditions and streaming text
 * exist once. */
#include "serve/gen.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sample/grammar.h"
#include "sample/json.h"
#include "sample/regex_mask.h"
#include "sample/stop.h"
#include "sample/tool_match.h"
#include "tok/tokenizer.h"
#include "util/err.h"

struct dsv4_gen {
    int V;                  /* vocabulary of the model's head */
    dsv4_sampler *sampler;
    dsv4_stop *stop;
    dsv4_tok_stream *stream;
    float *row;             /* (V) logits after the mask and the bias */
    const float *mask;      /* (n_mask) the tokenizer's: 0, or -inf for ids without text;
                             * ids from n_mask to V have none either */
    int n_mask;
    int32_t *bias_id;       /* (n_bias) distinct biased ids */
    float *bias_add;        /* (n_bias) what their logit gets instead of the mask: mask +
                             * the biases given for the id, in the order given */
    int n_bias;
    int32_t *tokens;        /* (cap) sampled so far */
    int n, cap;
    int finish;             /* DSV4_FINISH_* once finished */
    int ended;              /* held-back text released: nothing more comes out */
    char *text;             /* (text_cap) text released by the last call */
    size_t text_len, text_cap;
    int32_t *stops;         /* (n_stops) EOS and the caller's stop tokens */
    int n_stops;
    /* structured output (json.h), all sized at create: nothing is allocated per token */
    dsv4_json_schema *schema; /* NULL: unconstrained */
    const json_vocab *jv;   /* the tokenizer's vocabulary index (built once, shared) */
    json_walk walk;
    const dsv4_tokenizer *tok;
    json_state *js;         /* (2) js[jcur]: the state after the value's bytes so far */
    int jcur;
    uint64_t *jbits;        /* (jv->words) the ids the state allows */
    /* strict tool calls (tool_match.h), the same way; the constraint is the schema's or
     * the tools' (never both) */
    tm_tools *tools;        /* NULL: none */
    tm_walk twalk;
    tm_state *ts;           /* (4) ts[jcur]; 2, 3: scratch */
    int think;              /* >= 0: the constraint starts after the text's first "</think>",
                             * of which `think` bytes are matched so far; -1: it runs */
    /* guided decoding (regex_mask.h): a regex or a choice list, the same way */
    const rx_guide *rx;     /* NULL: none; else rwalk's (its masks own it) */
    rx_walk rwalk;
    char *rx_key;           /* (rx_key_len) the regex or the choice list as given: a later
                             * generation shares rwalk's masks when its own is the same */
    size_t rx_key_len;
    rx_state rs;
    /* grammar-guided decoding (grammar.h), the same way */
    dsv4_grammar *gram;     /* NULL: none; else one reference (its masks shared with every
                             * generation of the same compiled grammar) */
    gr_run *grun;
    int32_t eos;            /* the model's EOS (-1: none) */
    int ignore_eos, min_tokens;
};

/* (id, position in the request) pairs: a bias list sorted by id, stable */
typedef struct { int32_t id, at; } bias_key;

static int by_id_then_at(const void *a, const void *b) {
    const bias_key *x = a, *y = b;
    return x->id != y->id ? (x->id < y->id ? -1 : 1) : (x->at < y->at ? -1 : x->at > y->at);
}

/* g->bias_id/bias_add from the request's list (ids already checked against V): one entry
 * per distinct id, its biases summed onto the mask in request order. */
static int merge_bias(dsv4_gen *g, const dsv4_gen_params *p) {
    if (p->n_bias == 0) return 0;
    bias_key *k = malloc(sizeof *k * (size_t)p->n_bias);
    g->bias_id = malloc(sizeof *g->bias_id * (size_t)p->n_bias);
    g->bias_add = malloc(sizeof *g->bias_add * (size_t)p->n_bias);
    if (!k || !g->bias_id || !g->bias_add) {
        free(k);
        return -1;
    }
    for (int i = 0; i < p->n_bias; i++) k[i] = (bias_key){p->bias_ids[i], i};
    qsort(k, (size_t)p->n_bias, sizeof *k, by_id_then_at);
    for (int i = 0; i < p->n_bias; i++) {
        const int32_t id = k[i].id;
        if (i == 0 || id != k[i - 1].id) {
            g->bias_id[g->n_bias] = id;
            g->bias_add[g->n_bias++] = id < g->n_mask ? g->mask[id] : -INFINITY;
        }
        g->bias_add[g->n_bias - 1] += p->bias[k[i].at];
    }
    free(k);
    return 0;
}

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

static void *vocab_build(const dsv4_tokenizer *tok) { return json_vocab_build(tok); }
static void vocab_drop(void *v) { json_vocab_free(v); }

const json_vocab *gen_vocab(const dsv4_tokenizer *tok) { return dsv4_tok_lazy(tok, vocab_build, vocab_drop); }

int dsv4_json_vocab_prepare(const dsv4_tokenizer *tok, dsv4_err *err) {
    return gen_vocab(tok) ? DSV4_OK : dsv4_fail(err, DSV4_ERR_NOMEM, "json: out of memory for the vocabulary index");
}

int dsv4_tools_check(const char *tools, size_t len, int *strict, dsv4_err *err) {
    tm_tools *t = NULL;
    int rc = tm_compile(tools, len, TM_REQUIRED, 0, &t, err);
    *strict = !rc && tm_any_strict(t);
    tm_free(t);
    return rc;
}

int dsv4_regex_check(const char *regex, size_t len, dsv4_err *err) {
    char why[256];
    rx_guide *g = NULL;
    if (rx_guide_regex(regex, len, &g, why, sizeof why)) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s", why);
    rx_guide_free(g);
    return DSV4_OK;
}

/* The regex ('r' and its text) or the choice list ('c', then each choice's length and bytes)
 * as one string, into g->rx_key: what two generations compare to share their masks */
static int guide_key(dsv4_gen *g, const dsv4_gen_params *p) {
    size_t n = 1 + (p->regex ? strlen(p->regex) : 0);
    for (int i = 0; i < p->n_choices; i++) n += sizeof(size_t) + strlen(p->choices[i]);
    char *k = malloc(n);
    if (!k) return -1;
    size_t at = 1;
    k[0] = p->regex ? 'r' : 'c';
    if (p->regex) memcpy(k + 1, p->regex, n - 1);
    for (int i = 0; i < p->n_choices; i++) {
        const size_t len = strlen(p->choices[i]);
        memcpy(k + at, &len, sizeof len);
        memcpy(k + at + sizeof len, p->choices[i], len);
        at += sizeof len + len;
    }
    g->rx_key = k, g->rx_key_len = n;
    return 0;
}

/* The compiled schema (or tools), the shared vocabulary index and the per-generation
 * scratch. */
/* The regex, choice or grammar constraint compiled (a regex's or choice list's: p->share's,
 * when it is the same); DSV4_ERR_UNSUPPORTED / ARG naming what is wrong. */
static int guide_setup(dsv4_gen *g, const dsv4_gen_params *p, dsv4_err *err) {
    char why[256];
    if (p->n_choices < 0 || (p->n_choices && !p->choices))
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: bad choice list");
    for (int i = 0; i < p->n_choices; i++)
        if (!p->choices[i]) return dsv4_fail(err, DSV4_ERR_ARG, "gen: choice %d is NULL", i);
    const int gram = p->grammar || p->compiled_grammar;
    if ((p->regex != NULL) + (p->n_choices > 0) + gram + (p->json_schema != NULL) + (p->tools != NULL) > 1 &&
        (p->regex || p->n_choices || gram))
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: a regex, a choice list or a grammar goes alone (not with another "
                         "regex, choice list, grammar, JSON schema or tools)");
    if (gram) { /* compiled once: given, or p->share's when the text is the same, or here */
        dsv4_grammar *G = p->compiled_grammar;
        dsv4_err e = {0};
        int rc;
        const dsv4_gen *o = p->share;
        const size_t len = G ? 0 : strlen(p->grammar);
        if (G && G->jv && G->jv != g->jv)
            return dsv4_fail(err, DSV4_ERR_ARG, "gen: the compiled grammar was made for another tokenizer");
        if (G) g->gram = dsv4_grammar_ref(G);
        else if (o && o->gram && o->gram->jv == g->jv && o->gram->len == len && !memcmp(o->gram->text, p->grammar, len))
            g->gram = dsv4_grammar_ref(o->gram);
        else if ((rc = gen_grammar_make(p->grammar, len, g->jv, 0, &g->gram, &e)))
            return dsv4_fail(err, rc, rc == DSV4_ERR_UNSUPPORTED ? "gen: the grammar %s" : "gen: %s", e.msg);
        if (gr_run_new_shared(g->gram->g, g->jv->max_len, g->jv->words, g->gram->cache, &g->grun))
            return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
        return DSV4_OK;
    }
    if (guide_key(g, p)) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    const dsv4_gen *o = p->share;
    if (o && o->rx && o->jv == g->jv && o->rx_key_len == g->rx_key_len && !memcmp(o->rx_key, g->rx_key, g->rx_key_len)) {
        if (rx_walk_share(&g->rwalk, g->jv, &o->rwalk)) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    } else {
        rx_guide *rx = NULL;
        if (p->regex && rx_guide_regex(p->regex, strlen(p->regex), &rx, why, sizeof why))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "gen: the regex %s", why);
        if (p->n_choices && rx_guide_choice(p->choices, p->n_choices, &rx, why, sizeof why))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "gen: the choice list %s", why);
        if (rx_walk_init_own(&g->rwalk, g->jv, rx)) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    }
    g->rx = rx_walk_guide(&g->rwalk);
    rx_state_init(g->rx, &g->rs);
    return DSV4_OK;
}

static int json_setup(dsv4_gen *g, const dsv4_tokenizer *tok, const dsv4_gen_params *p, dsv4_err *err) {
    g->think = p->json_after_think ? 0 : -1;
    if (!p->json_schema && !p->tools && !p->regex && !p->n_choices && !p->grammar && !p->compiled_grammar) return DSV4_OK;
    if (p->regex || p->n_choices || p->grammar || p->compiled_grammar) {
        g->tok = tok;
        g->jv = gen_vocab(tok);
        g->jbits = g->jv ? malloc((size_t)g->jv->words * sizeof *g->jbits) : NULL;
        if (!g->jbits) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
        return guide_setup(g, p, err);
    }
    if (p->tools && p->tools_mode != DSV4_TOOLS_REQUIRED && p->tools_mode != DSV4_TOOLS_AUTO)
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: tools_mode must be DSV4_TOOLS_REQUIRED or DSV4_TOOLS_AUTO");
    if (p->json_schema && p->tools && p->tools_mode != DSV4_TOOLS_AUTO)
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: a JSON schema goes with tools in DSV4_TOOLS_AUTO only (the "
                         "text is the document or the block)");
    int rc = p->tools ? tm_compile(p->tools, strlen(p->tools), p->tools_mode == DSV4_TOOLS_AUTO ? TM_AUTO : TM_REQUIRED,
                                   p->tools_single != 0, &g->tools, err)
                      : dsv4_json_schema_compile(p->json_schema, strlen(p->json_schema), &g->schema, err);
    if (!rc && p->tools && p->json_schema) rc = tm_set_doc(g->tools, p->json_schema, strlen(p->json_schema), err);
    if (rc) return rc;
    g->tok = tok;
    g->jv = gen_vocab(tok);
    g->jbits = g->jv ? malloc((size_t)g->jv->words * sizeof *g->jbits) : NULL;
    if (!g->jbits) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    if (g->tools) {
        g->ts = malloc(4 * sizeof *g->ts); /* ts[jcur], the next; 2, 3: tools_apply's scratch */
        if (!g->ts || tm_walk_init(&g->twalk, g->jv, tok, tm_max_stacks(g->tools))) return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
        tm_state_init(g->tools, &g->ts[0]);
        return DSV4_OK;
    }
    g->js = malloc(2 * sizeof *g->js);
    if (!g->js || json_walk_init(&g->walk, g->jv, g->schema->max_stacks))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory");
    json_state_init(g->schema, &g->js[0]);
    return DSV4_OK;
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
    for (int i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] < 0 || p->stop_tokens[i] >= V)
            return dsv4_fail(err, DSV4_ERR_ARG, "gen: stop token %d outside the vocabulary [0, %d)",
                             p->stop_tokens[i], V);
    if (p->min_tokens < 0 || (p->max_tokens > 0 && p->min_tokens > p->max_tokens))
        return dsv4_fail(err, DSV4_ERR_ARG, "gen: min_tokens %d must be in [0, max_tokens %d]", p->min_tokens,
                         p->max_tokens);
    dsv4_gen *g = calloc(1, sizeof *g);
    int32_t *stops = malloc(((size_t)p->n_stop_tokens + 1) * sizeof *stops);
    int rc = DSV4_OK;
    if (!g || !stops) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory"); goto fail; }
    g->V = V;
    g->eos = info.eos_token_id;
    g->ignore_eos = p->ignore_eos != 0;
    g->min_tokens = p->min_tokens;
    g->mask = dsv4_tok_text_mask(tok); /* made once by the tokenizer, shared */
    g->n_mask = dsv4_tok_vocab_size(tok);
    g->row = malloc((size_t)V * sizeof *g->row);
    g->cap = 64;
    g->tokens = malloc((size_t)g->cap * sizeof *g->tokens);
    if (!g->row || !g->tokens || merge_bias(g, p)) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "gen: out of memory"); goto fail; }

    /* The model's EOS ends every generation; the caller may add more stop tokens. */
    int n_stops = 0;
    if (info.eos_token_id >= 0) stops[n_stops++] = info.eos_token_id;
    for (int i = 0; i < p->n_stop_tokens; i++) stops[n_stops++] = p->stop_tokens[i];
    if ((rc = dsv4_sampler_create(&p->sample, V, &g->sampler, err))) goto fail;
    if ((rc = dsv4_stop_create(p->stop_strings, p->n_stop, stops, n_stops, p->max_tokens, &g->stop,
                               err)))
        goto fail;
    dsv4_stop_options(g->stop, p->min_tokens, p->include_stop_str != 0);
    if ((rc = dsv4_tok_stream_new(tok, p->skip_special ? DSV4_DETOK_SKIP_SPECIAL : 0, &g->stream, err))) goto fail;
    g->stops = stops, g->n_stops = n_stops;
    stops = NULL;
    if ((rc = json_setup(g, tok, p, err))) goto fail;
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
    free(g->bias_id);
    free(g->bias_add);
    free(g->tokens);
    free(g->text);
    free(g->stops);
    dsv4_json_schema_free(g->schema);
    json_walk_free(&g->walk);
    free(g->js);
    tm_free(g->tools);
    tm_walk_free(&g->twalk);
    free(g->ts);
    free(g->jbits);
    rx_walk_free(&g->rwalk);
    free(g->rx_key);
    gr_run_free(g->grun);
    dsv4_grammar_free(g->gram);
    free(g);
}

long dsv4_gen_guide_walks(const dsv4_gen *g) {
    long hits = 0, misses = 0, nodes = 0;
    if (g->grun) gr_run_stats(g->grun, &hits, &misses, &nodes);
    return g->rx ? g->rwalk.misses : misses;
}

static void tools_apply(dsv4_gen *g);
static void bits_apply(dsv4_gen *g, int done);

/* Structured output: ids the JSON state refuses get -inf; the stop tokens keep their
 * value only when the value is complete. -1 when a grammar's mask passes a bound. */
static int json_apply(dsv4_gen *g) {
    if (g->tools) { tools_apply(g); return 0; }
    if (g->grun) {
        if (gr_mask(g->grun, g->jv, g->jbits) < 0) return -1;
        bits_apply(g, gr_run_accepting(g->grun));
        return 0;
    }
    if (g->rx) {
        rx_mask(g->rx, g->jv, &g->rwalk, &g->rs, g->jbits);
        bits_apply(g, rx_state_accepting(g->rx, &g->rs));
        return 0;
    }
    json_mask(g->schema, g->jv, &g->walk, &g->js[g->jcur], g->jbits);
    /* the stop tokens (EOS too) are allowed exactly when the value is complete */
    bits_apply(g, json_state_accepting(g->schema, &g->js[g->jcur]));
    return 0;
}

/* Strict tool calls: in AUTO's free text only the ids that complete the opener are
 * checked (the block must go on from there); in the block, the mask as above. */
static void tools_apply(dsv4_gen *g) {
    const tm_state *st = &g->ts[g->jcur];
    if (!tm_state_free(st)) {
        tm_mask(g->tools, g->jv, &g->twalk, st, g->jbits, g->tok);
        bits_apply(g, tm_state_accepting(g->tools, st));
        return;
    }
    tm_state *a = g->ts + 2; /* scratch */
    for (int k = 0; k < g->jv->n_gt; k++) {
        const int32_t id = g->jv->gt[k];
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(g->tok, id, &len);
        if (id >= g->V || !b) continue;
        memcpy(&a[0], st, offsetof(tm_state, js)); /* free text has no value state */
        int c = 0;
        if (!tm_state_feed(g->tools, a, &c, (const uint8_t *)b, len)) g->row[id] = -INFINITY;
    }
    /* EOS: not in the middle of the opener */
    if (!tm_state_accepting(g->tools, st))
        for (int i = 0; i < g->n_stops; i++)
            if (g->stops[i] < g->V) g->row[g->stops[i]] = -INFINITY;
}

/* g->jbits onto the row; the stop tokens (EOS too) only when done */
static void bits_apply(dsv4_gen *g, int done) {
    const int words = g->jv->words, V = g->V;
    for (int i = 0; i < g->n_stops; i++) {
        const int32_t t = g->stops[i];
        if (t >= V) continue;
        if (t < words * 64) g->jbits[t >> 6] = done ? g->jbits[t >> 6] | 1ull << (t & 63) : g->jbits[t >> 6] & ~(1ull << (t & 63));
        else if (!done) g->row[t] = -INFINITY;
    }
    for (int w = 0; w < words && w * 64 < V; w++) {
        const uint64_t on = g->jbits[w];
        float *r = g->row + (size_t)w * 64;
        if (on == ~0ull) continue;
        if (w * 64 + 64 > V) { /* the last, partial word */
            for (int i = 0; w * 64 + i < V; i++) if (!(on >> i & 1)) r[i] = -INFINITY;
        } else if (__builtin_popcountll(on) >= 32) { /* inside a string: a few banned ids */
            for (uint64_t off = ~on; off; off &= off - 1) r[__builtin_ctzll(off)] = -INFINITY;
        } else {  /* outside: a few allowed ids, kept while the word is filled */
            float keep[64];
            for (uint64_t m = on; m; m &= m - 1) keep[__builtin_ctzll(m)] = r[__builtin_ctzll(m)];
            for (int i = 0; i < 64; i++) r[i] = -INFINITY;
            for (uint64_t m = on; m; m &= m - 1) r[__builtin_ctzll(m)] = keep[__builtin_ctzll(m)];
        }
    }
}

/* 1 when the constraint's mask (g->jbits, as bits_apply last took it) allows no id with
 * text; 0 where the mask is not the bits (the reasoning, AUTO's free text) */
static int mask_empty(const dsv4_gen *g) {
    if (g->think >= 0 || (g->tools && tm_state_free(&g->ts[g->jcur]))) return 0;
    const int n = g->V < g->n_mask ? g->V : g->n_mask, words = g->jv->words;
    for (int i = 0; i < g->n_stops; i++) { /* EOS allowed: the value is complete */
        const int32_t t = g->stops[i];
        if (t < words * 64 && t < g->V && (g->jbits[t >> 6] >> (t & 63) & 1)) return 0;
    }
    for (int w = 0; w < words && w * 64 < n; w++)
        for (uint64_t m = g->jbits[w]; m; m &= m - 1) {
            const int v = w * 64 + __builtin_ctzll(m);
            if (v < n && g->mask[v] == 0.0f) return 0;
        }
    return 1;
}

/* ignore_eos: the EOS banned; before min_tokens, or in the reasoning before a JSON schema's
 * or a regex's constrained answer (a stop there would end with no answer to satisfy it),
 * every stop token. Not where the row has nothing else (a constraint's text complete,
 * nothing can follow; a forced stop): its stop then ends it. */
static void ban_stops(dsv4_gen *g, int all) {
    int other = 0;
    for (int v = 0; v < g->V && !other; v++) {
        if (g->row[v] == -INFINITY) continue;
        int stop = 0;
        for (int i = 0; i < g->n_stops && !stop; i++) stop = g->stops[i] == v && (all || v == g->eos);
        other = !stop;
    }
    if (!other) return;
    for (int i = 0; i < g->n_stops; i++)
        if (g->stops[i] < g->V && (all || g->stops[i] == g->eos)) g->row[g->stops[i]] = -INFINITY;
}

/* Matches "</think>" over b[0..n) from `m` bytes matched: the bytes after the match (at
 * *rest), or -1 with the new count in *m. ('<' occurs once in it: a mismatch restarts.) */
static long think_end(const char *b, size_t n, int *m) {
    static const char close[] = DSV4_CHAT_THINK_CLOSE;
    for (size_t i = 0; i < n; i++) {
        *m = b[i] == close[*m] ? *m + 1 : b[i] == '<';
        if (*m == (int)sizeof close - 1) return (long)i + 1;
    }
    return -1;
}

/* Steps js[jcur] over n bytes; 0 once it dies. */
static int json_feed(dsv4_gen *g, const char *b, size_t n) {
    if (g->grun) {
        if (gr_run_feed(g->grun, (const uint8_t *)b, n) <= 0) return 0;
        gr_run_compact(g->grun);
        return 1;
    }
    if (g->rx) return rx_state_feed(g->rx, &g->rs, (const uint8_t *)b, n);
    if (g->tools) return tm_state_feed(g->tools, g->ts, &g->jcur, (const uint8_t *)b, n);
    return json_state_feed(g->schema, g->js, &g->jcur, (const uint8_t *)b, n);
}

/* the constraint's start state */
static void json_restart(dsv4_gen *g) {
    if (g->grun) gr_run_reset(g->grun);
    else if (g->rx) rx_state_init(g->rx, &g->rs);
    else if (g->tools) tm_state_init(g->tools, &g->ts[g->jcur]);
    else json_state_init(g->schema, &g->js[g->jcur]);
}

/* In the reasoning: a token that ends it may only go on with bytes that start the value. */
static void think_apply(dsv4_gen *g) {
    for (int k = 0; k < g->jv->n_gt; k++) {
        const int32_t id = g->jv->gt[k];
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(g->tok, id, &len);
        int m = g->think;
        const long at = think_end(b, len, &m);
        if (at < 0 || id >= g->V) continue;
        json_restart(g);
        if (!json_feed(g, b + at, len - (size_t)at)) g->row[id] = -INFINITY;
    }
    json_restart(g);
}

/* The JSON state after token tok joined the text (it was allowed: it cannot die). */
static int json_advance(dsv4_gen *g, int32_t tok, dsv4_err *err) {
    size_t len = 0;
    const char *b = dsv4_tok_id_bytes(g->tok, tok, &len);
    if (!b) len = 0;
    if (g->think >= 0) {
        const long at = think_end(b, len, &g->think);
        if (at < 0) return DSV4_OK;
        g->think = -1; /* the value starts right after "</think>" */
        b += at, len -= (size_t)at;
    }
    if (!json_feed(g, b, len))
        return dsv4_fail(err, DSV4_ERR_STATE, "gen: token %d leaves the output constraint", (int)tok);
    return DSV4_OK;
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

/* g->row = logits + the text mask: ids without text can never be sampled */
static void masked_row(dsv4_gen *g, const float *logits) {
    const int n = g->V < g->n_mask ? g->V : g->n_mask;
    for (int v = 0; v < n; v++) g->row[v] = logits[v] + g->mask[v];
    for (int v = n; v < g->V; v++) g->row[v] = logits[v] + -INFINITY;
}

int dsv4_gen_score(dsv4_gen *g, const float *logits, int32_t token, int n_top, dsv4_sample_out *out,
                   dsv4_err *err) {
    masked_row(g, logits);
    return dsv4_sample_score(g->sampler, g->row, token, n_top, out, err);
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
    /* row = logits + mask (+ the biases) */
    masked_row(g, logits);
    for (int j = 0; j < g->n_bias; j++) g->row[g->bias_id[j]] = logits[g->bias_id[j]] + g->bias_add[j];
    if (g->schema || g->tools || g->rx || g->grun) {
        if (g->think >= 0) think_apply(g);
        else if (json_apply(g))
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "gen: the grammar cannot be followed here: %s (after %d tokens)",
                             gr_run_why(g->grun), g->n);
    }
    const int reasoning = (g->schema || g->rx || g->grun) && !g->tools && g->think >= 0;
    if (reasoning || g->ignore_eos || g->n < g->min_tokens) ban_stops(g, reasoning || g->n < g->min_tokens);
    g->text_len = 0;
    int rc = dsv4_sample(g->sampler, g->row, g->tokens, g->n, &out->sample, err);
    /* when the caller banned (logit_bias -inf) every id the value can go on with: an alive
     * state can always be completed (json.h, tool_match.h: what would empty the mask
     * mid-value is refused at compile), so this names the request's own ban; a mask empty
     * before any bias is the constraint's own dead end (a bug: named as such) */
    if (rc && (g->schema || g->tools || g->rx || g->grun))
        dsv4_err_prefix(err, mask_empty(g) ? "gen: the output constraint (%s) allows no token here: its own dead end, "
                                             "a bug (after %d tokens)"
                                           : "gen: the output constraint (%s) allows no token here that logit_bias "
                                             "leaves possible (after %d tokens)",
                        g->tools ? "strict tools" : g->rx ? "the regex or choice list" : g->grun ? "the grammar" : "the JSON schema", g->n);
    if (rc) return rc;
    const int32_t tok = out->sample.token;
    g->tokens[g->n++] = tok;
    out->token = tok;

    int why = dsv4_stop_token(g->stop, tok);
    if (why != DSV4_FINISH_STOP_TOKEN) {
        /* the token joins the text: show what it completes, minus any stop string */
        const char *piece, *emit;
        size_t piece_len, emit_len;
        if ((g->schema || g->tools || g->rx || g->grun) && (rc = json_advance(g, tok, err))) return rc;
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

int dsv4_gen_stop_matched(const dsv4_gen *g) {
    return g->finish == DSV4_FINISH_STOP_STRING ? dsv4_stop_matched(g->stop) : -1;
}
