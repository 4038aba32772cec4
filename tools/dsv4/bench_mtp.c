/* bench_mtp.c — `dsv4 bench --mtp on` (see bench_mtp.h).
 *
 * B base sequences are prefilled once with a random prompt, their MTP rows caught up (m = n).
 * Every measurement forks them (dsv4_seq_fork), so each starts from the same state:
 *   plain:  greedy decode without MTP, one row per sequence a step; its tokens are the
 *           reference, and its tokens/s and bytes the baseline;
 *   mtp:    the speculative step of serving.md §e for all B sequences at once: one
 *           dsv4_mtp_forward over every sequence's ready MTP rows, one head call over the
 *           draft rows, one dsv4_forward over the B verify spans (2 rows each), one head
 *           call over all their rows. Drafts are the MTP block's own ("natural"), or
 *           forced by a draft hook: with probability p the reference token, else a wrong
 *           one, from a hash of (seed, sequence, position), so every rep sees the same.
 * Greedy decoding is exact under MTP, so every mtp measurement must reproduce the plain
 * tokens; "exact" reports that check.
 *
 * The measurements of one batch size run interleaved, `reps` rounds of (plain, then every
 * speculative one), so that a slow spell of this shared machine lands on all of them alike:
 * a speculative run's gain is the median over rounds of its tokens/s over the same round's
 * plain tokens/s, with the smallest and largest of those ratios as its spread.
 *
 * Bytes come from the routing the timed steps made (the engine's choice hook, every row's
 * K experts per layer): a plain step reads the main weights with the union of its rows'
 * experts (bench_model.h); a speculative step reads them with the union over its verify
 * rows, plus the MTP block with the union of its rows' experts, plus the head a second
 * time (the draft logits). ideal gain = tokens per step / (spec bytes / plain bytes). */
#include "bench_mtp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "dsv4_internal.h"
#include "dsv4_text.h"

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- routing census: which experts the timed steps read ------------------------------- */

typedef struct census {
    int L, E;
    uint8_t *main_used;   /* (L, E) experts of the main layers in the current call(s) */
    uint8_t *mtp_used;    /* (E) experts of the MTP block */
} census;

static void on_choice(void *user, int seq, int64_t pos, int layer, int kind, const int *ids, int n) {
    (void)seq, (void)pos;
    census *c = user;
    if (kind != DSV4_CHOICE_EXPERTS) return;
    uint8_t *u = layer < c->L ? c->main_used + (size_t)layer * c->E : layer == c->L ? c->mtp_used : NULL;
    if (!u) return;
    for (int k = 0; k < n; k++)
        if (ids[k] >= 0 && ids[k] < c->E) u[ids[k]] = 1;
}

static void census_clear(census *c) {
    memset(c->main_used, 0, (size_t)c->L * c->E);
    memset(c->mtp_used, 0, (size_t)c->E);
}

/* ---- forced drafts --------------------------------------------------------------------- */

typedef struct draft_src {
    const int32_t *ref;   /* (n_ref) reference tokens of positions [p0, p0 + n_ref) */
    int64_t p0;
    int n_ref, V, seq_index;
    double p;             /* < 0: the MTP block's own draft */
    uint64_t seed;
} draft_src;

static int32_t forced_draft(void *user, int64_t pos, int32_t draft) {
    const draft_src *d = user;
    const int64_t i = pos - d->p0;
    if (d->p < 0 || i < 0 || i >= d->n_ref) return draft;
    const uint64_t h = mix64(d->seed ^ mix64((uint64_t)d->seq_index * 0x100000001b3ull + (uint64_t)pos));
    const double u = (double)(h >> 11) * 0x1.0p-53;
    if (u < d->p) return d->ref[i];
    /* any other token: ref + 1 + (h mod (V - 1)), never the reference itself */
    return (int32_t)((d->ref[i] + 1 + (int64_t)((h & 0x7ff) % (uint64_t)(d->V - 1))) % d->V);
}

/* ---- state ----------------------------------------------------------------------------- */

