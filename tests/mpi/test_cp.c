/* test_cp.c — context-parallel prefill (spec/serving.md §c) against the single-process
 * engine, through the public API on every rank (SPMD):
 *
 *   mpirun -np CP test_cp MODEL_DIR [--ep] [--fast] [--cases all|short|none]
 *                         [--golden RUN_DIR --granule G]
 *
 * Each case is a schedule of forward calls (chunk sizes; chunks of 1 are decode steps)
 * with MTP rows run after every call, and a CP granule G. Every rank drives a CP engine
 * (opts.parallel = CP, or CP|EP with --ep); the home rank also drives a single-process
 * engine through the same schedule and checks, bitwise (reference kernels, or the
 * optimized ones with --fast: their results do not depend on the row count either):
 *   - the final hidden state and last-block streams of every row, and the MTP hidden rows;
 *   - the home rank's cache after every call: window rows of the last win-1 positions of
 *     every main layer and of the MTP block, every compressed entry and indexer key, and
 *     the live compressor state of model.md §7 (CSA: carry = first halves of a and b of
 *     the last closed window, open window rows whole; HCA: the open window);
 * and every rank checks that its sequence lengths follow the home rank's (each rank's exit
 * status is its verdict; mpirun fails if any rank fails).
 * Cases cover q < 2 CP (ranks without tokens), the default G and smaller ones (windows of
 * both compressors straddling segments, segments shorter than the window), a last segment
 * shorter than win-1, continuation from s0 > 0 (unaligned), and decoding afterwards.
 * With --golden, the golden run's tokens go through a CP prefill of its prefill length
 * and single-token decodes; hidden states, logits and MTP logits must also agree with the
 * golden arrays (max|diff|/max|ref| <= 1e-4, identical top-1).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "dump.h"
#include "engine/engine.h"
#include "model/model.h"
#include "kv_env.h"
#include "test.h"

typedef struct cp_case {
    const char *name;
    int granule;         /* 0 = default */
    int chunks[16];      /* forward calls in order; 0 ends the list */
} cp_case;

static const cp_case CASES[] = {
    {"default G, whole prompt", 0, {300}},
    {"default G, longer prompt + decode", 0, {557, 1, 1}},
    {"G=16, whole prompt", 16, {300}},
    {"G=16, short last segment, decode", 16, {115, 1, 1, 1}},
    {"G=16, continuation from s0=37", 16, {37, 180, 1, 1}},
    {"G=20 (not a multiple of 4), continuation from 130", 20, {130, 150, 1}},
    {"G=5, segments shorter than the window", 5, {203, 1}},
    {"G=8, two CP calls in a row", 8, {96, 97, 64, 1}},
};
/* --cases short: the ones that matter most, for larger models */
static const int SHORT_CASES[] = {1, 3, 4};

static int rank, size, V, D, HC, L, WIN, HD, DI, REFERENCE = 1;
static const dsv4_config *CFG;

static uint64_t rng = 0x243f6a8885a308d3ull;
static int32_t rnd_token(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (int32_t)((rng >> 11) % (uint64_t)V);
}

/* One engine driven through a schedule: outputs of every row. */
typedef struct run {
    dsv4_engine *e;
    int seq;
    int64_t done, mtp_done;
    float *hidden;   /* (N, D) */
    float *streams;  /* (N, hc, D) */
    float *mtp;      /* (N, D) */
} run;

static int KV; /* DSV4_KV_* of the engines: DSV4_TEST_KV, F32 for the golden run (FP4 indexer
                * keys, "+fp4": the engines run fidelity F3, which they need) */

static int run_open(dsv4_model *m, dsv4_dist *dist, int parallel, int granule, int N, run *r,
                    dsv4_err *err) {
    memset(r, 0, sizeof *r);
    dsv4_engine_opts eo = {.max_context = N, .max_seqs = 2, .mtp = 1, .reference = REFERENCE,
                           .threads = 1, .dist = dist, .parallel = parallel,
                           .cp_granule = granule, .kv_dtype = KV,
                           .fidelity = KV & DSV4_KV_IDX_FP4 ? DSV4_FID_F3 : 0};
    r->hidden = calloc((size_t)N * D, sizeof(float));
    r->streams = calloc((size_t)N * HC * D, sizeof(float));
    r->mtp = calloc((size_t)N * D, sizeof(float));
    if (!r->hidden || !r->streams || !r->mtp) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return err->code = DSV4_ERR_NOMEM;
    }
    int rc = dsv4_engine_create(m, &eo, &r->e, err);
    if (!rc) rc = dsv4_seq_create(r->e, &r->seq, err);
    return rc;
}

