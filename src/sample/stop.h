/* stop.h — when generation ends, and how much text to show: stop tokens, max tokens, and
 * stop strings found in the streaming decoded text.
 *
 * Stop strings are matched on the text (bytes), not on tokens, so a stop string may be
 * split across any number of tokens. The text handed out never contains a stop string or
 * any part of it: a tail of the text that could still become a stop string is held back
 * until it either completes one (then it is dropped, and everything after it) or stops
 * matching (then it is released). With several stop strings the one that starts first
 * wins. Held-back text starts at a character boundary whenever the stop strings are valid
 * UTF-8, so released text never splits a character that the decoder delivered whole.
 *
 * Per generated token, in this order:
 *   r = dsv4_stop_token(s, token)     STOP_TOKEN: end, the token's text is not shown
 *   dsv4_stop_feed(s, its text, ...)  STOP_STRING: end, show only the emitted part
 *   if r == LENGTH: dsv4_stop_flush() and end
 * and dsv4_stop_flush() whenever generation ends for another reason (EOS handled as a stop
 * token, cancellation), to release what was held back.
 */
#ifndef DSV4_SAMPLE_STOP_H
#define DSV4_SAMPLE_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

enum {
    DSV4_FINISH_NONE = 0,
    DSV4_FINISH_STOP_TOKEN,   /* a stop token (EOS, ...) was sampled */
    DSV4_FINISH_STOP_STRING,  /* a stop string appeared in the text */
    DSV4_FINISH_LENGTH,       /* max_tokens reached */
};

typedef struct dsv4_stop dsv4_stop;

/* strings: [n_strings] non-empty stop strings (copied); tokens: [n_tokens] stop token ids;
 * max_tokens: most tokens to generate (0 = no limit). DSV4_ERR_ARG for an empty or NULL
 * string, a negative count or limit. */
int dsv4_stop_create(const char *const *strings, int n_strings, const int32_t *tokens,
                     int n_tokens, int max_tokens, dsv4_stop **out, dsv4_err *err);
void dsv4_stop_free(dsv4_stop *s);
/* Forgets the text and the token count (a new generation with the same settings). */
void dsv4_stop_reset(dsv4_stop *s);

/* Counts a sampled token: STOP_TOKEN if it is a stop token (not counted), LENGTH if it
 * is the max_tokens-th token (its text is still shown), else NONE. */
int dsv4_stop_token(dsv4_stop *s, int32_t token);

/* Feeds the text of the next token(s). emit and emit_len receive the text to show now
 * (valid until the next call on s). Returns STOP_STRING once a stop string completed:
 * the emitted text then ends right before it and later feeds emit nothing. Else NONE.
 * Out of memory: returns -DSV4_ERR_NOMEM and emits nothing. */
int dsv4_stop_feed(dsv4_stop *s, const char *text, size_t len, const char **emit,
                   size_t *emit_len);
/* Releases the held-back text at the end of generation (nothing after a stop string). */
void dsv4_stop_flush(dsv4_stop *s, const char **emit, size_t *emit_len);

/* Index of the stop string that ended generation, or -1. Tokens generated so far. */
int dsv4_stop_matched(const dsv4_stop *s);
int dsv4_stop_count(const dsv4_stop *s);

#endif
