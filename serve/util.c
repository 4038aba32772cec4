/* util.c — clock, errors, text buffer and UTF-8 repair of the server (util.h). */
#include "serve/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int srv_fail(dsv4_err *err, int code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int reserve(srv_buf *b, size_t more) {
    if (b->oom) return -1;
    if (b->n + more + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return -1; }
    b->s = s;
    b->cap = cap;
    return 0;
}

void srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (reserve(b, n)) return;
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_put(b, s, strlen(s)); }

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || reserve(b, (size_t)k)) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void srv_buf_free(srv_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 character at s[0..n), or 0 if there is none. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    size_t len;
    unsigned min;
    unsigned cp;
    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xe0) == 0xc0) { len = 2; min = 0x80; cp = s[0] & 0x1f; }
    else if ((s[0] & 0xf0) == 0xe0) { len = 3; min = 0x800; cp = s[0] & 0x0f; }
    else if ((s[0] & 0xf8) == 0xf0) { len = 4; min = 0x10000; cp = s[0] & 0x07; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

void srv_buf_put_utf8(srv_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_char(u + i, n - i);
        if (k) { srv_buf_put(b, s + i, k); i += k; }
        else { srv_buf_puts(b, "\xef\xbf\xbd"); i++; }
    }
}

void srv_buf_json_str(srv_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    srv_buf_put(b, "\"", 1);
    size_t i = 0, run = 0;  /* s[i - run, i): bytes copied as they are, not yet put */
    while (i < n) {
        const size_t k = u[i] < 0x80 ? (u[i] >= 0x20 && u[i] != '"' && u[i] != '\\') : utf8_char(u + i, n - i);
        if (k) { i += k; run += k; continue; }
        srv_buf_put(b, s + i - run, run);
        run = 0;
        if (u[i] == '"') srv_buf_put(b, "\\\"", 2);
        else if (u[i] == '\\') srv_buf_put(b, "\\\\", 2);
        else if (u[i] < 0x20) srv_buf_printf(b, "\\u%04x", u[i]);
        else srv_buf_put(b, "\xef\xbf\xbd", 3);  /* not UTF-8: U+FFFD */
        i++;
    }
    srv_buf_put(b, s + i - run, run);
    srv_buf_put(b, "\"", 1);
}

size_t srv_find(const char *t, size_t n, size_t from, const char *m) {
    size_t k = strlen(m);
    for (size_t i = from; i + k <= n; i++)
        if (!memcmp(t + i, m, k)) return i;
    return n;
}

size_t srv_partial_tail(const char *t, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (!memcmp(t + n - l, m, l)) return l;
    return 0;
}

void srv_wr_i32(srv_buf *b, int32_t v) { srv_buf_put(b, (const char *)&v, sizeof v); }
void srv_wr_i64(srv_buf *b, int64_t v) { srv_buf_put(b, (const char *)&v, sizeof v); }

const void *srv_rd_view(srv_rd *r, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const void *v = r->p;
    r->p += n;
    return v;
}

void srv_rd_bytes(srv_rd *r, void *out, size_t n) {
    const void *v = srv_rd_view(r, n);
    if (v) memcpy(out, v, n);
    else memset(out, 0, n);
}

int32_t srv_rd_i32(srv_rd *r) { int32_t v; srv_rd_bytes(r, &v, sizeof v); return v; }
int64_t srv_rd_i64(srv_rd *r) { int64_t v; srv_rd_bytes(r, &v, sizeof v); return v; }

int srv_frame_send(dsv4_dist *d, uint32_t magic, const void *body, size_t n, dsv4_err *err) {
    const uint32_t hdr[2] = {magic, n > SRV_FRAME_MAX ? UINT32_MAX : (uint32_t)n};
    int rc = dsv4_dist_bcast(d, (void *)hdr, sizeof hdr, 0, err);
    if (rc) return rc;
    if (n > SRV_FRAME_MAX) return srv_fail(err, DSV4_ERR_NOMEM, "serve: a %zu-byte step message is over the limit", n);
    return dsv4_dist_bcast(d, (void *)body, n, 0, err);
}

int srv_frame_recv(dsv4_dist *d, uint32_t magic, uint8_t **buf, size_t *cap, size_t *n, dsv4_err *err) {
    uint32_t hdr[2];
    int rc = dsv4_dist_bcast(d, hdr, sizeof hdr, 1, err);
    if (rc) return rc;
    if (hdr[0] != magic || hdr[1] > SRV_FRAME_MAX)
        return srv_fail(err, DSV4_ERR_STATE, "follower: not a step message from rank 0");
    if (hdr[1] > *cap) {
        uint8_t *m = realloc(*buf, hdr[1]);
        /* this rank cannot join the body's broadcast: the group is lost */
        if (!m) return srv_fail(err, DSV4_ERR_NOMEM, "follower: out of memory for a %u-byte step message", hdr[1]);
        *buf = m;
        *cap = hdr[1];
    }
    *n = hdr[1];
    return dsv4_dist_bcast(d, *buf, hdr[1], 0, err);
}

/* The client's text t for an error message: valid UTF-8 (a bad byte becomes U+FFFD, so the
 * JSON body stays valid), cut to at most cap - 1 bytes on a character boundary, into out. */
void srv_client_text(char *out, size_t cap, const char *t) {
    srv_buf b = {0};
    srv_buf_put_utf8(&b, t, strlen(t));
    size_t k = b.s ? (b.n < cap - 1 ? b.n : cap - 1) : 0;
    while (k > 0 && k < b.n && ((unsigned char)b.s[k] & 0xc0) == 0x80) k--;
    if (k) memcpy(out, b.s, k);
    out[k] = 0;
    srv_buf_free(&b);
}
