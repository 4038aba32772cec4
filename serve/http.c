/* http.c — the HTTP side on libmicrohttpd: routes, authentication, body limits, and moving
 * answers to the client (one JSON body, or an SSE stream fed by the scheduler).
 *
 * Threading: one MHD thread runs every connection (an internal poll() loop). A generation
 * answer never blocks it: with nothing new to send, the connection is suspended
 * (MHD_suspend_connection) and leaves a one-shot waker on its request (srv_req_wait), which
 * the scheduler calls when it pushes the next token (MHD_resume_connection); the thread
 * sends every stream resumed meanwhile its chunk in one pass. (Until session 39 MHD ran a
 * thread per connection blocked on the request's condition variable: a thread switch, a
 * futex pair and MHD's poll before the send, every token: ~70 us of CPU a token at 16
 * streams on the bench VM, on the engine's cores; the one thread takes ~33.) A client
 * that hangs up while its connection is suspended is noticed by the watcher thread, which
 * polls the suspended sockets every --hangup-check-ms and cancels their requests; one gone
 * while tokens flow fails MHD's next send. A slow reader stalls only its own connection (MHD
 * asks for its next chunk when its socket takes bytes); what waits for it is its request's
 * events, bounded by the request's length. The engine runs on the scheduler thread only;
 * connections are capped by --max-connections.
 *
 * Intake: the MHD thread does not parse, render or tokenize a request's body (a 430 KB
 * prompt, ~100K tokens, takes it ~45 ms, every stream's tokens waiting meanwhile). A POST
 * whose body is complete, authorized and within the limit is queued for an intake thread
 * and its connection suspended; the intake thread runs the route's handler (parse,
 * validate, template, tokenize, submit) and resumes the connection, whose next callback on
 * the MHD thread sends the error or starts the answer as before. There are two intake
 * lanes, each a thread taking its queue in arrival order: requests that render at most
 * SRV_INTAKE_SMALL bytes (the body, and a previous_response_id's stored conversation:
 * intake_cost) on one, larger ones on the other, so a small request never waits
 * behind a multi-megabyte prompt's tokenization (~0.3-1 s for 6 MB), while the large ones
 * still take one core at most between them (on a small machine their CPU is the engine's).
 * A client that hangs up while queued is seen by the watcher (its waiter has no request
 * yet: marked gone) and its body is never tokenized. At shutdown the intake threads drain
 * their queues (the scheduler refuses the submissions: 503) before MHD stops; a request
 * that arrives after that is handled on the MHD thread. */
#include "serve/http.h"

#include <microhttpd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/srv.h"

/* A suspended connection waiting for its request's news; linked in srv_http's list while
 * suspended (a suspended connection is never closed, so its socket stays valid there). */
typedef struct waiter {
    struct srv_http *h;
    struct MHD_Connection *c;
    srv_req *r;                  /* NULL: queued at the intake, no request yet */
    int fd;                      /* the client's socket */
    int gone;                    /* (intake) the client hung up; guarded by the list's mu */
    int begun;                   /* its answer began (a stream: status and headers sent) */
    atomic_int probe;            /* (a stream) PROBE_*: the watcher asks, the stream writes */
    struct waiter *prev, *next;
} waiter;

/* A begun stream whose client shut its write side is probed once with an SSE comment: a
 * client that closed answers it with a reset (gone at the next look, or the write fails), a
 * half-closed one reads it and is served on. */
enum { PROBE_NONE = 0, PROBE_ASKED, PROBE_SENT };

struct conn;

/* Requests that render at most this many bytes go to the small intake lane (a chat of this
 * size renders and tokenizes in a few milliseconds). */
#define SRV_INTAKE_SMALL (64 * 1024)
enum { LANE_SMALL = 0, LANE_LARGE, N_LANES };

/* An intake lane: its queue (guarded by srv_http's qmu) and its thread. */
struct lane {
    struct srv_http *h;
    pthread_cond_t cv;           /* the thread's sleep, cut by a request or qstop */
    struct conn *head, *tail;    /* requests waiting for the thread, oldest first */
    pthread_t thread;
    int started;                 /* the thread was started */
};

/* The HTTP side's state beside the daemon. Lock order: a request's mu, then mu; qmu, then
 * mu. */
