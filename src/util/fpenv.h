/* fpenv.h — the SSE floating-point environment the kernels' bit contracts assume.
 *
 * Every result is defined under the default MXCSR: round to nearest, subnormals neither
 * flushed to zero (FTZ) nor read as zero (DAZ). Some kernels rely on subnormals on purpose
 * (the prescaled FP8 decodes make e4m3's subnormal codes F32 subnormals: linear_avx2.c,
 * linear_avx512_vbmi*.c), and a caller built with -ffast-math runs with FTZ | DAZ set,
 * which would silently change those products; round-toward-zero would change every sum.
 * So the public compute entry points (dsv4_engine_create, which also starts the pool's
 * workers: they inherit its MXCSR, dsv4_forward, dsv4_mtp_forward_out and the heads) run
 * under the default and hand the caller its own environment back (with any exception
 * flags the call raised). */
#ifndef DSV4_UTIL_FPENV_H
#define DSV4_UTIL_FPENV_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

#define DSV4_MXCSR_DEFAULT 0x1F80u /* every exception masked, round to nearest, no FTZ / DAZ */
#define DSV4_MXCSR_FLAGS 0x3Fu     /* the sticky exception flags */

typedef struct {
    unsigned csr; /* the caller's MXCSR */
} dsv4_fpenv;

static inline dsv4_fpenv dsv4_fpenv_enter(void) {
    const dsv4_fpenv f = {_mm_getcsr()};
    if ((f.csr & ~DSV4_MXCSR_FLAGS) != DSV4_MXCSR_DEFAULT) _mm_setcsr(DSV4_MXCSR_DEFAULT | (f.csr & DSV4_MXCSR_FLAGS));
    return f;
}

static inline void dsv4_fpenv_leave(dsv4_fpenv f) {
    if ((f.csr & ~DSV4_MXCSR_FLAGS) != DSV4_MXCSR_DEFAULT) _mm_setcsr(f.csr | (_mm_getcsr() & DSV4_MXCSR_FLAGS));
}
#else
typedef struct {
    int unused;
} dsv4_fpenv;
static inline dsv4_fpenv dsv4_fpenv_enter(void) { return (dsv4_fpenv){0}; }
static inline void dsv4_fpenv_leave(dsv4_fpenv f) { (void)f; }
#endif

#endif
