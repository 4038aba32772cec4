/* scheduler.c — continuous batching over one engine (scheduler.h). */
#include "serve/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/util.h"

struct srv_sched {
    dsv4_engine *e;
    const dsv4_model *m;
    const dsv4_tokenizer *tok;
    srv_sched_opts o;
    srv_metrics *met;
    int V, D;
    int32_t eos;

    pthread_t thread;
    int started;
    /* ---- shared, under mu ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_req *in_head, *in_tail;   /* submitted, not yet seen by the thread */
    int stopping;
    int64_t next_id;
    double deadline;              /* when stopping: cancel what is left after this */
    int n_live;                   /* submitted and not ended */

    /* ---- scheduler thread only ---- */
    srv_req **wait;               /* (n_wait) by id: not admitted (new or preempted) */
    srv_req **run;                /* (n_run) by id: holding a sequence */
    int n_wait, n_run;
    int admit_hold;               /* after a preemption: admit nothing until pages are freed */
    dsv4_span *spans;             /* (max_seqs) one step */
    srv_req **span_req;           /* (max_seqs) */
    float *hidden;                /* (max_seqs, D) rows that need logits */
    float *logits;                /* (max_seqs, V) */
    float *forced_row;            /* (V) a test script's logits */
};

/* ---- lists ------------------------------------------------------------------------------ */

/* Inserts r into list (n entries, room for one more) keeping ids ascending. */
static void list_insert(srv_req **list, int *n, srv_req *r) {
    int i = *n;
    while (i > 0 && list[i - 1]->id > r->id) { list[i] = list[i - 1]; i--; }
    list[i] = r;
    (*n)++;
}

static void list_remove(srv_req **list, int *n, srv_req *r) {
    int i = 0;
    while (i < *n && list[i] != r) i++;
    if (i == *n) return;
    memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    (*n)--;
}

/* ---- ending requests -------------------------------------------------------------------- */

/* Frees r's sequence (if any), takes it off both lists, ends it, drops our reference. */
static void finish(srv_sched *s, srv_req *r, int end, int fin, const char *msg) {
    if (r->seq >= 0) {
        dsv4_err err = {0};
        dsv4_seq_free(s->e, r->seq, &err);
        r->seq = -1;
        list_remove(s->run, &s->n_run, r);
        s->admit_hold = 0;  /* pages came back */
    } else {
        list_remove(s->wait, &s->n_wait, r);
    }
    if (r->gen) {
        /* release the text still held back (nothing after a normal finish) */
        const char *t = NULL;
        size_t n = 0;
        dsv4_gen_end(r->gen, &t, &n);
        srv_req_push_text(r, t, n);
    }
    srv_metrics_tokens(s->met, r->n_prompt, r->n_sampled);
    if (end == SRV_END_CANCELLED) srv_metrics_event(s->met, 1, 0);
    srv_req_end(r, end, fin, msg);
    srv_req_release(r);
    pthread_mutex_lock(&s->mu);
    s->n_live--;
    pthread_mutex_unlock(&s->mu);
}

