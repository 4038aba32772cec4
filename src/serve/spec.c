/* spec.c — dsv4_spec, the MTP side of one sequence (serving.md §e; see dsv4_text.h).
 *
 * Positions [hs, n) have run through the main model but not yet through the MTP block
 * (hs is the engine's MTP length m). MTP row t consumes the streams h_t and the token
 * x_{t+1}, so rows [hs, n - 1) are always ready and row n - 1 waits for x_n, the pending
 * token. Only committed positions are ever handed to the MTP block, so its cache never
 * needs a rollback. Uses only the public API.
 */
#include <stdlib.h>
#include <string.h>

#include "serve/gen.h"
#include "util/err.h"

struct dsv4_spec {
    dsv4_engine *e;
    int seq;
    int64_t row_floats;     /* hc * D */
    int64_t max_ctx;
    int c_max;              /* the engine's most rows of one span */
    int64_t n;              /* main length */
    int64_t hs;             /* first position whose MTP row has not run (= m) */
    float *h;               /* (cap, hc, D) streams of positions [hs, n) */
    int32_t *x;             /* (cap) x[i] = token of position hs + 1 + i, for i < n - hs
                             * (the last one, x_n, only while has_next) */
    int64_t cap;
    int has_next;           /* x_n known */
    int32_t next;           /* x_n while has_next */
    int32_t draft;          /* d_{n+1}, or -1 */
    int32_t vtok[2];        /* rows of the verify span in flight: [x_n, d] */
    int vrows, vspec;       /* its row count, 1 when speculative */
    int64_t mtp_rows;       /* rows of the last MTP span handed out */
    int mtp_drafts;
    dsv4_spec_stats st;
    dsv4_spec_draft_fn hook;
    void *hook_user;
};

/* The sequence must be where s left it: every call on it goes through s. */
static int in_step(const dsv4_spec *s, const char *what, dsv4_err *err) {
    const int64_t n = dsv4_seq_length(s->e, s->seq), m = dsv4_seq_mtp_length(s->e, s->seq);
    if (n != s->n || m != s->hs)
        return dsv4_fail(err, DSV4_ERR_STATE, "spec %s: sequence %d is at n = %lld, m = %lld; "
                         "its MTP state expected n = %lld, m = %lld (a call on it was not "
                         "reported)", what, s->seq, (long long)n, (long long)m, (long long)s->n,
                         (long long)s->hs);
    return DSV4_OK;
}

static int reserve(dsv4_spec *s, int64_t rows, dsv4_err *err) {
    if (rows <= s->cap) return DSV4_OK;
    int64_t cap = rows > 2 * s->cap ? rows : 2 * s->cap;
    float *h = realloc(s->h, (size_t)(cap * s->row_floats) * sizeof *h);
    if (h) s->h = h;
    int32_t *x = realloc(s->x, (size_t)cap * sizeof *x);
    if (x) s->x = x;
    if (!h || !x) return dsv4_fail(err, DSV4_ERR_NOMEM, "spec: out of memory");
    s->cap = cap;
    return DSV4_OK;
}

/* Positions [n, n + c) joined the sequence: their streams and tokens. */
static void append(dsv4_spec *s, const int32_t *tokens, int c, const float *streams) {
    for (int j = 0; j < c; j++) {
        const int64_t p = s->n + j;
        memcpy(s->h + (p - s->hs) * s->row_floats, streams + (int64_t)j * s->row_floats,
               (size_t)s->row_floats * sizeof(float));
        if (p >= s->hs + 1) s->x[p - s->hs - 1] = tokens[j];
    }
    s->n += c;
    s->has_next = 0;
    s->draft = -1;
}

/* A spec for seq at length n whose MTP block consumed [0, hs); last = the streams of
 * position hs when hs == n - 1 (a restored snapshot), else NULL. */
static int spec_new(dsv4_engine *e, int seq, int64_t n, int64_t hs, const float *last,
                    dsv4_spec **out, dsv4_err *err) {
    dsv4_spec *s = calloc(1, sizeof *s);
    if (!s) return dsv4_fail(err, DSV4_ERR_NOMEM, "spec: out of memory");
    const dsv4_model_info info = dsv4_model_get_info(dsv4_engine_model(e));
    s->e = e;
    s->seq = seq;
    s->row_floats = (int64_t)info.hc_mult * info.hidden_size;
    s->max_ctx = dsv4_engine_get_opts(e).max_context;
    s->c_max = dsv4_engine_get_opts(e).c_max;
    s->n = n;
    s->hs = hs;
    s->draft = -1;
    int rc = reserve(s, 4, err);
    if (rc) { dsv4_spec_free(s); return rc; }
    if (last) memcpy(s->h, last, (size_t)s->row_floats * sizeof(float));
    *out = s;
    return DSV4_OK;
}