typedef struct mb {
    dsv4_model *model;
    dsv4_engine *eng;
    const dsv4_config *cfg;
    dsv4_step_weights w;
    census cs;
    int V, D, HC, max_b;
    int64_t P;               /* prompt length: every fork starts at n = m = P */
    int *base;               /* (max_b) prefilled sequences */
    int32_t *x0;             /* (max_b) greedy token after each prompt (position P) */
    int *fork;               /* (max_b) the current measurement's sequences */
    dsv4_spec **spec;        /* (max_b) */
    draft_src *dsrc;         /* (max_b) */
    int32_t *ref;            /* (max_b, n_ref) plain tokens of positions [P, P + n_ref) */
    int n_ref;
    int32_t *out;            /* (max_b, n_ref) tokens a speculative run emitted */
    int *n_out;              /* (max_b) */
    dsv4_span *spans;        /* (max_b) */
    dsv4_mtp_span *mspans;   /* (max_b) */
    int *mout;               /* (max_b) DSV4_MTP_OUT_* of each MTP span */
    int *mrow_of;            /* (max_b) the row of a sequence's draft in the draft head call */
    int32_t *tok;            /* (max_b) */
    float *hidden;           /* (max(2 max_b, 1), D) */
    float *streams;          /* (max(2 max_b, chunk), hc, D) */
    float *mtp_hidden;       /* (max_b, D) the drafting rows */
    float *logits;           /* (2 max_b, V) */
    double ph[4];            /* seconds in the phases of the steps since the last reset: MTP
                              * call, draft head, main forward, its head */
    dsv4_err err;
} mb;

enum { MAX_ROUNDS = 64 };

typedef struct measure {
    int batch;
    double p;                /* forced acceptance; < 0: the MTP block's own drafts */
    int spec;                /* 0: plain */
    int warm, steps;         /* untimed and timed steps of a round */
    int64_t tokens;          /* tokens the timed steps committed, all sequences (every round
                              * alike: greedy, and forced drafts are a fixed hash) */
    int64_t drafts, accepted;
    int census_steps;
    double bytes_main, bytes_mtp, bytes_head2; /* per step, mean over round 0's timed steps */
    int exact;               /* speculative: the tokens equal the plain run's */
    int rounds;
    double seconds[MAX_ROUNDS];      /* timed seconds of each round */
    double phase_ms[MAX_ROUNDS][4];  /* per step in each round: MTP call, draft head, forward, head */
    /* after measure_finish */
    double best_s, median_s;
    int median_round;        /* the round whose time is the median (the lower one for even) */
} measure;

static int fail_oom(mb *b) {
    snprintf(b->err.msg, sizeof b->err.msg, "bench --mtp: out of memory");
    return 1;
}

/* MTP rows of every sequence that has some ready in one call, then one head call over the
 * draft rows (a drafting span yields its last row's hidden state alone, packed in span
 * order); every sequence whose rows ran hears of it (dsv4_spec_mtp_done). */
static int run_mtp_rows(mb *b, int n, int *mtp_rows, int *draft_rows) {
    int ns = 0, rows = 0, nd = 0;
    for (int i = 0; i < n; i++) {
        int drafts;
        dsv4_mtp_span ms;
        dsv4_spec_mtp_span(b->spec[i], &ms, &drafts);
        b->mrow_of[i] = !ms.n ? -1 : drafts ? nd++ : -2;  /* -1: nothing ran; -2: no draft */
        if (!ms.n) continue;
        b->mout[ns] = drafts ? DSV4_MTP_OUT_LAST : DSV4_MTP_OUT_NONE;
        b->mspans[ns++] = ms;
        rows += ms.n;
    }
    *mtp_rows = rows;
    *draft_rows = nd;
    if (!ns) return 0;
    const double t0 = cli_now_s();
    int rc = dsv4_mtp_forward_out(b->eng, b->mspans, ns, b->mout, b->mtp_hidden, &b->err);
    const double t1 = cli_now_s();
    if (!rc && nd) rc = dsv4_lm_head(b->eng, b->mtp_hidden, nd, b->logits, &b->err);
    if (rc) return rc;
    b->ph[0] += t1 - t0;
    b->ph[1] += cli_now_s() - t1;
    for (int i = 0; i < n; i++)
        if (b->mrow_of[i] != -1)
            dsv4_spec_mtp_done(b->spec[i], b->mrow_of[i] >= 0 ? dsv4_argmax(b->logits + (size_t)b->mrow_of[i] * b->V, b->V) : -1);
    return 0;
}

