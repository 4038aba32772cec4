/* step_msg.c — rank 0's engine calls recorded, broadcast and replayed on the other ranks
 * (step_msg.h).
 *
 * Wire format (native byte order: the ranks of a group run one build on one kind of host,
 * which engine create's agreement checks): framed by srv_frame_send (util.h), a header
 * {magic, body bytes} for which a follower waits without a deadline, then the body under
 * the peer timeout.
 * The body is a list of ops, each an int32 kind followed by its fields:
 *   START   seq n(i64)                  n = 0: dsv4_seq_create; else dsv4_seq_mirror(n)
 *                                       (rank 0 restored a prefix of n); either must
 *                                       return seq
 *   FREE    seq                         dsv4_seq_free
 *   FORK    src dst                     dsv4_seq_fork(src): must return dst
 *   COMMIT  seq k                       dsv4_seq_commit
 *   FORWARD n_spans, per span: seq start(i64) n_tokens n_hidden n_streams speculative
 *           has_hidden_rows has_stream_rows tokens[n_tokens] [hidden_rows] [stream_rows]
 *   MTP     n_spans, per span: seq start(i64) n out next_tokens[n]   (out: DSV4_MTP_OUT_*)
 *   STOP
 * FORWARD, MTP and STOP end a message.
 */
#include "serve/step_msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/util.h"

enum { OP_START = 1, OP_FREE, OP_COMMIT, OP_FORWARD, OP_MTP, OP_STOP, OP_FORK };

#define MSG_MAGIC 0x44535634u /* "DSV4" */

struct srv_relay {
    dsv4_engine *e;
    dsv4_dist *d;       /* NULL: no group, the calls pass straight through */
    srv_buf msg;        /* the message being recorded (oom: a call could not be recorded) */
    int failed;         /* DSV4_ERR_* once the group is unusable (a broadcast failed, or a
                         * call could not be recorded): every later call fails */
    char why[sizeof ((dsv4_err *)0)->msg];
    int stopped;
};

/* ---- recording (rank 0) ---------------------------------------------------------------- */

static void put(srv_relay *rl, const void *p, size_t n) { srv_buf_put(&rl->msg, p, n); }
static void put_i32(srv_relay *rl, int32_t v) { srv_wr_i32(&rl->msg, v); }
static void put_i64(srv_relay *rl, int64_t v) { srv_wr_i64(&rl->msg, v); }

static int group_failed(const srv_relay *rl, dsv4_err *err) {
    return srv_fail(err, rl->failed, "the process group cannot serve any more (%s); restart the server",
                    rl->why);
}

/* Whether the group can still serve; a call that could not be recorded fails it. */
static int usable(srv_relay *rl) {
    if (!rl->failed && rl->msg.oom) {
        rl->failed = DSV4_ERR_NOMEM;
        snprintf(rl->why, sizeof rl->why, "out of memory for the step message");
    }
    return !rl->failed;
}

/* Broadcasts the recorded message (srv_frame_send) and starts a new one. */
static int send_msg(srv_relay *rl, dsv4_err *err) {
    if (!usable(rl)) {
        rl->msg.n = 0;  /* what was recorded since goes nowhere */
        return group_failed(rl, err);
    }
    dsv4_err e2 = {0};
    const int rc = srv_frame_send(rl->d, MSG_MAGIC, rl->msg.s, rl->msg.n, &e2);
    rl->msg.n = 0;
    if (rc) {
        rl->failed = rc;
        snprintf(rl->why, sizeof rl->why, "%s", e2.msg);
        return group_failed(rl, err);
    }
    return DSV4_OK;
}

int srv_relay_create(dsv4_engine *e, dsv4_dist *d, srv_relay **out, dsv4_err *err) {
    srv_relay *rl = calloc(1, sizeof *rl);
    if (!rl) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    rl->e = e;
    rl->d = d && dsv4_dist_size(d) > 1 ? d : NULL;
    *out = rl;
    return DSV4_OK;
}

void srv_relay_free(srv_relay *rl) {
    if (!rl) return;
    srv_buf_free(&rl->msg);
    free(rl);
}

