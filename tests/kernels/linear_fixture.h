/* linear_fixture.h — what the dsv4_linear tests share: random weight matrices of every format
 * (owned storage), random activations, the kernel contexts on 1..3 threads, bit comparisons and
 * products with a path forced. test_linear.c checks the contract (reference, levels, threads,
 * batch invariance, guard pages, NaN codes), test_linear_smallm.c the small-M kernel's bits,
 * test_linear_onerow.c the one-row GEMV's; each is its own executable, so ctest runs them side
 * by side. */
#ifndef DSV4_TESTS_LINEAR_FIXTURE_H
#define DSV4_TESTS_LINEAR_FIXTURE_H

#include <stdint.h>

#include "kernels/kctx.h"
#include "kernels/linear.h"
#include "kernels/linear_fast.h"

/* a weight matrix with owned storage */
typedef struct {
    dsv4_mat m;
    void *w, *scale;
} tmat;

enum { SC_E8M0, SC_F32 };

/* Under AddressSanitizer (a -O0 build) the portable level skips the few largest shapes:
 * they add minutes of plain arithmetic and no coverage the smaller ones lack. */
#if defined(__SANITIZE_ADDRESS__)
static const int sanitized = 1;
#else
static const int sanitized = 0;
#endif

/* kernel contexts on 1, 2 and 3 threads (index = threads; kc[0] unused), made by
 * fixture_open, freed by fixture_close */
extern dsv4_kctx *kc[4];

/* Creates kc[1..3] and prints the levels this CPU and build run; returns the best level
 * (kc[1] is left at the portable level, as every test starts from it), or -1 (with a
 * message on stderr) when a context cannot be made. The fixture holds no CHECKs: test.h's
 * counters are per file, so the tests' mains check what it returns. */
int fixture_open(void);
void fixture_close(void);

uint64_t rnd(void);  /* xorshift64, one fixed seed a process */
float urand(void);   /* uniform in [-1, 1) */
const char *fmt_name(dsv4_wfmt f, int sc);
/* Random weights covering every code of the format (FP8: all but the NaN codes), with scales
 * spread over a few binades so blocks really differ. */
tmat make_mat(dsv4_wfmt f, int sc, int64_t rows, int64_t cols);
void free_mat(tmat *t);
float *rand_vec(int64_t n); /* (n) uniform in [-1, 1); malloc'd */
int same_bits(const float *a, const float *b, int64_t n);
int64_t bits_differ(const float *y, const float *y2, int64_t n); /* outputs whose bits differ */
/* y = x m^T on k with the path forced (then AUTO again) */
void linear_forced(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, const float *x, int nr, float *y);
/* The path dsv4_linear takes for nr rows of m on k with path forced (AUTO: the thresholds'
 * own); a forced path the level cannot take falls back to another. Two forcings that take the
 * same path run the same plan, so a test that compares forced paths skips the repeats. */
dsv4_lin_path forced_path_of(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, int nr);
/* linear_forced into y; the outputs whose bits differ from yref's */
int64_t forced_differs(dsv4_kctx *k, dsv4_lin_path path, const dsv4_mat *m, const float *x, int nr, const float *yref,
                       float *y);

#endif