/* One speculative step of sequences [0, n): MTP rows and drafts, then the verify. Adds the
 * committed tokens to *tokens and records them in b->out. */
static int spec_step(mb *b, int n, int *verify_rows, int *mtp_rows, int *draft_rows, int64_t *tokens) {
    int rc = run_mtp_rows(b, n, mtp_rows, draft_rows);
    int rows = 0;
    for (int i = 0; !rc && i < n; i++) {
        rc = dsv4_spec_verify_span(b->spec[i], &b->spans[i], &b->err);
        rows += b->spans[i].n_tokens;
    }
    *verify_rows = rows;
    const double t0 = cli_now_s();
    if (!rc) rc = dsv4_forward(b->eng, b->spans, n, b->hidden, b->streams, &b->err);
    const double t1 = cli_now_s();
    if (!rc) rc = dsv4_lm_head(b->eng, b->hidden, rows, b->logits, &b->err);
    b->ph[2] += t1 - t0;
    b->ph[3] += cli_now_s() - t1;
    for (int i = 0, r = 0; !rc && i < n; i++) {
        const int c = b->spans[i].n_tokens;
        const int32_t y = dsv4_argmax(b->logits + (size_t)r * b->V, b->V);
        int k;
        rc = dsv4_spec_verify_done(b->spec[i], y, 1, b->streams + (size_t)r * b->HC * b->D, &k, &b->err);
        if (rc) break;
        int32_t last = y;
        int32_t *o = b->out + (size_t)i * b->n_ref;
        if (b->n_out[i] < b->n_ref) o[b->n_out[i]++] = y;
        if (k == 2) {
            last = dsv4_argmax(b->logits + (size_t)(r + 1) * b->V, b->V);
            if (b->n_out[i] < b->n_ref) o[b->n_out[i]++] = last;
        }
        *tokens += k;
        dsv4_spec_set_next(b->spec[i], last);
        r += c;
    }
    return rc;
}

/* One plain greedy step of sequences [0, n): b->tok in, the next tokens out. */
static int plain_step(mb *b, int n) {
    for (int i = 0; i < n; i++)
        b->spans[i] = (dsv4_span){.seq = b->fork[i], .start = dsv4_seq_length(b->eng, b->fork[i]),
                                  .n_tokens = 1, .tokens = &b->tok[i], .n_hidden = 1};
    const double t0 = cli_now_s();
    int rc = dsv4_forward(b->eng, b->spans, n, b->hidden, NULL, &b->err);
    const double t1 = cli_now_s();
    if (!rc) rc = dsv4_lm_head(b->eng, b->hidden, n, b->logits, &b->err);
    b->ph[2] += t1 - t0;
    b->ph[3] += cli_now_s() - t1;
    for (int i = 0; !rc && i < n; i++) b->tok[i] = dsv4_argmax(b->logits + (size_t)i * b->V, b->V);
    return rc;
}

static void free_forks(mb *b, int n) {
    for (int i = 0; i < n; i++) {
        dsv4_spec_free(b->spec[i]);
        b->spec[i] = NULL;
        if (b->fork[i] >= 0) dsv4_seq_free(b->eng, b->fork[i], NULL);
        b->fork[i] = -1;
    }
}

