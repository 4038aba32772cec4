/* fuzz_serve.c — libFuzzer target: the server's front door, request bodies of every endpoint
 * through their handlers (serve/openai.c, anthropic.c, responses.c, structured.c, tokenize.c)
 * as the HTTP layer calls them, on DeepSeek's tokenizer ($DSV4_TOKENIZER), without HTTP, a
 * scheduler thread or an engine; and what a job answers (the JSON answer or the SSE stream,
 * with the streamed tool-call parser, serve/tool_stream.c) for a model answer the input gives.
 *
 * Input: up to four records, the parts between NUL bytes taken two at a time: a request (one
 * control byte, then the body) and the model's answer to it (any bytes, repaired to UTF-8 as
 * the generation releases whole characters). The control byte:
 *   bits 0-2  the route: 0 /v1/chat/completions, 1 /v1/completions, 2 /v1/messages,
 *             3 /v1/messages/count_tokens, 4 POST /v1/responses, 5 /tokenize, 6 /detokenize,
 *             7 GET|DELETE /v1/responses/{id}[/input_items], POST /v1/responses/{id}/cancel
 *             (the body: {"method", "path", "after", "before", "limit", "order"}), or with
 *             "stream": true (and "starting_after") a background stream followed; POST
 *             input_tokens: POST /v1/responses/input_tokens with the record's "body"
 *   bit 3     the scheduler refuses the request (busy: 503)
 *   bit 4     max_context 256 (else 8192): prompts too long, Responses' truncation
 *   bits 5-6  how the answer ends: a stop token, max_tokens (length), a stop string (the
 *             first of the request's, else a stop token), an engine error
 *   bit 7     one character per token (else 1-4)
 * The stored responses start empty for each input and the answers' ids are numbered from 1
 * (the server's id salt is 0), so a later record can name an earlier one's response:
 * resp_e220a8397b1dcdaf1, the second resp_6e789e6aa1b965f42.
 *
 * The scheduler here is srv_sched_submit_n's first half as scheduler.c runs it on the
 * caller's thread (srv_sched_prepare: the generation state, dsv4_gen_create, whose refusal
 * is the client's 400), on a model that exists only as its vocabulary (dsv4_model_get_info
 * below), and a queue: every request submitted during a record gets the record's answer and
 * its end (a cancelled one ends cancelled), a background response's run too, which the
 * store's worker thread drives as in the server.
 *
 * What must hold: no crash, leak, UB or hang; a handler's answer is an error (4xx, 503 only
 * when the scheduler refused) with a JSON body, a 200 with a JSON body, or a job; a job's
 * stream ends once its choices ended, each data line JSON or [DONE], a chat stream's tool_calls
 * deltas adding up to the parsed calls' arguments; its JSON answer is 200
 * (500 after an engine error, except /v1/responses' failed response) with a JSON body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/srv.h"

static srv S;
static dsv4_model_info info;
static char model_byte;    /* the model: only its address is used */
static int refuse;         /* the scheduler's answer to the next submit */
#define QUEUE_MAX 64
static srv_req *queue[QUEUE_MAX];  /* the requests submitted during a record (a reference each) */
static int n_queue;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- what the handlers link against, without an engine ---------------------------------- */

dsv4_model_info dsv4_model_get_info(const dsv4_model *m) {
    if (m != (const dsv4_model *)&model_byte) abort();
    return info;
}

/* util.c's frames between ranks: one process here */
int dsv4_dist_bcast(dsv4_dist *d, void *buf, size_t n, int root, dsv4_err *err) {
    (void)d, (void)buf, (void)n, (void)root, (void)err;
    abort();
}

/* scheduler.c's srv_sched_submit_n up to the queue: every choice's generation state (the
 * parameters' last check), then the queue takes one reference of each (run_record drops it). */
int srv_sched_submit_n(srv_sched *sc, srv_req *const *r, int n, dsv4_err *err) {
    (void)sc;
    if (n < 1 || n > SRV_MAX_CHOICES) abort();
    for (int i = 0; i < n; i++) {
        if (r[i]->gen || (i && r[i]->lead != r[0])) abort();
        int rc = dsv4_gen_create(S.m, S.tok, &r[i]->gp, &r[i]->gen, err);
        if (rc) return rc;
    }
    if (refuse || n_queue + n > QUEUE_MAX) return srv_fail(err, DSV4_ERR_CACHE_FULL, "server busy: 0 requests queued");
    for (int i = 0; i < n; i++) queue[n_queue++] = r[i];
    return DSV4_OK;
}

