/* dp.c — a process group serving with data-parallel attention (dp.h): rank 0's placement,
 * step messages and the reports it gathers; a follower's loop.
 *
 * The step message (rank 0 to all, framed by srv_frame_send: a header {magic, body bytes} for
 * which a follower waits without a deadline, then the body under the peer timeout) is a list
 * of ops:
 *   NEW home bytes(i64) request (dp_wire.h: `bytes` long; every follower gets every rank's
 *       NEW, and the others skip it)   CANCEL id(i64)   EXPIRE   STOP
 *   RESEND rank(i32): that rank's next report carries its whole key list
 * The report (every rank to rank 0, its size first in an allgather, then a gather):
 *   load (srv_rank_load) keys (srv_keys_put) n_news news[n_news] (dp_wire.h)
 * keys: the chain keys of the prefixes its cache holds (srv_pcache_held), ascending, when they
 * changed since its last report: the whole list, or what changed (the keys it no longer
 * holds and those it holds now) when that is shorter; then the checksum of its set. Rank 0
 * places a request on the rank that holds the longest prefix of its prompt, and sees what
 * each rank has evicted. When what rank 0 holds of a rank disagrees with the checksum (a
 * change it could not apply for memory), it asks that rank for its whole list (RESEND), which
 * comes with the rank's next report: the two agree again one step after a miss.
 */
#include "serve/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/dp_wire.h"
#include "serve/sched_int.h"
#include "serve/util.h"

enum { OP_NEW = 1, OP_CANCEL, OP_EXPIRE, OP_STOP, OP_RESEND };

#define DP_MAGIC 0x44505331u   /* "DPS1" */

/* A prompt's prefix key and its block count (the placement's lookup). */
typedef struct keyat {
    uint64_t key;
    int64_t blocks;
} keyat;

struct srv_dp {
    dsv4_dist *d;
    srv_sched *s;
    int rank, K;
    srv_buf msg;               /* rank 0: the step message being recorded */
    uint8_t *in;               /* (in_cap) a follower: the step message received */
    size_t in_cap;
    srv_buf rep;               /* this rank's report */
    int failed;                /* rank 0: the group cannot serve any more */
    int stopped;               /* rank 0: the followers were sent the stop (they returned) */
    int oom_next;              /* rank 0: the next message fails as out of memory (tests) */
    char why[sizeof ((dsv4_err *)0)->msg];
    /* rank 0 */
    srv_req **remote;          /* (n_remote) placed on other ranks, not ended */
    int n_remote, cap_remote;
    int *live;                 /* (K) requests placed on each rank, not ended (rank 0's: unused) */
    int64_t *placed;           /* (K) requests placed on each rank since the start */
    srv_rank_load *load;       /* (K) the latest reports */
    srv_keys_rx *held;         /* (K) the prefix keys each rank's cache holds (ascending), from
                                * its reports */
    int *resend;               /* (K) ask that rank for its whole key list in the next message */
    int64_t *resends;          /* (K) how many times it was asked */
    uint64_t *keys;            /* (cap_keys) the placed prompt's prefix keys (srv_pcache_keys) */
    int64_t cap_keys;
    keyat *by_key;             /* (cap_by_key) those keys sorted, with their block counts */
    int64_t cap_by_key;
    uint64_t *sizes;           /* (K) report bytes */
    size_t *counts;            /* (K) */
    uint8_t *all;              /* (all_cap) the gathered reports */
    size_t all_cap;
    /* every rank */
    uint64_t *own;             /* (n_own, cap_own) the prefix keys this rank's cache holds now */
    int64_t n_own, cap_own;
    int64_t sig[6];            /* the counters own was taken at (held_moved) */
    int sig_set;
    srv_keys_tx tx;            /* the keys its reports gave (a follower) */
    /* a follower */
    srv_req **mine;            /* (n_mine) its requests, one reference each, until reported ended */
    int n_mine, cap_mine;
};

