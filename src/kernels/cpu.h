/* cpu.h — which SIMD kernels this processor can run.
 *
 * Kernels come in levels; the kernel context picks the highest level that both the CPU
 * (and the OS, which must save the wide registers) supports and this build compiled in.
 * Level 0 is portable C and always available, so every optimized kernel has an oracle
 * that runs anywhere. Each level includes the ones below it (an AVX-512 CPU runs the AVX2
 * kernels too), so a kernel family without code for a level uses the next one down.
 */
#ifndef DSV4_KERNELS_CPU_H
#define DSV4_KERNELS_CPU_H

typedef enum {
    DSV4_SIMD_SCALAR = 0, /* portable C */
    DSV4_SIMD_AVX2 = 1,   /* x86-64 AVX2 + FMA + F16C */
    DSV4_SIMD_AVX512 = 2, /* AVX2 level + AVX-512 F/BW/VL/DQ (Skylake-SP, Zen 4 and later) */
    DSV4_SIMD_AVX512VBMI = 3, /* AVX-512 level + VBMI (byte permutes) and VNNI (byte dots): Ice Lake, Zen 4
                               * and later */
} dsv4_simd;

#define DSV4_SIMD_MAX DSV4_SIMD_AVX512VBMI

/* Highest level the running CPU and OS support (ignores what was compiled in). */
dsv4_simd dsv4_cpu_simd(void);

/* Highest level compiled into this build. */
dsv4_simd dsv4_build_simd(void);

/* "portable", "avx2", "avx512", "avx512vbmi". */
const char *dsv4_simd_name(dsv4_simd level);

/* Parses a level name ("portable" or its old name "scalar", "avx2", "avx512",
 * "avx512vbmi") or number (0 .. 3). Returns the level, or -1 for anything else. */
int dsv4_simd_parse(const char *s);

/* The level the environment's DSV4_SIMD asks for, or dflt where it is unset; -1 with err set
 * where it names no level (an error, not a silent fallback: a run with it must measure what
 * it says). Whether the CPU runs that level is the caller's to check. */
struct dsv4_err;
int dsv4_simd_env(int dflt, struct dsv4_err *err);

#endif