/* scheduler.c's: the request ends (cancelled) at the next step */
void srv_sched_cancel(srv_sched *sc, srv_req *r) {
    (void)sc;
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    pthread_mutex_unlock(&r->mu);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("DSV4_TOKENIZER");
    dsv4_err err = {0};
    if (!path || dsv4_tokenizer_load(path, &S.tok, &err)) {
        fprintf(stderr, "fuzz_serve: set DSV4_TOKENIZER to DeepSeek's tokenizer.json (%s)\n", err.msg);
        abort();
    }
    S.V = dsv4_tok_vocab_size(S.tok);
    S.bos = dsv4_tok_token_to_id(S.tok, "<｜begin▁of▁sentence｜>");
    S.eos = dsv4_tok_token_to_id(S.tok, "<｜end▁of▁sentence｜>");
    if (S.bos < 0 || S.eos < 0) abort();
    info.vocab_size = S.V;
    info.bos_token_id = S.bos;
    info.eos_token_id = S.eos;
    S.m = (const dsv4_model *)&model_byte;
    S.o.max_seqs = 4;
    S.model_name = "dsv4-fuzz";
    pthread_mutex_init(&S.mu, NULL);
    return 0;
}

/* ---- checks -------------------------------------------------------------------------------- */

static void must_be_json(const char *t, size_t n) {
    cJSON *j = t ? cJSON_ParseWithLength(t, n) : NULL;
    if (!j) {
        fprintf(stderr, "fuzz_serve: not JSON: %.*s\n", (int)(n < 400 ? n : 400), t ? t : "(null)");
        abort();
    }
    cJSON_Delete(j);
}

/* Every SSE event's data line is JSON, or the [DONE] marker. */
static void check_sse(const srv_buf *b, size_t from) {
    const char *p = b->s ? b->s + from : NULL, *end = b->s ? b->s + b->n : NULL;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) abort();  /* every line ends */
        if (nl - p > 6 && !memcmp(p, "data: ", 6) && !(nl - p == 12 && !memcmp(p + 6, "[DONE]", 6)))
            must_be_json(p + 6, (size_t)(nl - p - 6));
        p = nl + 1;
    }
}

/* ---- the scheduler's side: the queued requests answered ----------------------------- */

/* 1 when r has ended, or was cancelled (then it ends, as the scheduler's next step ends it) */
static int over(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    const int cancel = r->cancel, end = r->end;
    pthread_mutex_unlock(&r->mu);
    if (!end && cancel) srv_req_end(r, SRV_END_CANCELLED, DSV4_FINISH_NONE, NULL);
    return end || cancel;
}

/* Pushes one token of text t[0..n) to every queued request that runs on (the same text for
 * all). */
static void push_token(const char *t, size_t n) {
    for (int k = 0; k < n_queue; k++) {
        srv_req *r = queue[k];
        if (over(r)) continue;
        dsv4_gen_token g = {0};
        g.token = (int32_t)((n ? (unsigned char)t[0] * 257u + n : 1u) % (unsigned)S.V);
        g.feed = 1;
        g.text = t;
        g.text_len = n;
        g.sample.token = g.token;
        g.sample.logprob = -0.25f * (float)k;
        g.sample.n_top = r->gp.sample.n_logprobs;
        for (int i = 0; i < g.sample.n_top; i++) {
            g.sample.top_ids[i] = (g.token + i) % S.V;
            g.sample.top_logprobs[i] = -(float)i;
        }
        if (srv_req_push(r, &g)) abort();
    }
}

/* Every queued request that runs on ends: how (the control byte's bits 5-6). */
static void end_all(int how) {
    for (int k = 0; k < n_queue; k++) {
        srv_req *r = queue[k];
        if (over(r)) continue;
        if (how == 3) {
            srv_req_end(r, SRV_END_ERROR, DSV4_FINISH_NONE, "engine: the fuzzer's error");
        } else if (how == 2 && r->gp.n_stop > 0) {
            pthread_mutex_lock(&r->mu);
            r->stop_index = 0;  /* written before the end is published, as the scheduler does */
            pthread_mutex_unlock(&r->mu);
            srv_req_end(r, SRV_END_FINISHED, DSV4_FINISH_STOP_STRING, NULL);
        } else {
            srv_req_end(r, SRV_END_FINISHED, how == 1 ? DSV4_FINISH_LENGTH : DSV4_FINISH_STOP_TOKEN, NULL);
        }
    }
}

static int queued(const srv_req *r) {
    for (int k = 0; k < n_queue; k++)
        if (queue[k] == r) return 1;
    return 0;
}

