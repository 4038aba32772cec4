/* stop.c — stop tokens, max tokens and streaming stop strings (see stop.h). */
#include "sample/stop.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

struct dsv4_stop {
    char **str;          /* [n_str] stop strings */
    size_t *len;         /* [n_str] their lengths */
    int n_str;
    int32_t *tok;        /* [n_tok] stop tokens */
    int n_tok;
    int max_tokens, count;
    int matched;         /* stop string that ended generation, or -1 */
    int min;             /* stop strings end generation in the text of tokens after the
                          * min-th (vLLM's rule: one may begin in the text before) */
    int include;         /* 1: the stop string is handed out too */
    char *buf;           /* [cap]: held-back text [held], then the new text appended */
    size_t held, cap;
    size_t before;       /* of the held text, the bytes fed up to the min-th token: a stop
                          * string must end after them */
    char *out;           /* [out_cap]: the text emitted by the last call */
    size_t out_cap;
};

int dsv4_stop_create(const char *const *strings, int n_strings, const int32_t *tokens,
                     int n_tokens, int max_tokens, dsv4_stop **out, dsv4_err *err) {
    *out = NULL;
    if (n_strings < 0 || n_tokens < 0 || max_tokens < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "stop: negative count (strings %d, tokens %d, max %d)",
                         n_strings, n_tokens, max_tokens);
    if ((n_strings && !strings) || (n_tokens && !tokens))
        return dsv4_fail(err, DSV4_ERR_ARG, "stop: NULL list");
    for (int i = 0; i < n_strings; i++)
        if (!strings[i] || !strings[i][0])
            return dsv4_fail(err, DSV4_ERR_ARG, "stop: stop string %d is empty", i);
    dsv4_stop *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->matched = -1;
    s->max_tokens = max_tokens;
    s->str = calloc((size_t)n_strings + 1, sizeof *s->str);
    s->len = calloc((size_t)n_strings + 1, sizeof *s->len);
    s->tok = malloc(((size_t)n_tokens + 1) * sizeof *s->tok);
    if (!s->str || !s->len || !s->tok) goto nomem;
    for (int i = 0; i < n_strings; i++) {
        s->len[i] = strlen(strings[i]);
        if (!(s->str[i] = malloc(s->len[i] + 1))) goto nomem;
        memcpy(s->str[i], strings[i], s->len[i] + 1);
        s->n_str++;
    }
    if (n_tokens) memcpy(s->tok, tokens, (size_t)n_tokens * sizeof *tokens);
    s->n_tok = n_tokens;
    *out = s;
    return 0;
nomem:
    dsv4_stop_free(s);
    return dsv4_fail(err, DSV4_ERR_NOMEM, "stop: out of memory");
}

void dsv4_stop_free(dsv4_stop *s) {
    if (!s) return;
    for (int i = 0; s->str && i < s->n_str; i++) free(s->str[i]);
    free(s->str);
    free(s->len);
    free(s->tok);
    free(s->buf);
    free(s->out);
    free(s);
}

void dsv4_stop_reset(dsv4_stop *s) {
    s->count = 0;
    s->matched = -1;
    s->held = 0;
    s->before = 0;
}

int dsv4_stop_token(dsv4_stop *s, int32_t token) {
    for (int i = 0; i < s->n_tok; i++)
        if (s->tok[i] == token) return DSV4_FINISH_STOP_TOKEN;
    s->count++;
    return (s->max_tokens > 0 && s->count >= s->max_tokens) ? DSV4_FINISH_LENGTH : DSV4_FINISH_NONE;
}

void dsv4_stop_options(dsv4_stop *s, int min, int include) {
    s->min = min;
    s->include = include;
}

int dsv4_stop_matched(const dsv4_stop *s) { return s->matched; }
int dsv4_stop_count(const dsv4_stop *s) { return s->count; }

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    for (const char *p = h, *end = h + hn - nn; p <= end; p++) {
        p = memchr(p, nd[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, nd, nn) == 0) return p;
    }
    return NULL;
}

/* Makes room for n bytes in *b (capacity *cap). */
static int grow(char **b, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    char *nb = realloc(*b, c);
    if (!nb) return 0;
    *b = nb;
    *cap = c;
    return 1;
}

int dsv4_stop_feed(dsv4_stop *s, const char *text, size_t len, const char **emit,
                   size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (s->matched >= 0) return DSV4_FINISH_STOP_STRING;
    if (!text) len = 0;
    size_t n = s->held + len;
    if (!grow(&s->buf, &s->cap, n + 1) || !grow(&s->out, &s->out_cap, n + 1)) return -DSV4_ERR_NOMEM;
    if (len) memcpy(s->buf + s->held, text, len);

    /* A complete stop string: the earliest start wins. Up to the min-th token nothing is
     * matched; from the token after it, a stop string that ends in its text, also one that
     * begins in the held text before it (vLLM's rule). Otherwise the held part holds none. */
    size_t cut = n;
    const int check = !s->min || s->count > s->min;
    for (int i = 0; check && i < s->n_str; i++) {
        /* a match must end after the bytes fed up to the min-th token */
        const size_t from = s->before >= s->len[i] ? s->before - s->len[i] + 1 : 0;
        const char *p = find_bytes(s->buf + from, n - from, s->str[i], s->len[i]);
        if (p && (size_t)(p - s->buf) < cut) { cut = (size_t)(p - s->buf); s->matched = i; }
    }
    size_t keep = 0;
    if (s->matched < 0) {
        /* Hold back the longest tail that is a proper prefix of some stop string (before the
         * min-th token too: a stop string may begin there). */
        for (int i = 0; i < s->n_str; i++) {
            size_t m = s->len[i] - 1 < n ? s->len[i] - 1 : n;
            for (size_t k = m; k > keep; k--)
                if (memcmp(s->buf + n - k, s->str[i], k) == 0) { keep = k; break; }
        }
        cut = n - keep;
    } else if (s->include) {
        cut += s->len[s->matched];
    }
    memcpy(s->out, s->buf, cut);
    s->out[cut] = 0;
    memmove(s->buf, s->buf + n - keep, keep);
    s->held = keep;
    /* what stays held of the bytes fed up to the min-th token (all of it before then) */
    s->before = !check ? keep : s->before > n - keep ? s->before - (n - keep) : 0;
    *emit = s->out;
    *emit_len = cut;
    return s->matched >= 0 ? DSV4_FINISH_STOP_STRING : DSV4_FINISH_NONE;
}

void dsv4_stop_flush(dsv4_stop *s, const char **emit, size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (s->matched >= 0 || s->held == 0) return;
    /* out has room: it was grown to at least the held size by the feed that held it. */
    memcpy(s->out, s->buf, s->held);
    s->out[s->held] = 0;
    *emit = s->out;
    *emit_len = s->held;
    s->held = 0;
}