static void run_close(run *r) {
    dsv4_engine_free(r->e);
    free(r->hidden); free(r->streams); free(r->mtp);
}

/* One forward call of c rows, then the MTP rows that became ready. */
static int run_step(run *r, const int32_t *tokens, int N, int c, dsv4_err *err) {
    dsv4_span sp = {.seq = r->seq, .start = r->done, .n_tokens = c, .tokens = tokens + r->done,
                    .n_hidden = c, .n_streams = c};
    int rc = dsv4_forward(r->e, &sp, 1, r->hidden + (size_t)r->done * D,
                          r->streams + (size_t)r->done * HC * D, err);
    if (rc) return rc;
    r->done += c;
    int64_t ready = r->done < N - 1 ? r->done : N - 1;
    if (r->mtp_done < ready) {
        dsv4_mtp_span ms = {r->seq, r->mtp_done, (int)(ready - r->mtp_done), tokens + r->mtp_done + 1,
                            r->streams + (size_t)r->mtp_done * HC * D};
        if ((rc = dsv4_mtp_forward(r->e, &ms, 1, r->mtp + (size_t)r->mtp_done * D, err))) return rc;
        r->mtp_done = ready;
    }
    return 0;
}

static int same_rows(const float *a, const float *b, int64_t n, int64_t width, const char *what,
                     const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i * width, b + i * width, (size_t)width * sizeof(float))) {
            CHECK_MSG(0, "%s: %s row %lld differs from the single-process run", name, what, (long long)i);
            return 0;
        }
    return 1;
}

/* Live §7 state of the two caches (home rank vs single process), bitwise. */
static int same_cache(dsv4_engine *ea, int sa, dsv4_engine *eb, int sb, const char *name) {
    dsv4_cache *ca = ea->cache, *cb = eb->cache;
    const int64_t n = dsv4_seq_length(ea, sa), m = dsv4_seq_mtp_length(ea, sa);
    const dsv4_cache_plan *pl = dsv4_cache_get_plan(ca);  /* rows as stored */
    int bad = 0;
    for (int l = 0; l <= L && !bad; l++) {
        const int64_t len = l < L ? n : m;
        for (int64_t p = len - WIN + 1 > 0 ? len - WIN + 1 : 0; p < len && !bad; p++)
            if (memcmp(dsv4_cache_win_row(ca, sa, l, p), dsv4_cache_win_row(cb, sb, l, p), (size_t)pl->win_row_bytes)) {
                CHECK_MSG(0, "%s: layer %d window row %lld differs", name, l, (long long)p);
                bad = 1;
            }
        const int r = l < L ? CFG->compress_ratios[l] : 0;
        if (!r) continue;
        for (int64_t w = 0; w < n / r && !bad; w++)
            if (memcmp(dsv4_cache_cmp_row(ca, sa, l, w), dsv4_cache_cmp_row(cb, sb, l, w), (size_t)pl->cmp_row_bytes)) {
                CHECK_MSG(0, "%s: layer %d entry %lld differs", name, l, (long long)w);
                bad = 1;
            }
        for (int64_t w = 0; r == 4 && w < n / 4 && !bad; w++)
            if (memcmp(dsv4_cache_idx_row(ca, sa, l, w), dsv4_cache_idx_row(cb, sb, l, w), (size_t)pl->idx_row_bytes)) {
                CHECK_MSG(0, "%s: layer %d indexer key %lld differs", name, l, (long long)w);
                bad = 1;
            }
        /* compressor state (model.md §7): CSA positions [4(n//4) - 4, n), of which those
         * below 4(n//4) are the carry (only first halves are ever read again); HCA
         * positions [r(n//r), n) */
        for (int ix = 0; ix < (r == 4 ? 2 : 1) && !bad; ix++) {
            const int d = ix ? DI : HD, W = (r == 4 ? 2 : 1) * d;
            const int64_t open = n / r * r, lo = r == 4 ? (open - 4 > 0 ? open - 4 : 0) : open;
            for (int64_t p = lo; p < n && !bad; p++) {
                const float *ra = dsv4_cache_ring_row(ca, sa, l, ix, p);
                const float *rb = dsv4_cache_ring_row(cb, sb, l, ix, p);
                const size_t k = (size_t)(p < open ? d : W) * 4;
                if (memcmp(ra, rb, k) || memcmp(ra + W, rb + W, k)) {
                    CHECK_MSG(0, "%s: layer %d %s compressor state of position %lld differs", name,
                              l, ix ? "indexer" : "main", (long long)p);
                    bad = 1;
                }
            }
        }
    }
    if (!bad) CHECK(1);
    return !bad;
}