static void stream_once(srv_job *j, srv_reply *rep, srv_buf *out, int *finished) {
    const size_t from = out->n;
    pthread_mutex_lock(&j->r->mu);
    rep->stream(&S, j, out, finished);
    pthread_mutex_unlock(&j->r->mu);
    if (out->oom) abort();
    check_sse(out, from);
}

/* A chat stream's tool_calls deltas of choice 0 add up to the arguments of the calls the
 * non-streamed answer parses (tool_stream.h's promise), when it parses any. */
#define MAX_CALLS 16
static void check_stream_calls(srv_job *j, const srv_buf *b) {
    srv_buf args[MAX_CALLS] = {{0}};
    for (const char *p = b->s, *end = b->s + b->n; p && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        cJSON *o = nl - p > 6 && !memcmp(p, "data: ", 6) ? cJSON_ParseWithLength(p + 6, (size_t)(nl - p - 6)) : NULL;
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(c, "index");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "delta"), "tool_calls");
        for (const cJSON *e = cJSON_IsNumber(ix) && ix->valueint == 0 && cJSON_IsArray(calls) ? calls->child : NULL; e; e = e->next) {
            const cJSON *i = cJSON_GetObjectItemCaseSensitive(e, "index");
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "function"), "arguments");
            if (!cJSON_IsNumber(i) || i->valueint < 0 || !cJSON_IsString(a)) abort();
            if (i->valueint < MAX_CALLS) srv_buf_puts(&args[i->valueint], a->valuestring);
        }
        cJSON_Delete(o);
        p = nl + 1;
    }
    dsv4_parsed parsed;
    srv_parse_answer(j, &parsed);
    for (int i = 0; i < parsed.n_calls && i < MAX_CALLS; i++) {
        const char *want = parsed.calls[i].arguments ? parsed.calls[i].arguments : "";
        if (strcmp(args[i].s ? args[i].s : "", want)) {
            fprintf(stderr, "fuzz_serve: call %d streamed %s, parsed %s\n", i, args[i].s ? args[i].s : "", want);
            abort();
        }
    }
    dsv4_parsed_free(&parsed);
    for (int i = 0; i < MAX_CALLS; i++) srv_buf_free(&args[i]);
}

/* The record's answer: the text (repaired) as tokens to every queued request (a job's
 * choices, a background response's run, which the store's worker drives), its stream written
 * as they arrive, every request's end, then the rest of the stream or the JSON answer; then
 * the job and the queue's references are dropped. A background stream's follower (its
 * request no queued one) is woken by the worker thread: polled until its end. */
static void run_record(srv_reply *rep, const uint8_t *ans, size_t n, unsigned ctl) {
    srv_job *j = rep->job;
    srv_buf text = {0}, out = {0};
    srv_buf_put_utf8(&text, (const char *)ans, n);
    int finished = 0;
    size_t off = 0;
    for (int tok = 0; off < text.n; tok++) {
        /* 1-4 characters a token (bit 7: one) */
        int chars = ctl & 0x80 ? 1 : 1 + (tok * 7 + (int)off) % 4;
        size_t end = off;
        while (chars-- > 0 && end < text.n)
            do end++; while (end < text.n && ((unsigned char)text.s[end] & 0xc0) == 0x80);
        push_token(text.s + off, end - off);
        off = end;
        if (j && j->stream && !finished) stream_once(j, rep, &out, &finished);
    }
    const int how = (ctl >> 5) & 3;
    end_all(how);
    if (j && j->stream) {
        /* once every choice ended, one call writes the rest (a follower: once the worker
         * has relayed the run's end; a hang is libFuzzer's -timeout) */
        const int follower = !queued(j->r);
        if (!finished) stream_once(j, rep, &out, &finished);
        while (!finished && follower) {
            nanosleep(&(struct timespec){0, 200000}, NULL);
            stream_once(j, rep, &out, &finished);
        }
        if (!finished) abort();
        if (j->api == SRV_API_CHAT && how != 3) check_stream_calls(j, &out);
    } else if (j) {
        int status = 0;
        pthread_mutex_lock(&j->r->mu);
        if (!srv_job_ended(j)) abort();
        rep->final(&S, j, &out, &status);
        pthread_mutex_unlock(&j->r->mu);
        /* an engine error: 500, but a failed response object (200) on /v1/responses */
        if (status != (how == 3 && j->api != SRV_API_RESPONSES ? 500 : 200) || out.oom) abort();
        must_be_json(out.s, out.n);
    }
    if (j) srv_job_free(j);
    rep->job = NULL;
    for (int k = 0; k < n_queue; k++) srv_req_release(queue[k]);
    n_queue = 0;
    srv_buf_free(&out);
    srv_buf_free(&text);
}

