/* gen_grammar.c — dsv4_grammar (dsv4_text.h): a grammar compiled once and shared by reference,
 * with the mask cache of its vocabulary, so a request's check and its choices compile it once
 * and walk each state's mask once between them. */
#include "serve/gen.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int gen_grammar_make(const char *text, size_t len, const json_vocab *jv, int first, dsv4_grammar **out, dsv4_err *err) {
    *out = NULL;
    char why[256];
    dsv4_grammar *G = calloc(1, sizeof *G);
    if (!G || !(G->text = malloc(len + 1))) {
        free(G);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    }
    memcpy(G->text, text, len);
    G->text[len] = 0, G->len = len, G->jv = jv;
    atomic_init(&G->refs, 1);
    if (gr_compile(text, len, &G->g, why, sizeof why)) {
        dsv4_grammar_free(G);
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "%s", why);
    }
    if (jv && !(G->cache = gr_cache_new(jv->words, 2 * GR_CACHE))) {
        dsv4_grammar_free(G);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    }
    if (jv && first) { /* the first mask, into the cache: a bound passed before any token is the grammar's */
        gr_run *r = NULL;
        uint64_t *bits = malloc((size_t)jv->words * sizeof *bits);
        int rc = !bits || gr_run_new_shared(G->g, jv->max_len, jv->words, G->cache, &r)
                     ? dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory")
                     : DSV4_OK;
        if (!rc && gr_mask(r, jv, bits) < 0)
            rc = dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "cannot be followed from its start: %s", gr_run_why(r));
        gr_run_free(r);
        free(bits);
        if (rc) {
            dsv4_grammar_free(G);
            return rc;
        }
    }
    *out = G;
    return DSV4_OK;
}

int dsv4_grammar_compile(const char *grammar, size_t len, const dsv4_tokenizer *tok, dsv4_grammar **out, dsv4_err *err) {
    *out = NULL;
    if (!grammar) return dsv4_fail(err, DSV4_ERR_ARG, "grammar: NULL text");
    const json_vocab *jv = tok ? gen_vocab(tok) : NULL;
    if (tok && !jv) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory for the vocabulary index");
    return gen_grammar_make(grammar, len, jv, 1, out, err);
}

int dsv4_grammar_check(const char *grammar, size_t len, dsv4_err *err) {
    dsv4_grammar *g = NULL;
    const int rc = dsv4_grammar_compile(grammar, len, NULL, &g, err);
    dsv4_grammar_free(g);
    return rc;
}

dsv4_grammar *dsv4_grammar_ref(dsv4_grammar *g) {
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void dsv4_grammar_free(dsv4_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    gr_cache_free(g->cache);
    gr_free(g->g);
    free(g->text);
    free(g);
}
