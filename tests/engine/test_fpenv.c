/* test_fpenv.c — results do not depend on the caller's SSE floating-point environment
 * (util/fpenv.h). A caller built with -ffast-math runs with FTZ | DAZ set, and the
 * prescaled FP8 decodes make e4m3's subnormal codes F32 subnormals on purpose: under DAZ
 * they would read as zero. On the FP8 tiny model (random weights, so subnormal codes in
 * every FP8 matrix), at the machine's level and at avx2 (its prescaled decode), a prefill
 * and greedy decode steps with FTZ | DAZ and round-toward-zero set on the calling thread
 * before the engine is made (its workers inherit that) must give the hidden states and
 * logits of the run under the default MXCSR bit for bit, and every call must hand the
 * caller its own MXCSR back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include "dsv4.h"
#include "test.h"

#define N_PROMPT 20
#define N_DECODE 6
#define CSR_FAST (0x8000u | 0x0040u | 0x6000u) /* FTZ | DAZ | round toward zero */

typedef struct {
    float *hidden; /* (1 + N_DECODE, D) */
    float *logits; /* (1 + N_DECODE, V) */
} run_out;

/* One engine's prefill of N_PROMPT tokens and N_DECODE greedy steps; 0 on success. */
static int run(dsv4_model *m, unsigned csr, run_out *o) {
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(csr);
    const dsv4_model_info mi = dsv4_model_get_info(m);
    const int D = mi.hidden_size, V = mi.vocab_size;
    dsv4_engine_opts eo = {.max_context = 64, .max_seqs = 1, .c_max = 32, .threads = 2};
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    int rc = dsv4_engine_create(m, &eo, &e, &err), seq = -1;
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) rc = dsv4_seq_create(e, &seq, &err);
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

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: test_fpenv FP8_MODEL_DIR\n"); return 2; }
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(argv[1], &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const dsv4_model_info mi = dsv4_model_get_info(m);
    const size_t nh = (size_t)(1 + N_DECODE) * mi.hidden_size, nl = (size_t)(1 + N_DECODE) * mi.vocab_size;
    static const char *levels[] = {NULL, "avx2"};
    for (int li = 0; li < 2; li++) {
        if (levels[li]) setenv("DSV4_SIMD", levels[li], 1);
        run_out a = {malloc(nh * sizeof(float)), malloc(nl * sizeof(float))};
        run_out b = {malloc(nh * sizeof(float)), malloc(nl * sizeof(float))};
        if (run(m, 0x1F80u, &a) == 0 && run(m, 0x1F80u | CSR_FAST, &b) == 0) {
            const int64_t dh = differ(a.hidden, b.hidden, nh), dl = differ(a.logits, b.logits, nl);
            CHECK_MSG(dh == 0 && dl == 0, "level %s: under FTZ|DAZ|RZ %lld of %zu hidden and %lld of %zu logits differ",
                      levels[li] ? levels[li] : "default", (long long)dh, nh, (long long)dl, nl);
            if (dh == 0 && dl == 0)
                printf("level %s: %zu hidden, %zu logits the same under FTZ|DAZ|RZ\n", levels[li] ? levels[li] : "default",
                   nh, nl);
        }
        free(a.hidden), free(a.logits), free(b.hidden), free(b.logits);
        unsetenv("DSV4_SIMD");
    }
    dsv4_model_close(m);
    return test_report();
}