/* ---- one request ------------------------------------------------------------------------- */

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* GET, DELETE or POST (cancel) /v1/responses/{path}: 200 or a 4xx with a JSON body; GET with
 * "stream": true follows a background stream (srv_responses_follow: a job in rep, or its
 * error); POST input_tokens counts "body" (srv_responses_input_tokens). */
static void lookup(const char *body, size_t len, srv_reply *rep) {
    cJSON *j = cJSON_ParseWithLength(body, len);
    const char *method = str_of(j, "method"), *path = str_of(j, "path");
    if (method && path && !strcmp(method, "POST") && !strcmp(path, "input_tokens")) {
        char *b = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "body"));
        srv_responses_input_tokens(&S, b ? b : "", b ? strlen(b) : 0, rep);
        free(b);
    } else if (method && path && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "stream")) && !strcmp(method, "GET")) {
        srv_responses_follow(&S, path, str_of(j, "starting_after"), rep);
    } else if (method && path && (!strcmp(method, "GET") || !strcmp(method, "DELETE") || !strcmp(method, "POST"))) {
        srv_list_query q = {str_of(j, "after"), str_of(j, "before"), str_of(j, "limit"), str_of(j, "order")};
        rep->status = srv_responses_lookup(&S, method, path, &q, &rep->body);
    } else {
        rep->status = 404;
        srv_openai_error(&rep->body, 404, "no route");
    }
    cJSON_Delete(j);
}

static void request(const uint8_t *p, size_t n, const uint8_t *ans, size_t ans_n) {
    const unsigned ctl = p[0], route = ctl & 7;
    /* the body as the HTTP layer hands it over: NUL-terminated, exactly its size */
    char *body = malloc(n);
    if (!body) abort();
    memcpy(body, p + 1, n - 1);
    body[n - 1] = '\0';
    const size_t len = n - 1;
    refuse = (ctl >> 3) & 1;
    S.o.max_context = ctl & 0x10 ? 256 : 8192;
    srv_reply rep = {0};
    switch (route) {
    case 0: srv_openai_chat(&S, body, len, &rep); break;
    case 1: srv_openai_completion(&S, body, len, &rep); break;
    case 2: srv_anthropic_messages(&S, body, len, &rep); break;
    case 3: srv_anthropic_count_tokens(&S, body, len, &rep); break;
    case 4: srv_responses_create(&S, body, len, &rep); break;
    case 5: srv_tokenize(&S, body, len, &rep); break;
    case 6: srv_detokenize(&S, body, len, &rep); break;
    default: lookup(body, len, &rep); break;
    }
    if (rep.job) {
        /* a background stream's follower (its request none the scheduler has) streams only */
        if (rep.body.n || !rep.stream || (!rep.final && queued(rep.job->r))) abort();
    } else {
        /* an error of the client's, a 503 when the scheduler refused (or the store cannot keep
         * a background response), or a 200 answered on the spot (count_tokens, tokenize,
         * detokenize, a lookup, a background response queued) */
        const int ok = rep.status == 200 ? route >= 3
                                         : (rep.status >= 400 && rep.status < 500) ||
                                               (rep.status == 503 && (refuse || route == 4));
        if (!ok || rep.body.oom) {
            fprintf(stderr, "fuzz_serve: status %d: %.*s\n", rep.status, (int)rep.body.n, rep.body.s ? rep.body.s : "");
            abort();
        }
        must_be_json(rep.body.s, rep.body.n);
    }
    run_record(&rep, ans, ans_n, ctl);
    srv_buf_free(&rep.body);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[8];
    size_t len[8];
    int n = 0;
    for (size_t at = 0; n < 8;) {
        const uint8_t *z = memchr(data + at, 0, size - at);
        size_t end = z ? (size_t)(z - data) : size;
        part[n] = data + at;
        len[n++] = end - at;
        if (!z) break;
        at = end + 1;
    }
    S.rstore = srv_rstore_create(1 << 16);
    S.n_jobs = 0;
    S.seed_state = 0;
    if (!S.rstore) abort();
    for (int i = 0; i < n; i += 2)
        if (len[i] >= 1) request(part[i], len[i], i + 1 < n ? part[i + 1] : NULL, i + 1 < n ? len[i + 1] : 0);
    srv_rstore_free(S.rstore);
    S.rstore = NULL;
    return 0;
}
