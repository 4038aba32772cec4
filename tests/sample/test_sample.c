/* test_sample.c — the sampler against independent computations in this file: greedy is
 * the argmax, seeds reproduce, truncations never emit excluded tokens and the empirical
 * frequencies over thousands of seeded draws match the renormalized distribution, penalties
 * move exactly the tokens they should by exactly the right amount, and log-probabilities
 * are a normalized, ordered log-softmax. */
#include <stdint.h>

#include "sample/sample.h"
#include "test.h"

static dsv4_err err;

static uint64_t lcg = 12345;
static double urand(void) {  /* test-side randomness, independent of the sampler's PRNG */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1.0p-53;
}
static double nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static dsv4_sampler *make(dsv4_sample_params p, int V) {
    dsv4_sampler *s = NULL;
    int rc = dsv4_sampler_create(&p, V, &s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return s;
}

static int32_t draw(dsv4_sampler *s, const float *x, dsv4_sample_out *o) {
    dsv4_sample_out tmp;
    if (!o) o = &tmp;
    int rc = dsv4_sample(s, x, NULL, 0, o, &err);
    if (rc) fprintf(stderr, "sample: %s\n", err.msg);
    return o->token;
}

static void test_greedy(void) {
    const int V = 1000;
    float *x = malloc(V * sizeof *x);
    dsv4_sampler *s = make((dsv4_sample_params){0}, V);
    int bad = 0;
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < V; i++) x[i] = (float)nrand();
        int best = 0;
        for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
        if (draw(s, x, NULL) != best) bad++;
    }
    CHECK(bad == 0);
    /* Ties go to the lowest id; NaN never wins; top_k = 1 is greedy at any temperature. */
    for (int i = 0; i < V; i++) x[i] = 0;
    x[7] = 3; x[5] = 3; x[900] = 3; x[0] = NAN;
    CHECK(draw(s, x, NULL) == 5);
    dsv4_sampler *k1 = make((dsv4_sample_params){.temperature = 5, .top_k = 1, .seed = 9}, V);
    for (int r = 0; r < 50; r++) CHECK(draw(k1, x, NULL) == 5);
    CHECK(dsv4_argmax(x, V) == 5);
    dsv4_sampler_free(k1);
    dsv4_sampler_free(s);
    free(x);
}

static void test_seed(void) {
    const int V = 5000, N = 400;
    float *x = malloc((size_t)V * N * sizeof *x);
    for (int i = 0; i < V * N; i++) x[i] = (float)(2 * nrand());
    dsv4_sample_params p = {.temperature = 0.8f, .top_k = 200, .top_p = 0.9f, .min_p = 0.01f, .seed = 42};
    dsv4_sampler *a = make(p, V), *b = make(p, V);
    p.seed = 43;
    dsv4_sampler *c = make(p, V);
    int32_t first[400];
    int same_ab = 1, same_ac = 1;
    for (int r = 0; r < N; r++) {
        int32_t ta = draw(a, x + (size_t)r * V, NULL), tb = draw(b, x + (size_t)r * V, NULL);
        int32_t tc = draw(c, x + (size_t)r * V, NULL);
        first[r] = ta;
        same_ab &= ta == tb;
        same_ac &= ta == tc;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    /* Reseeding restarts the sequence. */
    dsv4_sampler_seed(a, 42);
    int again = 1;
    for (int r = 0; r < N; r++) again &= draw(a, x + (size_t)r * V, NULL) == first[r];
    CHECK(again);
    dsv4_sampler_free(a);
    dsv4_sampler_free(b);
    dsv4_sampler_free(c);
    free(x);
}

/* Draws N tokens from logits x [V] and compares frequencies with want [V] (probabilities,
 * 0 = must never appear): each within 5 standard errors + 0.002. */
static void check_freq(const char *what, dsv4_sample_params p, const float *x, int V,
                       const double *want, int N) {
    dsv4_sampler *s = make(p, V);
    int *cnt = calloc((size_t)V, sizeof *cnt);
    for (int i = 0; i < N; i++) {
        int32_t t = draw(s, x, NULL);
        if (t >= 0 && t < V) cnt[t]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)cnt[i] / N;
        if (want[i] == 0) {
            CHECK_MSG(cnt[i] == 0, "%s: excluded token %d drawn %d times", what, i, cnt[i]);
        } else {
            double tol = 5 * sqrt(want[i] * (1 - want[i]) / N) + 0.002;
            CHECK_MSG(fabs(f - want[i]) <= tol, "%s: token %d freq %.4f want %.4f (tol %.4f)",
                      what, i, f, want[i], tol);
        }
    }
    free(cnt);
    dsv4_sampler_free(s);
}

