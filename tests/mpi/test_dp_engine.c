/* test_dp_engine.c — data-parallel attention over an expert-parallel group (DSV4_PAR_EP |
 * DSV4_PAR_DP, spec/serving.md §d): every rank is the home rank of its own sequences, and
 * each rank's results are bitwise those of a single-process engine running the same calls.
 *  - each rank its own two sequences (other tokens, other prompt lengths and chunk sizes per
 *    rank), prefill chunks and decode rows mixed, some steps with no rows on a rank, MTP
 *    calls (all rows, the last row only, or none kept; some ranks with no MTP rows), small
 *    exchange waves so that ranks run different numbers of waves: hidden states, streams,
 *    MTP hidden states and greedy ids equal to the local engine's, lengths equal;
 *  - the same with the head sharded over the vocabulary (DSV4_PAR_DP_HEAD: every rank calls
 *    it after every call, with its rows or none; the MTP drafts' logits too);
 *  - the same with adversarial routing (every route it can to the last rank);
 *  - refusals: one rank's bad token, one rank's full cache, ranks in different kinds of
 *    call: the same clean error on every rank, no sequence changed or broken, every rank's
 *    pool usage as before (a rank's reservation goes back), later calls work;
 *  - every rank has its own prefix cache (dsv4_prefix_start) and no follower mirror;
 *  - DP needs EP, refused on every rank at create.
 * With --cp the group engine adds DSV4_PAR_CP with a granule of 2 positions, so that many
 * prefill chunks (of 11 + 5 r tokens) run as CP prefills over the group with their rank as
 * home (every rank at some steps, rank 0 too): at the first chunk and later ones (s0 > 0),
 * several ranks' in one call, next to other ranks' decode rows or none, MTP after them; a
 * bad token on one rank while the others pass CP spans, rank 0's CP chunks of 64 filling its
 * pool, and rank 0 passing a CP span in a forward while the others make an MTP call, refuse
 * cleanly everywhere (the same words on every rank). Every rank's outputs and the decode
 * steps after stay bitwise the local engine's; each step's CP prefills as home
 * (dsv4_engine_cp_prefills) are the ones the granule rule, computed in the test, predicts;
 * a peer's CP span out of range (negative or overflowing start, past max_context or
 * max_rows) is refused by its decode.
 *
 *   mpirun -np N test_dp_engine MODEL_DIR [--cp]  (N divides the routed experts: the goldens'
 *                                                 8 and 16 at 2 and 4, the generated e12 at 3)
 */
#include "engine/forward_cp.h"
#include "ep_fixture.h"

enum { NSEQ = 3, MAXC = 256, STEPS = 9 };

typedef struct world {
    ep_world g;
    int32_t tok[NSEQ][MAXC + 1]; /* this rank's sequences: other tokens on every rank */
} world;

/* The group's engine and this rank's single-process reference. */
typedef struct pair {
    dsv4_engine *dp, *loc;
    int sd[NSEQ], sl[NSEQ]; /* sequence handles in each */
    float *bias;            /* adversarial gate bias (E), or NULL */
    int32_t *table;         /* adversarial tid2eid (V, K), or NULL */
} pair;

static uint64_t rng;
static int with_cp;            /* --cp: DSV4_PAR_CP on the group engine */
static dsv4_cp_stats cp_stats; /* the group engines' CP prefills (with_cp) */
static dsv4_err last_err; /* the group engine's error of the last both_forward */
static uint32_t urand32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Every rank reaches the same verdict. */
static void same_verdict(world *w, int rc, const char *what, const dsv4_err *err) {
    int lo, hi;
    MPI_Allreduce(&rc, &lo, 1, MPI_INT, MPI_MIN, w->g.d->comm);
    MPI_Allreduce(&rc, &hi, 1, MPI_INT, MPI_MAX, w->g.d->comm);
    CHECK_MSG(lo == hi, "%s: ranks disagree on the result (%d..%d; rank %d: %s)", what, lo, hi, w->g.rank,
              err->msg);
}

static dsv4_engine_opts base_opts(uint64_t cache_bytes) {
    return (dsv4_engine_opts){.max_context = MAXC, .max_seqs = NSEQ, .c_max = 64, .mtp = 1, .threads = 1,
                              .cache_bytes = cache_bytes};
}