/* The golden arrays against the CP run's outputs (home rank). */
static void check_golden(dsv4_engine *e, const dump_dir *g, const run *r, int N) {
    const int P = g->prefill_len;
    float *logits = malloc((size_t)N * V * sizeof(float));
    CHECK(dsv4_lm_head(e, r->hidden, N, logits, NULL) == 0);
    float *mtp_logits = malloc((size_t)N * V * sizeof(float));
    CHECK(dsv4_lm_head(e, r->mtp, N - 1, mtp_logits, NULL) == 0);
    struct { const char *name; float *data; long long rows, cols; } arr[] = {
        {"prefill_hidden", r->hidden, P, D},
        {"prefill_logits", logits, P, V},
        {"decode_hidden", r->hidden + (size_t)P * D, N - P, D},
        {"decode_logits", logits + (size_t)P * V, N - P, V},
        {"mtp_logits", mtp_logits, N - 1, V},
    };
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
        const dump_array *ref = dump_find(g, arr[i].name);
        CHECK_MSG(ref != NULL, "golden run lacks %s", arr[i].name);
        if (!ref) continue;
        dump_array a = {.ndim = 2, .shape = {arr[i].rows, arr[i].cols},
                        .n = (size_t)(arr[i].rows * arr[i].cols), .data = arr[i].data};
        snprintf(a.name, sizeof a.name, "%s", arr[i].name);
        dump_cmp c;
        CHECK_MSG(dump_compare(&a, ref, &c) == 0, "%s: shape differs from the golden", arr[i].name);
        printf("  vs golden %-16s max-abs %.3e  max-rel %.3e", arr[i].name, c.max_abs, c.max_rel);
        if (arr[i].cols == V) printf("  top-1 %lld/%lld", c.top1_same, c.rows);
        printf("\n");
        CHECK_MSG(c.max_rel <= 1e-4, "%s: max-rel %.3e > 1e-4", arr[i].name, c.max_rel);
        if (arr[i].cols == V) CHECK_MSG(c.top1_same == c.rows, "%s: top-1 %lld/%lld", arr[i].name,
                                        c.top1_same, c.rows);
    }
    free(logits); free(mtp_logits);
}

static int run_case(dsv4_model *m, dsv4_dist *dist, int parallel, const cp_case *cs,
                    const dump_dir *golden) {
    int N = 0;
    for (int i = 0; i < 16 && cs->chunks[i]; i++) N += cs->chunks[i];
    int32_t *tokens = malloc((size_t)N * sizeof *tokens);
    for (int i = 0; i < N; i++) tokens[i] = golden ? golden->tokens[i] : rnd_token(); /* same on every rank */
    dsv4_err err = {0};
    run cp, ref;
    int ok = 1;
    if (run_open(m, dist, parallel, cs->granule, N, &cp, &err)) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, cs->name, err.msg);
        dsv4_dist_abort(dist, 1);
        return 0;
    }
    if (rank == 0 && run_open(m, NULL, 0, 0, N, &ref, &err)) {
        fprintf(stderr, "%s: %s\n", cs->name, err.msg);
        dsv4_dist_abort(dist, 1);
        return 0;
    }
    /* every rank makes every call, whatever the home rank's checks found */
    for (int i = 0; i < 16 && cs->chunks[i]; i++) {
        int c = cs->chunks[i];
        if (run_step(&cp, tokens, N, c, &err)) {
            fprintf(stderr, "rank %d: %s: call %d: %s\n", rank, cs->name, i, err.msg);
            dsv4_dist_abort(dist, 1);
            return 0;
        }
        CHECK_MSG(dsv4_seq_length(cp.e, cp.seq) == cp.done, "%s: rank %d length %lld != %lld",
                  cs->name, rank, (long long)dsv4_seq_length(cp.e, cp.seq), (long long)cp.done);
        CHECK(dsv4_seq_mtp_length(cp.e, cp.seq) == cp.mtp_done);
        if (rank != 0) continue;
        CHECK(run_step(&ref, tokens, N, c, &err) == 0);
        char what[160];
        snprintf(what, sizeof what, "%s, after call %d", cs->name, i);
        const int64_t s = ref.done - c;
        ok &= same_rows(cp.hidden + s * D, ref.hidden + s * D, c, D, "hidden", what);
        ok &= same_rows(cp.streams + s * HC * D, ref.streams + s * HC * D, c, (int64_t)HC * D,
                        "streams", what);
        ok &= same_rows(cp.mtp, ref.mtp, ref.mtp_done, D, "MTP hidden", what);
        ok &= same_cache(cp.e, cp.seq, ref.e, ref.seq, what);
    }
    if (rank == 0) {
        printf("%-52s N %4d: %s\n", cs->name, N, ok ? "bitwise equal" : "DIFFERENT");
        if (golden) check_golden(cp.e, golden, &cp, N);
        run_close(&ref);
    }
    run_close(&cp);
    free(tokens);
    return ok;
}

