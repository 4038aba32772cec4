/* tokenizer_decode.c — ids -> UTF-8, whole or streaming.
 *
 * Each id decodes to fixed bytes (precomputed at load). The concatenated bytes become
 * UTF-8 the way Rust's String::from_utf8_lossy (and so tokenizers' decode) does: every
 * maximal invalid stretch — a byte that cannot start a character, or the longest prefix
 * of a character that breaks off — becomes one U+FFFD. The streaming decoder holds back a
 * trailing prefix that may still complete, which yields exactly the whole-text result. */
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer_impl.h"
#include "util/err.h"

enum { U8_OK, U8_BAD, U8_PARTIAL };

/* Classifies the sequence at s[0..n), n >= 1: U8_OK (*len = its length), U8_BAD (*len =
 * the maximal invalid subpart, replaced by one U+FFFD) or U8_PARTIAL (all n bytes are a
 * valid beginning of a longer character). */
static int u8_step(const uint8_t *s, size_t n, size_t *len) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (b < 0x80) { *len = 1; return U8_OK; }
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;  // overlong
        if (b == 0xED) hi = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;  // overlong
        if (b == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
        *len = 1;
        return U8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) { *len = n; return U8_PARTIAL; }
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) { *len = i; return U8_BAD; }
    }
    *len = need;
    return U8_OK;
}

size_t tok_utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0, w;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) { i++; continue; }
        if (u8_step((const uint8_t *)s + i, n - i, &w) != U8_OK) return i;
        i += w;
    }
    return n;
}

/* Writes the UTF-8 of s[0..n) into out (room for 3n bytes: U+FFFD is 3 bytes for 1 bad
 * byte) and returns its length. Unless final, a trailing U8_PARTIAL is left unwritten and
 * *used tells how far s was consumed. */
static size_t lossy(const uint8_t *s, size_t n, int final, char *out, size_t *used) {
    size_t i = 0, k = 0, w;
    while (i < n) {
        int r = u8_step(s + i, n - i, &w);
        if (r == U8_PARTIAL && !final) break;
        if (r == U8_OK) {
            memcpy(out + k, s + i, w);
            k += w;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += w;
    }
    *used = i;
    return k;
}

static int bad_id(const dsv4_tokenizer *t, int32_t id, size_t at, dsv4_err *err) {
    return dsv4_fail(err, DSV4_ERR_ARG, "detokenize: id %d (at index %zu) has no token (vocabulary: ids 0..%d)",
                     id, at, t->n_ids - 1);
}

static inline int valid_id(const dsv4_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_HAS);
}

int dsv4_detokenize(const dsv4_tokenizer *t, const int32_t *ids, size_t n, int flags, char **text,
                    size_t *text_len, dsv4_err *err) {
    *text = NULL;
    *text_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!valid_id(t, ids[i])) return bad_id(t, ids[i], i, err);
        total += t->bytes_off[ids[i] + 1] - t->bytes_off[ids[i]];
    }
    char *raw = malloc(total + 1);
    if (!raw) return dsv4_fail(err, DSV4_ERR_NOMEM, "detokenize: out of memory (%zu bytes)", total);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if ((flags & DSV4_DETOK_SKIP_SPECIAL) && (t->flags[ids[i]] & TOK_SPECIAL)) continue;
        size_t w = t->bytes_off[ids[i] + 1] - t->bytes_off[ids[i]];
        memcpy(raw + k, t->bytes + t->bytes_off[ids[i]], w);
        k += w;
    }
    if (tok_utf8_valid_prefix(raw, k) == k) {  // the usual case: no repair needed
        raw[k] = 0;
        *text = raw;
        *text_len = k;
        return 0;
    }
    char *out = malloc(3 * k + 1);
    if (!out) {
        free(raw);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "detokenize: out of memory (%zu bytes)", 3 * k);
    }
    size_t used;
    size_t m = lossy((const uint8_t *)raw, k, 1, out, &used);
    out[m] = 0;
    free(raw);
    *text = out;
    *text_len = m;
    return 0;
}

/* ---- streaming ------------------------------------------------------------------------------ */

struct dsv4_tok_stream {
    const dsv4_tokenizer *t;
    int flags;
    uint8_t pend[4];  // a character's first bytes, waiting for the rest
    size_t npend;     // < 4
    uint8_t *in;      // (in_cap) pend + the new token's bytes
    char *out;        // (3 * in_cap + 1) what a push returns
    size_t in_cap;
};

int dsv4_tok_stream_new(const dsv4_tokenizer *t, int flags, dsv4_tok_stream **out, dsv4_err *err) {
    dsv4_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
    s->t = t;
    s->flags = flags;
    *out = s;
    return 0;
}

void dsv4_tok_stream_free(dsv4_tok_stream *s) {
    if (!s) return;
    free(s->in);
    free(s->out);
    free(s);
}

int dsv4_tok_stream_push(dsv4_tok_stream *s, int32_t id, const char **text, size_t *len,
                         dsv4_err *err) {
    const dsv4_tokenizer *t = s->t;
    *text = "";
    *len = 0;
    if (!valid_id(t, id)) return bad_id(t, id, 0, err);
    if ((s->flags & DSV4_DETOK_SKIP_SPECIAL) && (t->flags[id] & TOK_SPECIAL)) return 0;
    size_t w = t->bytes_off[id + 1] - t->bytes_off[id], n = s->npend + w;
    if (n == 0) return 0;  // an empty token with nothing pending: the buffers may not exist yet
    if (n > s->in_cap) {
        size_t cap = n < 256 ? 256 : 2 * n;
        uint8_t *in = malloc(cap);
        char *out = malloc(3 * cap + 1);
        if (!in || !out) {
            free(in), free(out);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "out of memory");
        }
        free(s->in), free(s->out);
        s->in = in, s->out = out, s->in_cap = cap;
    }
    memcpy(s->in, s->pend, s->npend);
    memcpy(s->in + s->npend, t->bytes + t->bytes_off[id], w);
    size_t used, m = lossy(s->in, n, 0, s->out, &used);
    s->npend = n - used;  // a partial character: at most 3 bytes
    memcpy(s->pend, s->in + used, s->npend);
    s->out[m] = 0;
    *text = s->out;
    *len = m;
    return 0;
}

void dsv4_tok_stream_flush(dsv4_tok_stream *s, const char **text, size_t *len) {
    // A partial character is one maximal invalid subpart: one U+FFFD.
    static const char repl[] = "\xEF\xBF\xBD";
    *text = s->npend ? repl : "";
    *len = s->npend ? 3 : 0;
    s->npend = 0;
}
