/* kv_env.h — the KV storage a test's engines use: DSV4_TEST_KV=f32|bf16|fp8 (unset = the
 * engine default), so that one invariant test runs at every storage format from CTest. */
#ifndef DSV4_TESTS_KV_ENV_H
#define DSV4_TESTS_KV_ENV_H

#include <stdio.h>
#include <stdlib.h>

#include "dsv4.h"

static inline int test_kv_dtype(void) {
    const char *s = getenv("DSV4_TEST_KV");
    int d = DSV4_KV_DEFAULT;
    dsv4_err e = {0};
    if (s && *s && dsv4_kv_dtype_parse(s, &d, &e)) {
        fprintf(stderr, "DSV4_TEST_KV: %s\n", e.msg);
        exit(2);
    }
    return d;
}

#endif
