/* test_cpu.c — kernel levels: detection, names, DSV4_SIMD, and the FMA probe's level.
 *
 * DSV4_SIMD forces a level by name or number; an unknown value, or a level this CPU or
 * build cannot run, fails dsv4_kctx_create with a message naming it (never a silent
 * fallback). The FMA probe runs at the context's level, the widest by default. */
#include <stdlib.h>

#include "kernels/cpu.h"
#include "kernels/kctx.h"
#include "kernels/probe.h"
#include "test.h"

/* dsv4_kctx_create under DSV4_SIMD=value: the level, or -1 with the message in err */
static int level_under(const char *value, dsv4_err *err) {
    setenv("DSV4_SIMD", value, 1);
    dsv4_kctx *k = NULL;
    const int rc = dsv4_kctx_create(1, 16, &k, err);
    unsetenv("DSV4_SIMD");
    if (rc) return -1;
    const int level = dsv4_kctx_simd(k);
    dsv4_kctx_free(k);
    return level;
}

int main(void) {
    const int cpu = dsv4_cpu_simd(), build = dsv4_build_simd(), best = cpu < build ? cpu : build;
    printf("cpu level %s, build level %s\n", dsv4_simd_name(cpu), dsv4_simd_name(build));

    /* names round-trip; the old name of the portable level still parses */
    for (int l = DSV4_SIMD_SCALAR; l <= DSV4_SIMD_MAX; l++) {
        CHECK(dsv4_simd_parse(dsv4_simd_name((dsv4_simd)l)) == l);
        const char num[2] = {(char)('0' + l), 0};
        CHECK(dsv4_simd_parse(num) == l);
    }
    CHECK(strcmp(dsv4_simd_name(DSV4_SIMD_SCALAR), "portable") == 0);
    CHECK(strcmp(dsv4_simd_name(DSV4_SIMD_AVX512), "avx512") == 0);
    CHECK(strcmp(dsv4_simd_name(DSV4_SIMD_AVX512VBMI), "avx512vbmi") == 0);
    CHECK(dsv4_simd_parse("scalar") == DSV4_SIMD_SCALAR);
    const char *bad[] = {"", "AVX2", "avx", "4", "-1", "avx2 ", "avx512f", NULL};
    for (int i = 0; bad[i]; i++) CHECK_MSG(dsv4_simd_parse(bad[i]) == -1, "'%s' parsed", bad[i]);
    CHECK(dsv4_simd_parse(NULL) == -1);

    /* without DSV4_SIMD: the best level */
    dsv4_err err;
    unsetenv("DSV4_SIMD");
    dsv4_kctx *k = NULL;
    CHECK(dsv4_kctx_create(1, 16, &k, &err) == DSV4_OK);
    if (k) {
        CHECK(dsv4_kctx_simd(k) == best);
        /* the FMA probe runs the widest loop of that level */
        dsv4_probe_result r;
        CHECK(dsv4_probe_fma(k, 1e-3, 1, &r, &err) == DSV4_OK);
        CHECK_MSG(r.simd == best, "FMA probe at level %s, context at %s", dsv4_simd_name(r.simd),
                  dsv4_simd_name(best));
        CHECK(r.best > 0);
        dsv4_kctx_set_simd(k, DSV4_SIMD_SCALAR);
        CHECK(dsv4_probe_fma(k, 1e-3, 1, &r, &err) == DSV4_OK && r.simd == DSV4_SIMD_SCALAR);
        dsv4_kctx_free(k);
    }

    /* DSV4_SIMD: every level up to the best is forced; above it, an error */
    for (int l = DSV4_SIMD_SCALAR; l <= DSV4_SIMD_MAX; l++) {
        const char *name = dsv4_simd_name((dsv4_simd)l);
        const int got = level_under(name, &err);
        if (l <= best) {
            CHECK_MSG(got == l, "DSV4_SIMD=%s gave level %d", name, got);
        } else {
            printf("level %s: not run here (this %s lacks it); DSV4_SIMD=%s must fail\n", name,
                   cpu < l ? "CPU" : "build", name);
            CHECK_MSG(got == -1, "DSV4_SIMD=%s accepted on a machine without it", name);
            CHECK_ERR(err, DSV4_ERR_ARG, "runs at most");
        }
    }
    CHECK(level_under("scalar", &err) == DSV4_SIMD_SCALAR);
    CHECK(level_under("0", &err) == DSV4_SIMD_SCALAR);
    CHECK(level_under("sse", &err) == -1);
    CHECK_ERR(err, DSV4_ERR_ARG, "DSV4_SIMD=sse: unknown kernel level");
    for (int l = DSV4_SIMD_SCALAR; l <= DSV4_SIMD_MAX; l++) /* the message lists every level a user may set */
        CHECK_MSG(strstr(err.msg, dsv4_simd_name((dsv4_simd)l)) != NULL, "the message \"%s\" omits %s", err.msg,
                  dsv4_simd_name((dsv4_simd)l));
    CHECK(level_under("", &err) == -1);
    CHECK_ERR(err, DSV4_ERR_ARG, "unknown kernel level");
    return test_report();
}
