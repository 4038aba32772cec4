/* err.c — error values with messages (see err.h). */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dsv4_fail(dsv4_err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void dsv4_err_prefix(dsv4_err *err, const char *fmt, ...) {
    if (!err) return;
    char head[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* keep as much of the old message as fits after the prefix */
    size_t n = strlen(head);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, head, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof err->msg - n - 3;
    size_t m = strlen(old);
    if (m > rest) m = rest;
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = 0;
}

const char *dsv4_strerror(int code) {
    switch (code) {
    case DSV4_OK: return "ok";
    case DSV4_ERR_IO: return "i/o error";
    case DSV4_ERR_FORMAT: return "malformed input";
    case DSV4_ERR_CONFIG: return "invalid config";
    case DSV4_ERR_ARG: return "invalid argument";
    case DSV4_ERR_CACHE_FULL: return "cache full";
    case DSV4_ERR_NOMEM: return "out of memory";
    case DSV4_ERR_UNSUPPORTED: return "unsupported";
    case DSV4_ERR_STATE: return "invalid state";
    case DSV4_ERR_NUMERIC: return "non-finite result";
    default: return "unknown error";
    }
}