int srv_dp_ranks(const srv_dp *dp) { return dp->K; }

int srv_dp_create(dsv4_dist *d, srv_sched *s, srv_dp **out, dsv4_err *err) {
    srv_dp *dp = calloc(1, sizeof *dp);
    if (!dp) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    dp->d = d;
    dp->s = s;
    dp->rank = dsv4_dist_rank(d);
    dp->K = dsv4_dist_size(d);
    const size_t K = (size_t)dp->K;
    dp->live = calloc(K, sizeof *dp->live);
    dp->placed = calloc(K, sizeof *dp->placed);
    dp->load = calloc(K, sizeof *dp->load);
    dp->held = calloc(K, sizeof *dp->held);
    dp->resend = calloc(K, sizeof *dp->resend);
    dp->resends = calloc(K, sizeof *dp->resends);
    dp->tx.n_sent = -1;
    dp->sizes = calloc(K, sizeof *dp->sizes);
    dp->counts = calloc(K, sizeof *dp->counts);
    *out = dp;
    if (!dp->live || !dp->placed || !dp->load || !dp->held || !dp->resend || !dp->resends || !dp->sizes || !dp->counts)
        return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    if (dp->K > SRV_MAX_RANKS)
        return srv_fail(err, DSV4_ERR_ARG, "serve: at most %d ranks with data-parallel attention", SRV_MAX_RANKS);
    /* tests: the first key change of each rank fails to apply here, as out of memory would */
    for (int q = 1; q < dp->K && dp->rank == 0 && s; q++) dp->held[q].fail_next = s->o.test_key_fault;
    return DSV4_OK;
}

void srv_dp_free(srv_dp *dp) {
    if (!dp) return;
    for (int i = 0; i < dp->n_mine; i++) srv_req_release(dp->mine[i]);
    free(dp->mine);
    free(dp->remote);
    free(dp->live);
    free(dp->placed);
    free(dp->load);
    for (int q = 0; dp->held && q < dp->K; q++) srv_keys_rx_free(&dp->held[q]);
    free(dp->held);
    free(dp->resend);
    free(dp->resends);
    free(dp->keys);
    free(dp->by_key);
    free(dp->own);
    srv_keys_tx_free(&dp->tx);
    free(dp->sizes);
    free(dp->counts);
    free(dp->all);
    free(dp->in);
    srv_buf_free(&dp->msg);
    srv_buf_free(&dp->rep);
    free(dp);
}

int srv_dp_refused_elsewhere(const srv_dp *dp) {
    return dsv4_dist_last_refusal(dp->d) == DSV4_DIST_REFUSED_ELSEWHERE;
}

int srv_dp_refusal(const srv_dp *dp) { return dsv4_dist_last_refusal(dp->d) == DSV4_DIST_REFUSED_HERE; }

/* ---- placement (rank 0) ------------------------------------------------------------------ */

static int cmp_keyat(const void *a, const void *b) {
    const uint64_t x = ((const keyat *)a)->key, y = ((const keyat *)b)->key;
    return x < y ? -1 : x > y;
}

/* Sorts the placed prompt's nb prefix keys (keys[i] covers i + 1 blocks) into by_key; 0, or
 * -1 when out of memory. */
static int sort_keys(srv_dp *dp, int64_t nb) {
    if (nb > dp->cap_by_key) {
        keyat *k = realloc(dp->by_key, (size_t)nb * sizeof *k);
        if (!k) return -1;
        dp->by_key = k;
        dp->cap_by_key = nb;
    }
    for (int64_t i = 0; i < nb; i++) dp->by_key[i] = (keyat){dp->keys[i], i + 1};
    if (nb > 1) qsort(dp->by_key, (size_t)nb, sizeof *dp->by_key, cmp_keyat);
    return 0;
}

