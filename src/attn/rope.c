/* rope.c — RoPE frequency tables and interleaved partial rotation (spec/model.md §4).
 *
 * Every step that the official code performs in FP32 is done here in FP32, in the same
 * order, so the frequencies match its tables bit for bit (a double-precision variant
 * differs in the last bit of about a third of them, and positions multiply that error).
 * Only cos/sin of the FP32 angle are evaluated in double, then rounded (≤ 1 ulp from the
 * official FP32 polar form). */
#include "attn/rope.h"

#include <math.h>
#include <stdlib.h>

#include "util/err.h"
#include "util/hot.h"

void dsv4_rope_freqs(const dsv4_config *cfg, int compress, float *f) {
    const int rd = cfg->qk_rope_head_dim, half = rd / 2;
    const double base = compress ? cfg->compress_rope_theta : cfg->rope_theta;
    const float basef = (float)base;
    for (int i = 0; i < half; i++) f[i] = 1.0f / powf(basef, (float)(2 * i) / (float)rd);

    /* YaRN applies to the compress table only, and only when the original context length
     * is given (> 0), even when the served context is shorter. */
    if (!compress || cfg->rope_original_max_pos <= 0) return;
    const double orig = (double)cfg->rope_original_max_pos;
    const double two_pi = 2.0 * 3.14159265358979323846;
    /* corr(n): the dimension index at which a pair completes n rotations over orig. */
    const double corr_fast = rd * log(orig / (cfg->rope_beta_fast * two_pi)) / (2.0 * log(base));
    const double corr_slow = rd * log(orig / (cfg->rope_beta_slow * two_pi)) / (2.0 * log(base));
    double low = floor(corr_fast), high = ceil(corr_slow);
    if (low < 0) low = 0;
    if (high > rd - 1) high = rd - 1;
    if (low == high) high += 0.001;
    const float lowf = (float)low, spanf = (float)(high - low), factor = (float)cfg->rope_factor;
    for (int i = 0; i < half; i++) {
        float ramp = ((float)i - lowf) / spanf;
        if (ramp < 0.0f) ramp = 0.0f;
        if (ramp > 1.0f) ramp = 1.0f;
        const float smooth = 1.0f - ramp;
        /* Left to right, each product rounded: (f/factor)·(1−smooth) + f·smooth. */
        const float scaled = f[i] / factor;
        const float part_a = scaled * (1.0f - smooth);
        const float part_b = f[i] * smooth;
        f[i] = part_a + part_b;
    }
}

/* cos/sin of the FP32 angle (float)t · f (the official code forms the angle in FP32). */
static inline void rope_cs(float f, int64_t pos, float *c, float *s) {
    const float ang = (float)pos * f;
    *c = (float)cos((double)ang);
    *s = (float)sin((double)ang);
}

int dsv4_rope_init(dsv4_rope *r, const dsv4_config *cfg, int compress, int64_t n_pos,
                   dsv4_err *err) {
    r->rd = 0;
    r->n_pos = 0;
    r->freqs = r->cos = r->sin = NULL;
    const int rd = cfg->qk_rope_head_dim;
    if (rd <= 0 || rd % 2)
        return dsv4_fail(err, DSV4_ERR_CONFIG, "rope: qk_rope_head_dim must be even and > 0, got %d", rd);
    if (n_pos < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "rope: table length must be >= 0, got %lld", (long long)n_pos);
    const int half = rd / 2;
    /* Refuse sizes whose byte count does not fit in size_t before asking malloc. */
    if ((uint64_t)n_pos > (uint64_t)(SIZE_MAX / 2) / sizeof(float) / (uint64_t)half)
        return dsv4_fail(err, DSV4_ERR_ARG, "rope: table of %lld positions x %d pairs is too large",
                         (long long)n_pos, half);
    const size_t cells = (size_t)n_pos * (size_t)half;
    r->freqs = malloc((size_t)half * sizeof(float));
    r->cos = malloc((cells ? cells : 1) * sizeof(float));
    r->sin = malloc((cells ? cells : 1) * sizeof(float));
    if (!r->freqs || !r->cos || !r->sin) {
        dsv4_rope_free(r);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "rope: out of memory for %lld positions x %d pairs",
                         (long long)n_pos, half);
    }
    r->rd = rd;
    r->n_pos = n_pos;
    dsv4_rope_freqs(cfg, compress, r->freqs);
    for (int64_t t = 0; t < n_pos; t++)
        for (int i = 0; i < half; i++)
            rope_cs(r->freqs[i], t, &r->cos[t * half + i], &r->sin[t * half + i]);
    return DSV4_OK;
}

void dsv4_rope_free(dsv4_rope *r) {
    if (!r) return;
    free(r->freqs);
    free(r->cos);
    free(r->sin);
    r->freqs = r->cos = r->sin = NULL;
    r->n_pos = 0;
}

DSV4_HOT_AT(dsv4_rope_apply, 0x880)
void dsv4_rope_apply(const dsv4_rope *r, float *v, int n, int64_t pos, int inverse) {
    const int half = r->rd / 2;
    float *p = v + (n - r->rd); /* layout [nope | rope]: pairs (2i, 2i+1) of the tail */
    const int in_table = pos >= 0 && pos < r->n_pos;
    const float *ct = in_table ? r->cos + pos * half : NULL;
    const float *st = in_table ? r->sin + pos * half : NULL;
    for (int i = 0; i < half; i++) {
        float c, s;
        if (in_table) {
            c = ct[i];
            s = st[i];
        } else {
            rope_cs(r->freqs[i], pos, &c, &s);
        }
        if (inverse) s = -s; /* the conjugate rotation */
        const float a = p[2 * i], b = p[2 * i + 1];
        p[2 * i] = a * c - b * s;
        p[2 * i + 1] = a * s + b * c;
    }
}
