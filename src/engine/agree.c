/* agree.c — ranks of a group agree before they compute (see engine.h): a rank given another
 * checkpoint, other options or other inputs must fail cleanly on every rank, never blend
 * two models, overflow a peer-sized buffer or wait forever. */
#include <string.h>

#include "dist/dist.h"
#include "engine/engine.h"
#include "engine/forward_cp.h"
#include "util/err.h"
#include "util/sha256.h"

/* Little-endian 64-bit fields into the hash (mismatched hosts then still compare). */
static int put(dsv4_sha256 *h, int64_t v, dsv4_err *err) { return dsv4_sha256_u64(h, (uint64_t)v, err); }

/* The options that change what a rank computes or how the group exchanges data: every
 * field of dsv4_engine_opts after defaults except threads, pin_threads, numa and fp4_layout
 * (results do not depend on the split, the placement or the weights' layout), the group pointer and the progress callback, plus
 * the kernel level in use. max_rows decides which calls a rank refuses, prefix_entries which
 * snapshots its prefix cache still holds: ranks that differ there would part ways later. */
static int options_digest(const dsv4_engine *e, uint8_t out[32], dsv4_err *err) {
    const dsv4_engine_opts *o = &e->opts;
    const int64_t v[] = {
        o->max_context, o->max_seqs, o->c_max, o->mtp, (int64_t)o->cache_bytes, o->block, o->win_block,
        o->reference, o->parallel, o->ep_wave, o->cp_granule, o->w8a8, (int64_t)o->fidelity,
        o->verify_weights, o->max_rows, o->prefix_entries, o->kv_dtype, e->k ? dsv4_kctx_simd(e->k) : -1,
    };
    dsv4_sha256 *h = dsv4_sha256_new(err);
    if (!h) return DSV4_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; i < sizeof v / sizeof *v && !rc; i++) rc = put(h, v[i], err);
    if (!rc) rc = dsv4_sha256_final(h, out, err);
    dsv4_sha256_free(h);
    return rc;
}

int dsv4_engine_agree_create(dsv4_engine *e, int rc, dsv4_err *err) {
    uint8_t dig[3][32];
    memset(dig, 0, sizeof dig);
    dsv4_err mine = {0};
    /* the digests are computed even after a local failure: the rank must still take part */
    int drc = dsv4_model_config_hash(e->model, dig[0], &mine);
    if (!drc) drc = dsv4_model_fingerprint(e->model, e->opts.verify_weights, dig[1], &mine);
    if (!drc) drc = options_digest(e, dig[2], &mine);
    if (!rc && drc) {
        rc = drc;
        if (err) *err = mine;
    }
    static const char *const names[] = {
        "config (canonical config.json fields)",
        "checkpoint (weights fingerprint: config.json, safetensors headers and sampled data)",
        "engine options or kernel level",
    };
    const char *full = "checkpoint (weights fingerprint: config.json, safetensors headers and every byte)";
    const char *const names_full[] = {names[0], full, names[2]};
    return dsv4_dist_agree(e->group, rc, 3, (const uint8_t(*)[32])dig,
                           e->opts.verify_weights ? names_full : names, DSV4_ERR_CONFIG,
                           "engine create", err);
}

/* Rows a span asks for, as indices, into the hash. */
static int put_rows(dsv4_sha256 *h, const int *rows, int n_wanted, int n_tokens, dsv4_err *err) {
    int rc = put(h, n_wanted, err);
    for (int j = 0; j < n_wanted && !rc; j++) rc = put(h, dsv4_wanted_row(rows, n_wanted, n_tokens, j), err);
    return rc;
}

int dsv4_engine_agree_spans(dsv4_engine *e, int rc, const dsv4_span *spans, int n_spans, dsv4_err *err) {
    uint8_t dig[1][32];
    memset(dig, 0, sizeof dig);
    if (!rc) { /* the spans were validated: every pointer and count can be read */
        dsv4_sha256 *h = e->call_hash; /* made at create: a call allocates nothing */
        rc = h ? dsv4_sha256_reset(h, err) : dsv4_fail(err, DSV4_ERR_STATE, "agreement: no digest context");
        if (!rc) rc = put(h, n_spans, err);
        for (int i = 0; i < n_spans && !rc; i++) {
            const dsv4_span *sp = &spans[i];
            rc = put(h, sp->seq, err);
            if (!rc) rc = put(h, sp->start, err);
            if (!rc) rc = put(h, sp->n_tokens, err);
            if (!rc) rc = put(h, sp->speculative, err);
            if (!rc) rc = dsv4_sha256_update(h, sp->tokens, (size_t)sp->n_tokens * sizeof(int32_t), err);
            if (!rc) rc = put_rows(h, sp->hidden_rows, sp->n_hidden, sp->n_tokens, err);
            if (!rc) rc = put_rows(h, sp->stream_rows, sp->n_streams, sp->n_tokens, err);
        }
        if (!rc) rc = dsv4_sha256_final(h, dig[0], err);
    }
    static const char *const names[] = {"call (spans: sequences, starts, tokens, requested rows, speculative)"};
    return dsv4_dist_agree(e->group, rc, 1, (const uint8_t(*)[32])dig, names, DSV4_ERR_ARG, "forward", err);
}

