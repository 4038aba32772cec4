/* sched_thread.c — the scheduler's thread (sched_main: intake, sweep, step, the group's
 * failure under data-parallel attention) and its API: create, start, submit, cancel, stop,
 * free (scheduler.h). One step is scheduler.c's. */
#include "serve/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/dp.h"
#include "serve/prefix_cache.h"
#include "serve/sched_int.h"
#include "serve/util.h"

/* Under data-parallel attention, once the group cannot serve: this rank's requests end with
 * the reason (err: the failure, when it happened just now). */
static void group_gone(srv_sched *s, const dsv4_err *err) {
    if (!atomic_load(&s->group_failed)) {
        if (err->msg[0]) snprintf(s->group_why, sizeof s->group_why, "the process group cannot serve any more; "
                                  "restart the server (%.180s)", err->msg);
        else snprintf(s->group_why, sizeof s->group_why, "the process group cannot serve any more");
        atomic_store(&s->group_failed, 1);
    }
    for (int i = s->n_run - 1; i >= 0; i--) srv_sched_finish(s, s->run[i], SRV_END_ERROR, 0, s->group_why);
    for (int i = s->n_wait - 1; i >= 0; i--) srv_sched_finish(s, s->wait[i], SRV_END_ERROR, 0, s->group_why);
    srv_sched_publish_load(s);
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->in_head && !s->n_run && !s->n_wait && !(s->dp && srv_dp_remote(s->dp)) && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        srv_req *in = s->in_head;
        s->in_head = s->in_tail = NULL;
        int stopping = s->stopping;
        int expired = stopping && srv_now() > s->deadline;
        pthread_mutex_unlock(&s->mu);
        while (in) {
            srv_req *next = in->next;
            in->next = NULL;
            /* data-parallel attention: each request on its home rank */
            if (!s->dp || srv_dp_place(s->dp, in) == 0) srv_sched_enqueue(s, in);
            in = next;
        }
        srv_sched_sweep(s, expired);
        if (stopping && !s->n_run && !s->n_wait && !(s->dp && srv_dp_remote(s->dp))) break;
        if (s->dp) {
            dsv4_err err = {0};
            /* a failed group ended its remote requests; this rank cannot step without the
             * others (every step's calls are collective): its own end with the reason (the
             * recorded one when the group failed in an earlier srv_dp_end) */
            if (srv_dp_failed(s->dp, &err) || srv_dp_begin(s->dp, expired, &err)) {
                group_gone(s, &err);
                continue;
            }
        }
        srv_sched_step(s);
        if (s->dp) {
            srv_dp_end(s->dp);
            dsv4_err err = {0};
            /* failed in the gather or a report: gone now (/health), not at the next work */
            if (srv_dp_failed(s->dp, &err)) group_gone(s, &err);
        }
    }
    /* every request has ended: the followers return (srv_dp_follow) */
    if (s->dp) s->stop_rc = srv_dp_stop(s->dp, &s->stop_err);
    return NULL;
}