int main(int argc, char **argv) {
    dsv4_dist *dist;
    dsv4_err err = {0};
    if (dsv4_dist_init(&argc, &argv, &dist, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    rank = dsv4_dist_rank(dist);
    size = dsv4_dist_size(dist);
    int parallel = DSV4_PAR_CP, granule = 0;
    KV = test_kv_dtype();
    const char *cases = "all", *golden_dir = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--ep")) parallel |= DSV4_PAR_EP;
        else if (!strcmp(argv[i], "--fast")) REFERENCE = 0;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = argv[++i];
        else if (!strcmp(argv[i], "--golden") && i + 1 < argc) golden_dir = argv[++i];
        else if (!strcmp(argv[i], "--granule") && i + 1 < argc) granule = atoi(argv[++i]);
        else argc = 0; /* usage */
    }
    if (argc < 2) {
        fprintf(stderr, "usage: mpirun -np CP test_cp MODEL_DIR [--ep] [--fast] [--cases all|short|none] "
                        "[--golden RUN_DIR --granule G]\n");
        dsv4_dist_finalize(dist);
        return 2;
    }
    dsv4_model *m;
    if (dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        dsv4_dist_abort(dist, 1);
        return 1;
    }
    dsv4_model_info info = dsv4_model_get_info(m);
    V = info.vocab_size; D = info.hidden_size; HC = info.hc_mult; L = info.n_layers;
    CFG = &m->cfg;
    WIN = CFG->sliding_window; HD = CFG->head_dim; DI = CFG->index_head_dim;
    if (rank == 0)
        printf("CP = %d ranks%s, %s kernels, window %d\n", size, parallel & DSV4_PAR_EP ? " (+EP)" : "",
               REFERENCE ? "reference" : "optimized", WIN);
    const size_t n_cases = sizeof CASES / sizeof CASES[0];
    if (!strcmp(cases, "all"))
        for (size_t i = 0; i < n_cases; i++) run_case(m, dist, parallel, &CASES[i], NULL);
    else if (!strcmp(cases, "short"))
        for (size_t i = 0; i < sizeof SHORT_CASES / sizeof SHORT_CASES[0]; i++)
            run_case(m, dist, parallel, &CASES[SHORT_CASES[i]], NULL);
    if (golden_dir) {
        /* the golden run: one CP prefill of its prefill length, then decode steps, on the
         * reference (F32) cache the oracle's 1e-4 is meant for */
        KV = DSV4_KV_F32;
        dump_dir g;
        if (dump_load(golden_dir, &g)) { dsv4_dist_abort(dist, 1); return 1; }
        cp_case cs = {"golden run", granule, {g.prefill_len}};
        int k = 1;
        for (int t = g.prefill_len; t < g.n_tokens && k < 16; t++) cs.chunks[k++] = 1;
        CHECK_MSG(g.prefill_len + (k - 1) == g.n_tokens, "golden run longer than the schedule");
        char name[64];
        snprintf(name, sizeof name, "golden: CP prefill %d (G=%d) + %d decodes", g.prefill_len,
                 granule, k - 1);
        cs.name = name;
        run_case(m, dist, parallel, &cs, &g);
        dump_free(&g);
    }
    dsv4_model_close(m);
    int rc = rank == 0 ? test_report() : (test_failed_ ? 1 : 0);
    dsv4_dist_finalize(dist);
    return rc;
}
