/* sample.c — penalties, temperature, min-p / top-k / top-p truncation, seeded draws and
 * log-probabilities over one logits row (see sample.h). */
#include "sample/sample.h"
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/swiglu.h"
#include "util/argmax.h"
#include "util/err.h"

/* A candidate token and its unnormalized probability exp(z - z_max). */
typedef struct cand {
    float q;
    int32_t id;
} cand;

struct dsv4_sampler {
    dsv4_sample_params p;
    int V;
    dsv4_rng rng;      /* xoshiro256** state */
    float *z;          /* [V] processed logits */
    uint32_t *count;   /* [V] history counts; all zero between calls */
    int32_t *seen;     /* [V] distinct history tokens of the current call */
    float *q;          /* [V] exp(z - z_max), unnormalized probabilities */
    cand *c;           /* [V] candidates */
    cand *tmp;         /* [V] the kept ones after a truncation */
    dsv4_expf_rows_fn expf_rows; /* the AVX-512 expf where it gives libm's bits, else NULL */
};

void dsv4_sampler_seed(dsv4_sampler *s, uint64_t seed) { dsv4_rng_seed(&s->rng, seed); }

/* ---- setup --------------------------------------------------------------------------- */

int dsv4_sampler_create(const dsv4_sample_params *p, int vocab, dsv4_sampler **out,
                        dsv4_err *err) {
    static const dsv4_sample_params zero;
    *out = NULL;
    if (!p) p = &zero;
    if (vocab <= 0) return dsv4_fail(err, DSV4_ERR_ARG, "sampler: vocab %d must be > 0", vocab);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: temperature %g must be >= 0", p->temperature);
    if (p->top_k < 0) return dsv4_fail(err, DSV4_ERR_ARG, "sampler: top_k %d must be >= 0", p->top_k);
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: top_p %g must be in [0, 1]", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: min_p %g must be in [0, 1]", p->min_p);
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: repetition_penalty %g must be > 0 (0 = off)",
                         p->repetition_penalty);
    if (!isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: frequency/presence penalties must be finite");
    if (p->penalty_last_n < 0)
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: penalty_last_n %d must be >= 0", p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > DSV4_MAX_LOGPROBS)
        return dsv4_fail(err, DSV4_ERR_ARG, "sampler: n_logprobs %d must be in [0, %d]",
                         p->n_logprobs, DSV4_MAX_LOGPROBS);
    /* DSV4_SIMD below avx512 keeps libm's expf, as the kernels do (the same q either way) */
    const int level = dsv4_simd_env(DSV4_SIMD_MAX, err);
    if (level < 0) return DSV4_ERR_ARG;
    dsv4_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->z = malloc((size_t)vocab * sizeof *s->z);
        s->count = calloc((size_t)vocab, sizeof *s->count);
        s->seen = malloc((size_t)vocab * sizeof *s->seen);
        s->q = malloc((size_t)vocab * sizeof *s->q);
        s->c = malloc((size_t)vocab * sizeof *s->c);
        s->tmp = malloc((size_t)vocab * sizeof *s->tmp);
    }
    if (!s || !s->z || !s->count || !s->seen || !s->q || !s->c || !s->tmp) {
        dsv4_sampler_free(s);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "sampler: out of memory for vocab %d", vocab);
    }
    s->p = *p;
    s->V = vocab;
    /* the same q either way (libm's expf bits): ~4K expf calls to check, once a sampler */
    s->expf_rows = dsv4_expf_at(level, level >= DSV4_SIMD_AVX512 && dsv4_expf_x512_agrees());
    dsv4_sampler_seed(s, p->seed);
    *out = s;
    return 0;
}

void dsv4_sampler_free(dsv4_sampler *s) {
    if (!s) return;
    free(s->z);
    free(s->count);
    free(s->seen);
    free(s->q);
    free(s->c);
    free(s->tmp);
    free(s);
}

/* ---- ordering ------------------------------------------------------------------------ */

/* a ranks before b: higher q, then lower id. */
static int better(cand a, cand b) { return a.q > b.q || (a.q == b.q && a.id < b.id); }

