/* util.h — small helpers of the server: a monotonic clock, error filling, a growable
 * text buffer and UTF-8 repair. */
#ifndef DSV4_SERVE_UTIL_H
#define DSV4_SERVE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

/* Seconds on the monotonic clock. */
double srv_now(void);
/* Fills err (code, printf-style message) and returns code. */
int srv_fail(dsv4_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A growable NUL-terminated text; oom sticks once an allocation failed. Start from {0}. */
typedef struct srv_buf {
    char *s;
    size_t n, cap;
    int oom;
} srv_buf;

void srv_buf_put(srv_buf *b, const char *s, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);

/* Appends bytes as valid UTF-8: every invalid or incomplete sequence becomes U+FFFD (a
 * token's bytes may hold part of a character; JSON text must be valid UTF-8). */
void srv_buf_put_utf8(srv_buf *b, const char *s, size_t n);

/* The client's text t for an error message: valid UTF-8 (a bad byte becomes U+FFFD), cut to
 * at most cap - 1 bytes on a character boundary, into out. */
void srv_client_text(char *out, size_t cap, const char *t);

/* Appends s[0, n) as a JSON string literal (quoted; '"', '\\' and control bytes escaped,
 * invalid UTF-8 repaired as srv_buf_put_utf8 does): large answers written without a cJSON
 * tree. */
void srv_buf_json_str(srv_buf *b, const char *s, size_t n);

/* Offset of the first m in t[from..n), or n. */
size_t srv_find(const char *t, size_t n, size_t from, const char *m);
/* Messages between ranks (step messages, DP requests and reports): native values appended to
 * a srv_buf, and read back. */
/* Reading a received message (native byte order: the ranks run one build): every read past the end sets bad and yields zeros. */
typedef struct srv_rd {
    const uint8_t *p, *end;
    int bad;
} srv_rd;

void srv_wr_i32(srv_buf *b, int32_t v);
void srv_wr_i64(srv_buf *b, int64_t v);
int32_t srv_rd_i32(srv_rd *r);
int64_t srv_rd_i64(srv_rd *r);
void srv_rd_bytes(srv_rd *r, void *out, size_t n);
/* n bytes in place (NULL when bad): valid while the message is. */
const void *srv_rd_view(srv_rd *r, size_t n);

/* A framed message from rank 0 to the other ranks of d (the step messages of both group
 * protocols, step_msg.c and dp.c): a header {magic, body bytes} broadcast first, for which
 * the others wait without a deadline (the server may idle), then the body under the peer
 * timeout. A body over SRV_FRAME_MAX bytes fails on every rank after the header (rank 0
 * sends one no rank accepts). */
#define SRV_FRAME_MAX (1u << 30)
int srv_frame_send(dsv4_dist *d, uint32_t magic, const void *body, size_t n, dsv4_err *err);
/* The other ranks: the next message into *buf (grown as needed; *cap its bytes), *n = its
 * size. Fails when the header is not magic's (rank 0 sent another protocol's, or none). */
int srv_frame_recv(dsv4_dist *d, uint32_t magic, uint8_t **buf, size_t *cap, size_t *n, dsv4_err *err);

/* Length of the longest tail of t[0..n) that is a proper beginning of m: bytes to hold back
 * while a marker may still be arriving. */
size_t srv_partial_tail(const char *t, size_t n, const char *m);

/* splitmix64's output function, a bijection of 64-bit words (its state advances by
 * 0x9e3779b97f4a7c15 a value): request seeds and ids, the DP key reports' checksum */
static inline uint64_t srv_splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