/* head_shard: the group's head sharded over the vocabulary (DSV4_PAR_DP_HEAD): every rank
 * then calls the head after every successful call, with no rows too */
static void make_pair(world *w, pair *p, uint64_t cache_bytes, int adversarial, int head_shard) {
    dsv4_engine_opts o = base_opts(cache_bytes), od = o;
    dsv4_err err = {0};
    memset(p, 0, sizeof *p);
    od.dist = w->g.d;
    od.parallel = DSV4_PAR_EP | DSV4_PAR_DP | (head_shard ? DSV4_PAR_DP_HEAD : 0) | (with_cp ? DSV4_PAR_CP : 0);
    od.ep_wave = 5;
    od.cp_granule = 2;
    CHECK_MSG(dsv4_engine_create(w->g.m, &od, &p->dp, &err) == 0, "create: %s", err.msg);
    p->dp->cp_stats = &cp_stats;
    CHECK(dsv4_engine_create(w->g.m, &o, &p->loc, &err) == 0);
    CHECK(p->dp && p->dp->dp && !p->dp->idle && p->dp->ep);
    for (int i = 0; i < NSEQ; i++) {
        CHECK(dsv4_seq_create(p->dp, &p->sd[i], &err) == 0);
        CHECK(dsv4_seq_create(p->loc, &p->sl[i], &err) == 0);
    }
    if (!adversarial) return;
    dsv4_engine *es[2] = {p->dp, p->loc};
    ep_fixture_adversarial(w->g.m, w->g.size, es, 2, &p->bias, &p->table);
}

/* Which of the pair's sequences a group handle is. */
static int seq_index(const pair *p, int seq) {
    int i = 0;
    while (i + 1 < NSEQ && p->sd[i] != seq) i++;
    return i;
}

static void free_pair(pair *p) {
    dsv4_engine_free(p->dp);
    dsv4_engine_free(p->loc);
    free(p->bias);
    free(p->table);
}

/* The group's head on this rank's rows h1 (n, D) against the local head on h2: greedy ids
 * (argmax) or logits. A sharded head is collective: called on every rank, rows or not. */
static void head_check(world *w, pair *p, const float *h1, const float *h2, int n, int argmax, const char *what) {
    if (n == 0 && !p->dp->dp_head) return;
    const int V = w->g.V;
    int32_t *ids = malloc(sizeof(int32_t) * (n + 1)), *ids2 = malloc(sizeof(int32_t) * (n + 1));
    float *lg = malloc(sizeof(float) * ((size_t)n * V + 1)), *lg2 = malloc(sizeof(float) * ((size_t)n * V + 1));
    dsv4_err err = {0};
    const int rc = argmax ? dsv4_lm_head_argmax(p->dp, h1, n, ids, NULL, &err) : dsv4_lm_head_dist(p->dp, h1, n, lg, &err);
    CHECK_MSG(rc == 0, "%s: rank %d: head: %s", what, w->g.rank, err.msg);
    if (rc == 0 && n > 0 && argmax) {
        CHECK(dsv4_lm_head_argmax(p->loc, h2, n, ids2, NULL, &err) == 0);
        CHECK_MSG(memcmp(ids, ids2, sizeof(int32_t) * n) == 0, "%s: greedy ids differ", what);
    } else if (rc == 0 && n > 0) {
        CHECK(dsv4_lm_head(p->loc, h2, n, lg2, &err) == 0);
        CHECK_MSG(memcmp(lg, lg2, sizeof(float) * n * V) == 0, "%s: rank %d: logits differ", what, w->g.rank);
    }
    free(ids); free(ids2); free(lg); free(lg2);
}

/* One forward of this rank's spans (n may be 0) on the group engine, the same on the local
 * one, outputs compared bitwise; greedy ids from the (local under DP) head too. A span's
 * streams (the last n_streams rows) go to keep (NSEQ, MAXC, hc, D) at their positions. */
