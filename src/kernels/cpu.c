/* cpu.c — CPU feature detection with cpuid and xgetbv.
 *
 * AVX2 needs three things: the instruction-set bits (cpuid leaf 7 AVX2, leaf 1 FMA, F16C,
 * AVX, OSXSAVE) and the OS having enabled the XMM and YMM state in XCR0; without the last
 * one the instructions fault even though cpuid lists them. Nothing is cached: detection is
 * a handful of instructions and runs once per kernel context.
 */
#include "kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    /* xgetbv with ecx = 0; encoded as bytes so no -mxsave is needed for this file */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

dsv4_simd dsv4_cpu_simd(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return DSV4_SIMD_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return DSV4_SIMD_SCALAR;
    if ((read_xcr0() & 6) != 6) return DSV4_SIMD_SCALAR; /* XMM and YMM state enabled */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return DSV4_SIMD_SCALAR;
    const int avx2 = (b >> 5) & 1;
    return avx2 ? DSV4_SIMD_AVX2 : DSV4_SIMD_SCALAR;
}
#else
dsv4_simd dsv4_cpu_simd(void) { return DSV4_SIMD_SCALAR; }
#endif

const char *dsv4_simd_name(dsv4_simd level) {
    switch (level) {
    case DSV4_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}

dsv4_simd dsv4_build_simd(void) {
#ifdef DSV4_HAVE_AVX2
    return DSV4_SIMD_AVX2;
#else
    return DSV4_SIMD_SCALAR;
#endif
}