static void test_distributions(void) {
    /* Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 (logits = log p + 7). */
    const int V = 5;
    const double pr[5] = {0.4, 0.3, 0.15, 0.1, 0.05};
    float x[5];
    for (int i = 0; i < V; i++) x[i] = (float)(log(pr[i]) + 7);
    const int N = 20000;

    check_freq("plain", (dsv4_sample_params){.temperature = 1, .seed = 1}, x, V, pr, N);
    double tk[5] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0};
    check_freq("top_k=3", (dsv4_sample_params){.temperature = 1, .top_k = 3, .seed = 2}, x, V, tk, N);
    double tp[5] = {0.4 / 0.7, 0.3 / 0.7, 0, 0, 0};
    check_freq("top_p=0.65", (dsv4_sample_params){.temperature = 1, .top_p = 0.65f, .seed = 3}, x, V, tp, N);
    double mp[5] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0};  /* 0.3 * 0.4 = 0.12 */
    check_freq("min_p=0.3", (dsv4_sample_params){.temperature = 1, .min_p = 0.3f, .seed = 4}, x, V, mp, N);
    /* top-k 4 (mass 0.95) then top-p 0.8 of that: 0.4+0.3 = 0.7 < 0.76 <= 0.85. */
    double kp[5] = {0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0};
    check_freq("top_k=4 top_p=0.8", (dsv4_sample_params){.temperature = 1, .top_k = 4, .top_p = 0.8f, .seed = 5},
               x, V, kp, N);
    /* Temperature 2: p ∝ p^(1/2). */
    double t2[5], z = 0;
    for (int i = 0; i < V; i++) z += sqrt(pr[i]);
    for (int i = 0; i < V; i++) t2[i] = sqrt(pr[i]) / z;
    check_freq("T=2", (dsv4_sample_params){.temperature = 2, .seed = 6}, x, V, t2, N);
    /* Temperature 0.5: p ∝ p^2, with top_p 0.9 on the sharpened distribution. */
    double t5[5], z5 = 0;
    for (int i = 0; i < V; i++) z5 += pr[i] * pr[i];
    for (int i = 0; i < V; i++) t5[i] = pr[i] * pr[i] / z5;  /* .5424 .3051 .0763 .0339 .0085 */
    double t5p[5] = {t5[0] / (t5[0] + t5[1] + t5[2]), t5[1] / (t5[0] + t5[1] + t5[2]),
                     t5[2] / (t5[0] + t5[1] + t5[2]), 0, 0};
    check_freq("T=0.5 top_p=0.9", (dsv4_sample_params){.temperature = 0.5f, .top_p = 0.9f, .seed = 7},
               x, V, t5p, N);
    /* -inf logits are never drawn. */
    float xi[5] = {0, -INFINITY, 0, -INFINITY, 0};
    double wi[5] = {1 / 3.0, 0, 1 / 3.0, 0, 1 / 3.0};
    check_freq("-inf", (dsv4_sample_params){.temperature = 1, .seed = 8}, xi, V, wi, N);
}

static const double *sort_q;
static int by_q_desc_id_asc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    double x = sort_q[i], y = sort_q[j];
    return x > y ? -1 : x < y ? 1 : i - j;
}

/* The top-p set computed here: sort by (q desc, id asc) in double precision, shortest
 * prefix reaching top_p of the mass. Returns its size; allowed[id] = 1 for its members. */
static int ref_top_p(const float *x, int V, double top_p, char *allowed, int *ord, double *q) {
    double zmax = -1e30, sum = 0;
    for (int i = 0; i < V; i++) if (x[i] > zmax) zmax = x[i];
    for (int i = 0; i < V; i++) sum += (q[i] = exp((double)x[i] - zmax));
    for (int i = 0; i < V; i++) ord[i] = i;
    sort_q = q;
    qsort(ord, (size_t)V, sizeof *ord, by_q_desc_id_asc);
    memset(allowed, 0, (size_t)V);
    double cum = 0;
    int kept = 0;
    for (int i = 0; i < V && cum < top_p * sum; i++) { cum += q[ord[i]]; allowed[ord[i]] = 1; kept++; }
    return kept;
}