struct srv_http {
    srv *s;
    pthread_mutex_t mu;          /* guards the list, stop */
    pthread_cond_t cv;           /* the watcher's sleep between looks, cut by stop */
    waiter *head;                /* suspended connections */
    int cap;                     /* the watcher's arrays' size (max_connections) */
    struct pollfd *fds;          /* (cap) the watcher's poll set */
    srv_req **gone;              /* (cap) requests whose client hung up, one look's */
    srv_req **probe;             /* (cap) begun streams whose client shut its write side */
    int stop;
    int inflight;                /* requests begun (on_request) and not completed; guarded by mu */
    pthread_cond_t done_cv;      /* signalled when inflight drops */
    pthread_t watcher;
    int watching;                /* the watcher thread was started */
    pthread_mutex_t qmu;         /* guards the lanes' queues, qstop, and conns' stage */
    struct lane lanes[N_LANES];
    int qstop;                   /* the intake threads drain their queues and end */
};

/* At shutdown, the most seconds MHD_stop_daemon waits for answers still being written. */
#define SRV_STOP_FLUSH_S 2

/* Where a POST is: its body arriving, queued at the intake, handled (rep set), answered. */
enum { ST_NEW = 0, ST_QUEUED, ST_HANDLED, ST_GONE, ST_ANSWERED };

/* Per-request state: the body as it arrives; the intake's answer; a JSON answer's job
 * while it runs. */
typedef struct conn {
    srv_buf body;
    int too_large;
    const struct route *rt;      /* the POST's route, for the intake */
    int stage;                   /* ST_*; guarded by qmu while the intake may touch it */
    srv_reply rep;               /* the handler's answer (ST_HANDLED) */
    struct conn *qnext;
    srv_job *job;                /* a submitted non-stream request, answered at its end */
    srv_final_fn final;
    waiter w;
} conn;

/* An SSE answer in progress. */
typedef struct stream {
    srv *s;
    srv_job *job;
    srv_stream_fn fn;
    srv_buf out;     /* bytes formatted, not yet handed to MHD */
    size_t pos;
    int finished;
    waiter w;
} stream;

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void waiter_init(waiter *w, srv *s, struct MHD_Connection *c, srv_req *r) {
    *w = (waiter){.h = s->http, .c = c, .r = r, .fd = conn_fd(c)};
}

/* The waker (the scheduler's thread, r->mu not held): out of the list, then resumed. */
static void wake_waiter(void *arg) {
    waiter *w = arg;
    struct srv_http *h = w->h;
    pthread_mutex_lock(&h->mu);
    if (w->prev) w->prev->next = w->next;
    else h->head = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&h->mu);
    MHD_resume_connection(w->c);
}

/* Links w into the list (the watcher looks at its socket from now on) and suspends its
 * connection. */
static void list_and_suspend(waiter *w) {
    struct srv_http *h = w->h;
    pthread_mutex_lock(&h->mu);
    w->prev = NULL;
    w->next = h->head;
    if (h->head) h->head->prev = w;
    h->head = w;
    pthread_mutex_unlock(&h->mu);
    MHD_suspend_connection(w->c);
}

/* Suspends w's connection until its request has news (end_only: until it ended, a JSON
 * answer's). Called on the MHD thread from one of its callbacks, with w->r->mu held, having
 * found nothing new: the waker cannot fire before the suspension, it needs that mutex. */
static void suspend(waiter *w, int end_only) {
    srv_req_wait(w->r, wake_waiter, w, end_only);
    list_and_suspend(w);
}

/* Whether a suspended connection's client is gone, from its socket's poll events: it reset
 * or closed both sides (POLLHUP, POLLERR), or, while its answer has not begun (queued at the
 * intake, or a non-stream answer being generated), it shut its write side (POLLRDHUP).
 * A client that half-closes after its request (HTTP/1.0 clients, `curl -N` behind some
 * proxies) cannot be told from one that closed by its FIN, and libmicrohttpd (0.9.75) reads
 * a connection whose answer it has not started, closing it at the end of file: such a
 * client's request could not be answered anyway, so it is dropped at once (never tokenized
 * if still queued, its generation cancelled). Once a stream has begun (its headers and first
 * event go at once, so also while it is queued or prefilling), MHD only writes, so a
 * half-closed stream client reads every event to the end: its FIN only has the stream probed
 * (wants_probe). A client that closed (an SDK's abort, curl's ^C) shows as the same FIN; the
 * probe makes its kernel answer with a reset, which the next look sees as POLLHUP|POLLERR
 * (or MHD's write fails), so it is cancelled within a look or two of the probe, not at its
 * first token (session 42: 3.6 s behind a 900-token request at --max-seqs 1). */