static int both_forward(world *w, pair *p, const dsv4_span *sp, int n, float *keep, const char *what) {
    int rows_h = 0, rows_s = 0;
    for (int i = 0; i < n; i++) { rows_h += sp[i].n_hidden; rows_s += sp[i].n_streams; }
    const size_t nh = (size_t)rows_h * w->g.D, ns = (size_t)rows_s * w->g.hc * w->g.D;
    float *buf = calloc(2 * (nh + ns) + 1, sizeof(float)); /* hidden and streams, group then local */
    float *h1 = buf, *s1 = h1 + nh, *h2 = s1 + ns, *s2 = h2 + nh;
    dsv4_span loc[NSEQ];
    dsv4_err err = {0};
    const int rc = dsv4_forward(p->dp, n ? sp : NULL, n, h1, s1, &err);
    last_err = err;
    same_verdict(w, rc, what, &err);
    if (rc == 0 && n > 0) {
        for (int i = 0; i < n; i++) {
            loc[i] = sp[i];
            for (int j = 0; j < NSEQ; j++) if (sp[i].seq == p->sd[j]) loc[i].seq = p->sl[j];
        }
        dsv4_err err2 = {0};
        CHECK_MSG(dsv4_forward(p->loc, loc, n, h2, s2, &err2) == 0, "%s: local: %s", what, err2.msg);
        CHECK_MSG(memcmp(h1, h2, nh * sizeof(float)) == 0, "%s: rank %d: hidden rows differ", what, w->g.rank);
        CHECK_MSG(memcmp(s1, s2, ns * sizeof(float)) == 0, "%s: rank %d: streams differ", what, w->g.rank);
        for (int i = 0, os = 0; i < n && keep; os += sp[i].n_streams, i++) {
            const int q = seq_index(p, sp[i].seq);
            const int64_t at = sp[i].start + sp[i].n_tokens - sp[i].n_streams;
            memcpy(keep + ((size_t)q * MAXC + at) * w->g.hc * w->g.D, s1 + (size_t)os * w->g.hc * w->g.D,
                   (size_t)sp[i].n_streams * w->g.hc * w->g.D * sizeof(float));
        }
    }
    if (rc == 0) head_check(w, p, h1, h2, rows_h, 1, what);
    free(buf);
    return rc;
}

/* One MTP call of this rank's spans (n may be 0) with out[] on both engines, compared. */
static int both_mtp(world *w, pair *p, const dsv4_mtp_span *sp, const int *out, int n, const char *what) {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += out[i] == DSV4_MTP_OUT_ALL ? sp[i].n : out[i] == DSV4_MTP_OUT_LAST;
    float *h1 = calloc((size_t)rows * w->g.D + 1, sizeof(float)), *h2 = calloc((size_t)rows * w->g.D + 1, sizeof(float));
    dsv4_err err = {0};
    const int rc = dsv4_mtp_forward_out(p->dp, n ? sp : NULL, n, n ? out : NULL, h1, &err);
    same_verdict(w, rc, what, &err);
    if (rc == 0 && n > 0) {
        dsv4_mtp_span loc[NSEQ];
        for (int i = 0; i < n; i++) {
            loc[i] = sp[i];
            for (int j = 0; j < NSEQ; j++) if (sp[i].seq == p->sd[j]) loc[i].seq = p->sl[j];
        }
        CHECK_MSG(dsv4_mtp_forward_out(p->loc, loc, n, out, h2, &err) == 0, "%s: local MTP: %s", what, err.msg);
        CHECK_MSG(memcmp(h1, h2, (size_t)rows * w->g.D * sizeof(float)) == 0, "%s: rank %d: MTP hidden differs",
                  what, w->g.rank);
    }
    /* the drafts' logits, as a server samples them (a sharded head: on every rank) */
    if (rc == 0 && p->dp->dp_head) head_check(w, p, h1, h2, rows, 0, what);
    free(h1); free(h2);
    return rc;
}