/* The blocks of the placed prompt that key h covers (0: none of its prefixes). */
static int64_t blocks_of(const srv_dp *dp, int64_t nb, uint64_t h) {
    const keyat k = {h, 0}, *f = h ? bsearch(&k, dp->by_key, (size_t)nb, sizeof k, cmp_keyat) : NULL;
    return f ? f->blocks : 0;
}

/* The longest prefix of the placed prompt (its nb keys sorted) that rank q can restore: one
 * its cache holds (its latest report), or one a request placed there and not ended will
 * leave in it (placed since: the report may not show it yet). In blocks. */
static int64_t cached_prefix(const srv_dp *dp, int q, int64_t nb) {
    int64_t best = 0, b;
    if (!nb) return 0;
    for (int64_t i = 0; i < dp->held[q].n; i++)
        if ((b = blocks_of(dp, nb, dp->held[q].k[i])) > best) best = b;
    if (q == 0) {
        const srv_sched *s = dp->s;
        for (int i = 0; i < s->n_run; i++) if ((b = blocks_of(dp, nb, s->run[i]->place_key)) > best) best = b;
        for (int i = 0; i < s->n_wait; i++) if ((b = blocks_of(dp, nb, s->wait[i]->place_key)) > best) best = b;
    } else {
        for (int i = 0; i < dp->n_remote; i++)
            if (dp->remote[i]->home == q && (b = blocks_of(dp, nb, dp->remote[i]->place_key)) > best) best = b;
    }
    return best;
}

/* The live requests of rank q that a request of priority p would not overtake there: all of
 * them but those waiting with a lower priority (a larger value), which strict priority admits
 * after it. Rank 0's from its own waiting list (in priority order), another rank's from its
 * latest report's queue by priority (a step old: a hint, as the rest of placement). Under
 * fcfs every priority is 0: every live request. */
static int ahead_on(const srv_dp *dp, int q, int p) {
    const srv_sched *s = dp->s;
    int64_t live = q == 0 ? s->n_run + s->n_wait : dp->live[q], behind = 0;
    if (q == 0) {
        for (int i = s->n_wait - 1; i >= 0 && s->wait[i]->priority > p; i--) behind++;
    } else {
        const srv_rank_load *l = &dp->load[q];
        for (int i = 0; i < l->n_prio && i < SRV_PRIO_SHOWN; i++) behind += l->prio[i] > p ? l->prio_n[i] : 0;
        /* the rest come after the shown ones, in priority order */
        if (l->n_prio == SRV_PRIO_SHOWN && l->prio[SRV_PRIO_SHOWN - 1] >= p) behind += l->prio_rest;
    }
    return live > behind ? (int)(live - behind) : 0;
}

/* Sends r to its home rank best (> 0) with the next step message; 0, or -1 when out of
 * memory (then it is served here). */
static int send_new(srv_dp *dp, srv_req *r, int best) {
    if (dp->n_remote == dp->cap_remote) {
        const int cap = dp->cap_remote ? 2 * dp->cap_remote : 64;
        srv_req **a = realloc(dp->remote, (size_t)cap * sizeof *a);
        if (!a) return -1;
        dp->remote = a;
        dp->cap_remote = cap;
    }
    dp->remote[dp->n_remote++] = r;
    dp->live[best]++;
    srv_wr_i32(&dp->msg, OP_NEW);
    srv_wr_i32(&dp->msg, best);
    const size_t at = dp->msg.n;
    srv_wr_i64(&dp->msg, 0);
    srv_wire_put_req(&dp->msg, r);
    const int64_t bytes = (int64_t)(dp->msg.n - at - sizeof bytes);
    if (!dp->msg.oom) memcpy(dp->msg.s + at, &bytes, sizeof bytes);
    return 0;
}

/* Choices 1..n-1 of n > 1 go where choice 0 went (placed just before them): they fork its
 * prompt there. */