int srv_relay_started(srv_relay *rl, int seq, int64_t n, dsv4_err *err) {
    if (!rl->d) return DSV4_OK;
    if (!usable(rl)) return group_failed(rl, err);
    put_i32(rl, OP_START);
    put_i32(rl, seq);
    put_i64(rl, n);
    return DSV4_OK;
}

int srv_relay_seq_free(srv_relay *rl, int seq, dsv4_err *err) {
    int rc = dsv4_seq_free(rl->e, seq, err);
    if (!rc && rl->d) {
        put_i32(rl, OP_FREE);
        put_i32(rl, seq);
    }
    return rc;
}

int srv_relay_fork(srv_relay *rl, int src, int *dst, dsv4_err *err) {
    if (rl->d && !usable(rl)) return group_failed(rl, err);
    int rc = dsv4_seq_fork(rl->e, src, dst, err);
    if (!rc && rl->d) {
        put_i32(rl, OP_FORK);
        put_i32(rl, src);
        put_i32(rl, *dst);
    }
    return rc;
}

void srv_relay_committed(srv_relay *rl, int seq, int k) {
    if (!rl->d) return;
    put_i32(rl, OP_COMMIT);
    put_i32(rl, seq);
    put_i32(rl, k);
}

/* Rows a span asks for: the list when there is one. */
static void put_rows(srv_relay *rl, const int *rows, int n) {
    if (rows)
        for (int j = 0; j < n; j++) put_i32(rl, rows[j]);
}

int srv_relay_forward(srv_relay *rl, const dsv4_span *spans, int n_spans, float *hidden,
                      float *streams, dsv4_err *err) {
    if (rl->d) {
        put_i32(rl, OP_FORWARD);
        put_i32(rl, n_spans);
        for (int i = 0; i < n_spans; i++) {
            const dsv4_span *sp = &spans[i];
            put_i32(rl, sp->seq);
            put_i64(rl, sp->start);
            put_i32(rl, sp->n_tokens);
            put_i32(rl, sp->n_hidden);
            put_i32(rl, sp->n_streams);
            put_i32(rl, sp->speculative);
            put_i32(rl, sp->hidden_rows != NULL);
            put_i32(rl, sp->stream_rows != NULL);
            put(rl, sp->tokens, (size_t)sp->n_tokens * sizeof *sp->tokens);
            put_rows(rl, sp->hidden_rows, sp->n_hidden);
            put_rows(rl, sp->stream_rows, sp->n_streams);
        }
        int rc = send_msg(rl, err);
        if (rc) return rc;
    }
    return dsv4_forward(rl->e, spans, n_spans, hidden, streams, err);
}

int srv_relay_mtp_forward(srv_relay *rl, const dsv4_mtp_span *spans, int n_spans, const int *out,
                          float *hidden, dsv4_err *err) {
    if (rl->d) {
        put_i32(rl, OP_MTP);
        put_i32(rl, n_spans);
        for (int i = 0; i < n_spans; i++) {
            put_i32(rl, spans[i].seq);
            put_i64(rl, spans[i].start);
            put_i32(rl, spans[i].n);
            put_i32(rl, out ? out[i] : DSV4_MTP_OUT_ALL);
            put(rl, spans[i].next_tokens, (size_t)spans[i].n * sizeof(int32_t));
        }
        int rc = send_msg(rl, err);
        if (rc) return rc;
    }
    return dsv4_mtp_forward_out(rl->e, spans, n_spans, out, hidden, err);
}

int srv_relay_stop(srv_relay *rl, dsv4_err *err) {
    if (!rl || !rl->d || rl->stopped) return DSV4_OK;
    rl->stopped = 1;
    if (!usable(rl) && rl->failed == DSV4_ERR_NOMEM) {
        /* a call went unrecorded: the followers may differ, but they can still stop */
        rl->failed = 0;
        srv_buf_free(&rl->msg);
    }
    put_i32(rl, OP_STOP);
    return send_msg(rl, err);
}

/* ---- replaying (the other ranks) ------------------------------------------------------- */

