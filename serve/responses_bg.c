/* responses_bg.c — background responses of OpenAI's Responses API. background: true (with
 * store): the POST answers at once (the response queued, or the stream of its events); the
 * job runs without a connection, driven by the store's worker thread, which runs the
 * stream function (responses_answer.c) on each batch of news (so a polled response
 * has its items so far, and its end is the stream's), keeps the events of a streamed one in
 * its log (GET ?stream=true&starting_after=N replays them after N, then follows live ones),
 * and rings the following streams' doorbells. The entry stays in the store, outside the LRU,
 * until the response ends; its log counts against the store's bytes, at most the entry's
 * share: past it the oldest events are trimmed (a resume before them is a 400), while each
 * connected follower still gets every event (up to two shares behind: log_trim). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/responses_int.h"
#include "serve/srv.h"

/* The most streams that follow one background response at once. */
#define RS_MAX_FOLLOW 64

static rs_log *log_new(void) {
    rs_log *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    atomic_init(&l->refs, 1);
    return l;
}

/* The bytes a log counts against the store: its text and its offsets. */
static size_t log_size(const rs_log *l) { return l->text.n + (size_t)l->n * sizeof *l->off; }

/* The bytes of a log's events from its k-th kept on. */
static size_t size_from(const rs_log *l, int k) {
    return k < l->n ? (l->text.n - l->off[k]) + (size_t)(l->n - k) * sizeof *l->off : 0;
}

/* Under l->mu: the oldest events trimmed until the log holds at most `most` bytes, but none a
 * connected follower has not sent yet while the log holds at most most + extra (extra: two
 * shares, so the memory slow readers keep is bounded, whatever their number); past that the
 * followers still behind the trim are cut (they end with an error event at their cursor).
 * 0 and 0: none kept, its memory freed. */
static void log_trim(rs_log *l, size_t most, size_t extra) {
    int k = 0, slow = l->n;
    for (int i = 0; i < l->n_fol; i++) {
        const rs_fol *f = l->fol[i];
        const int c = f->cursor - l->base;  /* (a connected follower's is never below base) */
        if (!f->cut && c < slow) slow = c;
    }
    while (k < l->n && size_from(l, k) > most) k++;
    if (k > slow) {
        k = slow;
        while (k < l->n && size_from(l, k) > most + extra) k++;
        for (int i = 0; i < l->n_fol; i++)
            if (l->fol[i]->cursor < l->base + k) l->fol[i]->cut = 1;
    }
    if (!k) return;
    const size_t cut = k < l->n ? l->off[k] : l->text.n;
    l->base += k;
    l->n -= k;
    if (!l->n) {
        srv_buf_free(&l->text);
        if (!most) {
            free(l->off);
            l->off = NULL;
            l->cap = 0;
        }
        return;
    }
    memmove(l->text.s, l->text.s + cut, l->text.n - cut);
    l->text.n -= cut;
    for (int i = 0; i < l->n; i++) l->off[i] = l->off[i + k] - cut;
}

/* A background response's end: its running entry gets its response and conversation (taken;
 * NULL: out of memory, not kept) and leaves the running; kept as rs_put keeps one. A log that
 * no longer fits beside the response in the entry's share is counted at what fits: the last
 * log_put, which follows at once, trims it so. Called under the job's request mu (finish):
 * the entry's reference to the run is not the last (the worker holds one). 1 when kept. */
