/* cpu.h — which SIMD kernels this processor can run.
 *
 * Kernels come in levels; the kernel context picks the highest level that both the CPU
 * (and the OS, which must save the wide registers) supports and this build compiled in.
 * Level 0 is portable C and always available, so every optimized kernel has an oracle
 * that runs anywhere.
 */
#ifndef DSV4_KERNELS_CPU_H
#define DSV4_KERNELS_CPU_H

typedef enum {
    DSV4_SIMD_SCALAR = 0, /* portable C */
    DSV4_SIMD_AVX2 = 1,   /* x86-64 AVX2 + FMA + F16C */
} dsv4_simd;

/* Highest level the running CPU and OS support (ignores what was compiled in). */
dsv4_simd dsv4_cpu_simd(void);

/* Highest level compiled into this build. */
dsv4_simd dsv4_build_simd(void);

/* "scalar", "avx2". */
const char *dsv4_simd_name(dsv4_simd level);

#endif
