/* st_write.c — streaming safetensors writer (see st_write.h). */
#include "model/st_write.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* fsync */

#include "util/err.h"

typedef struct stw_tensor {
    char *name;
    dsv4_st_dtype dtype;
    int ndim;
    int64_t shape[DSV4_ST_MAX_DIMS];
    uint64_t begin, nbytes;   /* offsets within the data area */
    const void *data;         /* NULL: streamed */
} stw_tensor;

struct dsv4_stw {
    stw_tensor *t;
    int n, cap;
    char **meta;              /* key, value pairs */
    int n_meta;
    uint64_t data_bytes;      /* data area size so far */
    FILE *f;
    char *path;
    char *iobuf;              /* stdio buffer: large sequential writes */
    uint64_t header_bytes;    /* 8 + padded JSON */
    int cur;                  /* tensor being written */
    uint64_t cur_done;        /* bytes of it written */
    int opened, failed;
};

#define STW_IOBUF (8u << 20)

dsv4_stw *dsv4_stw_new(void) { return calloc(1, sizeof(dsv4_stw)); }

void dsv4_stw_free(dsv4_stw *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    free(w->meta);
    free(w->t);
    free(w->path);
    free(w->iobuf);
    free(w);
}

int dsv4_stw_add(dsv4_stw *w, const char *name, dsv4_st_dtype dtype, int ndim,
                 const int64_t *shape, const void *data, dsv4_err *err) {
    if (w->opened) return dsv4_fail(err, DSV4_ERR_STATE, "safetensors writer: '%s' declared after open", name);
    if (!name || !*name || !strcmp(name, "__metadata__"))
        return dsv4_fail(err, DSV4_ERR_ARG, "safetensors writer: bad tensor name '%s'", name ? name : "(null)");
    if ((int)dtype < 0 || dtype >= DSV4_ST_N_DTYPES)
        return dsv4_fail(err, DSV4_ERR_ARG, "safetensors writer: '%s': bad dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > DSV4_ST_MAX_DIMS)
        return dsv4_fail(err, DSV4_ERR_ARG, "safetensors writer: '%s': %d dimensions", name, ndim);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && count > UINT64_MAX / 16 / (uint64_t)shape[i]))
            return dsv4_fail(err, DSV4_ERR_ARG, "safetensors writer: '%s': bad shape", name);
        count *= (uint64_t)shape[i];
    }
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 256;
        stw_tensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory");
        w->t = t;
        w->cap = cap;
    }
    stw_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = count * (uint64_t)dsv4_st_dtype_size(dtype);
    t->begin = w->data_bytes;
    t->data = data;
    w->data_bytes += t->nbytes;
    w->n++;
    return DSV4_OK;
}

int dsv4_stw_meta(dsv4_stw *w, const char *key, const char *value, dsv4_err *err) {
    if (w->opened) return dsv4_fail(err, DSV4_ERR_STATE, "safetensors writer: metadata after open");
    char **m = realloc(w->meta, (size_t)(w->n_meta + 1) * 2 * sizeof *m);
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory");
    w->meta = m;
    m[2 * w->n_meta] = strdup(key);
    m[2 * w->n_meta + 1] = strdup(value);
    w->n_meta++;
    if (!m[2 * w->n_meta - 2] || !m[2 * w->n_meta - 1])
        return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory");
    return DSV4_OK;
}

/* ---- header JSON ------------------------------------------------------------------- */

typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) DSV4_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* JSON string with the escapes the format needs (names are normally plain ASCII). */
static void sb_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int build_header(const dsv4_stw *w, sbuf *b) {
    sb_put(b, "{", 1);
    sb_put(b, "\"__metadata__\":{", 16);
    if (w->n_meta == 0) sb_put(b, "\"format\":\"pt\"", 13);
    for (int i = 0; i < w->n_meta; i++) {
        if (i) sb_put(b, ",", 1);
        sb_str(b, w->meta[2 * i]);
        sb_put(b, ":", 1);
        sb_str(b, w->meta[2 * i + 1]);
    }
    sb_put(b, "}", 1);
    for (int i = 0; i < w->n; i++) {
        const stw_tensor *t = &w->t[i];
        sb_put(b, ",", 1);
        sb_str(b, t->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dsv4_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->begin,
                  (unsigned long long)(t->begin + t->nbytes));
    }
    sb_put(b, "}", 1);
    while (!b->oom && b->n % 8) sb_put(b, " ", 1);
    return b->oom ? -1 : 0;
}