/* This rank's lengths in both engines, nothing broken. */
static void lengths_match(pair *p, const int64_t *n, const char *what) {
    for (int i = 0; i < NSEQ; i++) {
        CHECK_MSG(dsv4_seq_length(p->dp, p->sd[i]) == n[i] && dsv4_seq_length(p->loc, p->sl[i]) == n[i] &&
                  dsv4_seq_mtp_length(p->dp, p->sd[i]) == dsv4_seq_mtp_length(p->loc, p->sl[i]) &&
                  !p->dp->seqs[p->sd[i]].broken, "%s: sequence %d: length %lld, expected %lld", what, i,
                  (long long)dsv4_seq_length(p->dp, p->sd[i]), (long long)n[i]);
    }
}

/* Whether this rank's call runs a CP prefill with it as home (once a call: its longest
 * span that may), by the granule rule computed here: a non-speculative span touching at
 * least 2 P granules of the test's 2 positions. */
static int cp_expected(const world *w, const dsv4_span *sp, int n) {
    const int64_t G = 2;
    for (int i = 0; with_cp && i < n; i++)
        if (!sp[i].speculative &&
            (sp[i].start + sp[i].n_tokens + G - 1) / G - sp[i].start / G >= 2 * (int64_t)w->g.size)
            return 1;
    return 0;
}

/* The steps: rank r's sequence i has a prompt of 19 + 13 r + 9 i tokens, prefilled in chunks
 * of 11 + 5 r (at P <= 3 the first always a CP prefill, later ones not all), then decodes; sequence 1 starts at step r; rank r has no rows at the steps
 * where (step + r) % 3 == 2 and no MTP rows where (step + r) % 4 == 3. */
static void script(world *w, int adversarial, int head_shard) {
    const char *what = adversarial ? "adversarial" : head_shard ? "mixed, sharded head" : "mixed";
    const int r = w->g.rank, hcD = w->g.hc * w->g.D;
    pair p;
    make_pair(w, &p, 0, adversarial, head_shard);
    float *streams = calloc((size_t)NSEQ * MAXC * hcD, sizeof(float)); /* (NSEQ, MAXC, hc, D) */
    int64_t n[NSEQ] = {0}, m[NSEQ] = {0}, rows_here = 0, homes = 0;
    int ok = 1;
    for (int step = 0; step < STEPS; step++) {
        dsv4_span sp[NSEQ];
        int ns = 0;
        for (int i = 0; i < NSEQ && (step + r) % 3 != 2; i++) {
            if (step < i * (r + 1)) continue; /* sequence i starts at step i (r + 1) */
            const int64_t prompt = 19 + 13 * r + 9 * i;
            int cnt = n[i] < prompt ? (int)(prompt - n[i] < 11 + 5 * r ? prompt - n[i] : 11 + 5 * r) : 1;
            sp[ns++] = (dsv4_span){.seq = p.sd[i], .start = n[i], .n_tokens = cnt, .tokens = w->tok[i] + n[i],
                                   .n_hidden = cnt < 3 ? cnt : 3, .n_streams = cnt};
        }
        char label[64];
        snprintf(label, sizeof label, "%s step %d", what, step);
        const int64_t cp0 = dsv4_engine_cp_prefills(p.dp);
        const int rc = both_forward(w, &p, sp, ns, streams, label);
        ok &= rc == 0;
        const int cp_want = rc == 0 ? cp_expected(w, sp, ns) : 0;
        CHECK_MSG(dsv4_engine_cp_prefills(p.dp) - cp0 == cp_want, "%s: rank %d: %lld CP prefills as home, "
                  "expected %d", label, r, (long long)(dsv4_engine_cp_prefills(p.dp) - cp0), cp_want);
        homes += cp_want;
        for (int k = 0; k < ns; k++) {
            n[seq_index(&p, sp[k].seq)] += sp[k].n_tokens;
            rows_here += sp[k].n_tokens;
        }
        /* MTP: every position with its next token, m .. n - 2 (position n - 1 needs token n) */
        dsv4_mtp_span ms[NSEQ];
        int out[NSEQ], nm = 0;
        for (int i = 0; i < NSEQ && (step + r) % 4 != 3; i++) {
            const int64_t upto = n[i] - 1;
            if (upto <= m[i]) continue;
            const int cnt = (int)(upto - m[i] < 64 ? upto - m[i] : 64);
            out[nm] = (step + i + r) % 3; /* ALL, LAST, NONE in turn */
            ms[nm++] = (dsv4_mtp_span){p.sd[i], m[i], cnt, w->tok[i] + m[i] + 1, streams + ((size_t)i * MAXC + m[i]) * hcD};
            m[i] += cnt;
        }
        snprintf(label, sizeof label, "%s MTP step %d", what, step);
        ok &= both_mtp(w, &p, ms, out, nm, label) == 0;
    }
    CHECK_MSG(ok, "%s: a call failed", what);
    CHECK_MSG(rows_here > 0, "rank %d computed no rows", r);
    CHECK_MSG(!with_cp || homes > 0, "%s: rank %d was never a CP prefill's home", what, r);
    lengths_match(&p, n, what);
    free(streams);
    free_pair(&p);
}

