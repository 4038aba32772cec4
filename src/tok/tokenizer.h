/* tokenizer.h — the byte-level BPE tokenizer; its API is public (include/dsv4_text.h),
 * its internals are in tokenizer_impl.h. */
#ifndef DSV4_TOK_TOKENIZER_H
#define DSV4_TOK_TOKENIZER_H

#include "dsv4_text.h"

/* (dsv4_tok_vocab_size) 0 for an id that has text, -inf for a hole in the id range: what a
 * generation adds to a logits row so that no id without text is ever sampled. Made once at
 * load, read-only after (any thread may read it), freed with the tokenizer. */
const float *dsv4_tok_text_mask(const dsv4_tokenizer *t);

/* An object derived from the tokenizer and kept with it (one slot: the JSON vocabulary
 * index of structured output): built by build(t) on the first call (NULL when that
 * fails: the next call tries again), then returned as is; drop frees it with the
 * tokenizer. Thread-safe; read-only once built. */
void *dsv4_tok_lazy(const dsv4_tokenizer *t, void *(*build)(const dsv4_tokenizer *), void (*drop)(void *));

#endif