int srv_sched_create(dsv4_engine *e, const dsv4_model *m, const dsv4_tokenizer *tok,
                     const srv_sched_opts *o, srv_metrics *metrics, srv_sched **out,
                     dsv4_err *err) {
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    dsv4_model_info mi = dsv4_model_get_info(m);
    s->e = e;
    s->m = m;
    s->tok = tok;
    s->o = *o;
    s->met = metrics;
    s->V = mi.vocab_size;
    s->D = mi.hidden_size;
    s->HC = mi.hc_mult;
    s->eos = mi.eos_token_id;
    s->mtp = dsv4_engine_get_opts(e).mtp;
    s->t0 = srv_now();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    const size_t ns = (size_t)o->max_seqs;
    /* submit bounds n_live (under data-parallel attention the group's, which placement
     * may put on one rank) */
    const size_t group = o->dp_group ? (size_t)dsv4_dist_size(o->dp_group) : 1;
    s->wait = calloc(ns * group + (size_t)o->max_queue, sizeof *s->wait);
    s->run = calloc(ns, sizeof *s->run);
    s->spans = calloc(ns, sizeof *s->spans);
    s->span_req = calloc(ns, sizeof *s->span_req);
    s->span_verify = calloc(ns, sizeof *s->span_verify);
    s->hidden = malloc(((size_t)o->step_tokens + 2 * ns) * (size_t)s->D * sizeof(float));
    s->span_lp = calloc(ns, sizeof *s->span_lp);
    s->logits = malloc(2 * ns * (size_t)s->V * sizeof(float));
    s->span_snap = calloc(ns, sizeof *s->span_snap);
    s->snap_hidden = malloc(ns * (size_t)s->D * sizeof(float));
    s->snap_streams = malloc(ns * (size_t)s->HC * s->D * sizeof(float));
    s->restored = malloc((size_t)s->HC * s->D * sizeof(float));
    if (!s->span_snap || !s->snap_hidden || !s->snap_streams || !s->restored || !s->span_lp) goto oom;
    if (!s->mtp) {
        /* streams only of snapshot rows: one per span at most */
        if (!(s->streams = malloc(ns * (size_t)s->HC * s->D * sizeof(float)))) goto oom;
    } else {
        /* a step's rows: at most step_tokens, or two per sequence when all verify drafts */
        const size_t rows_cap = (size_t)o->step_tokens + 2 * ns;
        s->streams = malloc(rows_cap * (size_t)s->HC * s->D * sizeof(float));
        s->mtp_spans = calloc(ns, sizeof *s->mtp_spans);
        s->mtp_req = calloc(ns, sizeof *s->mtp_req);
        s->mtp_drafts = calloc(ns, sizeof *s->mtp_drafts);
        s->mtp_out = calloc(ns, sizeof *s->mtp_out);
        if (!s->streams || !s->mtp_spans || !s->mtp_req || !s->mtp_drafts || !s->mtp_out) goto oom;
    }
    /* the prompt rows' scorers: one per engine thread, no more than a head batch's rows */
    const int threads = dsv4_engine_get_opts(e).threads > 0 ? dsv4_engine_get_opts(e).threads : dsv4_available_cores();
    s->n_scorers = threads < 2 * o->max_seqs ? threads : 2 * o->max_seqs;
    if (s->n_scorers < 1) s->n_scorers = 1;
    s->scorers = calloc((size_t)s->n_scorers, sizeof *s->scorers);
    s->score_err = calloc((size_t)s->n_scorers, sizeof *s->score_err);
    if (!s->scorers || !s->score_err) goto oom;
    for (int k = 0; k < s->n_scorers; k++) {
        const dsv4_gen_params gp = {0};
        const int grc = dsv4_gen_create(m, tok, &gp, &s->scorers[k], err);
        if (grc) { srv_sched_free(s); return grc; }
    }
    s->forced_row = malloc((size_t)s->V * sizeof(float));
    s->span_draw = malloc(ns * sizeof *s->span_draw);
    s->draws = malloc(ns * sizeof *s->draws);
    /* on a group too: the cache is rank 0's, the followers mirror what it restores */
    int rc = o->no_prefix_cache ? DSV4_OK : srv_pcache_create(e, o->kv_dir, o->kv_dir_bytes, &s->pc, err);
    if (rc) { srv_sched_free(s); return rc; }
    if (!s->wait || !s->run || !s->spans || !s->span_req || !s->hidden || !s->logits ||
        !s->forced_row || !s->span_draw || !s->draws)
        goto oom;
    if (o->dp_group && s->mtp && o->max_seqs > 1) {
        /* choice 0 and a choice at least: max_seqs / 2 forking in one step at most */
        const size_t nl = (size_t)o->max_seqs / 2;
        s->late_rows = malloc(nl * (size_t)s->V * sizeof(float));
        s->late_req = calloc(nl, sizeof *s->late_req);
        s->late_draw = calloc(nl, sizeof *s->late_draw);
        if (!s->late_rows || !s->late_req || !s->late_draw) goto oom;
    }
    if (o->dp_group && (rc = srv_dp_create(o->dp_group, s, &s->dp, err))) { srv_sched_free(s); return rc; }
    *out = s;
    return DSV4_OK;
oom:
    srv_sched_free(s);
    return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
}

const char *srv_sched_group_failed(srv_sched *s) {
    return s && atomic_load(&s->group_failed) ? s->group_why : NULL;
}

int srv_sched_group_stopped(const srv_sched *s, dsv4_err *err) {
    if (s && s->stop_rc && err) *err = s->stop_err;
    return s ? s->stop_rc : DSV4_OK;
}

