/* test.h — minimal assertions for dsv4's CTest programs.
 * CHECK records a failure and continues; the program's exit status is the verdict, and the
 * last line reads "N passed, N failed". */
#ifndef DSV4_TESTS_TEST_H
#define DSV4_TESTS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed_, test_failed_;

#define CHECK(cond) do { \
    if (cond) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

#define CHECK_MSG(cond, ...) do { \
    if (cond) test_passed_++; \
    else { test_failed_++; fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

#define CHECK_NEAR(a, b, tol) do { \
    double a_ = (a), b_ = (b); \
    CHECK_MSG(fabs(a_ - b_) <= (tol), "%s = %.9g, %s = %.9g, tol %.3g", #a, a_, #b, b_, (double)(tol)); \
} while (0)

/* Error message contains a substring. */
#define CHECK_ERR(err, code_, substr) do { \
    CHECK_MSG((err).code == (code_) && strstr((err).msg, (substr)) != NULL, \
              "code %d (want %d), msg '%s' (want '%s')", (err).code, (int)(code_), (err).msg, (substr)); \
} while (0)

static inline int test_report(void) {
    printf("%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ ? 1 : 0;
}

/* Exit status of a test that cannot run here (CTest's SKIP_RETURN_CODE for every test). */
#define TEST_SKIP 77

/* The shared/ directory (spec, golden, tokenizer, oracle): DSV4_SHARED, else ../shared. */
static inline const char *test_shared_root(void) {
    const char *root = getenv("DSV4_SHARED");
    return root ? root : "../shared";
}

/* Exits TEST_SKIP, saying why, when the shared/ directory is absent (fopen opens a
 * directory for reading on Linux; no <sys/stat.h>, whose stat() would clash with tests). */
static inline void test_require_shared(void) {
    FILE *dir = fopen(test_shared_root(), "r");
    if (dir) fclose(dir);
    else {
        fprintf(stderr, "SKIP: %s not found; this test needs ../shared (spec, golden, tokenizer: "
                "configure with -DDSV4_SHARED_DIR=DIR)\n", test_shared_root());
        exit(TEST_SKIP);
    }
}

/* Path under the shared/ directory; skips the test (exit TEST_SKIP) when it is absent. */
static inline const char *test_shared(const char *rel, char *buf, size_t n) {
    test_require_shared();
    snprintf(buf, n, "%s/%s", test_shared_root(), rel);
    return buf;
}

#endif