/* Draws n tokens with top_p (T = 1); counts draws outside the reference set. */
static int draws_outside(const float *x, int V, float top_p, int n, const char *allowed,
                         int *distinct, uint64_t seed) {
    dsv4_sampler *s = make((dsv4_sample_params){.temperature = 1, .top_p = top_p, .seed = seed}, V);
    char *seen = calloc((size_t)V, 1);
    int outside = 0;
    *distinct = 0;
    for (int r = 0; r < n; r++) {
        int32_t t = draw(s, x, NULL);
        if (t < 0 || !allowed[t]) outside++;
        else if (!seen[t]) { seen[t] = 1; (*distinct)++; }
    }
    free(seen);
    dsv4_sampler_free(s);
    return outside;
}

/* Large vocabularies: the kept set equals the one computed here, and nothing outside it
 * is ever drawn: a peaked full-size row, a flat row (the mass is spread over thousands of
 * tokens: the radix path) and a row of ties (the boundary must take the lowest ids). */
static void test_large_vocab(void) {
    const int VF = 129280, V = 32768;
    float *x = malloc(VF * sizeof *x);
    double *q = malloc(VF * sizeof *q);
    int *ord = malloc(VF * sizeof *ord);
    char *allowed = calloc(VF, 1);
    int distinct, kept, out;

    for (int i = 0; i < VF; i++) x[i] = (float)(3 * nrand());
    kept = ref_top_p(x, VF, 0.5, allowed, ord, q);
    out = draws_outside(x, VF, 0.5f, 200, allowed, &distinct, 11);
    CHECK_MSG(out == 0, "peaked: %d draws outside the top-p set of %d", out, kept);
    CHECK(kept > 20 && distinct > 10);

    for (int i = 0; i < V; i++) x[i] = (float)(2 * urand() - 1);
    kept = ref_top_p(x, V, 0.3, allowed, ord, q);
    out = draws_outside(x, V, 0.3f, 300, allowed, &distinct, 12);
    CHECK_MSG(out == 0, "flat: %d draws outside the top-p set of %d", out, kept);
    CHECK_MSG(kept > 2500 && distinct > 250, "kept %d distinct %d", kept, distinct);

    /* 250 tokens at logit 2, the rest tied at 0: the set takes all of the former and
     * then the lowest-id ties; about 1 draw in 3 lands among the ties. */
    for (int i = 0; i < V; i++) x[i] = 0;
    for (int i = 0; i < 250; i++) x[(int)(urand() * V)] = 2;
    kept = ref_top_p(x, V, 0.2, allowed, ord, q);
    out = draws_outside(x, V, 0.2f, 1000, allowed, &distinct, 13);
    CHECK_MSG(out == 0, "ties: %d draws outside the top-p set of %d", out, kept);
    CHECK(kept > 4000 && allowed[0] && !allowed[V - 1]);

    /* top_k 40 on a peaked row. */
    for (int i = 0; i < VF; i++) x[i] = (float)(3 * nrand());
    ref_top_p(x, VF, 1.0, allowed, ord, q);
    memset(allowed, 0, VF);
    for (int i = 0; i < 40; i++) allowed[ord[i]] = 1;
    dsv4_sampler *s = make((dsv4_sample_params){.temperature = 1.5f, .top_k = 40, .seed = 14}, VF);
    out = 0;
    for (int r = 0; r < 200; r++) { int32_t t = draw(s, x, NULL); if (t < 0 || !allowed[t]) out++; }
    CHECK(out == 0);
    dsv4_sampler_free(s);
    free(allowed);
    free(ord);
    free(q);
    free(x);
}

/* Log-probabilities of all V (<= 20) tokens: processed logit differences. */
static void all_logprobs(dsv4_sample_params p, const float *x, int V, const int32_t *hist, int nh,
                         double *lp) {
    p.n_logprobs = V;
    dsv4_sampler *s = make(p, V);
    dsv4_sample_out o;
    CHECK(dsv4_sample(s, x, hist, nh, &o, &err) == 0);
    CHECK(o.n_top == V);
    for (int i = 0; i < o.n_top; i++) lp[o.top_ids[i]] = o.top_logprobs[i];
    dsv4_sampler_free(s);
}