static int client_gone(const waiter *w, short ev) {
    if (ev & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    return (ev & POLLRDHUP) && !w->begun;
}

static int wants_probe(const waiter *w, short ev) {
    return (ev & POLLRDHUP) && w->begun && w->r && atomic_load(&w->probe) == PROBE_NONE;
}

/* Every --hangup-check-ms: the suspended sockets polled at once; a client gone cancels its
 * request (whose end then wakes and closes the connection), a begun stream to probe is woken
 * (its stream_read writes the probe). Both go after the list's unlock (a request's mu is
 * never taken under it), each request held by a reference. */
static void *watch_main(void *arg) {
    struct srv_http *h = arg;
    const int ms = h->s->o.hangup_ms;
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        int n = 0, m = 0, np = 0;
        for (waiter *w = h->head; w && n < h->cap; w = w->next)
            h->fds[n++] = (struct pollfd){.fd = w->fd, .events = POLLRDHUP};
        if (n && poll(h->fds, (nfds_t)n, 0) > 0) {
            int i = 0;
            for (waiter *w = h->head; w && i < n; w = w->next, i++)
                if (client_gone(w, h->fds[i].revents)) {
                    if (!w->r) { w->gone = 1; continue; }  /* queued: never handled */
                    atomic_fetch_add(&w->r->refs, 1);
                    h->gone[m++] = w->r;
                } else if (wants_probe(w, h->fds[i].revents)) {
                    atomic_store(&w->probe, PROBE_ASKED);
                    atomic_fetch_add(&w->r->refs, 1);
                    h->probe[np++] = w->r;
                }
        }
        pthread_mutex_unlock(&h->mu);
        for (int i = 0; i < m; i++) {
            srv_sched_cancel(h->s->sched, h->gone[i]);
            /* a stream's waiter woken: one that follows a background response (its request
             * is not the scheduler's) ends on it; another finds its write failing */
            srv_req_kick(h->gone[i]);
            srv_req_release(h->gone[i]);
        }
        for (int i = 0; i < np; i++) {
            srv_req_kick(h->probe[i]);
            srv_req_release(h->probe[i]);
        }
        pthread_mutex_lock(&h->mu);
        if (h->stop) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static enum MHD_Result send_body(srv *s, struct MHD_Connection *c, int status, const char *type,
                                 const char *body, size_t len) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->met, status);
    return rc;
}

static enum MHD_Result send_json(srv *s, struct MHD_Connection *c, int status, const srv_buf *b) {
    if (b->oom || !b->s) return send_body(s, c, 500, "application/json", "{}", 2);
    return send_body(s, c, status, "application/json", b->s, b->n);
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, int api, int status,
                                  const char *msg) {
    srv_reply rep = {0};
    srv_reply_error(&rep, api, status, msg);
    enum MHD_Result rc = send_json(s, c, status, &rep.body);
    srv_buf_free(&rep.body);
    return rc;
}

/* ---- streaming -------------------------------------------------------------------------- */

/* Formats what is new in the request (the opening chunk at the first call); when that is
 * nothing, suspends the connection until the request has news and returns 0 (MHD's
 * contract: 0 only with the connection suspended, else it calls again at once). A stream
 * waiting for its first token, or for a token whose text is held back, costs nothing while
 * it waits. (A connection thread spinning here on the request's mutex once made 16 queued
 * clients slow prefill steps 5-10x.) */
