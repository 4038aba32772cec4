/* gen.h — generation: the per-sequence step state (dsv4_gen) and the blocking loop over one
 * sequence; the API is public (include/dsv4_text.h). */
#ifndef DSV4_SERVE_GEN_H
#define DSV4_SERVE_GEN_H

#include <stdatomic.h>

#include "dsv4_text.h"
#include "sample/grammar.h"
#include "sample/json.h"

/* the tokenizer's vocabulary index (built on the first call, kept with it); NULL out of memory */
const json_vocab *gen_vocab(const dsv4_tokenizer *tok);

/* A compiled grammar (gen_grammar.c): immutable after gen_grammar_make but for refs */
struct dsv4_grammar {
    gr_grammar *g;
    gr_cache *cache;        /* the masks every run of it shares; NULL when made without a vocabulary */
    const json_vocab *jv;   /* the vocabulary the cache is for */
    char *text;             /* (len) as given: a generation given the same text shares it */
    size_t len;
    atomic_int refs;
};

/* Compiles text (len bytes) for jv (NULL: no cache, each generation keeps its own masks);
 * first: its first token mask computed too (a bound passed there is a refusal).
 * DSV4_ERR_UNSUPPORTED with what is wrong (to be read after "the grammar "), NOMEM. */
int gen_grammar_make(const char *text, size_t len, const json_vocab *jv, int first, dsv4_grammar **out, dsv4_err *err);

#endif