static int place_choice(srv_dp *dp, srv_req *r) {
    r->home = r->lead->home;
    dp->placed[r->home]++;
    if (r->home == 0) return 0;
    if (!send_new(dp, r, r->home)) return r->home;
    /* served here: it computes the prompt, and the choices here must not wait to fork a
     * choice 0 that runs elsewhere (this rank's copy of its flag) */
    dp->placed[r->home]--;
    dp->placed[0]++;
    r->home = 0;
    r->lead->forkable = 0;
    return 0;
}

int srv_dp_place(srv_dp *dp, srv_req *r) {
    if (dp->failed) return 0;
    if (r->lead) return place_choice(dp, r);
    const int p = r->priority;
    int least = ahead_on(dp, 0, p);
    for (int q = 1; q < dp->K; q++) least = ahead_on(dp, q, p) < least ? ahead_on(dp, q, p) : least;
    /* the keys of the prompt's aligned prefixes a prefix cache could hold (shorter than the
     * prompt), hashed once; none when out of memory (placed by load alone then) */
    int64_t nb = r->n_prompt > 1 ? srv_pcache_keys(dp->s->pc, r->prompt, r->n_prompt - 1, &dp->keys, &dp->cap_keys) : 0;
    nb = nb < 0 || sort_keys(dp, nb) ? 0 : nb;
    /* the longest cached prefix among the ranks within one request of the least loaded
     * (a shared system prompt then spreads over every rank instead of piling on one), else
     * the fewest live requests, then the most free pages, then the lowest rank; the load of
     * a rank is what r would not overtake there (ahead_on: all live requests under fcfs) */
    int best = -1;
    int64_t best_k = -1;
    for (int q = 0; q < dp->K; q++) {
        if (ahead_on(dp, q, p) > least + 1) continue;
        const int64_t k = cached_prefix(dp, q, nb);
        int better = best < 0 || k > best_k;
        if (!better && k == best_k) {
            const int a = ahead_on(dp, q, p), b = ahead_on(dp, best, p);
            better = a < b || (a == b && dp->load[q].pages_free > dp->load[best].pages_free);
        }
        if (better) { best = q; best_k = k; }
    }
    /* the prompt's snapshot point: its home's cache keeps that prefix (scheduler.c) */
    r->place_key = nb ? dp->keys[nb - 1] : 0;
    r->home = best;
    dp->placed[best]++;
    if (best == 0) return 0;
    if (send_new(dp, r, best)) { r->home = 0; return 0; }  /* served here then */
    return best;
}

int srv_dp_remote(const srv_dp *dp) { return dp->n_remote; }

/* Remote request i ended (reported, or the group failed): off the list, and ended for its
 * client as a local one is (srv_sched_ended). */
static void remote_done(srv_dp *dp, int i, int end, int fin, const char *msg) {
    srv_req *r = dp->remote[i];
    dp->live[r->home]--;
    dp->remote[i] = dp->remote[--dp->n_remote];
    srv_sched_ended(dp->s, r, end, fin, msg);
}

/* The group failed: every remote request ends with the reason; this rank serves alone. */
static void group_failed(srv_dp *dp, const dsv4_err *e) {
    if (!dp->failed) memcpy(dp->why, e->msg, sizeof dp->why);
    dp->failed = 1;
    char msg[sizeof ((srv_req *)0)->errmsg];
    snprintf(msg, sizeof msg, "the process group cannot serve any more; restart the server (%.180s)", dp->why);
    while (dp->n_remote > 0) remote_done(dp, dp->n_remote - 1, SRV_END_ERROR, 0, msg);
}

/* The stop, from memory of its own (the message's buffer may be what ran out). */
static int send_stop(srv_dp *dp, dsv4_err *err) {
    const int32_t stop = OP_STOP;
    const int rc = srv_frame_send(dp->d, DP_MAGIC, &stop, sizeof stop, err);
    dp->stopped = !rc;
    return rc;
}

/* Broadcasts the recorded message (rank 0) or receives one (a follower: into in, *n bytes).
 * A message that could not be recorded (out of memory: a request or cancel missing) must not
 * run on the followers, who would otherwise wait for it without a deadline: they get the
 * stop instead and return, and the group serves no more. */