/* Forks of base sequences [0, n) at n = m = P with x_P pending. */
static int make_forks(mb *b, int n, int spec) {
    for (int i = 0; i < n; i++)
        if (dsv4_seq_fork(b->eng, b->base[i], &b->fork[i], &b->err)) return 1;
    for (int i = 0; i < n; i++) {
        b->tok[i] = b->x0[i];
        if (!spec) {
            if (dsv4_seq_mtp_off(b->eng, b->fork[i], &b->err)) return 1;
            continue;
        }
        if (dsv4_spec_create(b->eng, b->fork[i], &b->spec[i], &b->err)) return 1;
        dsv4_spec_set_next(b->spec[i], b->x0[i]);
    }
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Round r of a plain or speculative decode of n forks (m set up by measure_init): `warm`
 * untimed steps, then `steps` timed ones from fresh forks. Round 0 also takes the bytes from
 * its timed steps' routing; a plain round 0 records its tokens (from position P on) as the
 * reference, and a speculative round 0 is checked against it. */
static void measure_init(measure *m, int n, int spec, double p, int warm, int steps) {
    memset(m, 0, sizeof *m);
    m->batch = n;
    m->spec = spec;
    m->p = p;
    m->warm = warm;
    m->steps = steps;
    m->exact = 1;
}

static int measure_round(mb *b, measure *m) {
    const int n = m->batch, spec = m->spec, r = m->rounds;
    if (r == MAX_ROUNDS) return 0;
    int rc = make_forks(b, n, spec);
    for (int i = 0; !rc && i < n; i++) {
        b->n_out[i] = 0;
        b->dsrc[i] = (draft_src){b->ref + (size_t)i * b->n_ref, b->P, b->n_ref, b->V, i, m->p, 0x5eedull};
        if (spec) dsv4_spec_set_draft_hook(b->spec[i], forced_draft, &b->dsrc[i]);
    }
    int64_t tokens = 0;
    dsv4_spec_stats st0 = {0};
    double t0 = cli_now_s();
    for (int s = 0; !rc && s < m->warm + m->steps; s++) {
        if (s == m->warm) {
            tokens = 0;
            for (int i = 0; spec && i < n; i++) {
                const dsv4_spec_stats st = dsv4_spec_get_stats(b->spec[i]);
                st0.drafts += st.drafts;
                st0.accepted += st.accepted;
            }
            memset(b->ph, 0, sizeof b->ph);
            t0 = cli_now_s();
        }
        census_clear(&b->cs);
        int vrows = n, mrows = 0, drows = 0;
        if (spec) {
            rc = spec_step(b, n, &vrows, &mrows, &drows, &tokens);
        } else {
            if (r == 0 && s < b->n_ref)
                for (int i = 0; i < n; i++) b->ref[(size_t)i * b->n_ref + s] = b->tok[i];
            rc = plain_step(b, n);
            tokens += n;
        }
        if (!rc && r == 0 && s >= m->warm) {
            m->bytes_main += dsv4_step_weights_bytes(&b->w, b->cfg, vrows, b->cs.main_used);
            if (mrows) m->bytes_mtp += dsv4_mtp_weights_bytes(&b->w, mrows, b->cs.mtp_used);
            if (drows) m->bytes_head2 += (double)b->w.head;
            m->census_steps++;
        }
    }
    const double dt = cli_now_s() - t0;
    if (!rc) {
        m->seconds[r] = dt;
        for (int q = 0; q < 4; q++) m->phase_ms[r][q] = 1e3 * b->ph[q] / m->steps;
        m->rounds++;
    }
    if (!rc && r == 0) {
        m->tokens = tokens;
        for (int i = 0; spec && i < n; i++) {
            const dsv4_spec_stats st = dsv4_spec_get_stats(b->spec[i]);
            m->drafts += st.drafts;
            m->accepted += st.accepted;
        }
        m->drafts -= st0.drafts;
        m->accepted -= st0.accepted;
        /* greedy MTP gives the plain tokens: x_{P+1} ... as far as both go */
        for (int i = 0; spec && i < n; i++)
            for (int j = 0; j < b->n_out[i] && 1 + j < b->n_ref; j++)
                if (b->out[(size_t)i * b->n_ref + j] != b->ref[(size_t)i * b->n_ref + 1 + j]) m->exact = 0;
        if (m->census_steps) {
            m->bytes_main /= m->census_steps;
            m->bytes_mtp /= m->census_steps;
            m->bytes_head2 /= m->census_steps;
        }
    }
    free_forks(b, n);
    return rc;
}

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Best and median time over the rounds, and the round of the median. */
static void measure_finish(measure *m) {
    double t[MAX_ROUNDS];
    memcpy(t, m->seconds, (size_t)m->rounds * sizeof *t);
    m->median_s = median_of(t, m->rounds);
    m->best_s = t[0];
    const double lower = t[(m->rounds - 1) / 2];
    for (int r = 0; r < m->rounds; r++)
        if (m->seconds[r] == lower) { m->median_round = r; break; }
}

/* Base sequence i: a random prompt of P tokens with every row's streams reported to a
 * dsv4_spec and its MTP rows run, then x_P (greedy) and MTP row P - 1: n = m = P. */
static int prefill_base(mb *b, int i, int chunk, uint64_t *rng) {
    int32_t *tok = malloc((size_t)chunk * sizeof *tok);
    dsv4_spec *sp = NULL;
    int rc = tok ? 0 : fail_oom(b);
    if (!rc) rc = dsv4_seq_create(b->eng, &b->base[i], &b->err);
    if (!rc) rc = dsv4_spec_create(b->eng, b->base[i], &sp, &b->err);
    b->spec[0] = sp;
    for (int64_t n = 0; !rc && n < b->P;) {
        const int c = (int)(b->P - n < chunk ? b->P - n : chunk);
        for (int j = 0; j < c; j++) {
            *rng = mix64(*rng);
            tok[j] = (int32_t)(*rng % (uint64_t)b->V);
        }
        const int last = n + c == b->P;
        dsv4_span s = {.seq = b->base[i], .start = n, .n_tokens = c, .tokens = tok,
                       .n_hidden = last, .n_streams = c};
        rc = dsv4_forward(b->eng, &s, 1, b->hidden, b->streams, &b->err);
        if (!rc) rc = dsv4_spec_fed(sp, tok, c, b->streams, &b->err);
        int mr, dr;
        if (!rc) rc = run_mtp_rows(b, 1, &mr, &dr);
        if (!rc && last) rc = dsv4_lm_head(b->eng, b->hidden, 1, b->logits, &b->err);
        if (!rc && last) {
            b->x0[i] = dsv4_argmax(b->logits, b->V);
            dsv4_spec_set_next(sp, b->x0[i]);
            rc = run_mtp_rows(b, 1, &mr, &dr);
        }
        n += c;
    }
    if (!rc && dsv4_seq_mtp_length(b->eng, b->base[i]) != b->P) {
        snprintf(b->err.msg, sizeof b->err.msg, "bench --mtp: base sequence %d has MTP length %lld, not %lld",
                 i, (long long)dsv4_seq_mtp_length(b->eng, b->base[i]), (long long)b->P);
        rc = 1;
    }
    dsv4_spec_free(sp);
    b->spec[0] = NULL;
    free(tok);
    return rc;
}

/* ---- output ---------------------------------------------------------------------------- */

/* tokens/s of the median round */
static double tps(const measure *m) { return (double)m->tokens / m->median_s; }
static double step_bytes(const measure *m) { return m->bytes_main + m->bytes_mtp + m->bytes_head2; }
/* tokens per step per sequence */
static double tok_per_step(const measure *m) { return (double)m->tokens / ((double)m->steps * m->batch); }
static double ideal_gain(const measure *m, const measure *plain) {
    return tok_per_step(m) / (step_bytes(m) / step_bytes(plain));
}

/* m's tokens/s over plain's, round by round (they ran interleaved): median, min, max. */
typedef struct paired { double median, lo, hi; } paired;

static paired paired_gain(const measure *m, const measure *plain) {
    double g[MAX_ROUNDS];
    const int n = m->rounds < plain->rounds ? m->rounds : plain->rounds;
    for (int r = 0; r < n; r++)
        g[r] = ((double)m->tokens / m->seconds[r]) / ((double)plain->tokens / plain->seconds[r]);
    const double med = median_of(g, n);  /* sorts g */
    return (paired){med, g[0], g[n - 1]};
}

static cJSON *measure_json(const mb *b, const bench_mtp_opts *o, const measure *m, const measure *plain,
                           double load0, int threads) {
    cJSON *j = cJSON_CreateObject();
    const double *ph = m->phase_ms[m->median_round];
    cJSON_AddStringToObject(j, "model", o->model_dir);
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON_AddNumberToObject(j, "loadavg_start", load0);
    cJSON_AddNumberToObject(j, "loadavg_now", cli_loadavg());
    cJSON_AddNumberToObject(j, "prompt_len", (double)b->P);
    cJSON_AddNumberToObject(j, "batch", m->batch);
    cJSON_AddStringToObject(j, "mode", !m->spec ? "plain" : m->p < 0 ? "mtp_natural" : "mtp_forced");
    if (m->spec && m->p >= 0) cJSON_AddNumberToObject(j, "p", m->p);
    else cJSON_AddNullToObject(j, "p");
    cJSON_AddNumberToObject(j, "steps", m->steps);
    cJSON_AddNumberToObject(j, "rounds", m->rounds);
    cJSON_AddNumberToObject(j, "tokens", (double)m->tokens);
    cJSON_AddNumberToObject(j, "tokens_per_step", tok_per_step(m));
    cJSON_AddNumberToObject(j, "drafts", (double)m->drafts);
    cJSON_AddNumberToObject(j, "accepted", (double)m->accepted);
    cJSON_AddNumberToObject(j, "acceptance", m->drafts ? (double)m->accepted / m->drafts : 0);
    /* the median round's; the best round's; the rounds' spread, (max - min) / median time */
    cJSON_AddNumberToObject(j, "tokens_per_s", tps(m));
    cJSON_AddNumberToObject(j, "tokens_per_s_best", (double)m->tokens / m->best_s);
    double hi = m->seconds[0];
    for (int r = 1; r < m->rounds; r++) hi = m->seconds[r] > hi ? m->seconds[r] : hi;
    cJSON_AddNumberToObject(j, "time_spread", (hi - m->best_s) / m->median_s);
    cJSON_AddNumberToObject(j, "ms_per_step", 1e3 * m->median_s / m->steps);
    /* where the median round's step time goes (the rest: sampling and bookkeeping) */
    cJSON_AddNumberToObject(j, "ms_mtp_call", ph[0]);
    cJSON_AddNumberToObject(j, "ms_draft_head", ph[1]);
    cJSON_AddNumberToObject(j, "ms_forward", ph[2]);
    cJSON_AddNumberToObject(j, "ms_head", ph[3]);
    cJSON_AddNumberToObject(j, "bytes_per_step", step_bytes(m));
    cJSON_AddNumberToObject(j, "bytes_main", m->bytes_main);
    cJSON_AddNumberToObject(j, "bytes_mtp_block", m->bytes_mtp);
    cJSON_AddNumberToObject(j, "bytes_second_head", m->bytes_head2);
    if (m->spec) {
        const double ideal = ideal_gain(m, plain);
        const paired g = paired_gain(m, plain);
        cJSON_AddNumberToObject(j, "plain_tokens_per_s", tps(plain));
        cJSON_AddNumberToObject(j, "plain_bytes_per_step", step_bytes(plain));
        cJSON_AddNumberToObject(j, "bytes_ratio", step_bytes(m) / step_bytes(plain));
        cJSON_AddNumberToObject(j, "gain", g.median);
        cJSON_AddNumberToObject(j, "gain_min", g.lo);
        cJSON_AddNumberToObject(j, "gain_max", g.hi);
        cJSON_AddNumberToObject(j, "gain_best", ((double)m->tokens / m->best_s) / ((double)plain->tokens / plain->best_s));
        cJSON_AddNumberToObject(j, "ideal_gain", ideal);
        cJSON_AddNumberToObject(j, "gain_over_ideal", g.median / ideal);
        cJSON_AddNumberToObject(j, "gain_over_ideal_min", g.lo / ideal);
        cJSON_AddNumberToObject(j, "gain_over_ideal_max", g.hi / ideal);
        cJSON_AddBoolToObject(j, "exact", m->exact);
    }
    return j;
}

static void print_header(void) {
    printf("%5s %-8s %5s %8s %8s %10s %9s %9s %19s %7s %19s %6s  %s\n", "batch", "mode", "p", "accept",
           "tok/step", "tokens/s", "ms/step", "MB/step", "gain [min, max]", "ideal", "gain/ideal [min, max]",
           "exact", "ms: mtp + draft head + forward + head");
}

static void print_phases(const measure *m) {
    const double *ph = m->phase_ms[m->median_round];
    printf("  %.2f + %.2f + %.2f + %.2f\n", ph[0], ph[1], ph[2], ph[3]);
}

static void print_row(const measure *m, const measure *plain) {
    const double mbs = step_bytes(m) / 1e6;
    if (!m->spec) {
        printf("%5d %-8s %5s %8s %8.3f %10.1f %9.2f %9.1f %19s %7s %19s %6s", m->batch, "plain", "-", "-",
               tok_per_step(m), tps(m), 1e3 * m->median_s / m->steps, mbs, "1", "1", "-", "-");
        print_phases(m);
        return;
    }
    char p[16], gs[40], rs[40];
    if (m->p < 0) snprintf(p, sizeof p, "model");
    else snprintf(p, sizeof p, "%.2f", m->p);
    const double ideal = ideal_gain(m, plain);
    const paired g = paired_gain(m, plain);
    snprintf(gs, sizeof gs, "%.3f [%.3f, %.3f]", g.median, g.lo, g.hi);
    snprintf(rs, sizeof rs, "%.3f [%.3f, %.3f]", g.median / ideal, g.lo / ideal, g.hi / ideal);
    printf("%5d %-8s %5s %8.3f %8.3f %10.1f %9.2f %9.1f %19s %7.3f %19s %6s", m->batch, "mtp", p,
           m->drafts ? (double)m->accepted / m->drafts : 0.0, tok_per_step(m), tps(m),
           1e3 * m->median_s / m->steps, mbs, gs, ideal, rs, m->exact ? "yes" : "NO");
    print_phases(m);
}

static void emit(const mb *b, const bench_mtp_opts *o, const measure *m, const measure *plain, double load0,
                 int threads) {
    if (!o->json) {
        print_row(m, plain);
        return;
    }
    cJSON *j = measure_json(b, o, m, plain, load0, threads);
    char *s = cJSON_PrintUnformatted(j);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
}

/* ---- the command ----------------------------------------------------------------------- */

int bench_mtp(const bench_mtp_opts *o) {
    mb b = {0};
    int status = 1;
    const double load0 = cli_loadavg();
    int max_b = 1;
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] > max_b) max_b = (int)o->batches[i];
    if (dsv4_model_open(o->model_dir, &b.model, &b.err)) {
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        return 1;
    }
    if (dsv4_model_get_info(b.model).n_mtp < 1) {
        fprintf(stderr, "dsv4 bench: --mtp on: the model %s has no MTP block\n", o->model_dir);
        dsv4_model_close(b.model);
        return 1;
    }
    b.cfg = &b.model->cfg;
    b.V = b.cfg->vocab_size;
    b.D = b.cfg->hidden_size;
    b.HC = b.cfg->hc_mult;
    b.max_b = max_b;
    b.P = o->prompt_len;
    const int warm = 2;  /* a fork's first step has no draft yet; the second is the first full one */
    /* the reference covers every position a speculative run can reach: 2 a step */
    b.n_ref = (int)(2 * (warm + o->gen) + 2);
    int chunk = (int)(o->chunk ? o->chunk : (o->prompt_len < 2048 ? o->prompt_len : 2048));
    dsv4_engine_opts eo = {0};
    eo.max_context = o->prompt_len + b.n_ref + 4;
    eo.max_seqs = 2 * max_b;          /* the bases and one measurement's forks */
    eo.c_max = chunk;
    eo.max_rows = chunk > 2 * max_b ? chunk : 2 * max_b;
    eo.mtp = 1;
    eo.threads = (int)o->threads;
    eo.scratch_resident = 1; /* as dsv4 serve and bench */
    if (dsv4_engine_create(b.model, &eo, &b.eng, &b.err) || dsv4_step_weights_init(b.eng, &b.w, &b.err)) {
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out;
    }
    const int threads = dsv4_kctx_threads(b.eng->k);
    const int rows = 2 * max_b > chunk + 1 ? 2 * max_b : chunk + 1;
    b.cs.L = b.cfg->num_hidden_layers;
    b.cs.E = b.cfg->n_routed_experts;
    b.cs.main_used = calloc((size_t)b.cs.L * b.cs.E, 1);
    b.cs.mtp_used = calloc((size_t)b.cs.E, 1);
    b.base = malloc((size_t)max_b * sizeof *b.base);
    b.x0 = calloc((size_t)max_b, sizeof *b.x0);
    b.fork = malloc((size_t)max_b * sizeof *b.fork);
    b.spec = calloc((size_t)max_b, sizeof *b.spec);
    b.dsrc = calloc((size_t)max_b, sizeof *b.dsrc);
    b.ref = calloc((size_t)max_b * b.n_ref, sizeof *b.ref);
    b.out = calloc((size_t)max_b * b.n_ref, sizeof *b.out);
    b.n_out = calloc((size_t)max_b, sizeof *b.n_out);
    b.spans = calloc((size_t)max_b, sizeof *b.spans);
    b.mspans = calloc((size_t)max_b, sizeof *b.mspans);
    b.mrow_of = calloc((size_t)max_b, sizeof *b.mrow_of);
    b.mout = calloc((size_t)max_b, sizeof *b.mout);
    b.tok = calloc((size_t)max_b, sizeof *b.tok);
    b.hidden = malloc((size_t)2 * max_b * b.D * sizeof(float));
    b.streams = malloc((size_t)rows * b.HC * b.D * sizeof(float));
    b.mtp_hidden = malloc((size_t)max_b * b.D * sizeof(float));
    b.logits = malloc((size_t)2 * max_b * b.V * sizeof(float));
    if (!b.cs.main_used || !b.cs.mtp_used || !b.base || !b.x0 || !b.fork || !b.spec || !b.dsrc ||
        !b.ref || !b.out || !b.n_out || !b.spans || !b.mspans || !b.mrow_of || !b.mout || !b.tok || !b.hidden ||
        !b.streams || !b.mtp_hidden || !b.logits) {
        fail_oom(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out;
    }
    for (int i = 0; i < max_b; i++) b.base[i] = b.fork[i] = -1;
    dsv4_engine_set_choice_trace(b.eng, on_choice, &b.cs);

    uint64_t rng = mix64((uint64_t)o->seed);
    int rc = 0;
    for (int i = 0; i < max_b && !rc; i++) rc = prefill_base(&b, i, chunk, &rng);
    if (!o->json) {
        printf("model %s: prompt %lld, %lld timed steps (after %d untimed), median of %lld interleaved rounds, %d threads, load %.2f\n",
               o->model_dir, (long long)o->prompt_len, (long long)o->gen, warm, (long long)o->reps, threads, load0);
        print_header();
    }
    /* per batch size: the plain measurement, the MTP block's drafts, each forced p */
    const int n_meas = 2 + o->n_accept;
    measure *ms = calloc((size_t)n_meas, sizeof *ms);
    if (!ms) rc = fail_oom(&b);
    for (int bi = 0; bi < o->n_batches && !rc; bi++) {
        const int n = (int)o->batches[bi];
        /* the plain run goes as far as the reference must: 2 tokens a step at most */
        measure_init(&ms[0], n, 0, -1, 0, b.n_ref);
        for (int q = 1; q < n_meas; q++) measure_init(&ms[q], n, 1, q == 1 ? -1 : o->accept[q - 2], warm, (int)o->gen);
        for (int r = 0; r < o->reps && !rc; r++)
            for (int q = 0; q < n_meas && !rc; q++) rc = measure_round(&b, &ms[q]);
        if (rc) break;
        for (int q = 0; q < n_meas; q++) {
            measure_finish(&ms[q]);
            emit(&b, o, &ms[q], &ms[0], load0, threads);
        }
        fflush(stdout);
    }
    free(ms);
    if (rc) {
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out;
    }
    status = 0;
out:
    if (b.eng) dsv4_engine_set_choice_trace(b.eng, NULL, NULL);
    dsv4_step_weights_free(&b.w);
    free(b.cs.main_used); free(b.cs.mtp_used);
    free(b.base); free(b.x0); free(b.fork); free(b.spec); free(b.dsrc); free(b.ref); free(b.out);
    free(b.n_out); free(b.spans); free(b.mspans); free(b.mrow_of); free(b.mout); free(b.tok);
    free(b.hidden); free(b.streams); free(b.mtp_hidden); free(b.logits);
    dsv4_engine_free(b.eng);
    dsv4_model_close(b.model);
    return status;
}