static int cancelled(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    int c = r->cancel;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* Frees the newest running request's sequence and requeues it; its tokens are kept, so it
 * is recomputed from them when admitted again. */
static void preempt_newest(srv_sched *s) {
    srv_req *r = s->run[s->n_run - 1];
    dsv4_err err = {0};
    dsv4_seq_free(s->e, r->seq, &err);
    r->seq = -1;
    r->n_done = 0;
    s->n_run--;
    list_insert(s->wait, &s->n_wait, r);
    s->admit_hold = 1;
    srv_metrics_event(s->met, 0, 1);
}

/* ---- one step --------------------------------------------------------------------------- */

/* Adds a span for r's next pending rows, at most `room` of them; returns the rows added. */
static int add_span(srv_sched *s, int *n_spans, srv_req *r, int room) {
    int pending = r->n_ctx - r->n_done;
    int n = pending < room ? pending : room;
    if (n > s->o.c_max) n = s->o.c_max;
    if (n <= 0) return 0;
    dsv4_span *sp = &s->spans[*n_spans];
    memset(sp, 0, sizeof *sp);
    sp->seq = r->seq;
    sp->start = r->n_done;
    sp->n_tokens = n;
    sp->tokens = r->ctx + r->n_done;
    sp->n_hidden = n == pending;  /* logits only once the whole context has run */
    s->span_req[(*n_spans)++] = r;
    return n;
}

/* The step's spans: every running decode row first (they never wait), then prefill chunks
 * of running requests, then newly admitted requests, oldest first, within step_tokens rows.
 * All admission and prefill chunking happens here. Returns the span count; *rows and
 * *decode receive the row counts. */
static int plan_step(srv_sched *s, int *rows, int *decode) {
    int n_spans = 0, budget = s->o.step_tokens;
    *decode = 0;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i]->n_ctx - s->run[i]->n_done == 1) {
            budget -= add_span(s, &n_spans, s->run[i], 1);
            (*decode)++;
        }
    for (int i = 0; i < s->n_run && budget > 0; i++)
        if (s->run[i]->n_ctx - s->run[i]->n_done > 1)
            budget -= add_span(s, &n_spans, s->run[i], budget);
    while (budget > 0 && s->n_wait > 0 && !s->admit_hold && s->n_run < s->o.max_seqs) {
        srv_req *r = s->wait[0];
        dsv4_err err = {0};
        if (dsv4_seq_create(s->e, &r->seq, &err)) { r->seq = -1; break; }
        list_remove(s->wait, &s->n_wait, r);
        list_insert(s->run, &s->n_run, r);
        budget -= add_span(s, &n_spans, r, budget);
    }
    *rows = s->o.step_tokens - budget;
    return n_spans;
}

static int ctx_append(srv_req *r, int32_t tok) {
    if (r->n_ctx == r->cap_ctx) {
        int cap = 2 * r->cap_ctx + 16;
        int32_t *c = realloc(r->ctx, (size_t)cap * sizeof *c);
        if (!c) return -1;
        r->ctx = c;
        r->cap_ctx = cap;
    }
    r->ctx[r->n_ctx++] = tok;
    return 0;
}

/* Samples r's next token from its logits row and hands it to the client. */
static void take_token(srv_sched *s, srv_req *r, const float *row) {
    if (r->forced) {
        /* test script: only the scripted token (then EOS) is possible */
        int32_t t = r->n_sampled < r->n_forced ? r->forced[r->n_sampled] : s->eos;
        for (int v = 0; v < s->V; v++) s->forced_row[v] = -INFINITY;
        s->forced_row[t] = 0.0f;
        row = s->forced_row;
    }
    dsv4_gen_token t;
    dsv4_err err = {0};
    if (dsv4_gen_next(r->gen, row, &t, &err)) { finish(s, r, SRV_END_ERROR, 0, err.msg); return; }
    double now = srv_now();
    srv_metrics_latency(s->met, r->n_sampled ? -1 : now - r->t_arrival,
                        r->n_sampled ? now - r->t_last : -1);
    r->t_last = now;
    r->n_sampled++;
    if (srv_req_push(r, &t)) { finish(s, r, SRV_END_ERROR, 0, "out of memory"); return; }
    if (t.finish) { finish(s, r, SRV_END_FINISHED, t.finish, NULL); return; }
    if (t.feed && ctx_append(r, t.token)) { finish(s, r, SRV_END_ERROR, 0, "out of memory"); return; }
    if (r->n_ctx >= s->o.max_context) {
        /* the context is full: the last token is shown but cannot run */
        const char *txt = NULL;
        size_t n = 0;
        dsv4_gen_end(r->gen, &txt, &n);
        srv_req_push_text(r, txt, n);
        finish(s, r, SRV_END_FINISHED, DSV4_FINISH_LENGTH, NULL);
    }
}

