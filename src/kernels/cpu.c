/* cpu.c — CPU feature detection with cpuid and xgetbv.
 *
 * A level needs two things: the instruction-set bits in cpuid and the OS having enabled
 * the register state in XCR0; without the second the instructions fault even though cpuid
 * lists them. AVX2: cpuid leaf 7 AVX2, leaf 1 FMA, F16C, AVX, OSXSAVE; XCR0 XMM and YMM.
 * AVX-512: leaf 7 F, DQ, BW, VL; XCR0 also the opmask and both halves of the ZMM state.
 * AVX-512 VBMI: leaf 7 ecx bits 1 (VBMI) and 11 (VNNI) on top of that (same register state):
 * every processor with VBMI but Cannon Lake has VNNI too, and the FP4 indexer's integer
 * scores (idx_fi_x512.c) need it.
 * Nothing is cached: detection is a handful of instructions and runs once per kernel
 * context.
 */
#include "kernels/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    /* xgetbv with ecx = 0; encoded as bytes so no -mxsave is needed for this file */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

#define XCR0_AVX 0x6ull     /* XMM, YMM */
#define XCR0_AVX512 0xe0ull /* opmask, ZMM_Hi256, Hi16_ZMM */

dsv4_simd dsv4_cpu_simd(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return DSV4_SIMD_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return DSV4_SIMD_SCALAR;
    const unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & XCR0_AVX) != XCR0_AVX) return DSV4_SIMD_SCALAR;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return DSV4_SIMD_SCALAR;
    const int avx2 = (b >> 5) & 1;
    if (!avx2) return DSV4_SIMD_SCALAR;
    const int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    const int vbmi = (c >> 1) & 1 && (c >> 11) & 1; /* VBMI and VNNI */
    if (f && dq && bw && vl && (xcr0 & XCR0_AVX512) == XCR0_AVX512) return vbmi ? DSV4_SIMD_AVX512VBMI : DSV4_SIMD_AVX512;
    return DSV4_SIMD_AVX2;
}

#else
dsv4_simd dsv4_cpu_simd(void) { return DSV4_SIMD_SCALAR; }
#endif

const char *dsv4_simd_name(dsv4_simd level) {
    switch (level) {
    case DSV4_SIMD_AVX2: return "avx2";
    case DSV4_SIMD_AVX512: return "avx512";
    case DSV4_SIMD_AVX512VBMI: return "avx512vbmi";
    default: return "portable";
    }
}

int dsv4_simd_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "scalar") == 0) return DSV4_SIMD_SCALAR;
    for (int l = DSV4_SIMD_SCALAR; l <= DSV4_SIMD_MAX; l++) {
        const char num[2] = {(char)('0' + l), 0};
        if (strcmp(s, num) == 0 || strcmp(s, dsv4_simd_name((dsv4_simd)l)) == 0) return l;
    }
    return -1;
}

int dsv4_simd_env(int dflt, struct dsv4_err *err) {
    const char *env = getenv("DSV4_SIMD");
    if (!env) return dflt;
    const int level = dsv4_simd_parse(env);
    if (level < 0) { /* the names from the table, so a new level cannot be left out of the message */
        char names[96] = "";
        for (int l = DSV4_SIMD_SCALAR; l <= DSV4_SIMD_MAX; l++) {
            const size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", l == DSV4_SIMD_SCALAR ? "" : l == DSV4_SIMD_MAX ? " or " : ", ",
                     dsv4_simd_name((dsv4_simd)l));
        }
        dsv4_fail(err, DSV4_ERR_ARG, "DSV4_SIMD=%s: unknown kernel level (%s)", env, names);
    }
    return level;
}

dsv4_simd dsv4_build_simd(void) {
#if defined(DSV4_HAVE_AVX512)
    return DSV4_SIMD_AVX512VBMI; /* its kernels are compiled with the AVX-512 ones */
#elif defined(DSV4_HAVE_AVX2)
    return DSV4_SIMD_AVX2;
#else
    return DSV4_SIMD_SCALAR;
#endif
}
