/* err.h — filling a dsv4_err: the only way errors travel up through the library. */
#ifndef DSV4_UTIL_ERR_H
#define DSV4_UTIL_ERR_H

#include "dsv4.h"

#if defined(__GNUC__)
#define DSV4_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DSV4_PRINTF(a, b)
#endif

/* Sets err (which may be NULL) to code + formatted message and returns code. */
int dsv4_fail(dsv4_err *err, int code, const char *fmt, ...) DSV4_PRINTF(3, 4);

/* Prepends "prefix: " to an existing message (adds context on the way up). */
void dsv4_err_prefix(dsv4_err *err, const char *fmt, ...) DSV4_PRINTF(2, 3);

static inline void dsv4_err_clear(dsv4_err *err) {
    if (err) { err->code = DSV4_OK; err->msg[0] = 0; }
}

#endif