static void test_penalties(void) {
    const int V = 8;
    const float x[8] = {1.0f, -1.0f, 2.0f, 0.5f, -0.5f, 3.0f, 0.0f, 1.5f};
    const int32_t hist[] = {2, 4, 2, 5, 2};  /* counts: 2 -> 3, 4 -> 1, 5 -> 1 */
    double base[8], lp[8];
    all_logprobs((dsv4_sample_params){0}, x, V, NULL, 0, base);
    /* Each token's processed logit relative to token 0 (never in the history). */
    #define REL(a, i) ((a)[i] - (a)[0])
    all_logprobs((dsv4_sample_params){.repetition_penalty = 2}, x, V, hist, 5, lp);
    for (int i = 0; i < V; i++) {
        double want = x[i] - x[0];
        if (i == 2 || i == 5) want = x[i] / 2 - x[0];   /* positive: divided */
        if (i == 4) want = x[i] * 2 - x[0];             /* negative: multiplied */
        CHECK_NEAR(REL(lp, i), want, 1e-5);
    }
    all_logprobs((dsv4_sample_params){.frequency_penalty = 0.5f, .presence_penalty = 1.0f}, x, V, hist, 5, lp);
    for (int i = 0; i < V; i++) {
        double want = x[i] - x[0];
        if (i == 2) want -= 3 * 0.5 + 1;
        if (i == 4 || i == 5) want -= 0.5 + 1;
        CHECK_NEAR(REL(lp, i), want, 1e-5);
    }
    /* Window of the last 2 tokens: only 5 and 2 (once each). */
    all_logprobs((dsv4_sample_params){.frequency_penalty = 1, .penalty_last_n = 2}, x, V, hist, 5, lp);
    for (int i = 0; i < V; i++) {
        double want = x[i] - x[0] - ((i == 2 || i == 5) ? 1 : 0);
        CHECK_NEAR(REL(lp, i), want, 1e-5);
    }
    /* Negative penalties encourage; combined with temperature the whole row scales. */
    all_logprobs((dsv4_sample_params){.temperature = 2, .presence_penalty = -1}, x, V, hist, 5, lp);
    for (int i = 0; i < V; i++) {
        double want = (x[i] + ((i == 2 || i == 4 || i == 5) ? 1 : 0)) / 2 - x[0] / 2;
        CHECK_NEAR(REL(lp, i), want, 1e-5);
    }
    /* Greedy follows the penalized logits: 5 is the max (3.0) until penalized below 2.0. */
    dsv4_sampler *s = make((dsv4_sample_params){.frequency_penalty = 2}, V);
    dsv4_sample_out o;
    const int32_t h5[] = {5};
    CHECK(dsv4_sample(s, x, NULL, 0, &o, &err) == 0 && o.token == 5);
    CHECK(dsv4_sample(s, x, h5, 1, &o, &err) == 0 && o.token == 2);  /* 3 - 2 = 1 < 2 */
    /* The counts are cleared between calls. */
    CHECK(dsv4_sample(s, x, NULL, 0, &o, &err) == 0 && o.token == 5);
    const int32_t bad[] = {3, 8};
    CHECK(dsv4_sample(s, x, bad, 2, &o, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "history[1] = 8 outside [0, 8)");
    dsv4_sampler_free(s);
    (void)base;
}

static void test_logprobs(void) {
    const int V = 12;
    float x[12];
    for (int i = 0; i < V; i++) x[i] = (float)nrand();
    x[3] = x[9] = 2.5f;  /* a tie at the top */
    for (int greedy = 0; greedy <= 1; greedy++) {
        dsv4_sample_params p = {.temperature = greedy ? 0 : 0.7f, .n_logprobs = 20, .seed = 5};
        dsv4_sampler *s = make(p, V);
        dsv4_sample_out o;
        CHECK(dsv4_sample(s, x, NULL, 0, &o, &err) == 0);
        CHECK(o.n_top == V);  /* capped at V */
        double total = 0;
        int ordered = 1, chosen_found = 0;
        for (int i = 0; i < o.n_top; i++) {
            total += exp(o.top_logprobs[i]);
            if (i && (o.top_logprobs[i] > o.top_logprobs[i - 1] ||
                      (o.top_logprobs[i] == o.top_logprobs[i - 1] && o.top_ids[i] < o.top_ids[i - 1])))
                ordered = 0;
            if (o.top_ids[i] == o.token) { chosen_found = 1; CHECK(o.top_logprobs[i] == o.logprob); }
        }
        CHECK_NEAR(total, 1.0, 1e-5);
        CHECK(ordered && chosen_found);
        CHECK(o.top_ids[0] == 3 && o.top_ids[1] == 9);
        /* Against a log-softmax computed here. */
        double t = greedy ? 1 : 0.7, m = -1e30, sz = 0;
        for (int i = 0; i < V; i++) if (x[i] / t > m) m = x[i] / t;
        for (int i = 0; i < V; i++) sz += exp(x[i] / t - m);
        for (int i = 0; i < o.n_top; i++)
            CHECK_NEAR(o.top_logprobs[i], x[o.top_ids[i]] / t - m - log(sz), 1e-5);
        if (greedy) CHECK(o.token == 3 && o.logprob == o.top_logprobs[0]);
        dsv4_sampler_free(s);
    }
    /* Large vocabulary: 20 best, ordered, mass below 1, chosen logprob consistent. */
    const int VL = 129280;
    float *xl = malloc(VL * sizeof *xl);
    for (int i = 0; i < VL; i++) xl[i] = (float)(2 * nrand());
    dsv4_sampler *s = make((dsv4_sample_params){.temperature = 1, .top_k = 5, .n_logprobs = 20, .seed = 1}, VL);
    dsv4_sample_out o;
    CHECK(dsv4_sample(s, xl, NULL, 0, &o, &err) == 0);
    double mass = 0;
    int ok = o.n_top == 20;
    for (int i = 0; i < o.n_top; i++) {
        mass += exp(o.top_logprobs[i]);
        if (i && o.top_logprobs[i] > o.top_logprobs[i - 1]) ok = 0;
    }
    CHECK(ok && mass < 1);
    int in_top5 = 0;
    for (int i = 0; i < 5; i++) in_top5 |= o.top_ids[i] == o.token;
    CHECK(in_top5);
    CHECK(o.top_ids[0] == dsv4_argmax(xl, VL));
    dsv4_sampler_free(s);
    free(xl);
    /* A +inf logit takes all the mass. */
    float xi[4] = {0, INFINITY, 1, 2};
    s = make((dsv4_sample_params){.temperature = 1, .n_logprobs = 2, .seed = 3}, 4);
    CHECK(dsv4_sample(s, xi, NULL, 0, &o, &err) == 0 && o.token == 1 && o.logprob == 0);
    CHECK(o.top_ids[0] == 1 && isinf(o.top_logprobs[1]) && o.top_logprobs[1] < 0);
    dsv4_sampler_free(s);
}

/* The AVX-512 expf (where the CPU has it) against libm's (DSV4_SIMD=portable): the same
 * tokens, log-probabilities and top lists, bit for bit, over Flash's vocabulary and the
 * truncations; and an unknown DSV4_SIMD is an error. */
static void test_levels(void) {
    const int V = 129280, ROWS = 6;
    float *x = malloc((size_t)V * ROWS * sizeof *x);
    for (int i = 0; i < V * ROWS; i++) x[i] = (float)(3 * nrand());
    for (int r = 0; r < ROWS; r++) x[(size_t)r * V + (r * 7919) % V] += 12.0f; /* a peak */
    const dsv4_sample_params ps[] = {
        {.n_logprobs = 20, .seed = 1},
        {.temperature = 0.8f, .top_p = 0.9f, .n_logprobs = 5, .seed = 2},
        {.temperature = 1.0f, .top_k = 40, .top_p = 0.95f, .seed = 3},
        {.temperature = 1.3f, .min_p = 0.001f, .seed = 4},
        {.temperature = 0.7f, .seed = 5}};
    const char *had = getenv("DSV4_SIMD");
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        setenv("DSV4_SIMD", "portable", 1);
        dsv4_sampler *a = make(ps[k], V);
        if (had) setenv("DSV4_SIMD", had, 1); else unsetenv("DSV4_SIMD");
        dsv4_sampler *b = make(ps[k], V);
        int same = 1;
        for (int r = 0; r < ROWS * 4; r++) {
            dsv4_sample_out oa, ob;
            draw(a, x + (size_t)(r % ROWS) * V, &oa);
            draw(b, x + (size_t)(r % ROWS) * V, &ob);
            same &= oa.token == ob.token && memcmp(&oa.logprob, &ob.logprob, sizeof oa.logprob) == 0 &&
                    oa.n_top == ob.n_top && memcmp(oa.top_ids, ob.top_ids, sizeof oa.top_ids) == 0 &&
                    memcmp(oa.top_logprobs, ob.top_logprobs, sizeof oa.top_logprobs) == 0;
        }
        CHECK_MSG(same, "params %zu: the levels differ", k);
        dsv4_sampler_free(a);
        dsv4_sampler_free(b);
    }
    setenv("DSV4_SIMD", "avx9", 1);
    dsv4_sampler *s = NULL;
    CHECK(dsv4_sampler_create(&ps[0], V, &s, &err) == DSV4_ERR_ARG && s == NULL && strstr(err.msg, "DSV4_SIMD"));
    if (had) setenv("DSV4_SIMD", had, 1); else unsetenv("DSV4_SIMD");
    free(x);
}