static void step(srv_sched *s) {
    int rows, decode, n_spans;
    dsv4_err err = {0};
    for (;;) {
        n_spans = plan_step(s, &rows, &decode);
        if (n_spans == 0) return;
        int rc = dsv4_forward(s->e, s->spans, n_spans, s->hidden, NULL, &err);
        if (rc == DSV4_OK) break;
        if (rc == DSV4_ERR_CACHE_FULL && s->n_run > 1) { preempt_newest(s); continue; }
        /* alone and still too big for the pools, or an engine error: those requests fail */
        for (int i = 0; i < n_spans; i++) finish(s, s->span_req[i], SRV_END_ERROR, 0, err.msg);
        return;
    }
    int n_rows = 0;
    for (int i = 0; i < n_spans; i++) {
        s->span_req[i]->n_done += s->spans[i].n_tokens;
        n_rows += s->spans[i].n_hidden;
    }
    srv_metrics_step(s->met, rows, decode);
    if (n_rows && dsv4_lm_head(s->e, s->hidden, n_rows, s->logits, &err)) {
        for (int i = 0; i < n_spans; i++)
            if (s->spans[i].n_hidden) finish(s, s->span_req[i], SRV_END_ERROR, 0, err.msg);
        return;
    }
    /* span_req[] stays valid while take_token ends requests: it is a copy of the plan */
    for (int i = 0, k = 0; i < n_spans; i++)
        if (s->spans[i].n_hidden) take_token(s, s->span_req[i], s->logits + (size_t)k++ * s->V);
}

static void publish_load(srv_sched *s) {
    srv_metrics_load(s->met, s->n_wait, s->n_run, dsv4_engine_cache_stats(s->e));
}

/* ---- the thread ------------------------------------------------------------------------- */

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->in_head && !s->n_run && !s->n_wait && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        srv_req *in = s->in_head;
        s->in_head = s->in_tail = NULL;
        int stopping = s->stopping;
        int expired = stopping && srv_now() > s->deadline;
        pthread_mutex_unlock(&s->mu);
        while (in) {
            srv_req *next = in->next;
            in->next = NULL;
            list_insert(s->wait, &s->n_wait, in);
            in = next;
        }
        for (int i = s->n_run - 1; i >= 0; i--)
            if (expired || cancelled(s->run[i]))
                finish(s, s->run[i], SRV_END_CANCELLED, 0, expired ? "server shutting down" : NULL);
        for (int i = s->n_wait - 1; i >= 0; i--)
            if (expired || cancelled(s->wait[i]))
                finish(s, s->wait[i], SRV_END_CANCELLED, 0, expired ? "server shutting down" : NULL);
        if (stopping && !s->n_run && !s->n_wait) break;
        step(s);
        publish_load(s);
    }
    return NULL;
}

int srv_sched_start(dsv4_engine *e, const dsv4_model *m, const dsv4_tokenizer *tok,
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
    s->eos = mi.eos_token_id;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    const size_t ns = (size_t)o->max_seqs;
    s->wait = calloc(ns + (size_t)o->max_queue, sizeof *s->wait);  /* submit bounds n_live */
    s->run = calloc(ns, sizeof *s->run);
    s->spans = calloc(ns, sizeof *s->spans);
    s->span_req = calloc(ns, sizeof *s->span_req);
    s->hidden = malloc(ns * (size_t)s->D * sizeof(float));
    s->logits = malloc(ns * (size_t)s->V * sizeof(float));
    s->forced_row = malloc((size_t)s->V * sizeof(float));
    if (!s->wait || !s->run || !s->spans || !s->span_req || !s->hidden || !s->logits ||
        !s->forced_row)
        goto oom;
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        srv_sched_free(s);
        return srv_fail(err, DSV4_ERR_NOMEM, "serve: cannot start the scheduler thread");
    }
    s->started = 1;
    *out = s;
    return DSV4_OK;
oom:
    srv_sched_free(s);
    return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
}

int srv_sched_submit(srv_sched *s, srv_req *r, dsv4_err *err) {
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
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->n_live >= s->o.max_seqs + s->o.max_queue) {
        rc = s->stopping ? srv_fail(err, DSV4_ERR_STATE, "the server is shutting down")
                         : srv_fail(err, DSV4_ERR_CACHE_FULL, "server busy: %d requests queued",
                                    s->o.max_queue);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    r->id = s->next_id++;
    s->n_live++;
    r->next = NULL;
    if (s->in_tail) s->in_tail->next = r;
    else s->in_head = r;
    s->in_tail = r;
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
    free(s->hidden);
    free(s->logits);
    free(s->forced_row);
    free(s);
}
