/* accuracy_metrics.h — how a quantized path is compared with P0 (spec/serving.md §f),
 * shared by the P2 (test_w8a8_accuracy) and P3 (test_fidelity_accuracy) tests: per array
 * max-abs, max-rel (max|diff| / max|ref|), rel-L2 ||a-ref|| / ||ref||, cosine; on logits
 * top-1 agreement and mean KL(p_ref || p_a). */
#ifndef DSV4_TESTS_ACCURACY_METRICS_H
#define DSV4_TESTS_ACCURACY_METRICS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    double max_abs, max_rel, rel_l2, cosine, top1, kl;
    int finite; /* every value of a is finite */
} metrics;

static inline metrics compare(const float *a, const float *ref, int rows, int cols, int logits) {
    metrics m = {0};
    m.finite = 1;
    double num = 0, den = 0, dot = 0, na = 0, max_ref = 0;
    for (int64_t i = 0; i < (int64_t)rows * cols; i++) {
        m.finite &= isfinite(a[i]) != 0;
        const double d = (double)a[i] - ref[i];
        m.max_abs = fmax(m.max_abs, fabs(d));
        max_ref = fmax(max_ref, fabs(ref[i]));
        num += d * d;
        den += (double)ref[i] * ref[i];
        dot += (double)a[i] * ref[i];
        na += (double)a[i] * a[i];
    }
    m.max_rel = m.max_abs / max_ref;
    m.rel_l2 = sqrt(num / den);
    m.cosine = dot / sqrt(na * den);
    if (!logits) return m;
    int same = 0;
    double kl = 0;
    for (int r = 0; r < rows; r++) {
        const float *p = ref + (int64_t)r * cols, *q = a + (int64_t)r * cols;
        int ap = 0, aq = 0;
        double mp = p[0], mq = q[0];
        for (int i = 1; i < cols; i++) {
            if (p[i] > p[ap]) ap = i;
            if (q[i] > q[aq]) aq = i;
            mp = fmax(mp, p[i]);
            mq = fmax(mq, q[i]);
        }
        same += ap == aq;
        double zp = 0, zq = 0;
        for (int i = 0; i < cols; i++) { zp += exp(p[i] - mp); zq += exp(q[i] - mq); }
        const double lzp = mp + log(zp), lzq = mq + log(zq);
        for (int i = 0; i < cols; i++) {
            const double lp = p[i] - lzp, lq = q[i] - lzq;
            kl += exp(lp) * (lp - lq);
        }
    }
    m.top1 = (double)same / rows;
    m.kl = kl / rows;
    return m;
}

static inline void print_metrics(const char *what, const metrics *m, int logits) {
    printf("  %-22s max-abs %.3e  max-rel %.3e  rel-L2 %.3e  cosine %.6f", what, m->max_abs,
           m->max_rel, m->rel_l2, m->cosine);
    if (logits) printf("  top-1 %.2f%%  mean KL %.3e", 100 * m->top1, m->kl);
    printf("\n");
}

#endif