int rs_end(srv_rstore *st, const char *id, char *resp, char *conv, int n_in) {
    int kept = 0;
    pthread_mutex_lock(&st->mu);
    rs_entry **l = rs_link(st, id), *e = *l;
    if (e && e->run) {
        atomic_fetch_sub(&e->run->refs, 1);
        e->run = NULL;
        if (resp && conv) {
            st->used -= e->bytes;
            free(e->resp);
            free(e->conv);
            e->resp = resp;
            e->conv = conv;
            e->conv_len = strlen(conv);
            e->n_in = n_in;
            resp = conv = NULL;
            const size_t base = rs_base_bytes(e), share = st->cap / RS_ENTRY_SHARE;
            if (e->log && base + e->log_bytes > share) e->log_bytes = base < share ? share - base : 0;
            e->bytes = base + e->log_bytes;
            kept = e->bytes <= share && rs_room(st, e->bytes, e);
            st->used += e->bytes;
        }
        if (!kept) rs_drop(st, l);  /* (out of memory: not kept either) */
    }
    pthread_mutex_unlock(&st->mu);
    free(resp);
    free(conv);
    return kept;
}

/* Under the store's mu: the most bytes entry e's log may hold once `more` are appended, that
 * many counted in its bytes now (the least recently used entries go to make room). Past the
 * entry's share the log is trimmed to three quarters of it (so a trim moves its text once
 * every quarter of a share, not at every step), to all of it with the last events (done);
 * SIZE_MAX: no trim, exactly `more` counted. */
static size_t log_budget(srv_rstore *st, rs_entry *e, size_t more, int done) {
    const size_t base = rs_base_bytes(e), share = st->cap / RS_ENTRY_SHARE;
    const size_t limit = base < share ? share - base : 0, want = e->log_bytes + more;
    size_t most = want <= limit ? want : done ? limit : limit - limit / 4;
    if (most > e->log_bytes && !rs_room(st, most - e->log_bytes, e)) {
        most = e->log_bytes + (st->used < st->cap ? st->cap - st->used : 0);
        most -= done ? 0 : most / 4;  /* (the same slack: not a trim at every step) */
    }
    st->used = st->used - e->log_bytes + most;
    e->bytes = e->bytes - e->log_bytes + most;
    e->log_bytes = most;
    return most == want ? SIZE_MAX : most;
}

/* The events of one step (their SSE text: each ends with a blank line, which JSON text never
 * holds) appended to run x's log, its entry's share kept by trimming the oldest (log_budget);
 * a log its entry no longer holds (the response ended and was not kept, or the log did not
 * fit beside it) keeps nothing, its events only passed to its followers. done: the last
 * events. The following streams are woken. */
static void log_put(srv_rstore *st, rs_run *x, const srv_buf *ev, int done) {
    rs_log *l = x->log;
    int n = 0;
    for (size_t i = 0; i + 1 < ev->n; i++)
        if (ev->s[i] == '\n' && ev->s[i + 1] == '\n') n++, i++;
    size_t most = SIZE_MAX;
    pthread_mutex_lock(&st->mu);
    const size_t extra = 2 * (st->cap / RS_ENTRY_SHARE);  /* (what lagging followers may keep more) */
    rs_entry *e = *rs_link(st, x->job->id);
    const int held = e && e->log == l;
    if (!held) most = 0;
    else if (n) most = log_budget(st, e, ev->n + (size_t)n * sizeof(size_t), done);
    if (held && done && most == SIZE_MAX) most = e->log_bytes;  /* (what rs_end counted it at) */
    pthread_mutex_unlock(&st->mu);
    srv_req *kick[RS_MAX_FOLLOW];
    pthread_mutex_lock(&l->mu);
    if (!l->lost && n) {
        if (l->n + n > l->cap) {
            const int cap = l->n + n > 2 * l->cap ? l->n + n : 2 * l->cap;
            size_t *off = realloc(l->off, (size_t)cap * sizeof *off);
            if (off) l->off = off, l->cap = cap;
        }
        const size_t at = l->text.n;
        srv_buf_put(&l->text, ev->s, ev->n);
        if (l->n + n > l->cap || l->text.oom) {
            l->lost = 1;  /* out of memory: the followers end with an error */
        } else {
            l->off[l->n++] = at;
            for (size_t i = 0; i + 2 < ev->n; i++)
                if (ev->s[i] == '\n' && ev->s[i + 1] == '\n') l->off[l->n++] = at + i + 2, i++;
        }
    }
    if (!l->lost && most != SIZE_MAX) log_trim(l, most, extra);  /* (lost: kept for the followers) */
    const size_t size = log_size(l);
    const int lost = l->lost;
    l->done |= done;
    const int nk = l->n_fol;
    for (int i = 0; i < nk; i++) {
        kick[i] = l->fol[i]->r;
        atomic_fetch_add(&kick[i]->refs, 1);
    }
    pthread_mutex_unlock(&l->mu);
    if (held && (most != SIZE_MAX || lost)) {  /* the entry counts what the trim left (lagging
                                                * followers' events too: at most one share more) */
        pthread_mutex_lock(&st->mu);
        if ((e = *rs_link(st, x->job->id)) && e->log == l) {
            st->used = st->used - e->log_bytes + (lost ? 0 : size);
            e->bytes = e->bytes - e->log_bytes + (lost ? 0 : size);
            e->log_bytes = lost ? 0 : size;
            if (lost) {  /* (no resume from a log out of memory) */
                e->log = NULL;
                atomic_fetch_sub(&l->refs, 1);  /* the entry's (the run holds one) */
            }
        }
        pthread_mutex_unlock(&st->mu);
    }
    for (int i = 0; i < nk; i++) {
        srv_req_kick(kick[i]);
        srv_req_release(kick[i]);
    }
}