static ssize_t stream_read(void *cls, uint64_t at, char *buf, size_t max) {
    (void)at;
    stream *st = cls;
    srv_req *r = st->job->r;
    while (st->pos == st->out.n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.n = st->pos = 0;
        pthread_mutex_lock(&r->mu);
        if (atomic_load(&st->w.probe) == PROBE_ASKED) {  /* an SSE comment: clients skip it */
            srv_buf_puts(&st->out, ": \n\n");
            atomic_store(&st->w.probe, PROBE_SENT);
        }
        /* looked at first: the other choices (n > 1) may end while the function runs */
        const int ended = srv_job_ended(st->job);
        st->fn(st->s, st->job, &st->out, &st->finished);
        /* nothing to send: wait for the request's next event. (An ended request always
         * makes the stream function write its last event; should one not, end here rather
         * than spin.) */
        const int idle = st->out.n == 0 && !st->finished && !st->out.oom;
        if (idle && !ended) {
            srv_metrics_stream_wait(&st->s->met);
            suspend(&st->w, 0);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (idle || st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out.n - st->pos < max ? st->out.n - st->pos : max;
    memcpy(buf, st->out.s + st->pos, n);
    st->pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    if (!st->finished) srv_sched_cancel(st->s->sched, st->job->r);
    srv_job_free(st->job);
    srv_buf_free(&st->out);
    free(st);
}

static enum MHD_Result send_stream(srv *s, struct MHD_Connection *c, srv_reply *rep) {
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        int api = rep->job->api;
        srv_sched_cancel(s->sched, rep->job->r);
        srv_job_free(rep->job);
        return send_error(s, c, api, 500, "out of memory");
    }
    st->s = s;
    st->job = rep->job;
    st->fn = rep->stream;
    waiter_init(&st->w, s, c, rep->job->r);
    st->w.begun = 1;  /* MHD sends the status and headers with the first read */
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!resp) { stream_free(st); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->met, 200);
    return rc;
}

/* ---- routes ----------------------------------------------------------------------------- */

/* Constant-time comparison of the presented key with the configured one. */
static int key_matches(const char *given, const char *want) {
    size_t gn = strlen(given), wn = strlen(want);
    unsigned char d = (unsigned char)(gn != wn);
    for (size_t i = 0; i < wn; i++) d |= (unsigned char)(want[i] ^ (i < gn ? given[i] : 0));
    return d == 0;
}

static int authorized(const srv *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (auth && !strncmp(auth, "Bearer ", 7) && key_matches(auth + 7, s->o.api_key)) return 1;
    return xkey && key_matches(xkey, s->o.api_key);
}

typedef void (*api_fn)(srv *s, const char *body, size_t len, srv_reply *out);

static const struct route {
    const char *path, *method;
    api_fn fn;          /* NULL: a GET answered in place */
    int api;            /* the shape of its errors */
    int open;           /* no key needed */
} kRoutes[] = {
    {"/v1/chat/completions", "POST", srv_openai_chat, SRV_API_CHAT, 0},
    {"/v1/completions", "POST", srv_openai_completion, SRV_API_COMPLETION, 0},
    {"/v1/messages", "POST", srv_anthropic_messages, SRV_API_MESSAGES, 0},
    {"/v1/messages/count_tokens", "POST", srv_anthropic_count_tokens, SRV_API_MESSAGES, 0},
    {"/v1/responses", "POST", srv_responses_create, SRV_API_RESPONSES, 0},
    {"/v1/responses/*", "GET", NULL, SRV_API_RESPONSES, 0},     /* a stored response, its input_items */
    {"/v1/responses/*", "DELETE", NULL, SRV_API_RESPONSES, 0},
    {"/v1/responses/*", "POST", NULL, SRV_API_RESPONSES, 0},    /* .../cancel: a flag and a copy */
    /* (after the pattern: the last route that matches is taken) */
    {"/v1/responses/input_tokens", "POST", srv_responses_input_tokens, SRV_API_RESPONSES, 0},
    {"/tokenize", "POST", srv_tokenize, SRV_API_CHAT, 0},
    {"/detokenize", "POST", srv_detokenize, SRV_API_CHAT, 0},
    {"/v1/models", "GET", NULL, SRV_API_CHAT, 0},
    {"/v1/models/*", "GET", NULL, SRV_API_CHAT, 0},  /* one model by its id */
    {"/health", "GET", NULL, SRV_API_CHAT, 1},
    {"/metrics", "GET", NULL, SRV_API_CHAT, 1},
};

/* url is rt's path, or (a path ending in '*') has its prefix and something after it */
static int route_matches(const struct route *rt, const char *url) {
    size_t n = strlen(rt->path);
    if (rt->path[n - 1] != '*') return !strcmp(url, rt->path);
    return !strncmp(url, rt->path, n - 1) && url[n - 1];
}

static cJSON *model_object(const srv *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "dsv4");
    cJSON_AddNumberToObject(m, "max_model_len", (double)s->o.max_context);
    return m;
}