int dsv4_spec_resume(dsv4_engine *e, int seq, const float *streams, dsv4_spec **out,
                     dsv4_err *err) {
    *out = NULL;
    if (!e || !streams) return dsv4_fail(err, DSV4_ERR_ARG, "spec resume: NULL argument");
    if (!dsv4_engine_get_opts(e).mtp)
        return dsv4_fail(err, DSV4_ERR_STATE, "spec: the engine keeps no MTP caches (opts.mtp = 0)");
    const int64_t n = dsv4_seq_length(e, seq), m = dsv4_seq_mtp_length(e, seq);
    if (n < 1) return dsv4_fail(err, DSV4_ERR_ARG, "spec resume: sequence %d is not live or empty", seq);
    if (m != n - 1 || dsv4_seq_pending(e, seq))
        return dsv4_fail(err, DSV4_ERR_STATE, "spec resume: sequence %d has MTP length %lld, "
                         "length %lld (or a pending span); a restored snapshot has m = n - 1",
                         seq, (long long)m, (long long)n);
    return spec_new(e, seq, n, n - 1, streams, out, err);
}

int dsv4_spec_create(dsv4_engine *e, int seq, dsv4_spec **out, dsv4_err *err) {
    *out = NULL;
    if (!e) return dsv4_fail(err, DSV4_ERR_ARG, "spec: NULL engine");
    if (!dsv4_engine_get_opts(e).mtp)
        return dsv4_fail(err, DSV4_ERR_STATE, "spec: the engine keeps no MTP caches (opts.mtp = 0)");
    const int64_t n = dsv4_seq_length(e, seq), m = dsv4_seq_mtp_length(e, seq);
    if (n < 0) return dsv4_fail(err, DSV4_ERR_ARG, "spec: sequence %d is not live", seq);
    if (m != n || dsv4_seq_pending(e, seq))
        return dsv4_fail(err, DSV4_ERR_STATE, "spec: sequence %d has MTP length %lld != length "
                         "%lld (or a pending span); start it on a caught-up sequence", seq,
                         (long long)m, (long long)n);
    return spec_new(e, seq, n, n, NULL, out, err);
}

int dsv4_spec_fork(const dsv4_spec *src, int seq, dsv4_spec **out, dsv4_err *err) {
    *out = NULL;
    if (!src) return dsv4_fail(err, DSV4_ERR_ARG, "spec fork: NULL source");
    if (dsv4_seq_length(src->e, seq) != src->n || dsv4_seq_mtp_length(src->e, seq) != src->hs ||
        dsv4_seq_pending(src->e, seq))
        return dsv4_fail(err, DSV4_ERR_STATE, "spec fork: sequence %d is not at the source's "
                         "n = %lld, m = %lld (fork it with dsv4_seq_fork first)", seq,
                         (long long)src->n, (long long)src->hs);
    dsv4_spec *s;
    int rc = spec_new(src->e, seq, src->n, src->hs, NULL, &s, err);
    if (rc) return rc;
    const int64_t rows = src->n - src->hs;
    if ((rc = reserve(s, rows + 1, err))) { dsv4_spec_free(s); return rc; }
    memcpy(s->h, src->h, (size_t)(rows * s->row_floats) * sizeof(float));
    memcpy(s->x, src->x, (size_t)rows * sizeof *s->x);
    s->has_next = src->has_next;
    s->next = src->next;
    s->draft = src->draft;
    *out = s;
    return DSV4_OK;
}

void dsv4_spec_free(dsv4_spec *s) {
    if (!s) return;
    free(s->h);
    free(s->x);
    free(s);
}

void dsv4_spec_set_draft_hook(dsv4_spec *s, dsv4_spec_draft_fn fn, void *user) {
    s->hook = fn;
    s->hook_user = user;
}