/* What a follower holds to replay calls: spans pointing into its own arrays. */
typedef struct follower {
    dsv4_engine *e;
    int max_seqs, max_rows;
    dsv4_span *spans;        /* (max_seqs) */
    dsv4_mtp_span *mspans;   /* (max_seqs) */
    int *mout;               /* (max_seqs) DSV4_MTP_OUT_* of each MTP span */
    int32_t *tok;            /* (max_rows) every span's tokens, packed */
    int *rows;               /* (2 max_rows) requested hidden and stream rows, packed */
    float *hidden;           /* (max_rows, D) outputs: never written on a follower, but the
                              * calls want them */
    float *streams;          /* (max_rows, hc, D) also the MTP spans' input streams */
} follower;

static int diverged(dsv4_err *err, const char *what, int seq, const dsv4_err *why) {
    return srv_fail(err, DSV4_ERR_STATE, "follower: %s of sequence %d succeeded on rank 0 but not "
                    "here (%s): the ranks' engines differ", what, seq, why->msg);
}

static int read_forward(follower *f, srv_rd *r, int *n_spans) {
    int n = srv_rd_i32(r), rows = 0, wanted = 0;
    if (n < 1 || n > f->max_seqs) return -1;
    for (int i = 0; i < n && !r->bad; i++) {
        dsv4_span *sp = &f->spans[i];
        memset(sp, 0, sizeof *sp);
        sp->seq = srv_rd_i32(r);
        sp->start = srv_rd_i64(r);
        sp->n_tokens = srv_rd_i32(r);
        sp->n_hidden = srv_rd_i32(r);
        sp->n_streams = srv_rd_i32(r);
        sp->speculative = srv_rd_i32(r);
        const int has_h = srv_rd_i32(r), has_s = srv_rd_i32(r);
        if (sp->n_tokens < 1 || sp->n_tokens > f->max_rows - rows || sp->n_hidden < 0 ||
            sp->n_hidden > sp->n_tokens || sp->n_streams < 0 || sp->n_streams > sp->n_tokens)
            return -1;
        srv_rd_bytes(r, f->tok + rows, (size_t)sp->n_tokens * sizeof(int32_t));
        sp->tokens = f->tok + rows;
        rows += sp->n_tokens;
        if (has_h) {
            srv_rd_bytes(r, f->rows + wanted, (size_t)sp->n_hidden * sizeof(int));
            sp->hidden_rows = f->rows + wanted;
            wanted += sp->n_hidden;
        }
        if (has_s) {
            srv_rd_bytes(r, f->rows + wanted, (size_t)sp->n_streams * sizeof(int));
            sp->stream_rows = f->rows + wanted;
            wanted += sp->n_streams;
        }
    }
    *n_spans = n;
    return r->bad ? -1 : 0;
}

static int read_mtp(follower *f, srv_rd *r, int *n_spans) {
    int n = srv_rd_i32(r), rows = 0;
    if (n < 1 || n > f->max_seqs) return -1;
    for (int i = 0; i < n && !r->bad; i++) {
        dsv4_mtp_span *sp = &f->mspans[i];
        sp->seq = srv_rd_i32(r);
        sp->start = srv_rd_i64(r);
        sp->n = srv_rd_i32(r);
        f->mout[i] = srv_rd_i32(r);  /* the call checks it, on every rank alike */
        if (sp->n < 1 || sp->n > f->max_rows - rows) return -1;
        srv_rd_bytes(r, f->tok + rows, (size_t)sp->n * sizeof(int32_t));
        sp->next_tokens = f->tok + rows;
        sp->streams = f->streams;
        rows += sp->n;
    }
    *n_spans = n;
    return r->bad ? -1 : 0;
}

