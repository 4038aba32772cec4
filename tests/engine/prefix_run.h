/* prefix_run.h — one sequence driven through main chunks and greedy decode steps, with
 * MTP kept at m = n - 1 after every call, everything it returns appended to a log: the
 * prefix-cache and KV-file tests compare such logs bitwise. */
#ifndef DSV4_TESTS_PREFIX_RUN_H
#define DSV4_TESTS_PREFIX_RUN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "engine/engine.h"
#include "kv_env.h"
#include "test.h"

/* the model's sizes, the alignment A and the kernel path: set once by main */
static int D, HC, V, A, REFERENCE, HAS_MTP;
static int KV_DTYPE; /* DSV4_KV_*, 0 = the default */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static int32_t rnd_token(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (int32_t)(2 + (rng >> 11) % (uint64_t)(V - 2));
}

/* Everything a sequence's calls return, appended in call order. */
typedef struct {
    float *buf;
    size_t n, cap;
} log_t;

static void log_add(log_t *l, const float *x, size_t n) {
    if (l->n + n > l->cap) {
        l->cap = (l->n + n) * 2;
        l->buf = realloc(l->buf, l->cap * sizeof(float));
    }
    memcpy(l->buf + l->n, x, n * sizeof(float));
    l->n += n;
}

/* One sequence driven through main chunks, with MTP kept at m = n - 1 after every call. */
typedef struct {
    dsv4_engine *e;
    int seq, mtp;
    int64_t n;
    int32_t *tok;       /* (cap) every token so far, decoded ones appended */
    float *last_h;      /* (D) final hidden of position n - 1 */
    float *last_s;      /* (hc, D) streams of position n - 1 */
    log_t log;
} run_t;

static void run_init(run_t *r, dsv4_engine *e, int seq, int mtp, const int32_t *tokens, int64_t n_tok) {
    memset(r, 0, sizeof *r);
    r->e = e;
    r->seq = seq;
    r->mtp = mtp;
    r->tok = malloc((size_t)(n_tok + 64) * sizeof *r->tok);
    memcpy(r->tok, tokens, (size_t)n_tok * sizeof *r->tok);
    r->last_h = calloc((size_t)D, sizeof(float));
    r->last_s = calloc((size_t)HC * D, sizeof(float));
}

static void run_free(run_t *r) {
    free(r->tok); free(r->last_h); free(r->last_s); free(r->log.buf);
}

/* Main rows [n, n + c) of r->tok, then the MTP rows that became ready. */
static int run_chunk(run_t *r, int c) {
    dsv4_err err = {0};
    float *h = malloc((size_t)c * D * sizeof(float));       /* (c, D) */
    float *s = malloc((size_t)c * HC * D * sizeof(float));  /* (c, hc, D) */
    dsv4_span sp = {.seq = r->seq, .start = r->n, .n_tokens = c, .tokens = r->tok + r->n,
                    .n_hidden = c, .n_streams = c};
    int rc = dsv4_forward(r->e, &sp, 1, h, s, &err);
    CHECK_MSG(rc == 0, "forward at %lld: %s", (long long)r->n, err.msg);
    if (rc) { free(h); free(s); return rc; }
    log_add(&r->log, h, (size_t)c * D);
    log_add(&r->log, s, (size_t)c * HC * D);
    if (r->mtp) {
        /* MTP rows [m, n_new - 1): position n_old - 1 from last_s (none at the start) */
        const int64_t m = dsv4_seq_mtp_length(r->e, r->seq), n_new = r->n + c;
        const int rows = (int)(n_new - 1 - m);
        float *ms = malloc((size_t)rows * HC * D * sizeof(float));
        float *mh = malloc((size_t)rows * D * sizeof(float));
        for (int i = 0; i < rows; i++) {
            const int64_t p = m + i;
            memcpy(ms + (size_t)i * HC * D, p < r->n ? r->last_s : s + (size_t)(p - r->n) * HC * D,
                   (size_t)HC * D * sizeof(float));
        }
        dsv4_mtp_span mp = {r->seq, m, rows, r->tok + m + 1, ms};
        if (rows > 0) {
            rc = dsv4_mtp_forward(r->e, &mp, 1, mh, &err);
            CHECK_MSG(rc == 0, "mtp at %lld: %s", (long long)m, err.msg);
            if (!rc) log_add(&r->log, mh, (size_t)rows * D);
        }
        free(ms); free(mh);
    }
    memcpy(r->last_h, h + (size_t)(c - 1) * D, (size_t)D * sizeof(float));
    memcpy(r->last_s, s + (size_t)(c - 1) * HC * D, (size_t)HC * D * sizeof(float));
    r->n += c;
    free(h); free(s);
    return rc;
}