static int cmp_cand(const void *x, const void *y) {
    cand a = *(const cand *)x, b = *(const cand *)y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static void sift_down(cand *h, int n, int i) {
    /* Min-heap on `better`: the root is the worst of the kept ones. */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(h[w], h[l])) w = l;
        if (r < n && better(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* Writes the m best of c[0..n), best first, to out[0..m) (out holds n); c is unchanged.
 * O(n log m) with a heap of the m best so far (its root the worst of them). */
static void best_into(const cand *c, int n, int m, cand *out) {
    if (m > n) m = n;
    if (m <= 0) return;
    if (m > n / 4) {
        memcpy(out, c, (size_t)n * sizeof *c);
        qsort(out, (size_t)n, sizeof *c, cmp_cand);
        return;
    }
    memcpy(out, c, (size_t)m * sizeof *c);
    for (int i = m / 2 - 1; i >= 0; i--) sift_down(out, m, i);
    for (int i = m; i < n; i++)
        if (c[i].q >= out[0].q && better(c[i], out[0])) { /* the float test rejects most, branch-free of ids */
            out[0] = c[i];
            sift_down(out, m, 0);
        }
    qsort(out, (size_t)m, sizeof *out, cmp_cand);
}

/* ---- sums and the draw --------------------------------------------------------------- */

/* The sum in double of the n floats at base, base + step, ... (bytes): value i into lane
 * i % 8, the lanes added pairwise at the end, then the tail. A fixed order (the same bits on
 * every machine) with eight independent chains: one chain of double adds (4 cycles each)
 * took ~0.16 ms over Flash's 129280 logits, twice a call. */
static double sum8(const void *base, size_t step, int n) {
    const char *b = base;
    double a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += *(const float *)(b + (size_t)(i + j) * step);
    double t = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; i++) t += *(const float *)(b + (size_t)i * step);
    return t;
}

/* The first of kc[0..kept) at which the running mass passes u (the last one should rounding
 * keep it below u). Blocks of 8 whose mass leaves the running sum at or below u are passed by
 * their sum, so the walk adds one value at a time only inside the block where u falls. */
static int32_t draw_from(const cand *kc, int kept, double u) {
    double acc = 0;
    int i = 0;
    for (; i + 8 <= kept; i += 8) {
        double b = 0;
        for (int j = 0; j < 8; j++) b += kc[i + j].q;
        if (acc + b > u) break;
        acc += b;
    }
    for (; i < kept; i++) {
        acc += kc[i].q;
        if (acc > u) return kc[i].id;
    }
    return kc[kept - 1].id;
}

/* Float bits of a positive float order like the floats themselves. */
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Top-p over c[0..n) with total mass *total: keeps the shortest prefix, in (q desc, id asc)
 * order, whose mass reaches top_p * total. Writes the kept candidates to out (which holds
 * n), sets *total to their mass and returns their number. id_ordered: c is in id order
 * (then equal probabilities need no sorting). */
static int top_p_cut(const cand *c, int n, int id_ordered, float top_p, double *total,
                     cand *out) {
    double goal = top_p * *total;
    /* Peaked distributions: the mass sits in a few tokens; a partial sort finds it. */
    int m = n < 64 ? n : 64;
    best_into(c, n, m, out);
    double cum = 0;
    for (int i = 0; i < m; i++) {
        cum += out[i].q;
        if (cum >= goal) { *total = cum; return i + 1; }
    }
    if (m == n) { *total = cum; return n; }  /* rounding: keep all */
    /* Flat distributions: the last kept probability theta is the largest q value with
     * mass(q >= theta) >= goal. Radix-select it on the float bits (which order like the
     * positive floats), 11 + 11 + 10 bits: the first level over every candidate, the
     * other two over the bits of those in its bucket, gathered once into `sub` (out's room,
     * unused until the keep pass). Three passes over all of them took ~1 ms of a 1.5 ms
     * call over 129280 flat logits. */
    static const int widths[3] = {11, 11, 10};
    uint32_t *sub = (uint32_t *)out; /* (n) at most: out holds n candidates of 8 bytes */
    int n_sub = 0;
    uint32_t key = 0;
    int fixed = 0;
    double above = 0;  /* mass of q whose bits are above the current prefix */
    for (int l = 0; l < 3; l++) {
        int w = widths[l], shift = 32 - fixed - w;
        double hist[2048] = {0};
        if (l == 0)
            for (int i = 0; i < n; i++) hist[fbits(c[i].q) >> shift] += c[i].q;
        else
            for (int i = 0; i < n_sub; i++) {
                const uint32_t k = sub[i];
                if ((k >> (32 - fixed)) == (key >> (32 - fixed))) hist[(k >> shift) & ((1u << w) - 1)] += bitsf(k);
            }
        int b = (1 << w) - 1, lowest = -1;
        for (; b >= 0; b--) {
            if (hist[b] > 0) lowest = b;
            if (hist[b] > 0 && above + hist[b] >= goal) break;
            above += hist[b];
        }
        if (b < 0) {  /* rounding kept the goal out of reach: take everything left */
            b = lowest < 0 ? 0 : lowest;
            above -= hist[b];
        }
        key |= (uint32_t)b << shift;
        fixed += w;
        if (l == 0)
            for (int i = 0; i < n; i++) {
                const uint32_t k = fbits(c[i].q);
                if (k >> shift == (uint32_t)b) sub[n_sub++] = k;
            }
    }
    cum = 0;
    float theta = bitsf(key);
    /* Keep every q > theta, then the lowest ids among q == theta until the goal is met.
     * The compaction without a branch (about half the flat row's candidates pass, at random),
     * the kept mass by sum8: the branchy pass with one chain of adds was ~0.5 ms over 129280. */
    int k = 0;
    for (int i = 0; i < n; i++) {
        out[k] = c[i];
        k += c[i].q > theta;
    }
    cum = sum8(&out->q, sizeof *out, k);
    int ties = k;
    for (int i = 0; i < n; i++)
        if (c[i].q == theta) out[k++] = c[i];
    if (!id_ordered) qsort(out + ties, (size_t)(k - ties), sizeof *out, cmp_cand);
    int end = ties;
    while (end < k && cum < goal) cum += out[end++].q;
    *total = cum;
    return end;
}

int32_t dsv4_argmax(const float *x, int n) { return dsv4_argmax_index(x, n); }

/* ---- sampling ------------------------------------------------------------------------ */

static void apply_penalties(dsv4_sampler *s, const int32_t *hist, int n) {
    const dsv4_sample_params *p = &s->p;
    int rep = p->repetition_penalty > 0 && p->repetition_penalty != 1;
    if (!rep && p->frequency_penalty == 0 && p->presence_penalty == 0) return;
    int from = (p->penalty_last_n > 0 && n > p->penalty_last_n) ? n - p->penalty_last_n : 0;
    int n_seen = 0;
    for (int i = from; i < n; i++)
        if (s->count[hist[i]]++ == 0) s->seen[n_seen++] = hist[i];
    for (int i = 0; i < n_seen; i++) {
        int32_t t = s->seen[i];
        float x = s->z[t];
        if (rep) x = x > 0 ? x / p->repetition_penalty : x * p->repetition_penalty;
        x -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->z[t] = x;
        s->count[t] = 0;  /* leave the counts zero for the next call */
    }
}

/* log-softmax of one processed logit; with a +inf logit all mass sits on the +inf ones. */
static float logprob(float z, float zmax, double lse) {
    if (isinf(zmax)) return z == zmax ? 0.0f : -INFINITY;
    return (float)((double)z - lse);
}

/* sum of q_i = exp(z_i - zmax) over s->z (finite zmax), q kept in s->q: a pass each for
 * the differences, the exps (in lanes where the AVX-512 expf gives libm's bits) and the
 * sum, instead of one pass of libm calls chained by the sum: 0.48 ms a greedy call over
 * 129280 logits */
static double exp_sum(dsv4_sampler *s, float zmax) {
    const int V = s->V;
    const float *z = s->z;
    float *q = s->q;
    for (int i = 0; i < V; i++) q[i] = z[i] - zmax;
    /* banned ids (a constraint's mask, a bias, the text mask) are -inf: 0 either way */
    if (s->expf_rows) s->expf_rows(q, V, q);
    else
        for (int i = 0; i < V; i++) q[i] = expf(q[i]);
    return sum8(q, sizeof *q, V);
}

/* The best n of s->z (ties to the lowest id) with their log-probabilities, into out. */
static void best_logprobs(dsv4_sampler *s, int n, float zmax, double lse, dsv4_sample_out *out) {
    const int V = s->V;
    if (n <= 0) return;
    cand *c = s->c;
    for (int i = 0; i < V; i++) c[i] = (cand){s->z[i], i};
    const int m = n < V ? n : V;
    best_into(c, V, m, s->tmp);
    out->n_top = m;
    for (int i = 0; i < m; i++) {
        out->top_ids[i] = s->tmp[i].id;
        out->top_logprobs[i] = logprob(s->tmp[i].q, zmax, lse);
    }
}

int dsv4_sample(dsv4_sampler *s, const float *logits, const int32_t *history, int n_history,
                dsv4_sample_out *out, dsv4_err *err) {
    const dsv4_sample_params *p = &s->p;
    const int V = s->V;
    memset(out, 0, sizeof *out);
    out->token = -1;
    if (n_history < 0 || (n_history > 0 && !history))
        return dsv4_fail(err, DSV4_ERR_ARG, "sample: bad history (n %d)", n_history);
    for (int i = 0; i < n_history; i++)
        if (history[i] < 0 || history[i] >= V)
            return dsv4_fail(err, DSV4_ERR_ARG, "sample: history[%d] = %d outside [0, %d)", i,
                             (int)history[i], V);

    float *z = s->z;
    for (int i = 0; i < V; i++) z[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    apply_penalties(s, history, n_history);

    int greedy = p->temperature <= 0 || p->top_k == 1;
    int32_t amax = dsv4_argmax(z, V);
    if (amax < 0 || z[amax] == -INFINITY || isnan(z[amax]))
        return dsv4_fail(err, DSV4_ERR_ARG, "sample: the logits row has no finite value");
    if (z[amax] == INFINITY)  /* a +inf logit takes all the mass */
        greedy = 1;

    /* Processed logits z = x / T (T = 1 when greedy) and their log-sum-exp. */
    float inv_t = p->temperature > 0 ? 1.0f / p->temperature : 1.0f;
    if (inv_t != 1.0f)
        for (int i = 0; i < V; i++) z[i] *= inv_t;
    float zmax = z[amax];
    if (isinf(zmax)) greedy = 1;  /* overflowed by a tiny temperature: a point mass */
    cand *c = s->c;
    double sum = 0;
    int n = 0;
    if (isfinite(zmax)) {
        /* q_i = exp(z_i - zmax) in [0, 1] */
        const float *q = s->q;
        sum = exp_sum(s, zmax);
        /* the candidates (not needed greedy); min-p keeps q_i >= min_p (relative to the max) */
        if (!greedy)
            for (int i = 0; i < V; i++)
                if (q[i] > 0 && q[i] >= p->min_p) c[n++] = (cand){q[i], i};
    }
    double lse = isfinite(zmax) ? zmax + log(sum) : zmax;

    int32_t tok;
    if (greedy) {
        tok = amax;
    } else {
        /* the candidates' mass: every positive q without min-p */
        double total = p->min_p > 0 ? sum8(&c->q, sizeof *c, n) : sum;
        const cand *kc = c;  /* the kept candidates: kc[0..kept) */
        int kept = n, id_ordered = 1;
        if (p->top_k > 0 && p->top_k < kept) {
            best_into(c, n, p->top_k, s->tmp);
            memcpy(c, s->tmp, (size_t)p->top_k * sizeof *c);
            kept = p->top_k;
            id_ordered = 0;
            total = 0;
            for (int i = 0; i < kept; i++) total += c[i].q;
        }
        if (p->top_p > 0 && p->top_p < 1) {
            kept = top_p_cut(c, kept, id_ordered, p->top_p, &total, s->tmp);
            kc = s->tmp;
        }
        tok = draw_from(kc, kept, dsv4_rng_unit(&s->rng) * total);
    }

    out->token = tok;
    out->logprob = logprob(z[tok], zmax, lse);
    best_logprobs(s, p->n_logprobs, zmax, lse, out);
    return 0;
}

int dsv4_sample_score(dsv4_sampler *s, const float *logits, int32_t token, int n_top, dsv4_sample_out *out,
                      dsv4_err *err) {
    const int V = s->V;
    memset(out, 0, sizeof *out);
    out->token = -1;
    if (token < 0 || token >= V) return dsv4_fail(err, DSV4_ERR_ARG, "sample_score: token %d outside [0, %d)", (int)token, V);
    if (n_top < 0 || n_top > DSV4_MAX_LOGPROBS)
        return dsv4_fail(err, DSV4_ERR_ARG, "sample_score: n_top %d must be in [0, %d]", n_top, DSV4_MAX_LOGPROBS);
    float *z = s->z;
    for (int i = 0; i < V; i++) z[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    const int32_t amax = dsv4_argmax(z, V);
    if (amax < 0 || z[amax] == -INFINITY)
        return dsv4_fail(err, DSV4_ERR_ARG, "sample_score: the logits row has no finite value");
    /* dsv4_sample's figures of a greedy draw: T = 1, no penalties */
    const float zmax = z[amax];
    const double lse = isfinite(zmax) ? zmax + log(exp_sum(s, zmax)) : zmax;
    out->token = token;
    out->logprob = logprob(z[token], zmax, lse);
    int rank = 0;
    for (int i = 0; i < V; i++) rank += z[i] >= z[token];
    out->rank = rank;
    best_logprobs(s, n_top, zmax, lse, out);
    return 0;
}