/* The waker of a run's request (the scheduler's thread): news for the worker. */
static void run_wake(void *arg) {
    rs_run *x = arg;
    srv_rstore *st = x->s->rstore;
    pthread_mutex_lock(&st->mu);
    x->news = 1;
    pthread_cond_signal(&st->wcv);
    pthread_mutex_unlock(&st->mu);
}

/* The run's news: its events formatted (the items kept for a poll), logged when streamed; 1
 * once it ended (its response is in its entry). */
static int run_step(srv_rstore *st, rs_run *x) {
    srv_job *j = x->job;
    srv_req *r = j->r;
    srv_buf ev = {0};
    int finished = 0;
    pthread_mutex_lock(&r->mu);
    responses_stream(x->s, j, &ev, &finished);
    if (!finished) srv_req_wait(r, run_wake, x, 0);  /* (it has not ended: the stream ends with it) */
    pthread_mutex_unlock(&r->mu);
    if (x->log) log_put(st, x, &ev, finished);
    srv_buf_free(&ev);
    return finished;
}

/* The worker: runs with news, in turn (a run stepped goes to the list's end), until the stop
 * finds none running (the scheduler's stop ended every request first). */
static void *worker_main(void *arg) {
    srv_rstore *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        rs_run **p = &st->runs;
        while (*p && !(*p)->news) p = &(*p)->next;
        rs_run *x = *p;
        if (!x) {
            if (st->wstop && !st->runs) break;
            pthread_cond_wait(&st->wcv, &st->mu);
            continue;
        }
        *p = x->next;
        x->next = NULL;
        x->news = 0;
        st->stepping++;
        pthread_mutex_unlock(&st->mu);
        const int finished = run_step(st, x);
        if (finished) rs_run_release(x);
        pthread_mutex_lock(&st->mu);
        st->stepping--;
        if (finished) {
            if (!st->runs && !st->stepping) pthread_cond_broadcast(&st->idle);
            continue;
        }
        for (p = &st->runs; *p; p = &(*p)->next) {}
        *p = x;
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

void srv_rstore_stop(srv_rstore *st) {
    if (!st) return;
    pthread_mutex_lock(&st->mu);
    while (st->runs || st->stepping) pthread_cond_wait(&st->idle, &st->mu);
    pthread_mutex_unlock(&st->mu);
}

/* The worker told to end once no run is left, and joined (srv_rstore_free: the intake, which
 * may still hand it a run that its request's end made short, is gone). */
void rs_worker_end(srv_rstore *st) {
    pthread_mutex_lock(&st->mu);
    st->wstop = 1;
    pthread_cond_signal(&st->wcv);
    const int on = st->worker_on;
    st->worker_on = 0;
    pthread_mutex_unlock(&st->mu);
    if (on) pthread_join(st->worker, NULL);
}

/* A stream following log l from its event `cursor` (a job of its own: its request only a
 * doorbell; the log lists its place). NULL with *status and a message (400: the log no
 * longer holds the event at the cursor). */
srv_job *rs_follower(const char *id, rs_log *l, int cursor, int *status, char *msg) {
    srv_job *j = calloc(1, sizeof *j);
    struct srv_resp *R = calloc(1, sizeof *R);
    rs_fol *f = calloc(1, sizeof *f);
    srv_req *r = srv_req_new(NULL, 0);
    *status = 500;
    snprintf(msg, MSG, "out of memory");
    if (!j || !R || !f || !r) goto fail;
    pthread_mutex_lock(&l->mu);
    if (cursor < l->base) {
        pthread_mutex_unlock(&l->mu);
        *status = 400;
        snprintf(msg, MSG, "This response's events before sequence_number %d are no longer kept (its events "
                 "outgrew its share of the server's response store, --responses-store-bytes): "
                 "'starting_after' must be at least %d; GET without stream polls the response.",
                 l->base, l->base - 1);
        goto fail;
    }
    if (l->done && cursor > l->base + l->n) {
        pthread_mutex_unlock(&l->mu);
        *status = 400;
        snprintf(msg, MSG, "'starting_after' %d is past this response's last event (sequence_number %d)",
                 cursor - 1, l->base + l->n - 1);
        goto fail;
    }
    if (l->n_fol == RS_MAX_FOLLOW) {
        pthread_mutex_unlock(&l->mu);
        *status = 429;
        snprintf(msg, MSG, "%d streams follow this response already", RS_MAX_FOLLOW);
        goto fail;
    }
    if (l->n_fol == l->cap_fol) {
        const int cap = l->cap_fol ? 2 * l->cap_fol : 4;
        rs_fol **fl = realloc(l->fol, (size_t)cap * sizeof *fl);
        if (!fl) { pthread_mutex_unlock(&l->mu); goto fail; }
        l->fol = fl;
        l->cap_fol = cap;
    }
    f->r = r;  /* r's second reference */
    f->cursor = cursor;
    l->fol[l->n_fol++] = f;
    pthread_mutex_unlock(&l->mu);
    atomic_fetch_add(&l->refs, 1);
    R->flog = l;
    R->fol = f;
    j->api = SRV_API_RESPONSES;
    j->stream = 1;
    j->r = r;
    j->resp = R;
    snprintf(j->id, sizeof j->id, "%s", id);
    return j;
fail:
    if (r) { srv_req_release(r); srv_req_release(r); }
    free(f);
    free(R);
    free(j);
    return NULL;
}

/* A following stream's news: the log's events from its cursor; done once the log's last is
 * out. One cut (a share behind) or a log out of memory: what is kept from its cursor, then an
 * error event naming the first event it did not get, then the end. */
void rs_follow_stream(srv_job *j, srv_buf *out, int *finished) {
    rs_log *l = j->resp->flog;
    rs_fol *f = j->resp->fol;
    if (j->r->cancel) {  /* its client left (the hang-up watcher): its place among the followers goes */
        *finished = 1;
        return;
    }
    pthread_mutex_lock(&l->mu);
    const int i = f->cursor - l->base;
    if (!f->cut && i < l->n) {
        srv_buf_put(out, l->text.s + l->off[i], l->text.n - l->off[i]);
        f->cursor = l->base + l->n;
    }
    if (f->cut || l->lost) {
        cJSON *o = rs_ev("error");
        cJSON_AddStringToObject(o, "code", "stream_lost");
        cJSON_AddStringToObject(o, "message", f->cut ? "this stream fell more than a quarter of the server's "
                                "response store (--responses-store-bytes) behind: the events from this "
                                "sequence_number on were dropped before it sent them; GET /v1/responses/{id} "
                                "polls the response" : "the server ran out of memory for this background "
                                "response's events: its stream ended here; GET /v1/responses/{id} polls the response");
        cJSON_AddNullToObject(o, "param");
        cJSON_AddNumberToObject(o, "sequence_number", f->cursor);
        srv_sse(out, "error", o);
        *finished = 1;
    } else if (l->done && f->cursor >= l->base + l->n) {
        *finished = 1;
    }
    pthread_mutex_unlock(&l->mu);
}

/* Starts the worker unless it runs. Under mu. 0, or -1. */
static int worker_start(srv_rstore *st) {
    if (st->wstop) return -1;
    if (st->worker_on) return 0;
    if (pthread_create(&st->worker, NULL, worker_main, st)) return -1;
    pthread_setname_np(st->worker, "dsv4-bg");
    st->worker_on = 1;
    return 0;
}

/* A submitted background job (taken) handed to the worker: its entry stored (running), and the
 * POST's answer in out: the response queued, or (stream) a stream following its log from the
 * start. 0, or a status with a message (the job cancelled). */
int rs_bg_start(srv *s, srv_job *job, srv_reply *out, char *msg) {
    srv_rstore *st = s->rstore;
    const struct srv_resp *R = job->resp;
    rs_run *x = calloc(1, sizeof *x);
    rs_log *l = job->stream ? log_new() : NULL;
    cJSON *in = cJSON_Duplicate(R->conv, 1);
    if (in) rs_input_ids(job, in);
    char *conv = in ? cJSON_PrintUnformatted(in) : NULL;
    const int n_in = cJSON_GetArraySize(in);
    cJSON_Delete(in);
    int status = 500;
    snprintf(msg, MSG, "out of memory");
    if (!x || (job->stream && !l) || !conv) goto fail;
    atomic_init(&x->refs, 1);  /* the worker's */
    x->s = s;
    x->job = job;
    x->log = l;
    pthread_mutex_lock(&st->mu);
    const int w = worker_start(st);
    pthread_mutex_unlock(&st->mu);
    if (w) {
        status = 503;
        snprintf(msg, MSG, "cannot start a thread");
        goto fail_run;
    }
    if (!rs_put(st, job->id, NULL, conv, n_in, x, l)) {
        conv = NULL;
        status = 503;
        snprintf(msg, MSG, "the response store (--responses-store-bytes) cannot keep this background "
                 "response (its input is over an eighth of the store, or running ones fill it)");
        goto fail_run;
    }
    conv = NULL;
    srv_job *f = NULL;
    if (job->stream) {
        if (!(f = rs_follower(job->id, l, 0, &status, msg)))
            srv_sched_cancel(s->sched, job->r);  /* its entry ends failed (cancelled) */
    } else {
        out->status = 200;
        srv_put_json(&out->body, rs_response_object(s, job, "queued", NULL, NULL));
    }
    pthread_mutex_lock(&st->mu);
    x->news = 1;
    x->next = st->runs;
    st->runs = x;
    pthread_cond_signal(&st->wcv);
    pthread_mutex_unlock(&st->mu);
    if (job->stream && !f) return status;
    if (f) {
        out->job = f;
        out->stream = responses_stream;
    }
    return 0;
fail_run:
    x->job = NULL;  /* (cancelled and freed below) */
    rs_run_release(x);
    x = NULL;
    l = NULL;  /* (the run's reference, released with it) */
fail:
    free(conv);
    free(x);
    rs_log_release(l);
    srv_sched_cancel(s->sched, job->r);
    srv_job_free(job);
    return status;
}