/* The GET routes (and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel), answered in
 * place. */
static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, const char *path,
                                 const char *method) {
    int ready = atomic_load(&s->ready);
    if (!strcmp(path, "/health")) {
        const char *why = ready ? srv_sched_group_failed(s->sched) : NULL;
        if (why) {  /* a DP group that failed serves no more: not healthy */
            srv_buf f = {0};
            srv_buf_puts(&f, "{\"status\":\"failed\",\"error\":");
            srv_buf_json_str(&f, why, strlen(why));
            srv_buf_puts(&f, "}");
            enum MHD_Result rc = send_json(s, c, 503, &f);
            srv_buf_free(&f);
            return rc;
        }
        const char *b = ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
        return send_body(s, c, ready ? 200 : 503, "application/json", b, strlen(b));
    }
    if (!strcmp(path, "/metrics")) {
        char *t = srv_metrics_render(&s->met);
        if (!t) return send_error(s, c, SRV_API_CHAT, 500, "out of memory");
        enum MHD_Result rc = send_body(s, c, 200, "text/plain; version=0.0.4", t, strlen(t));
        free(t);
        return rc;
    }
    srv_buf b = {0};
    const char *stream = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream");
    if (!strncmp(path, "/v1/responses/", 14) && !strchr(path + 14, '/') && !strcmp(method, "GET") && stream &&
        !strcmp(stream, "true")) {  /* a background stream resumed: its log's events, then live ones */
        srv_reply rep = {0};
        if (!srv_responses_follow(s, path + 14,
                                  MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "starting_after"), &rep))
            return send_stream(s, c, &rep);
        enum MHD_Result rc = send_json(s, c, rep.status, &rep.body);
        srv_buf_free(&rep.body);
        return rc;
    }
    if (!strncmp(path, "/v1/responses/", 14)) {  /* the store: a lock and a copy */
        const srv_list_query q = {
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "before"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit"),
            MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order")};
        const int status = srv_responses_lookup(s, method, path + 14, &q, &b);
        enum MHD_Result rc = send_json(s, c, status, &b);
        srv_buf_free(&b);
        return rc;
    }
    const char *id = path + strlen("/v1/models");
    if (*id == '/') {  /* /v1/models/{id} (MHD decoded the URL's escapes) */
        if (strcmp(id + 1, s->model_name)) {
            /* OpenAI's answer for a model it does not serve */
            char msg[300], name[201];
            srv_client_text(name, sizeof name, id + 1);
            snprintf(msg, sizeof msg, "The model `%s` does not exist or you do not have access to it.",
                     name);
            srv_openai_error_code(&b, "invalid_request_error", NULL, "model_not_found", msg);
            enum MHD_Result rc = send_json(s, c, 404, &b);
            srv_buf_free(&b);
            return rc;
        }
        srv_put_json(&b, model_object(s));
    } else {  /* /v1/models */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(s));
        srv_put_json(&b, o);
    }
    enum MHD_Result rc = send_json(s, c, 200, &b);
    srv_buf_free(&b);
    return rc;
}

/* A non-stream answer: sent once its request ended; until then the connection is
 * suspended (MHD calls on_request again when it resumes). */
