/* textbuf.c — growable byte string (see textbuf.h). */
#include "tok/textbuf.h"

#include <stdlib.h>
#include <string.h>

static int tbuf_reserve(dsv4_tbuf *b, size_t extra) {
    if (b->oom) return 0;
    if (b->n + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) {
        if (cap > ((size_t)-1) / 2) { b->oom = 1; return 0; }
        cap *= 2;
    }
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return 0; }
    b->s = s;
    b->cap = cap;
    return 1;
}

void dsv4_tbuf_put(dsv4_tbuf *b, const char *s, size_t n) {
    if (!tbuf_reserve(b, n)) return;
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void dsv4_tbuf_puts(dsv4_tbuf *b, const char *s) {
    if (s) dsv4_tbuf_put(b, s, strlen(s));
}

void dsv4_tbuf_putc(dsv4_tbuf *b, char c) { dsv4_tbuf_put(b, &c, 1); }

char *dsv4_tbuf_take(dsv4_tbuf *b, size_t *len) {
    if (!b->oom && !b->s) tbuf_reserve(b, 0);
    if (b->oom) { dsv4_tbuf_free(b); if (len) *len = 0; return NULL; }
    char *s = b->s;
    b->s[b->n] = 0;
    if (len) *len = b->n;
    b->s = NULL;
    b->n = b->cap = 0;
    return s;
}

void dsv4_tbuf_free(dsv4_tbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
    b->oom = 0;
}
