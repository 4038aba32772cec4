/* textbuf.h — a growable byte string for building prompt text and JSON.
 *
 * Appends never fail loudly: the first failed allocation sets `oom`, later appends become
 * no-ops, and the owner checks `oom` once at the end (one error path instead of one per
 * append). The text is always NUL-terminated once anything was appended successfully. */
#ifndef DSV4_TOK_TEXTBUF_H
#define DSV4_TOK_TEXTBUF_H

#include <stddef.h>

typedef struct dsv4_tbuf {
    char *s;        /* [cap], s[0..n) used, s[n] == 0 */
    size_t n, cap;
    int oom;        /* an allocation failed; contents are incomplete */
} dsv4_tbuf;

void dsv4_tbuf_put(dsv4_tbuf *b, const char *s, size_t n);
void dsv4_tbuf_puts(dsv4_tbuf *b, const char *s);  /* NULL appends nothing */
void dsv4_tbuf_putc(dsv4_tbuf *b, char c);
/* Hands the text to the caller (malloc'ed, NUL-terminated even when empty) and resets b.
 * Returns NULL (and frees everything) if an append ran out of memory. */
char *dsv4_tbuf_take(dsv4_tbuf *b, size_t *len);
void dsv4_tbuf_free(dsv4_tbuf *b);

#endif
