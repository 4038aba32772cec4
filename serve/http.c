/* http.c — the HTTP side on libmicrohttpd: routes, authentication, body limits, and moving
 * answers to the client (one JSON body, or an SSE stream fed by the scheduler).
 *
 * Threading: MHD runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION). A
 * generation answer waits on the scheduler for seconds, and a stream trickles out token by
 * token; with a thread per connection the content callback can simply block on the
 * request's condition variable (in slices, checking whether the client hung up), where an
 * event-loop mode would need suspend/resume bookkeeping per connection. The engine runs on
 * the scheduler thread only; connection threads parse, enqueue and copy bytes, and their
 * number is capped (--max-connections). */
#include "serve/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/srv.h"

/* Per-connection request state: the body as it arrives. */
typedef struct conn {
    srv_buf body;
    int too_large;
} conn;

/* An SSE answer in progress. */
typedef struct stream {
    srv *s;
    srv_job *job;
    srv_stream_fn fn;
    srv_buf out;     /* bytes formatted, not yet handed to MHD */
    size_t pos;
    int finished;
    int fd;          /* the client's socket, to notice a hang-up while waiting */
} stream;

/* 1 if the peer closed its side of the socket. */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Waits (in slices of slice_ms, --hangup-check-ms) until r has news beyond what j has
 * written, or ended. Returns -1 when the client hung up first. Called and returns with r->mu held. The socket
 * is looked at when a slice passes without news, not at every wake: a streamed token woke
 * this thread for a poll() of its own beside MHD's, and on the bench VM every system call
 * of a connection thread is taken from the engine's two cores. A client gone while tokens
 * flow fails MHD's next send instead, which ends the response (stream_free cancels). */
static int wait_news(srv_req *r, const srv_job *j, int fd, int need_end, int slice_ms) {
    while (!r->end && (need_end || r->n_ev <= j->ev_sent)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += slice_ms / 1000;
        ts.tv_nsec += (long)(slice_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT && client_gone(fd)) return -1;
    }
    return 0;
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

/* Formats what is new in the request (the opening chunk at the first call) and, while that
 * is nothing, waits for news: a stream waiting for its first token, or for a token whose
 * text is held back, sleeps on the request's condition variable. (It used to wait only once
 * the opening chunk was out, and a completion stream has none: every client queued for its
 * first token spun here on the request's mutex, taking the cores from the engine; 16 such
 * clients made prefill steps 5-10x slower.) */
static ssize_t stream_read(void *cls, uint64_t at, char *buf, size_t max) {
    (void)at;
    stream *st = cls;
    srv_req *r = st->job->r;
    while (st->pos == st->out.n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.n = st->pos = 0;
        pthread_mutex_lock(&r->mu);
        st->fn(st->s, st->job, &st->out, &st->finished);
        /* nothing to send: wait for the request's next event. (An ended request always
         * makes the stream function write its last event; should one not, end here rather
         * than spin.) A client gone meanwhile: the free callback cancels. */
        const int idle = st->out.n == 0 && !st->finished;
        const int fail = idle && (r->end || wait_news(r, st->job, st->fd, 0, st->s->o.hangup_ms));
        pthread_mutex_unlock(&r->mu);
        if (fail || st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
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
    st->fd = conn_fd(c);
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
    int api;
    int open;           /* no key needed */
} kRoutes[] = {
    {"/v1/chat/completions", "POST", srv_openai_chat, SRV_API_CHAT, 0},
    {"/v1/completions", "POST", srv_openai_completion, SRV_API_COMPLETION, 0},
    {"/v1/messages", "POST", srv_anthropic_messages, SRV_API_MESSAGES, 0},
    {"/v1/models", "GET", NULL, SRV_API_CHAT, 0},
    {"/health", "GET", NULL, SRV_API_CHAT, 1},
    {"/metrics", "GET", NULL, SRV_API_CHAT, 1},
};

static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, const char *path) {
    int ready = atomic_load(&s->ready);
    if (!strcmp(path, "/health")) {
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
    /* /v1/models */
    srv_buf b = {0};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "dsv4");
    cJSON_AddNumberToObject(m, "max_model_len", (double)s->o.max_context);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    srv_put_json(&b, o);
    enum MHD_Result rc = send_json(s, c, 200, &b);
    srv_buf_free(&b);
    return rc;
}

static enum MHD_Result dispatch(srv *s, struct MHD_Connection *c, const char *url,
                                const char *method, conn *cc) {
    const struct route *rt = NULL;
    int path_known = 0;
    for (size_t i = 0; i < sizeof kRoutes / sizeof kRoutes[0]; i++)
        if (!strcmp(url, kRoutes[i].path)) {
            path_known = 1;
            if (!strcmp(method, kRoutes[i].method)) rt = &kRoutes[i];
        }
    int api = !strcmp(url, "/v1/messages") ? SRV_API_MESSAGES : SRV_API_CHAT;
    if (!rt) {
        char msg[160];
        snprintf(msg, sizeof msg, path_known ? "method %.16s is not allowed on %.100s"
                                             : "no route %.16s %.100s", method, url);
        return send_error(s, c, api, path_known ? 405 : 404, msg);
    }
    if (!rt->open && !authorized(s, c))
        return send_error(s, c, api, 401, "invalid or missing API key");
    if (cc->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->o.max_body);
        return send_error(s, c, api, 413, msg);
    }
    if (!rt->fn) return get_route(s, c, url);
    if (!atomic_load(&s->ready)) return send_error(s, c, api, 503, "the model is loading");

    srv_reply rep = {0};
    rt->fn(s, cc->body.s ? cc->body.s : "", cc->body.n, &rep);
    if (!rep.job) {
        enum MHD_Result rc = send_json(s, c, rep.status, &rep.body);
        srv_buf_free(&rep.body);
        return rc;
    }
    if (rep.job->stream) return send_stream(s, c, &rep);
    /* one JSON answer: wait for the end, or cancel when the client hangs up */
    srv_req *r = rep.job->r;
    int fd = conn_fd(c);
    pthread_mutex_lock(&r->mu);
    if (wait_news(r, rep.job, fd, 1, s->o.hangup_ms)) {
        pthread_mutex_unlock(&r->mu);
        srv_sched_cancel(s->sched, r);
        srv_job_free(rep.job);
        return MHD_NO;
    }
    int status = 500;
    rep.final(s, rep.job, &rep.body, &status);
    pthread_mutex_unlock(&r->mu);
    srv_job_free(rep.job);
    enum MHD_Result rc = send_json(s, c, status, &rep.body);
    srv_buf_free(&rep.body);
    return rc;
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
    return dispatch(s, c, url, method, cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)cls; (void)c; (void)code;
    conn *cc = *con_cls;
    if (!cc) return;
    srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

int srv_http_start(srv *s, const struct sockaddr *addr, dsv4_err *err) {
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC;
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

void srv_http_quiesce(srv *s) {
    if (s->d) MHD_quiesce_daemon(s->d);
}

void srv_http_stop(srv *s) {
    if (s->d) MHD_stop_daemon(s->d);
    s->d = NULL;
}