/* Replays one message; *stop = 1 after the stop op. */
static int replay(follower *f, srv_rd *r, int *stop, dsv4_err *err) {
    dsv4_err why = {0};
    while (r->p < r->end) {
        const int op = srv_rd_i32(r);
        int seq, n, got;
        int64_t len;
        switch (op) {
        case OP_START:
            seq = srv_rd_i32(r);
            len = srv_rd_i64(r);
            if (r->bad) break;
            if (len ? dsv4_seq_mirror(f->e, len, &n, &why) : dsv4_seq_create(f->e, &n, &why))
                return diverged(err, len ? "restore" : "create", seq, &why);
            if (n != seq)
                return srv_fail(err, DSV4_ERR_STATE, "follower: rank 0 started sequence %d, this rank %d: "
                                "the ranks' engines differ", seq, n);
            break;
        case OP_FREE:
            seq = srv_rd_i32(r);
            if (!r->bad && dsv4_seq_free(f->e, seq, &why)) return diverged(err, "free", seq, &why);
            break;
        case OP_FORK:
            seq = srv_rd_i32(r);
            n = srv_rd_i32(r);
            if (r->bad) break;
            if (dsv4_seq_fork(f->e, seq, &got, &why)) return diverged(err, "fork", seq, &why);
            if (got != n)
                return srv_fail(err, DSV4_ERR_STATE, "follower: rank 0 forked sequence %d into %d, this rank "
                                "into %d: the ranks' engines differ", seq, n, got);
            break;
        case OP_COMMIT:
            seq = srv_rd_i32(r);
            n = srv_rd_i32(r);
            if (!r->bad && dsv4_seq_commit(f->e, seq, n, &why)) return diverged(err, "commit", seq, &why);
            break;
        case OP_FORWARD:
            if (read_forward(f, r, &n)) { r->bad = 1; break; }
            /* the outcome is rank 0's too: the call agrees across ranks before it computes,
             * and a failure inside it reaches every rank */
            dsv4_forward(f->e, f->spans, n, f->hidden, f->streams, &why);
            break;
        case OP_MTP:
            if (read_mtp(f, r, &n)) { r->bad = 1; break; }
            dsv4_mtp_forward_out(f->e, f->mspans, n, f->mout, f->hidden, &why);
            break;
        case OP_STOP:
            *stop = 1;
            break;
        default:
            r->bad = 1;
        }
        if (r->bad) break;
    }
    if (r->bad) return srv_fail(err, DSV4_ERR_STATE, "follower: a malformed step message from rank 0");
    return DSV4_OK;
}

int srv_follow(dsv4_engine *e, dsv4_dist *d, dsv4_err *err) {
    const dsv4_engine_opts eo = dsv4_engine_get_opts(e);
    const dsv4_model_info mi = dsv4_model_get_info(dsv4_engine_model(e));
    follower f = {.e = e, .max_seqs = eo.max_seqs, .max_rows = eo.max_rows};
    const size_t rows = (size_t)eo.max_rows, D = (size_t)mi.hidden_size, hc = (size_t)mi.hc_mult;
    f.spans = calloc((size_t)f.max_seqs, sizeof *f.spans);
    f.mspans = calloc((size_t)f.max_seqs, sizeof *f.mspans);
    f.mout = calloc((size_t)f.max_seqs, sizeof *f.mout);
    f.tok = malloc(rows * sizeof *f.tok);
    f.rows = malloc(2 * rows * sizeof *f.rows);
    f.hidden = malloc(rows * D * sizeof *f.hidden);
    f.streams = calloc(rows * hc * D, sizeof *f.streams);
    uint8_t *msg = NULL;
    size_t cap = 0;
    int rc = DSV4_OK, stop = 0;
    if (!f.spans || !f.mspans || !f.mout || !f.tok || !f.rows || !f.hidden || !f.streams)
        rc = srv_fail(err, DSV4_ERR_NOMEM, "follower: out of memory");
    while (!rc && !stop) {
        size_t n;
        if ((rc = srv_frame_recv(d, MSG_MAGIC, &msg, &cap, &n, err))) break;
        srv_rd r = {msg, msg + n, 0};
        rc = replay(&f, &r, &stop, err);
    }
    free(msg);
    free(f.spans);
    free(f.mspans);
    free(f.mout);
    free(f.tok);
    free(f.rows);
    free(f.hidden);
    free(f.streams);
    return rc;
}