int srv_sched_follow(srv_sched *s, dsv4_err *err) {
    if (!s->dp) return srv_fail(err, DSV4_ERR_STATE, "serve: a follower without a group");
    const int rc = srv_dp_follow(s->dp, err);
    srv_sched_sweep(s, 1);  /* a stop that came early (rank 0 could not record a step) */
    return rc;
}

int srv_sched_start(dsv4_engine *e, const dsv4_model *m, const dsv4_tokenizer *tok,
                    const srv_sched_opts *o, srv_metrics *metrics, srv_sched **out,
                    dsv4_err *err) {
    srv_sched *s;
    int rc = srv_sched_create(e, m, tok, o, metrics, &s, err);
    if (rc) return rc;
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        srv_sched_free(s);
        return srv_fail(err, DSV4_ERR_NOMEM, "serve: cannot start the scheduler thread");
    }
    s->started = 1;
    *out = s;
    return DSV4_OK;
}

int srv_sched_prepare(srv_sched *s, srv_req *r, dsv4_err *err) {
    int rc = dsv4_gen_create(s->m, s->tok, &r->gp, &r->gen, err);
    if (rc) return rc;
    r->cap_ctx = r->n_prompt + 64;
    if (!(r->ctx = malloc((size_t)r->cap_ctx * sizeof *r->ctx))) {
        dsv4_gen_free(r->gen);
        r->gen = NULL;
        return srv_fail(err, DSV4_ERR_NOMEM, "out of memory");
    }
    memcpy(r->ctx, r->prompt, (size_t)r->n_prompt * sizeof *r->ctx);
    r->n_ctx = r->n_prompt;
    r->t_arrival = srv_now();
    return DSV4_OK;
}

int srv_sched_submit(srv_sched *s, srv_req *r, dsv4_err *err) {
    return srv_sched_submit_n(s, &r, 1, err);
}

int srv_sched_submit_n(srv_sched *s, srv_req *const *r, int n, dsv4_err *err) {
    int rc;
    for (int i = 0; i < n; i++) {
        /* the choices of one request share choice 0's regex / choice masks (dsv4_gen_params.share) */
        r[i]->gp.share = i ? r[0]->gen : NULL;
        rc = srv_sched_prepare(s, r[i], err);
        r[i]->gp.share = NULL;
        if (rc) return rc;
    }
    /* the choices share choice 0's prompt by forking its sequence (on a rank-0-home group
     * the fork is relayed: srv_relay_fork; under data-parallel attention they are placed
     * on choice 0's home rank, which forks there: dp.c) */
    for (int i = 0; i < n; i++)
        if (r[i]->lead) r[i]->lead->forkable = 1;
    /* under data-parallel attention every rank has max_seqs slots */
    const int slots = s->o.max_seqs * (s->dp ? srv_dp_ranks(s->dp) : 1);
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->n_live + n > slots + s->o.max_queue) {
        rc = s->stopping ? srv_fail(err, DSV4_ERR_STATE, "the server is shutting down")
                         : srv_fail(err, DSV4_ERR_CACHE_FULL, "server busy: %d requests queued",
                                    s->o.max_queue);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    for (int i = 0; i < n; i++) {
        r[i]->id = s->next_id++;
        r[i]->next = NULL;
        if (s->in_tail) s->in_tail->next = r[i];
        else s->in_head = r[i];
        s->in_tail = r[i];
    }
    s->n_live += n;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return DSV4_OK;
}

void srv_sched_cancel(srv_sched *s, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stop(srv_sched *s, double grace_s) {
    if (!s || !s->started) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->deadline = srv_now() + grace_s;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s, 0);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->wait);
    free(s->run);
    free(s->spans);
    free(s->span_req);
    free(s->span_verify);
    free(s->streams);
    free(s->mtp_spans);
    free(s->mtp_req);
    free(s->mtp_drafts);
    free(s->mtp_out);
    free(s->hidden);
    free(s->logits);
    free(s->forced_row);
    for (int k = 0; s->scorers && k < s->n_scorers; k++) dsv4_gen_free(s->scorers[k]);
    free(s->scorers);
    free(s->score_err);
    free(s->span_draw);
    free(s->draws);
    free(s->span_snap);
    free(s->span_lp);
    free(s->snap_hidden);
    free(s->snap_streams);
    free(s->restored);
    free(s->late_rows);
    free(s->late_req);
    free(s->late_draw);
    srv_pcache_free(s->pc);
    srv_dp_free(s->dp);
    free(s);
}