static int exchange_msg(srv_dp *dp, size_t *n, dsv4_err *err) {
    if (dp->rank != 0) return srv_frame_recv(dp->d, DP_MAGIC, &dp->in, &dp->in_cap, n, err);
    if (dp->msg.oom || dp->oom_next) {
        dp->oom_next = 0;
        srv_buf_free(&dp->msg);
        dsv4_err e2 = {0};
        send_stop(dp, &e2);
        if (dp->stopped)
            return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory for the step message (the group was stopped)");
        return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory for the step message (the stop could not be "
                        "sent either: %.150s)", e2.msg);
    }
    *n = dp->msg.n;
    return srv_frame_send(dp->d, DP_MAGIC, dp->msg.s, dp->msg.n, err);
}

void srv_dp_inject_oom(srv_dp *dp) { dp->oom_next = 1; }

int srv_dp_failed(const srv_dp *dp, dsv4_err *err) {
    if (dp->failed && err) srv_fail(err, DSV4_ERR_STATE, "%s", dp->why);
    return dp->failed;
}

/* r's cancel (0 for NULL), under its mu. */
static int cancel_flag(srv_req *r) {
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    const int c = r->cancel;
    pthread_mutex_unlock(&r->mu);
    return c;
}

int srv_dp_begin(srv_dp *dp, int expired, dsv4_err *err) {
    if (dp->failed) return srv_fail(err, DSV4_ERR_STATE, "the process group cannot serve any more (%s)", dp->why);
    for (int i = 0; i < dp->n_remote; i++) {
        srv_req *r = dp->remote[i];
        /* a choice of n > 1 is cancelled with its choice 0 (the HTTP side cancels that one),
         * also once choice 0 has ended (its cancel then reaches no rank); choice 0's mu first */
        /* (another prompt of a list: with prompt 0's choice 0, its waiter) */
        const int lead_cancel = cancel_flag(r->lead) || cancel_flag(r->waiter);
        pthread_mutex_lock(&r->mu);
        const int c = (r->cancel || lead_cancel) && !r->dp_cancel_sent;
        r->dp_cancel_sent |= c;
        pthread_mutex_unlock(&r->mu);
        if (c) {
            srv_wr_i32(&dp->msg, OP_CANCEL);
            srv_wr_i64(&dp->msg, r->id);
        }
    }
    if (expired) srv_wr_i32(&dp->msg, OP_EXPIRE);
    for (int q = 1; q < dp->K; q++)
        if (dp->resend[q]) {
            srv_wr_i32(&dp->msg, OP_RESEND);
            srv_wr_i32(&dp->msg, q);
            dp->resend[q] = 0;
        }
    size_t n;
    const int rc = exchange_msg(dp, &n, err);
    dp->msg.n = 0;
    if (rc) group_failed(dp, err);
    return rc;
}

/* ---- reports ---------------------------------------------------------------------------- */

static void own_load(srv_dp *dp, srv_rank_load *l) {
    const srv_sched *s = dp->s;
    const dsv4_cache_stats c = dsv4_engine_cache_stats(s->e);
    pthread_mutex_lock(&s->met->mu);
    *l = (srv_rank_load){.running = s->n_run, .waiting = s->n_wait, .rows = s->st.rows,
                         .pages_free = c.win_total - c.win_used, .cp_prefills = dsv4_engine_cp_prefills(s->e),
                         .mtp_steps = (int64_t)s->met->mtp_steps, .mtp_drafts = (int64_t)s->met->mtp_drafts,
                         .mtp_accepted = (int64_t)s->met->mtp_accepted,
                         .preemptions = (int64_t)s->met->preemptions,
                         .prio_preemptions = (int64_t)s->met->prio_preemptions, .forks = (int64_t)s->met->forks,
                         .fork_tokens = (int64_t)s->met->fork_tokens,
                         .fork_waits = (int64_t)s->met->fork_waits, .idx = s->met->idx, .pcache = s->met->pcache,
                         .prefix = s->met->prefix, .n_prio = s->met->n_prio, .prio_rest = s->met->prio_rest};
    memcpy(l->prio, s->met->prio, sizeof l->prio);
    memcpy(l->prio_n, s->met->prio_n, sizeof l->prio_n);
    pthread_mutex_unlock(&s->met->mu);
}