static void test_errors(void) {
    dsv4_sampler *s = NULL;
    struct { dsv4_sample_params p; const char *msg; } bad[] = {
        {{.temperature = -1}, "temperature"},
        {{.temperature = NAN}, "temperature"},
        {{.top_k = -2}, "top_k"},
        {{.top_p = 1.5f}, "top_p"},
        {{.min_p = -0.1f}, "min_p"},
        {{.repetition_penalty = -1}, "repetition_penalty"},
        {{.frequency_penalty = INFINITY}, "finite"},
        {{.penalty_last_n = -1}, "penalty_last_n"},
        {{.n_logprobs = 21}, "n_logprobs 21"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(dsv4_sampler_create(&bad[i].p, 10, &s, &err) == DSV4_ERR_ARG && s == NULL);
        CHECK_ERR(err, DSV4_ERR_ARG, bad[i].msg);
    }
    CHECK(dsv4_sampler_create(NULL, 0, &s, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "vocab 0");
    s = make((dsv4_sample_params){.temperature = 1}, 4);
    float ninf[4] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    dsv4_sample_out o;
    CHECK(dsv4_sample(s, ninf, NULL, 0, &o, &err) == DSV4_ERR_ARG && o.token == -1);
    CHECK_ERR(err, DSV4_ERR_ARG, "no finite value");
    dsv4_sampler_free(s);
}

/* the one-pass scan dsv4_argmax replaced: ties to the lowest id, NaN never wins */
static int32_t argmax_ref(const float *x, int n) {
    int32_t best = -1;
    float bv = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > bv)) { best = i; bv = x[i]; }
    return best;
}