static int same_usage(const dsv4_engine *e, const dsv4_cache_stats *before) {
    const dsv4_cache_stats now = dsv4_engine_cache_stats(e);
    return memcmp(&now, before, sizeof now) == 0;
}

/* One rank's refusal is every rank's, and changes nothing anywhere. */
static void failures(world *w) {
    const int r = w->g.rank, last = w->g.size - 1;
    dsv4_err err = {0};
    pair p;
    make_pair(w, &p, ep_fixture_min_budget(NULL, w->g.m, base_opts(0)), 0, 0);
    int64_t n[NSEQ] = {0};

    /* the last rank's bad token: the others had reserved their pages, which go back */
    int32_t toks[16]; /* under --cp the other ranks' spans are CP prefills */
    const int nb = with_cp ? 16 : 4;
    memcpy(toks, w->tok[2], sizeof toks);
    if (r == last) toks[1] = w->g.V;
    dsv4_span sp = {.seq = p.sd[2], .start = 0, .n_tokens = nb, .tokens = toks, .n_hidden = 1};
    dsv4_cache_stats before = dsv4_engine_cache_stats(p.dp);
    const int64_t cp_before = cp_stats.calls;
    int rc = both_forward(w, &p, &sp, 1, NULL, "bad token");
    CHECK_MSG(rc == DSV4_ERR_ARG, "bad token: rc %d", rc);
    /* the refusing rank's own words reach the others */
    CHECK_MSG(strstr(last_err.msg, "token id") != NULL, "rank %d: '%s'", r, last_err.msg);
    if (r == 0) printf("bad token on rank %d, rank 0 reads: %s\n", last, last_err.msg);
    /* whose refusal it was, as a scheduler reads it (the refusing rank handles it, the others
     * call again) */
    CHECK_MSG(dsv4_dist_last_refusal(w->g.d) == (r == last ? DSV4_DIST_REFUSED_HERE : DSV4_DIST_REFUSED_ELSEWHERE),
              "bad token: rank %d reads refusal %d", r, dsv4_dist_last_refusal(w->g.d));
    CHECK(same_usage(p.dp, &before));
    CHECK(cp_stats.calls == cp_before); /* no CP prefill began */
    lengths_match(&p, n, "bad token");
    sp.tokens = w->tok[2];
    CHECK(both_forward(w, &p, &sp, 1, NULL, "after bad token") == 0);
    CHECK(dsv4_dist_last_refusal(w->g.d) == DSV4_DIST_PASSED);
    CHECK(cp_stats.calls == cp_before + (with_cp ? w->g.size : 0)); /* every rank's span, on every rank */
    /* the public count: this rank's own CP prefill (home), none when CP is off */
    CHECK_MSG(dsv4_engine_cp_prefills(p.dp) == (with_cp ? 1 : 0), "rank %d: %lld CP prefills as home", r,
              (long long)dsv4_engine_cp_prefills(p.dp));
    n[2] = nb;

    /* rank 0 prefills until its pool is full while the others decode: the others return
     * its error before any rank writes, their sequences and pools as before */
    int full = 0;
    for (int call = 0; call < 11 && !full; call++) {
        /* rank 0: sequences 0, 1 in 4 chunks of 64, then 2 (at 4) in 3; the others: sequence
         * 0 a row a call */
        const int q = r == 0 ? call / 4 : 0, cnt = r == 0 ? 64 : 1;
        dsv4_span c = {.seq = p.sd[q], .start = n[q], .n_tokens = cnt, .tokens = w->tok[q] + n[q], .n_hidden = 1};
        before = dsv4_engine_cache_stats(p.dp);
        rc = both_forward(w, &p, &c, 1, NULL, "fill");
        if (!rc) {
            n[q] += cnt;
            continue;
        }
        full = 1;
        CHECK_MSG(rc == DSV4_ERR_CACHE_FULL && strstr(last_err.msg, "pool") != NULL, "fill: rc %d '%s'", rc,
                  last_err.msg);
        if (r == 1) printf("rank 0's cache full, rank 1 reads: %s\n", last_err.msg);
        CHECK_MSG(dsv4_dist_last_refusal(w->g.d) == (r == 0 ? DSV4_DIST_REFUSED_HERE : DSV4_DIST_REFUSED_ELSEWHERE),
                  "cache full: rank %d reads refusal %d", r, dsv4_dist_last_refusal(w->g.d));
        CHECK_MSG(same_usage(p.dp, &before), "rank %d: a refused call changed the pools", r);
        lengths_match(&p, n, "cache full");
        /* rank 0 makes room (sequence 0 freed, made again) and decodes; the others' call
         * runs again */
        if (r == 0) {
            CHECK(dsv4_seq_free(p.dp, p.sd[0], &err) == 0 && dsv4_seq_free(p.loc, p.sl[0], &err) == 0);
            CHECK(dsv4_seq_create(p.dp, &p.sd[0], &err) == 0 && dsv4_seq_create(p.loc, &p.sl[0], &err) == 0);
            n[0] = 0;
            c = (dsv4_span){.seq = p.sd[q], .start = n[q], .n_tokens = 1, .tokens = w->tok[q] + n[q], .n_hidden = 1};
        }
        CHECK(both_forward(w, &p, &c, 1, NULL, "after cache full") == 0);
        n[q] += 1;
        lengths_match(&p, n, "after cache full");
    }
    CHECK_MSG(full, "rank 0's pool never ran full");

    /* a rank in an MTP call while the others run a forward: refused everywhere */
    before = dsv4_engine_cache_stats(p.dp);
    rc = r == 0 ? dsv4_mtp_forward(p.dp, NULL, 0, NULL, &err) : dsv4_forward(p.dp, NULL, 0, NULL, NULL, &err);
    same_verdict(w, rc, "call kinds", &err);
    CHECK_ERR(err, DSV4_ERR_ARG, "ranks disagree");
    CHECK(dsv4_dist_last_refusal(w->g.d) == DSV4_DIST_PASSED);  /* no rank's status refused it */
    CHECK(same_usage(p.dp, &before));
    lengths_match(&p, n, "call kinds");
    if (with_cp) {
        /* rank 0 a forward with a CP span (16 tokens on its emptied sequence 0), the others an
         * MTP call: the same kind error on every rank, its words after the call's name too
         * (each once checked a CP span against its own kind: rank 0 read the kinds, the
         * others the span) */
        dsv4_span c = {.seq = p.sd[0], .start = n[0], .n_tokens = 16, .tokens = w->tok[0] + n[0]};
        before = dsv4_engine_cache_stats(p.dp);
        rc = r == 0 ? dsv4_forward(p.dp, &c, 1, NULL, NULL, &err) : dsv4_mtp_forward(p.dp, NULL, 0, NULL, &err);
        same_verdict(w, rc, "call kinds, CP span", &err);
        CHECK_ERR(err, DSV4_ERR_ARG, "rank 1 makes another kind");
        char msg0[sizeof err.msg];
        memcpy(msg0, err.msg, sizeof msg0);
        MPI_Bcast(msg0, (int)sizeof msg0, MPI_CHAR, 0, w->g.d->comm);
        /* after the name of the rank's own call (forward, mtp_forward) */
        const char *mine = strchr(err.msg, ':'), *zero = strchr(msg0, ':');
        CHECK_MSG(mine && zero && !strcmp(mine, zero), "call kinds, CP span: rank %d reads '%s', rank 0 '%s'", r,
                  err.msg, msg0);
        CHECK(same_usage(p.dp, &before));
        lengths_match(&p, n, "call kinds, CP span");

        /* a peer's CP span as this rank decodes it (local, no collective): this rank's row of
         * the shared values rewritten, then put back */
        int32_t *v = p.dp->dp_share + (size_t)r * DSV4_DP_SHARE_N, saved[DSV4_DP_SHARE_N];
        memcpy(saved, v, sizeof saved);
        static const struct { uint32_t lo, hi; int n, max_rows, ok; } dec[] = {
            {0, 0, 16, 0, 1},                            /* a span it runs */
            {0, 0xffffffffu, 16, 0, 0},                  /* a negative start (high word) */
            {0xfffffff7u, 0x7fffffffu, 16, 0, 0},        /* start + n_tokens past INT64_MAX */
            {MAXC - 15, 0, 16, 0, 0},                    /* past max_context */
            {0, 0, 16, 8, 0},                            /* more tokens than max_rows */
        };
        const int max_rows = p.dp->opts.max_rows;
        for (int k = 0; k < (int)(sizeof dec / sizeof dec[0]); k++) {
            const int32_t row[DSV4_DP_SHARE_N] = {DSV4_DP_CALL_FORWARD, p.sd[0], (int32_t)dec[k].lo,
                                                  (int32_t)dec[k].hi, dec[k].n, 1, 0};
            memcpy(v, row, sizeof row);
            if (dec[k].max_rows) p.dp->opts.max_rows = dec[k].max_rows;
            dsv4_dp_cp got;
            CHECK_MSG(dsv4_engine_dp_cp(p.dp, r, &got) == dec[k].ok, "CP span decode %d: not %s", k,
                      dec[k].ok ? "taken" : "refused");
            p.dp->opts.max_rows = max_rows;
        }
        memcpy(v, saved, sizeof saved);
    }

    /* every DP rank holds its sequences' caches whole: the prefix cache is its own (a miss
     * starts an empty sequence), and the followers' mirror does not apply */
    int s2 = -1;
    int64_t cached = -1;
    CHECK(dsv4_seq_free(p.dp, p.sd[2], &err) == 0);
    CHECK_MSG(dsv4_prefix_start(p.dp, w->tok[2], 8, &s2, &cached, NULL, NULL, &err) == 0 && s2 >= 0 && cached == 0,
              "prefix start on rank %d: %s", r, err.msg);
    CHECK(dsv4_seq_mirror(p.dp, 128, &s2, &err) == DSV4_ERR_UNSUPPORTED);
    free_pair(&p);

    /* DP needs EP, refused on every rank at create */
    const int bad[2] = {DSV4_PAR_DP, DSV4_PAR_DP | DSV4_PAR_CP};
    for (int k = 0; k < 2; k++) {
        dsv4_engine_opts o = base_opts(0);
        o.dist = w->g.d;
        o.parallel = bad[k];
        dsv4_engine *e = NULL;
        CHECK(dsv4_engine_create(w->g.m, &o, &e, &err) != 0 && !e);
        CHECK_MSG(strstr(err.msg, "DSV4_PAR_DP") || strstr(err.msg, "rank"), "create: %s", err.msg);
    }
}

int main(int argc, char **argv) {
    world w;
    if (ep_world_open(&argc, &argv, "test_dp_engine", &w.g)) return 1;
    with_cp = argc > 2 && !strcmp(argv[2], "--cp");
    rng = 0x853c49e6748fea9bull + 0x9e3779b97f4a7c15ull * (uint64_t)(w.g.rank + 1); /* other tokens per rank */
    for (int i = 0; i < NSEQ; i++)
        for (int j = 0; j <= MAXC; j++) w.tok[i][j] = (int32_t)(urand32() % (uint32_t)w.g.V);
    script(&w, 0, 0);
    script(&w, 0, 1);
    script(&w, 1, 0);
    failures(&w);
    if (with_cp && w.g.rank == 0) printf("CP prefills: %lld on rank 0\n", (long long)cp_stats.calls);
    CHECK_MSG(!with_cp || cp_stats.calls > 0, "no CP prefill ran");
    return ep_world_close(&w.g);
}