/* 1 when the prefixes this rank's cache holds may have changed since own was taken: its
 * entries inserted and evicted, the directory's files (l: this step's load). */
static int held_moved(srv_dp *dp, const srv_rank_load *l) {
    const int64_t sig[6] = {l->prefix.inserts, l->prefix.evictions, l->prefix.entries, l->pcache.disk_files,
                            l->pcache.disk_saves, l->pcache.disk_bad};
    const int moved = !dp->sig_set || memcmp(sig, dp->sig, sizeof sig);
    memcpy(dp->sig, sig, sizeof sig);
    dp->sig_set = 1;
    return moved;
}

/* This rank's report: its load (also left in *l), the prefix keys its cache holds (rank 0
 * keeps its own at once), and on a follower its requests' news (an ended request is
 * reported once, then released). */
static void build_report(srv_dp *dp, srv_rank_load *l) {
    own_load(dp, l);
    if (held_moved(dp, l)) {
        dp->n_own = srv_pcache_held(dp->s->pc, &dp->own, &dp->cap_own);
        if (dp->n_own < 0) {  /* out of memory: none held, taken again next step */
            dp->n_own = 0;
            dp->sig_set = 0;
        }
        /* rank 0's own: out of memory, taken again next step */
        if (dp->rank == 0 && srv_keys_set(&dp->held[0], dp->own, dp->n_own)) dp->sig_set = 0;
    }
    l->prefix_keys = dp->n_own;
    dp->rep.n = 0;
    srv_buf_put(&dp->rep, (const char *)l, sizeof *l);
    if (dp->rank != 0) srv_keys_put(&dp->tx, &dp->rep, dp->own, dp->n_own);
    const size_t count_at = dp->rep.n;
    int32_t n = 0;
    srv_wr_i32(&dp->rep, 0);
    for (int i = 0; i < dp->n_mine;) {
        const size_t before = dp->rep.n;
        const int ended = srv_wire_put_news(&dp->rep, dp->mine[i]);
        n += dp->rep.n > before;
        if (ended) {
            srv_req_release(dp->mine[i]);
            dp->mine[i] = dp->mine[--dp->n_mine];
        } else {
            i++;
        }
    }
    if (!dp->rep.oom) memcpy(dp->rep.s + count_at, &n, sizeof n);
}

static srv_req *remote_by_id(const srv_dp *dp, int64_t id, int *at) {
    for (int i = 0; i < dp->n_remote; i++)
        if (dp->remote[i]->id == id) { *at = i; return dp->remote[i]; }
    return NULL;
}

/* Rank 0: rank q's report. 0, or -1 when it is malformed. */
static int apply_report(srv_dp *dp, int q, srv_rd *rd) {
    srv_rank_load l;
    srv_rd_bytes(rd, &l, sizeof l);
    if (rd->bad) return -1;
    /* what rank 0 holds of q's keys disagrees with q's (a change not applied for memory):
     * placement misses some of q's prefixes (a hint only) until q's whole list comes, with
     * the report after the next message */
    const int keys = srv_keys_get(&dp->held[q], rd);
    if (keys < 0) return -1;
    if (keys) {
        dp->resend[q] = 1;
        dp->resends[q]++;
    }
    l.requests = dp->placed[q];
    l.prefix_keys_seen = dp->held[q].n;
    l.prefix_key_resends = dp->resends[q];
    dp->load[q] = l;
    srv_metrics_rank(dp->s->met, q, dp->K, &l);
    const int n = srv_rd_i32(rd);
    for (int i = 0; i < n && !rd->bad; i++) {
        int at;
        srv_req *r = remote_by_id(dp, srv_wire_news_id(rd), &at);
        if (!r || r->home != q) return -1;
        int end, fin;
        char msg[sizeof r->errmsg];
        if (srv_wire_apply_news(rd, r, dp->s->met, &end, &fin, msg)) remote_done(dp, at, end, fin, msg[0] ? msg : NULL);
    }
    return rd->bad ? -1 : 0;
}