/* dsv4_argmax (two passes, 16 lanes and a tail) against the one-pass scan: lengths 0..70
 * around the 16-wide blocks, the winner at every position, ties, +0 / -0, -inf, NaN
 * anywhere and all NaN. */
static void test_argmax_edges(void) {
    enum { N = 70 };
    float x[N];
    int bad = 0;
    for (int n = 0; n <= N; n++) {
        for (int w = 0; w < n || (n == 0 && w == 0); w++) {
            for (int kind = 0; kind < 9; kind++) {
                for (int i = 0; i < n; i++) x[i] = (float)((i * 37 + n * 11) % 23) - 30.0f; /* < 0 */
                if (n == 0) { bad += dsv4_argmax(x, 0) != -1; continue; }
                switch (kind) {
                case 0: x[w] = 1; break;                                   /* one winner at w */
                case 1: x[w] = 1; x[n - 1] = 1; break;                     /* a tie: w first */
                case 2: x[w] = 1; for (int i = 0; i < w; i++) x[i] = NAN; break; /* NaN before */
                case 3: for (int i = 0; i < n; i++) x[i] = NAN; break;     /* all NaN: -1 */
                case 4: for (int i = 0; i < n; i++) x[i] = i == w ? -INFINITY : NAN; break;
                case 5: for (int i = 0; i < n; i++) x[i] = -INFINITY; x[w] = NAN; break;
                case 6: x[w] = -0.0f; x[n - 1] = 0.0f; break;              /* ±0: the first */
                case 7: x[w] = INFINITY; x[(w + 1) % n] = NAN; break;
                default: x[w] = 1; for (int i = w + 1; i < n; i++) if ((i - w) % 4 == 0) x[i] = NAN; /* NaN in w's lanes after it */
                    break;
                }
                const int32_t got = dsv4_argmax(x, n), want = argmax_ref(x, n);
                if (got != want) {
                    if (bad < 5) fprintf(stderr, "argmax n %d w %d kind %d: %d, want %d\n", n, w, kind, got, want);
                    bad++;
                }
            }
        }
    }
    CHECK(bad == 0);
}

int main(void) {
    test_greedy();
    test_argmax_edges();
    test_seed();
    test_distributions();
    test_large_vocab();
    test_penalties();
    test_logprobs();
    test_levels();
    test_errors();
    return test_report();
}