static enum MHD_Result json_answer(srv *s, struct MHD_Connection *c, conn *cc) {
    srv_req *r = cc->job->r;
    pthread_mutex_lock(&r->mu);
    if (!srv_job_ended(cc->job)) {  /* every choice (n > 1: their ends wake it too) */
        suspend(&cc->w, 1);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    srv_reply rep = {0};
    int status = 500;
    cc->final(s, cc->job, &rep.body, &status);
    pthread_mutex_unlock(&r->mu);
    srv_job_free(cc->job);
    cc->job = NULL;
    enum MHD_Result rc = send_json(s, c, status, &rep.body);
    srv_buf_free(&rep.body);
    return rc;
}

/* 1 when a JSON body holds a \u0000 escape (a backslash escape consumes the character after
 * it, so "\\u0000" is the text \u0000, not a NUL) */
static int has_nul_escape(const char *b, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (b[i] == '\\') {
            if (b[i + 1] == 'u' && i + 6 <= n && !memcmp(b + i + 2, "0000", 4)) return 1;
            i++;
        }
    return 0;
}

/* The route's handler on the body: parse, validate, render, tokenize, submit. cJSON ends
 * every string at a \u0000 escape, so a body holding one would be served silently changed
 * (a pattern "^a\u0000b$" as "^a", a prompt cut short): refused for every route.
 * stopping: the server is shutting down, so the request could not be submitted anyway:
 * its 503 without parsing or tokenizing its body (22 queued 6 MB prompts took 6.7 s from
 * SIGTERM to exit under --grace 0 when each was tokenized first). */
static void run_handler(srv *s, conn *cc, int stopping) {
    const char *body = cc->body.s ? cc->body.s : "";
    if (stopping) srv_reply_error(&cc->rep, cc->rt->api, 503, "the server is shutting down");
    else if (has_nul_escape(body, cc->body.n))
        srv_reply_error(&cc->rep, cc->rt->api, 400,
                        "the request body holds a \\u0000 escape (U+0000), which is not supported");
    else cc->rt->fn(s, body, cc->body.n, &cc->rep);
}

/* On the MHD thread, the handler's answer (cc->rep) out: an error body, a stream, or a
 * JSON answer waited for. */
static enum MHD_Result answer(srv *s, struct MHD_Connection *c, conn *cc) {
    srv_reply rep = cc->rep;
    cc->rep = (srv_reply){0};
    cc->stage = ST_ANSWERED;
    if (!rep.job) {
        enum MHD_Result rc = send_json(s, c, rep.status, &rep.body);
        srv_buf_free(&rep.body);
        return rc;
    }
    if (rep.job->stream) return send_stream(s, c, &rep);
    cc->job = rep.job;
    cc->final = rep.final;
    waiter_init(&cc->w, s, c, rep.job->r);
    return json_answer(s, c, cc);
}

/* An intake lane's thread: each queued request's handler, oldest first (one whose client
 * hung up is skipped), then its connection resumed. Ends when qstop is set and its queue is
 * empty. */
static void *intake_main(void *arg) {
    struct lane *ln = arg;
    struct srv_http *h = ln->h;
    pthread_mutex_lock(&h->qmu);
    for (;;) {
        while (!ln->head && !h->qstop) pthread_cond_wait(&ln->cv, &h->qmu);
        conn *cc = ln->head;
        if (!cc) break;
        ln->head = cc->qnext;
        if (!ln->head) ln->tail = NULL;
        const int stopping = h->qstop;
        pthread_mutex_unlock(&h->qmu);
        pthread_mutex_lock(&h->mu);
        const int gone = cc->w.gone;
        pthread_mutex_unlock(&h->mu);
        if (!gone) run_handler(h->s, cc, stopping);
        srv_metrics_intake(&h->s->met, gone);
        pthread_mutex_lock(&h->qmu);
        cc->stage = gone ? ST_GONE : ST_HANDLED;
        pthread_mutex_unlock(&h->qmu);
        wake_waiter(&cc->w);  /* cc may be freed from here on */
        pthread_mutex_lock(&h->qmu);
    }
    pthread_mutex_unlock(&h->qmu);
    return NULL;
}

/* The bytes a request's handler renders and tokenizes, which pick its intake lane: its body,
 * and for a Responses request with previous_response_id the stored conversation too (a
 * ~100-byte body can render megabytes; looked up only for a body that is small itself). */
static size_t intake_cost(srv *s, const conn *cc) {
    size_t n = cc->body.n;
    if (n <= SRV_INTAKE_SMALL && (cc->rt->fn == srv_responses_create || cc->rt->fn == srv_responses_input_tokens))
        n += srv_responses_prev_bytes(s, cc->body.s, cc->body.n);
    return n;
}

static enum MHD_Result dispatch(srv *s, struct MHD_Connection *c, const char *url,
                                const char *method, conn *cc) {
    const struct route *rt = NULL;
    int path_known = 0;
    int api = SRV_API_CHAT;
    for (size_t i = 0; i < sizeof kRoutes / sizeof kRoutes[0]; i++)
        if (route_matches(&kRoutes[i], url)) {
            path_known = 1;
            api = kRoutes[i].api == SRV_API_MESSAGES ? SRV_API_MESSAGES : SRV_API_CHAT;
            if (!strcmp(method, kRoutes[i].method)) rt = &kRoutes[i];
        }
    if (!rt) {
        char msg[160], m[17], u[101];
        srv_client_text(m, sizeof m, method);
        srv_client_text(u, sizeof u, url);
        snprintf(msg, sizeof msg, path_known ? "method %s is not allowed on %s" : "no route %s %s",
                 m, u);
        return send_error(s, c, api, path_known ? 405 : 404, msg);
    }
    if (!rt->open && !authorized(s, c))
        return send_error(s, c, api, 401, "invalid or missing API key");
    if (cc->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->o.max_body);
        return send_error(s, c, api, 413, msg);
    }
    if (!rt->fn) return get_route(s, c, url, method);
    if (!atomic_load(&s->ready)) return send_error(s, c, api, 503, "the model is loading");
    cc->rt = rt;
    struct srv_http *h = s->http;
    pthread_mutex_lock(&h->qmu);
    if (!h->qstop) {
        /* suspended under qmu: the intake thread cannot resume it before */
        const int lane = intake_cost(s, cc) <= SRV_INTAKE_SMALL ? LANE_SMALL : LANE_LARGE;
        struct lane *ln = &h->lanes[lane];
        cc->stage = ST_QUEUED;
        cc->qnext = NULL;
        if (ln->tail) ln->tail->qnext = cc;
        else ln->head = cc;
        ln->tail = cc;
        waiter_init(&cc->w, s, c, NULL);
        srv_metrics_intake_queued(&s->met, lane == LANE_LARGE);
        list_and_suspend(&cc->w);
        pthread_cond_signal(&ln->cv);
        pthread_mutex_unlock(&h->qmu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&h->qmu);
    run_handler(s, cc, 1);  /* shutting down: the intake threads are gone */
    return answer(s, c, cc);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    conn *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        pthread_mutex_lock(&s->http->mu);
        s->http->inflight++;
        pthread_mutex_unlock(&s->http->mu);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) cc->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large && cc->body.n + *upload_size > s->o.max_body) {
            cc->too_large = 1;
            srv_buf_free(&cc->body);
        }
        if (!cc->too_large) srv_buf_put(&cc->body, upload, *upload_size);
        if (cc->body.oom) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->job) return json_answer(s, c, cc);  /* resumed: its request ended */
    if (cc->stage != ST_NEW) {  /* resumed by the intake thread */
        pthread_mutex_lock(&s->http->qmu);
        const int stage = cc->stage;
        pthread_mutex_unlock(&s->http->qmu);
        if (stage == ST_HANDLED) return answer(s, c, cc);
        return MHD_NO;  /* ST_GONE: the client hung up while queued */
    }
    return dispatch(s, c, url, method, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)c; (void)code;
    srv *s = cls;
    conn *cc = *con_cls;
    if (!cc) return;
    if (cc->job) {  /* closed before its answer: the request is dropped */
        srv_sched_cancel(s->sched, cc->job->r);
        srv_job_free(cc->job);
    }
    if (cc->rep.job) {  /* handled by the intake, closed before it was answered */
        srv_sched_cancel(s->sched, cc->rep.job->r);
        srv_job_free(cc->rep.job);
    }
    srv_buf_free(&cc->rep.body);
    srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
    pthread_mutex_lock(&s->http->mu);
    s->http->inflight--;
    pthread_cond_broadcast(&s->http->done_cv);
    pthread_mutex_unlock(&s->http->mu);
}