/* Every rank's report to rank 0 (sizes first). */
static int gather_reports(srv_dp *dp, dsv4_err *err) {
    if (dp->rep.oom) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory for a step report");
    const uint64_t mine = dp->rep.n;
    int rc = dsv4_dist_allgather(dp->d, &mine, sizeof mine, dp->sizes, err);
    if (rc) return rc;
    size_t total = 0;
    for (int q = 0; q < dp->K; q++) total += dp->counts[q] = (size_t)dp->sizes[q];
    if (dp->rank == 0 && total > dp->all_cap) {
        uint8_t *a = realloc(dp->all, total);
        /* this rank cannot take part in the gather: the group is lost either way */
        if (!a) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory for %zu bytes of reports", total);
        dp->all = a;
        dp->all_cap = total;
    }
    return dsv4_dist_gatherv(dp->d, dp->rep.s, dp->rep.n, dp->all, dp->counts, err);
}

void srv_dp_end(srv_dp *dp) {
    if (dp->failed) return;
    dsv4_err err = {0};
    srv_rank_load l;
    build_report(dp, &l);
    l.requests = dp->placed[0];
    l.prefix_keys_seen = dp->held[0].n;
    dp->load[0] = l;
    srv_metrics_rank(dp->s->met, 0, dp->K, &l);
    if (gather_reports(dp, &err)) { group_failed(dp, &err); return; }
    size_t off = dp->counts[0];
    for (int q = 1; q < dp->K; q++) {
        srv_rd rd = {dp->all + off, dp->all + off + dp->counts[q], 0};
        off += dp->counts[q];
        if (apply_report(dp, q, &rd)) {
            err.code = DSV4_ERR_STATE;
            snprintf(err.msg, sizeof err.msg, "a malformed step report from rank %d", q);
            group_failed(dp, &err);
            dsv4_err e2 = {0};
            send_stop(dp, &e2);  /* the gather completed: the followers wait for a message */
            return;
        }
    }
}

/* A group that failed is not a clean stop, even when its followers were stopped already (a
 * message that failed for memory, a malformed report): the server then exits 1. */
int srv_dp_stop(srv_dp *dp, dsv4_err *err) {
    if (dp->failed)
        return srv_fail(err, DSV4_ERR_STATE, "the process group failed while serving (%.200s)", dp->why);
    const int rc = send_stop(dp, err);
    if (!rc) snprintf(dp->why, sizeof dp->why, "stopped");
    dp->failed = 1;
    return rc;
}

/* ---- a follower ------------------------------------------------------------------------- */

/* r is another choice of the request whose choice 0 has id lead_id, placed here just before
 * it (in the same message): it holds a reference on choice 0, whose cancel is its own, and
 * choice 0 (not admitted yet) forks its prompt into it (scheduler.c). */
static void take_choice(srv_dp *dp, srv_req *r, int64_t lead_id) {
    for (int i = 0; i < dp->n_mine; i++) {
        srv_req *lead = dp->mine[i];
        if (lead->id != lead_id || lead->lead) continue;
        atomic_fetch_add(&lead->refs, 1);
        r->lead = lead;
        /* choice 0 forks its prompt into its choices unless it already runs */
        lead->forkable = lead->gen && !lead->admitted;
        return;
    }
}

/* A request rank 0 placed (on any follower: the message goes to all): when here, its
 * generation state made, queued; a request that cannot start is reported ended with the
 * reason. */
