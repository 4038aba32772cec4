/* tokenizer.h — the byte-level BPE tokenizer; its API is public (include/dsv4_text.h),
 * its internals are in tokenizer_impl.h. */
#ifndef DSV4_TOK_TOKENIZER_H
#define DSV4_TOK_TOKENIZER_H

#include "dsv4_text.h"

#endif
