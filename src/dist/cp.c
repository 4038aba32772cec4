/* cp.c — the zigzag partition of a CP prefill and the rows each segment hands on
 * (see cp.h; spec/serving.md §c). Pure arithmetic, no MPI: every rank computes the same
 * plan from the call's arguments, so no layout ever needs to be communicated. */
#include "dist/cp.h"

#include <stdlib.h>

#include "util/err.h"

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t gcd64(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

int64_t dsv4_cp_default_granule(const dsv4_config *cfg) {
    int64_t l = 1;
    const int n = cfg->num_hidden_layers + cfg->num_nextn_predict_layers;
    for (int i = 0; i < n; i++) {
        const int64_t r = cfg->compress_ratios[i];
        if (r > 0) l = l / gcd64(l, r) * r;
    }
    const int64_t need = max64(1, cfg->sliding_window - 1);
    return (need + l - 1) / l * l;
}

int dsv4_cp_plan_make(int cp, int64_t s0, int64_t n, int64_t granule, dsv4_cp_plan *p,
                      dsv4_err *err) {
    dsv4_cp_seg *seg = cp >= 1 ? malloc(2 * (size_t)cp * sizeof *seg) : NULL;
    if (cp >= 1 && !seg) return dsv4_fail(err, DSV4_ERR_NOMEM, "CP plan: out of memory");
    const int rc = dsv4_cp_plan_into(seg, cp, s0, n, granule, p, err);
    if (rc) {
        free(seg);
        p->seg = NULL;
    }
    return rc;
}

int dsv4_cp_plan_into(dsv4_cp_seg *seg, int cp, int64_t s0, int64_t n, int64_t granule, dsv4_cp_plan *p,
                      dsv4_err *err) {
    p->seg = NULL;
    if (cp < 1 || s0 < 0 || n < 1 || granule < 1)
        return dsv4_fail(err, DSV4_ERR_ARG, "CP plan: bad arguments (cp %d, s0 %lld, n %lld, G %lld)",
                         cp, (long long)s0, (long long)n, (long long)granule);
    p->cp = cp;
    p->s0 = s0;
    p->n = n;
    p->granule = granule;
    const int64_t g0 = s0 / granule, g1 = (s0 + n + granule - 1) / granule;
    p->q = g1 - g0;
    p->split = cp > 1 && p->q >= 2 * (int64_t)cp;
    p->n_seg = p->split ? 2 * cp : 1;
    p->seg = seg;
    if (!p->split) {
        p->seg[0] = (dsv4_cp_seg){s0, s0 + n, 0};
        return DSV4_OK;
    }
    const int64_t ns = 2 * (int64_t)cp;
    for (int i = 0; i < p->n_seg; i++) {
        /* granules [i q / 2CP, (i+1) q / 2CP), clipped to the prompt */
        const int64_t k0 = i * p->q / ns, k1 = (i + 1) * p->q / ns;
        int64_t a = (g0 + k0) * granule, b = (g0 + k1) * granule;
        if (a < s0) a = s0;
        if (b > s0 + n) b = s0 + n;
        p->seg[i] = (dsv4_cp_seg){a, b, dsv4_cp_owner(i, cp)};
    }
    return DSV4_OK;
}

void dsv4_cp_plan_free(dsv4_cp_plan *p) {
    free(p->seg);
    p->seg = NULL;
}

int dsv4_cp_seg_of(const dsv4_cp_plan *p, int64_t pos) {
    int lo = 0, hi = p->n_seg - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (p->seg[mid].start <= pos) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int64_t dsv4_cp_tail_lo(const dsv4_cp_seg *s, int win) {
    return max64(s->start, s->end - (win - 1));
}

int64_t dsv4_cp_state_lo(int64_t n, int r, int coff) {
    return max64(0, floordiv(n, r) * r - (int64_t)(coff - 1) * r);
}

void dsv4_cp_state_range(const dsv4_cp_seg *s, int r, int coff, int64_t *lo, int64_t *open_lo) {
    *open_lo = max64(s->start, floordiv(s->end, r) * r);
    *lo = max64(s->start, dsv4_cp_state_lo(s->end, r, coff));
}

/* Floats of one compressor's state handed on by segment s (d: entry width). */
static int64_t state_floats(const dsv4_cp_seg *s, int r, int coff, int d) {
    int64_t lo, open_lo;
    dsv4_cp_state_range(s, r, coff, &lo, &open_lo);
    return (open_lo - lo) * 2 * d + (s->end - open_lo) * 2 * coff * d;
}

dsv4_cp_volume dsv4_cp_layer_volume(const dsv4_cp_plan *p, const dsv4_config *cfg, int ratio) {
    dsv4_cp_volume v = {0, 0, 0};
    const int hd = cfg->head_dim, dI = cfg->index_head_dim, win = cfg->sliding_window;
    const int csa = ratio == 4, coff = ratio == 4 ? 2 : 1;
    const int64_t end = p->s0 + p->n;
    if (!p->split) return v;
    for (int i = 0; i + 1 < p->n_seg; i++) {
        const dsv4_cp_seg *s = &p->seg[i];
        v.a += (s->end - dsv4_cp_tail_lo(s, win)) * hd;
        if (ratio) v.a += state_floats(s, ratio, coff, hd);
        if (csa) v.a += state_floats(s, 4, 2, dI);
    }
    if (ratio) v.b += (end / ratio - p->s0 / ratio) * hd;
    if (csa) v.b += (end / 4 - p->s0 / 4) * dI;
    if (p->s0 > 0) {
        v.bcast += (p->s0 - max64(0, p->s0 - win + 1)) * hd;
        if (ratio) v.bcast += (p->s0 - dsv4_cp_state_lo(p->s0, ratio, coff)) * 2 * coff * hd +
                              p->s0 / ratio * hd;
        if (csa) v.bcast += (p->s0 - dsv4_cp_state_lo(p->s0, 4, 2)) * 4 * dI + p->s0 / 4 * dI;
    }
    return v;
}