/* k greedy decode steps from the last hidden state; logits go to the log. */
static void run_decode(run_t *r, int k) {
    float *logits = malloc((size_t)V * sizeof(float));
    dsv4_err err = {0};
    for (int i = 0; i < k; i++) {
        CHECK(dsv4_lm_head(r->e, r->last_h, 1, logits, &err) == 0);
        log_add(&r->log, logits, (size_t)V);
        int best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        r->tok[r->n] = best;
        if (run_chunk(r, 1)) break;
    }
    free(logits);
}

static int logs_equal(const log_t *a, const log_t *b) {
    return a->n == b->n && a->n > 0 && !memcmp(a->buf, b->buf, a->n * sizeof(float));
}

static dsv4_engine *mk_engine(const dsv4_model *m, int mtp, int64_t max_context, int max_seqs,
                              uint64_t cache_bytes) {
    dsv4_engine_opts o = {0};
    o.max_context = max_context;
    o.max_seqs = max_seqs;
    o.mtp = mtp;
    o.threads = 2;
    o.reference = REFERENCE;
    o.kv_dtype = KV_DTYPE ? KV_DTYPE : test_kv_dtype();
    o.cache_bytes = cache_bytes;
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_engine_create(m, &o, &e, &err) == 0, "engine: %s", err.msg);
    if (e) dsv4_cache_set_sentinel(e->cache, 1);
    return e;
}


static void check_cache(dsv4_engine *e, const char *when) {
    dsv4_err err = {0};
    CHECK_MSG(dsv4_cache_check(e->cache, &err) == 0, "%s: %s", when, err.msg);
    CHECK_MSG(dsv4_cache_sentinel_check(e->cache, &err) == 0, "%s: %s", when, err.msg);
}

/* Continues r from a restored state: length n, position n - 1's hidden and streams. */
static void run_resume(run_t *r, int64_t n, const float *h, const float *s) {
    r->n = n;
    memcpy(r->last_h, h, (size_t)D * sizeof(float));
    memcpy(r->last_s, s, (size_t)HC * D * sizeof(float));
}

/* Continues seq, restored at length n with position n - 1's hidden h and streams s, through
 * chunks of the given sizes of tokens [n, ...) and then `dec` greedy decode steps, like the
 * uninterrupted run whose log from n on is base; 1 when everything it returns (hidden,
 * streams, MTP hidden, logits) is bitwise equal to base and its tokens to the run's. */
static int continues_like(dsv4_engine *e, int seq, int mtp, const int32_t *tokens, int64_t n_tok,
                          int64_t n, const float *h, const float *s, const int *chunks,
                          int n_chunks, int dec, const log_t *base, const int32_t *base_tokens) {
    run_t r;
    run_init(&r, e, seq, mtp, tokens, n_tok);
    run_resume(&r, n, h, s);
    for (int i = 0; i < n_chunks; i++) run_chunk(&r, chunks[i]);
    run_decode(&r, dec);
    int same = logs_equal(base, &r.log);
    if (base_tokens) same &= !memcmp(r.tok, base_tokens, (size_t)r.n * sizeof *r.tok);
    run_free(&r);
    return same;
}

/* Opens the model at dir and sets the globals above from it (A from a probe engine);
 * reference: the kernel path of every engine mk_engine makes. NULL after a message. */
static dsv4_model *prefix_run_open(const char *dir, int reference) {
    REFERENCE = reference;
    dsv4_model *m;
    dsv4_err err = {0};
    if (dsv4_model_open(dir, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    const dsv4_model_info info = dsv4_model_get_info(m);
    D = info.hidden_size; HC = info.hc_mult; V = info.vocab_size; HAS_MTP = info.n_mtp > 0;
    dsv4_engine *probe = mk_engine(m, 0, 64, 1, 0);
    A = probe ? dsv4_engine_alignment(probe) : 128;
    dsv4_engine_free(probe);
    return m;
}

#endif