static int take_new(srv_dp *dp, srv_rd *rd, dsv4_err *err) {
    const int home = srv_rd_i32(rd);
    const int64_t bytes = srv_rd_i64(rd);
    const uint8_t *at = srv_rd_view(rd, bytes >= 0 ? (size_t)bytes : SIZE_MAX);
    rd->bad |= !at || home < 1 || home >= dp->K;
    if (rd->bad || home != dp->rank) return DSV4_OK;  /* malformed (the caller says so), or another follower's */
    srv_rd one = {at, at + bytes, 0};
    int64_t lead_id;
    srv_req *r = srv_wire_get_req(&one, &lead_id);
    if (!r && !one.bad) return srv_fail(err, DSV4_ERR_NOMEM, "follower: out of memory for a request");
    if (!r || one.p != one.end) {
        if (r) { srv_req_release(r); srv_req_release(r); }
        rd->bad = 1;
        return DSV4_OK;
    }
    if (dp->n_mine == dp->cap_mine) {
        const int cap = dp->cap_mine ? 2 * dp->cap_mine : 64;
        srv_req **a = realloc(dp->mine, (size_t)cap * sizeof *a);
        if (!a) {
            srv_req_release(r);
            srv_req_release(r);
            return srv_fail(err, DSV4_ERR_NOMEM, "follower: out of memory for a request");
        }
        dp->mine = a;
        dp->cap_mine = cap;
    }
    dp->mine[dp->n_mine++] = r;
    r->home = dp->rank;
    if (lead_id >= 0) take_choice(dp, r, lead_id);
    dsv4_err why = {0};
    if (srv_sched_prepare(dp->s, r, &why)) {
        pthread_mutex_lock(&r->mu);
        r->cancel = 1;  /* its other choices (n > 1) end with it */
        pthread_mutex_unlock(&r->mu);
        srv_req_end(r, SRV_END_ERROR, 0, why.msg);
        srv_req_release(r);  /* the scheduler's */
        return DSV4_OK;
    }
    pthread_mutex_lock(&dp->s->mu);
    dp->s->n_live++;
    pthread_mutex_unlock(&dp->s->mu);
    srv_sched_enqueue(dp->s, r);
    return DSV4_OK;
}

static void cancel_mine(srv_dp *dp, int64_t id) {
    for (int i = 0; i < dp->n_mine; i++)
        if (dp->mine[i]->id == id) {
            pthread_mutex_lock(&dp->mine[i]->mu);
            dp->mine[i]->cancel = 1;
            pthread_mutex_unlock(&dp->mine[i]->mu);
        }
}

int srv_dp_follow(srv_dp *dp, dsv4_err *err) {
    for (;;) {
        size_t n;
        int rc = exchange_msg(dp, &n, err);
        if (rc) return rc;
        srv_rd rd = {dp->in, dp->in + n, 0};
        int expired = 0;
        while (!rd.bad && rd.p < rd.end) {
            switch (srv_rd_i32(&rd)) {
            case OP_NEW:
                if ((rc = take_new(dp, &rd, err))) return rc;
                break;
            case OP_CANCEL: cancel_mine(dp, srv_rd_i64(&rd)); break;
            case OP_EXPIRE: expired = 1; break;
            case OP_RESEND: {
                const int q = srv_rd_i32(&rd);
                rd.bad |= q < 1 || q >= dp->K;
                if (q == dp->rank) srv_keys_resend(&dp->tx);
                break;
            }
            case OP_STOP: return DSV4_OK;
            default: rd.bad = 1;
            }
        }
        if (rd.bad) return srv_fail(err, DSV4_ERR_STATE, "follower: a malformed step message from rank 0");
        srv_sched_sweep(dp->s, expired);
        srv_sched_step(dp->s);
        srv_rank_load l;
        build_report(dp, &l);
        if ((rc = gather_reports(dp, err))) return rc;
    }
}
