/* test_fpenv.c — results do not depend on the caller's SSE floating-point environment
 * (util/fpenv.h). A caller built with -ffast-math runs with FTZ | DAZ set, and the
 * prescaled FP8 decodes make e4m3's subnormal codes F32 subnormals on purpose: under DAZ
 * they would read as zero. On the FP8 tiny model (random weights, so subnormal codes in
 * every FP8 matrix), at the machine's level and at avx2 (its prescaled decode), a prefill
 * and greedy decode steps with FTZ | DAZ and round-toward-zero set on the calling thread
 * before the engine is made (its workers inherit that) must give the hidden states and
 * logits of the run under the default MXCSR bit for bit, and every call must hand the
 * caller its own MXCSR back.
 * The same runs with the kernels' other choice of subnormal handling: the engine's tables say
 * whether F32 subnormal FMA operands are free (dsv4_lin_tables.subnormal_fma_fast, set at create
 * from __builtin_cpu_is("amd")); AMD cores then take the prescaled bit decode for blocks with
 * subnormal codes, Intel's the F16 decode (and at avx512vbmi other routes and small-M kernels).
 * The test forces the choice this CPU did not make in the engine's own tables (an internal,
 * tests only) and wants the same bits, so both choices run on every machine; and the machine's
 * choice must match its CPUID vendor (AMD: 1, Intel: 0; another vendor is not checked). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cpuid.h>
#include <xmmintrin.h>

#include "dsv4.h"
#include "engine/engine.h"
#include "kernels/linear_fast.h"
#include "test.h"

#define N_PROMPT 20
#define N_DECODE 6
#define CSR_FAST (0x8000u | 0x0040u | 0x6000u) /* FTZ | DAZ | round toward zero */

typedef struct {
    float *hidden; /* (1 + N_DECODE, D) */
    float *logits; /* (1 + N_DECODE, V) */
    int sub_fast;  /* the engine's tables' subnormal_fma_fast as create set it */
} run_out;

/* One engine's prefill of N_PROMPT tokens and N_DECODE greedy steps; 0 on success. sub_fast:
 * -1 leaves the tables' subnormal choice as create made it, 0 or 1 forces it. */
static int run(dsv4_model *m, unsigned csr, int sub_fast, run_out *o) {
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(csr);
    const dsv4_model_info mi = dsv4_model_get_info(m);
    const int D = mi.hidden_size, V = mi.vocab_size;
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .c_max = 32, .threads = 2};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    int rc = dsv4_engine_create(m, &eo, &e, &err), seq = -1;
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        dsv4_lin_tables *tab = (dsv4_lin_tables *)dsv4_kctx_lin_tables(e->k);
        o->sub_fast = tab->subnormal_fma_fast;
        if (sub_fast >= 0) tab->subnormal_fma_fast = sub_fast;
        rc = dsv4_seq_create(e, &seq, &err);
    }
    int32_t tok[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) tok[i] = (int32_t)((i * 37 + 5) % V);
    int64_t pos = 0;
    for (int s = 0; s <= N_DECODE && !rc; s++) {
        const int n = s == 0 ? N_PROMPT : 1;
        const dsv4_span sp = {.seq = seq, .start = pos, .n_tokens = n, .tokens = tok, .n_hidden = 1};
        float *h = o->hidden + (size_t)s * D, *l = o->logits + (size_t)s * V;
        rc = dsv4_forward(e, &sp, 1, h, NULL, &err);
        CHECK_MSG((_mm_getcsr() & ~0x3Fu) == (csr & ~0x3Fu), "dsv4_forward left MXCSR %#x, caller had %#x",
                  _mm_getcsr(), csr);
        if (!rc) rc = dsv4_lm_head(e, h, 1, l, &err);
        int32_t id = 0;
        if (!rc) rc = dsv4_lm_head_argmax(e, h, 1, &id, NULL, &err);
        CHECK_MSG((_mm_getcsr() & ~0x3Fu) == (csr & ~0x3Fu), "the head left MXCSR %#x, caller had %#x",
                  _mm_getcsr(), csr);
        pos += n;
        tok[0] = id;
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    dsv4_engine_free(e);
    _mm_setcsr(saved);
    return rc;
}

static int64_t differ(const float *a, const float *b, size_t n) {
    int64_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* 1 on an AMD CPU, 0 on an Intel one, -1 on another vendor (CPUID leaf 0) */
static int cpuid_amd(void) {
    unsigned a, b, c, d;
    char v[13] = {0};
    if (!__get_cpuid(0, &a, &b, &c, &d)) return -1;
    memcpy(v, &b, 4), memcpy(v + 4, &d, 4), memcpy(v + 8, &c, 4);
    return !strcmp(v, "AuthenticAMD") ? 1 : !strcmp(v, "GenuineIntel") ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_fpenv FP8_MODEL_DIR\n"); return 2; }
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const dsv4_model_info mi = dsv4_model_get_info(m);
    const size_t nh = (size_t)(1 + N_DECODE) * mi.hidden_size, nl = (size_t)(1 + N_DECODE) * mi.vocab_size;
    const int vendor_amd = cpuid_amd();
    static const char *levels[] = {NULL, "avx2"};
    for (int li = 0; li < 2; li++) {
        const char *name = levels[li] ? levels[li] : "default";
        if (levels[li]) setenv("DSV4_SIMD", levels[li], 1);
        run_out a = {malloc(nh * sizeof(float)), malloc(nl * sizeof(float)), -1};
        run_out b = {malloc(nh * sizeof(float)), malloc(nl * sizeof(float)), -1};
        run_out c = {malloc(nh * sizeof(float)), malloc(nl * sizeof(float)), -1};
        if (run(m, 0x1F80u, -1, &a) == 0 && run(m, 0x1F80u | CSR_FAST, -1, &b) == 0) {
            const int64_t dh = differ(a.hidden, b.hidden, nh), dl = differ(a.logits, b.logits, nl);
            CHECK_MSG(dh == 0 && dl == 0, "level %s: under FTZ|DAZ|RZ %lld of %zu hidden and %lld of %zu logits differ",
                      name, (long long)dh, nh, (long long)dl, nl);
            if (dh == 0 && dl == 0)
                printf("level %s: %zu hidden, %zu logits the same under FTZ|DAZ|RZ\n", name, nh, nl);
            CHECK_MSG(vendor_amd < 0 || a.sub_fast == vendor_amd, "subnormal_fma_fast %d on a%s CPU", a.sub_fast,
                      vendor_amd ? "n AMD" : "n Intel");
            if (run(m, 0x1F80u, !a.sub_fast, &c) == 0) {
                const int64_t ch = differ(a.hidden, c.hidden, nh), cl = differ(a.logits, c.logits, nl);
                CHECK_MSG(ch == 0 && cl == 0, "level %s: with subnormal_fma_fast forced to %d %lld of %zu hidden and "
                          "%lld of %zu logits differ", name, !a.sub_fast, (long long)ch, nh, (long long)cl, nl);
                if (ch == 0 && cl == 0)
                    printf("level %s: the same with subnormal_fma_fast %d (this CPU's choice) and %d\n", name,
                           a.sub_fast, !a.sub_fast);
            }
        }
        free(a.hidden), free(a.logits), free(b.hidden), free(b.logits), free(c.hidden), free(c.logits);
        unsetenv("DSV4_SIMD");
    }
    dsv4_model_close(m);
    return test_report();
}