int dsv4_spec_fed(dsv4_spec *s, const int32_t *tokens, int n, const float *streams, dsv4_err *err) {
    if (n < 1 || !tokens || !streams) return dsv4_fail(err, DSV4_ERR_ARG, "spec fed: no rows");
    if (dsv4_seq_length(s->e, s->seq) != s->n + n || dsv4_seq_mtp_length(s->e, s->seq) != s->hs)
        return dsv4_fail(err, DSV4_ERR_STATE, "spec fed: sequence %d is at %lld, not %lld + %d",
                         s->seq, (long long)dsv4_seq_length(s->e, s->seq), (long long)s->n, n);
    int rc = reserve(s, s->n + n - s->hs + 1, err);
    if (rc) return rc;
    append(s, tokens, n, streams);
    return DSV4_OK;
}

void dsv4_spec_set_next(dsv4_spec *s, int32_t token) {
    if (s->n >= s->hs + 1) s->x[s->n - s->hs - 1] = token;  /* room: reserve keeps one spare */
    s->next = token;
    s->has_next = 1;
    s->draft = -1;
}

void dsv4_spec_mtp_span(dsv4_spec *s, dsv4_mtp_span *ms, int *drafts) {
    const int64_t ready = s->n - s->hs - (s->has_next ? 0 : 1);
    int64_t rows = ready < 0 ? 0 : ready;
    /* A whole chunk and the row that waited for its token can be ready at once (a scheduler
     * that draws the first token in the step of the prompt's last chunk): one span holds at
     * most c_max rows, so the rest, and with them the draft, wait for the next call. */
    if (rows > s->c_max) rows = s->c_max;
    s->mtp_rows = rows;
    s->mtp_drafts = s->has_next && rows > 0 && rows == ready;
    *ms = (dsv4_mtp_span){s->seq, s->hs, (int)rows, s->x, s->h};
    *drafts = s->mtp_drafts;
}

void dsv4_spec_mtp_done(dsv4_spec *s, int32_t draft) {
    const int64_t rows = s->mtp_rows, left = s->n - s->hs - rows;
    if (dsv4_seq_mtp_length(s->e, s->seq) != s->hs + rows) return; /* it did not run */
    memmove(s->h, s->h + rows * s->row_floats, (size_t)(left * s->row_floats) * sizeof(float));
    memmove(s->x, s->x + rows, (size_t)left * sizeof *s->x);
    s->hs += rows;
    s->mtp_rows = 0;
    if (s->mtp_drafts) s->draft = s->hook ? s->hook(s->hook_user, s->n + 1, draft) : draft;
    s->mtp_drafts = 0;
}

int dsv4_spec_verify_span(dsv4_spec *s, dsv4_span *sp, dsv4_err *err) {
    if (!s->has_next) return dsv4_fail(err, DSV4_ERR_STATE, "spec verify: no pending token");
    int rc = in_step(s, "verify", err);
    if (rc) return rc;
    s->vtok[0] = s->next;
    s->vspec = s->draft >= 0 && s->n + 2 <= s->max_ctx;
    s->vtok[1] = s->vspec ? s->draft : 0;
    s->vrows = 1 + s->vspec;
    *sp = (dsv4_span){.seq = s->seq, .start = s->n, .n_tokens = s->vrows, .tokens = s->vtok,
                      .n_hidden = s->vrows, .n_streams = s->vrows, .speculative = s->vspec};
    return DSV4_OK;
}

int dsv4_spec_verify_done(dsv4_spec *s, int32_t y, int y_joins, const float *streams, int *k,
                          dsv4_err *err) {
    *k = 0;
    if (!s->vrows) return dsv4_fail(err, DSV4_ERR_STATE, "spec verify_done: no verify span");
    int acc = 1;
    if (s->vspec) {
        acc = y == s->vtok[1] && y_joins ? 2 : 1;
        int rc = dsv4_seq_commit(s->e, s->seq, acc, err);
        if (rc) return rc;
        s->st.drafts++;
        s->st.accepted += acc == 2;
    }
    if (dsv4_seq_length(s->e, s->seq) != s->n + acc)
        return dsv4_fail(err, DSV4_ERR_STATE, "spec verify_done: the verify span of sequence %d "
                         "did not run", s->seq);
    int rc = reserve(s, s->n + acc - s->hs + 1, err);
    if (rc) return rc;
    append(s, s->vtok, acc, streams);
    s->vrows = 0;
    s->st.steps++;
    s->st.tokens += acc;
    *k = acc;
    return DSV4_OK;
}

dsv4_spec_stats dsv4_spec_get_stats(const dsv4_spec *s) { return s->st; }