/* Sets qstop and wakes the intake threads (each drains its queue and ends). */
static void intake_quit(struct srv_http *h) {
    pthread_mutex_lock(&h->qmu);
    h->qstop = 1;
    for (int i = 0; i < N_LANES; i++) pthread_cond_signal(&h->lanes[i].cv);
    pthread_mutex_unlock(&h->qmu);
}

/* Drains the intake queues and joins their threads; requests arriving later are handled on
 * the MHD thread. */
static void intake_stop(struct srv_http *h) {
    intake_quit(h);
    for (int i = 0; i < N_LANES; i++) {
        if (h->lanes[i].started) pthread_join(h->lanes[i].thread, NULL);
        h->lanes[i].started = 0;
    }
}

static void http_free(struct srv_http *h) {
    if (!h) return;
    if (h->watching) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->watcher, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    pthread_cond_destroy(&h->done_cv);
    pthread_mutex_destroy(&h->qmu);
    for (int i = 0; i < N_LANES; i++) pthread_cond_destroy(&h->lanes[i].cv);
    free(h->fds);
    free(h->gone);
    free(h->probe);
    free(h);
}

int srv_http_start(srv *s, const struct sockaddr *addr, dsv4_err *err) {
    struct srv_http *h = calloc(1, sizeof *h);
    if (!h) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    h->s = s;
    h->cap = s->o.max_connections;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_cond_init(&h->done_cv, NULL);
    pthread_mutex_init(&h->qmu, NULL);
    for (int i = 0; i < N_LANES; i++) {
        h->lanes[i].h = h;
        pthread_cond_init(&h->lanes[i].cv, NULL);
    }
    h->fds = calloc((size_t)h->cap, sizeof *h->fds);
    h->gone = calloc((size_t)h->cap, sizeof *h->gone);
    h->probe = calloc((size_t)h->cap, sizeof *h->probe);
    s->http = h;
    if (!h->fds || !h->gone || !h->probe) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    if (pthread_create(&h->watcher, NULL, watch_main, h))
        return srv_fail(err, DSV4_ERR_IO, "serve: cannot start a thread");
    h->watching = 1;
    static const char *const names[N_LANES] = {"dsv4-intake-s", "dsv4-intake"};
    for (int i = 0; i < N_LANES; i++) {
        struct lane *ln = &h->lanes[i];
        if (pthread_create(&ln->thread, NULL, intake_main, ln))
            return srv_fail(err, DSV4_ERR_IO, "serve: cannot start a thread");
        ln->started = 1;
        pthread_setname_np(ln->thread, names[i]);
    }
    /* poll(), not epoll: a suspension would cost an epoll_ctl pair a token */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME;
    if (addr->sa_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
                            /* no inactivity timeout: a queued or slow generation may
                             * leave a connection silent for minutes; open connections are
                             * bounded by the connection limit instead */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_END);
    if (!s->d) return srv_fail(err, DSV4_ERR_IO, "serve: cannot listen on %s:%d (in use, or no "
                               "such address)", s->o.host, s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->o.port;
    return DSV4_OK;
}

/* Shutting down: no new connections, and what the intake still holds is answered 503 from
 * here on (qstop), not tokenized. */
void srv_http_quiesce(srv *s) {
    if (s->d) MHD_quiesce_daemon(s->d);
    if (s->http) intake_quit(s->http);
}

/* Waits until every request begun has completed (its answer written, or its connection
 * closed), at most SRV_STOP_FLUSH_S: MHD_stop_daemon closes every connection, and a queued
 * client's 503 or a stream's last event resumed just before would be lost. A client that
 * does not read its answer holds the stop for the bound at most. */
static void wait_answers(struct srv_http *h) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += SRV_STOP_FLUSH_S;
    pthread_mutex_lock(&h->mu);
    while (h->inflight > 0 && pthread_cond_timedwait(&h->done_cv, &h->mu, &ts) == 0) {}
    pthread_mutex_unlock(&h->mu);
}

/* After the scheduler stopped: every request ended, so every suspended connection was
 * resumed once the intake's queue is drained (MHD refuses to stop with one suspended); their
 * answers are written before MHD stops (wait_answers). */
void srv_http_stop(srv *s) {
    if (s->http) intake_stop(s->http);
    if (s->http && s->d) wait_answers(s->http);
    if (s->d) MHD_stop_daemon(s->d);
    s->d = NULL;
    http_free(s->http);
    s->http = NULL;
}