int dsv4_engine_agree_mtp(dsv4_engine *e, int rc, const dsv4_mtp_span *spans, int n_spans, dsv4_err *err) {
    uint8_t dig[1][32];
    memset(dig, 0, sizeof dig);
    if (!rc) {
        dsv4_sha256 *h = e->call_hash; /* made at create: a call allocates nothing */
        rc = h ? dsv4_sha256_reset(h, err) : dsv4_fail(err, DSV4_ERR_STATE, "agreement: no digest context");
        if (!rc) rc = put(h, n_spans, err);
        for (int i = 0; i < n_spans && !rc; i++) {
            const dsv4_mtp_span *sp = &spans[i];
            rc = put(h, sp->seq, err);
            if (!rc) rc = put(h, sp->start, err);
            if (!rc) rc = put(h, sp->n, err);
            if (!rc) rc = dsv4_sha256_update(h, sp->next_tokens, (size_t)sp->n * sizeof(int32_t), err);
        }
        if (!rc) rc = dsv4_sha256_final(h, dig[0], err);
    }
    static const char *const names[] = {"call (MTP spans: sequences, starts, next tokens)"};
    return dsv4_dist_agree(e->group, rc, 1, (const uint8_t(*)[32])dig, names, DSV4_ERR_ARG, "mtp_forward", err);
}

/* Rank r's CP span from the shared values, checked as a peer's word: what a CP prefill of
 * this engine can run (the home validated it against its sequence). The start is put
 * together unsigned (a negative high word shifted is undefined), its end tested without an
 * overflow, and the tokens bounded by max_rows too: the CP arena is sized for that. */
static int dp_cp_decode(const dsv4_engine *e, const int32_t *v, dsv4_dp_cp *out) {
    out->seq = v[1];
    out->start = (int64_t)((uint64_t)(uint32_t)v[2] | (uint64_t)(uint32_t)v[3] << 32);
    out->n_tokens = v[4];
    out->n_hidden = v[5];
    out->n_streams = v[6];
    if (!out->n_tokens) return 1;
    const int most = e->opts.c_max < e->opts.max_rows ? e->opts.c_max : e->opts.max_rows;
    return out->n_tokens > 0 && out->n_tokens <= most && out->start >= 0 &&
           out->start <= e->opts.max_context - out->n_tokens && out->n_hidden >= 0 &&
           out->n_hidden <= out->n_tokens && out->n_streams >= 0 && out->n_streams <= out->n_tokens &&
           dsv4_cp_long_enough(e, out->start, out->n_tokens);
}

int dsv4_engine_dp_cp(const dsv4_engine *e, int r, dsv4_dp_cp *out) {
    if (!e->dp_share) {
        memset(out, 0, sizeof *out);
        return 1;
    }
    return dp_cp_decode(e, e->dp_share + (size_t)r * DSV4_DP_SHARE_N, out);
}

int dsv4_engine_agree_dp(dsv4_engine *e, int rc, int kind, const dsv4_span *cp, dsv4_err *err) {
    /* the kind: a rank in a forward next to one in an MTP call would walk other MoE
     * exchanges and pair the wrong collectives; under CP every rank's CP span too */
    const int64_t s0 = cp ? cp->start : 0;
    const int32_t mine[DSV4_DP_SHARE_N] = {kind, cp ? cp->seq : 0, (int32_t)(uint32_t)s0,
                                           (int32_t)(s0 >> 32), cp ? cp->n_tokens : 0,
                                           cp ? cp->n_hidden : 0, cp ? cp->n_streams : 0};
    const char *what = kind == DSV4_DP_CALL_MTP ? "mtp_forward" : "forward";
    if ((rc = dsv4_dist_agree_share(e->group, rc, DSV4_DP_SHARE_N, mine, e->dp_share, what, err))) return rc;
    /* every rank reads the same shared values in the same order and so returns the same
     * error: the kinds first (against rank 0's, never this rank's), then the CP spans */
    for (int r = 0; r < e->group->size; r++)
        if (e->dp_share[(size_t)r * DSV4_DP_SHARE_N] != e->dp_share[0])
            return dsv4_fail(err, DSV4_ERR_ARG, "%s: ranks disagree: rank %d makes another kind of call "
                             "(forward or MTP forward) than rank 0", what, r);
    for (int r = 0; r < e->group->size; r++) {
        const int32_t *v = e->dp_share + (size_t)r * DSV4_DP_SHARE_N;
        dsv4_dp_cp sp;
        if (!dp_cp_decode(e, v, &sp) || (sp.n_tokens && v[0] != DSV4_DP_CALL_FORWARD))
            return dsv4_fail(err, DSV4_ERR_STATE, "%s: rank %d shared a CP span this engine cannot run "
                             "(start %lld, %d tokens)", what, r, (long long)sp.start, sp.n_tokens);
    }
    return DSV4_OK;
}