/* ---- data -------------------------------------------------------------------------- */

static int io_fail(dsv4_stw *w, dsv4_err *err, const char *what) {
    w->failed = 1;
    return dsv4_fail(err, DSV4_ERR_IO, "%s: %s failed: %s", w->path, what, strerror(errno));
}

/* Writes every pointer-backed tensor that is next in line (and skips empty ones). */
static int drain_given(dsv4_stw *w, dsv4_err *err) {
    while (w->cur < w->n) {
        stw_tensor *t = &w->t[w->cur];
        if (t->nbytes == w->cur_done) { w->cur++; w->cur_done = 0; continue; }
        if (!t->data) break;
        if (fwrite((const uint8_t *)t->data + w->cur_done, 1, t->nbytes - w->cur_done, w->f) !=
            t->nbytes - w->cur_done)
            return io_fail(w, err, "write");
        w->cur++;
        w->cur_done = 0;
    }
    return DSV4_OK;
}

int dsv4_stw_open(dsv4_stw *w, const char *path, dsv4_err *err) {
    if (w->opened) return dsv4_fail(err, DSV4_ERR_STATE, "safetensors writer: opened twice");
    w->path = strdup(path);
    if (!w->path) return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory");
    sbuf b = {0};
    if (build_header(w, &b)) {
        free(b.p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "safetensors writer: out of memory for the header");
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        free(b.p);
        w->failed = 1;
        return dsv4_fail(err, DSV4_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    }
    w->iobuf = malloc(STW_IOBUF);
    if (w->iobuf) setvbuf(w->f, w->iobuf, _IOFBF, STW_IOBUF);
    w->opened = 1;
    uint8_t len8[8];
    uint64_t hn = b.n;
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hn >> (8 * i));
    w->header_bytes = 8 + hn;
    int ok = fwrite(len8, 1, 8, w->f) == 8 && fwrite(b.p, 1, b.n, w->f) == b.n;
    free(b.p);
    if (!ok) return io_fail(w, err, "write");
    return drain_given(w, err);
}

int dsv4_stw_write(dsv4_stw *w, const void *data, uint64_t n, dsv4_err *err) {
    if (!w->opened || w->failed) return dsv4_fail(err, DSV4_ERR_STATE, "safetensors writer: not open");
    const uint8_t *p = data;
    while (n > 0) {
        int rc = drain_given(w, err);
        if (rc) return rc;
        if (w->cur >= w->n)
            return dsv4_fail(err, DSV4_ERR_ARG, "%s: %llu bytes written past the end of the data",
                             w->path, (unsigned long long)n);
        stw_tensor *t = &w->t[w->cur];
        uint64_t k = t->nbytes - w->cur_done;
        if (k > n) k = n;
        if (fwrite(p, 1, k, w->f) != k) return io_fail(w, err, "write");
        p += k;
        n -= k;
        w->cur_done += k;
    }
    return drain_given(w, err);
}

const char *dsv4_stw_current(const dsv4_stw *w) {
    return w->cur < w->n ? w->t[w->cur].name : NULL;
}

int dsv4_stw_close(dsv4_stw *w, dsv4_err *err) {
    if (!w->opened || !w->f) return dsv4_fail(err, DSV4_ERR_STATE, "safetensors writer: not open");
    int rc = w->failed ? DSV4_ERR_IO : drain_given(w, err);
    if (!rc && w->cur < w->n)
        rc = dsv4_fail(err, DSV4_ERR_STATE, "%s: tensor '%s' has %llu of %llu bytes written", w->path,
                       w->t[w->cur].name, (unsigned long long)w->cur_done,
                       (unsigned long long)w->t[w->cur].nbytes);
    if (!rc && fflush(w->f)) rc = io_fail(w, err, "flush");
    if (!rc && fsync(fileno(w->f))) rc = io_fail(w, err, "fsync"); /* complete on disk before a rename */
    if (fclose(w->f) && !rc) rc = io_fail(w, err, "close");
    w->f = NULL;
    return rc;
}

uint64_t dsv4_stw_file_size(const dsv4_stw *w) {
    if (w->opened) return w->header_bytes + w->data_bytes;
    sbuf b = {0};
    uint64_t n = build_header(w, &b) ? 0 : 8 + b.n + w->data_bytes;
    free(b.p);
    return n;
}
