/* responses.c — OpenAI's Responses API: POST /v1/responses, GET and DELETE
 * /v1/responses/{id}, GET /v1/responses/{id}/input_items.
 *
 * A request is turned into a chat request (its input items, and the stored conversation
 * of previous_response_id, as OpenAI-style messages; tools, tool_choice, text.format,
 * reasoning.effort and the sampling fields in the chat endpoint's form) and goes the chat
 * endpoint's one path (srv_chat_submit): the same prompt, sampling, forced tool call and
 * structured output, so its usage is the chat's for the same conversation. The answer is
 * split as the chat stream splits it (srv_split, srv_tool_stream) into output items:
 * reasoning, a message with one output_text part, function calls; a stream sends them as
 * OpenAI's typed events, each with its sequence_number. An answer the engine fails midway is
 * a failed response (the stream closes its open items first, then response.failed).
 * truncation "auto" drops the conversation's oldest items until its prompt leaves room.
 *
 * store (default true, as OpenAI's): a finished response is kept in the server's store
 * (srv_rstore, an LRU under --responses-store-bytes) as its response object and its
 * conversation (the input items, previous ones included, then the output items), so that
 * previous_response_id continues it (the same rendered prefix: the prefix cache restores
 * its KV) and GET returns it. Like OpenAI, a follow-up does not carry the previous
 * request's instructions over.
 *
 * The request's rendering (input items, fields, prompt, truncation) is responses_request.c's;
 * the store (an LRU of response objects and conversations under a byte cap)
 * responses_store.c's; the answer (output items, the response object, the stream's events)
 * responses_answer.c's; the background runs (the store's worker, the logs and the streams
 * that follow them) responses_bg.c's. What the files share is declared in responses_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/responses_int.h"
#include "serve/srv.h"

/* ---- a job's state ---------------------------------------------------------------------- */

void srv_resp_free(struct srv_resp *x) {
    if (!x) return;
    if (x->flog) {  /* out of the log's followers */
        rs_log *l = x->flog;
        pthread_mutex_lock(&l->mu);
        for (int i = 0; i < l->n_fol; i++)
            if (l->fol[i] == x->fol) l->fol[i] = l->fol[--l->n_fol];
        pthread_mutex_unlock(&l->mu);
        srv_req_release(x->fol->r);
        free(x->fol);
        rs_log_release(l);
    }
    cJSON_Delete(x->echo);
    cJSON_Delete(x->conv);
    cJSON_Delete(x->items);
    cJSON_Delete(x->held);
    cJSON_Delete(x->lps);
    cJSON_Delete(x->lps_nb);
    srv_buf_free(&x->text);
    srv_buf_free(&x->name);
    free(x);
}

/* ---- the routes -------------------------------------------------------------------------- */

/* The field a 400's message names first, as OpenAI's error param: 'text.format.type' ...,
 * input[2]: ..., tools[0] needs ..., previous_response_id's conversation[3] ... (a leading
 * quoted name, or a leading path with an index, a dot or an underscore); NULL when none. */
static const char *msg_param(const char *msg, char *buf, size_t n) {
    const int quoted = *msg == '\'';
    const char *p = msg + quoted;
    size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyz_.[]0123456789");
    const char end = p[k];
    if (!k || k >= n) return NULL;
    if (quoted ? end != '\'' : (!end || !strchr(": '", end) || strcspn(p, "_.[") >= k)) return NULL;
    memcpy(buf, p, k);
    buf[k] = 0;
    return buf;
}

/* A request's failure as OpenAI answers it: a 400 names its param (the one given, else the
 * one the message names first) and, for an unknown previous_response_id or an input over the
 * context, OpenAI's code; other statuses in srv_reply_error's shape. */
static void responses_error(srv_reply *out, int status, const char *param, const char *msg) {
    char named[80];
    const char *code = status == PREV_NOT_FOUND ? "previous_response_not_found"
                       : status == TOO_LONG     ? "context_length_exceeded"
                                                : NULL;
    if (status == PREV_NOT_FOUND || status == PREV_RUNNING) param = "previous_response_id";
    else if (status == TOO_LONG) param = "input";
    else if (status == 400 && !param) param = msg_param(msg, named, sizeof named);
    if (status != 400 && !code && status != PREV_RUNNING) {
        srv_reply_error(out, SRV_API_RESPONSES, status, msg);
        return;
    }
    out->status = 400;
    srv_buf_free(&out->body);
    srv_openai_error_code(&out->body, "invalid_request_error", param, code, msg);
}

/* A 400 the chat path answered (its sampling fields, tool_choice against tools) gets the
 * param its message names. */
static void name_param(srv_reply *out) {
    cJSON *o = cJSON_ParseWithLength(out->body.s, out->body.n);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const char *m = rs_str_field(e, "message");
    if (m && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "param"))) {
        char *msg = strdup(m);
        if (msg) responses_error(out, 400, NULL, msg);
        free(msg);
    }
    cJSON_Delete(o);
}

/* The front half of a request (create's and input_tokens'): its conversation (previous
 * items, then its input) rendered as create would submit it, truncated when truncation is
 * auto and it leaves no room in the context; one that leaves none with truncation disabled
 * is a 400 when refuse_long. 0, or a status with a message. */
static int prepare(srv *s, const cJSON *j, int refuse_long, cJSON **conv, int *n_prev, cJSON **chat, srv_chat *c,
                   int *trunc_auto, char *msg) {
    int status = 400;
    if (rs_truncation(j, trunc_auto, msg)) return 400;
    if (!(*conv = rs_conversation(s, j, n_prev, &status, msg))) return status;
    if ((status = rs_render(s, j, *conv, *n_prev, chat, c, msg))) return status;
    if ((int64_t)c->ids.n < s->o.max_context) return 0;
    if (*trunc_auto) return rs_truncate_conv(s, j, conv, n_prev, chat, c, msg);
    return refuse_long ? rs_too_long(s, c, 0, msg) : 0;
}

void srv_responses_create(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    int status = 400, stream = 0, store = 1, parallel = 1, n_prev = 0, trunc_auto = 0, logprobs = 0, bg = 0;
    int sealed = 0;
    double top = 0;
    const char *param = NULL;  /* a 400 naming the field (OpenAI's error param) */
    cJSON *chat = NULL, *conv = NULL;
    srv_chat c = {0};
    struct srv_resp *R = NULL;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) { snprintf(msg, MSG, "the request body is not a JSON object"); goto bad; }
    if (rs_refused_fields(j, &param, msg) || rs_ignored_fields(j, &param, msg) ||
        srv_guided_refuse(j, "/v1/responses", &param, msg, MSG))
        goto bad;
    if (srv_opt_bool(j, "stream", &stream, msg, MSG) < 0 || srv_opt_bool(j, "store", &store, msg, MSG) < 0 ||
        srv_opt_bool(j, "parallel_tool_calls", &parallel, msg, MSG) < 0 ||
        srv_opt_bool(j, "background", &bg, msg, MSG) < 0)
        goto bad;
    if (bg && !store) {  /* (OpenAI's rule: a background response lives in the store) */
        param = "background";
        snprintf(msg, MSG, "'background' requires 'store' true (a background response is kept in the store "
                 "for GET to poll)");
        goto bad;
    }
    if (rs_opt_type(j, "user", 0, msg) || rs_opt_type(j, "model", 0, msg) ||
        rs_check_metadata(cJSON_GetObjectItemCaseSensitive(j, "metadata"), msg))
        goto bad;
    if (rs_includes(j, &logprobs, &sealed, msg)) {
        param = "include";
        goto bad;
    }
    /* (OpenAI's rule: the logprobs show only when include asks for them) */
    if (srv_opt_num(j, "top_logprobs", 0, DSV4_MAX_LOGPROBS, &top, msg, MSG) < 0 || top != (double)(int)top) {
        snprintf(msg, MSG, "'top_logprobs' must be a whole number from 0 to %d", DSV4_MAX_LOGPROBS);
        param = "top_logprobs";
        goto bad;
    }
    if ((status = prepare(s, j, 1, &conv, &n_prev, &chat, &c, &trunc_auto, msg))) goto bad;
    if (!(R = calloc(1, sizeof *R)) || !(R->items = cJSON_CreateArray()) || !(R->held = cJSON_CreateArray())) {
        status = 500;
        snprintf(msg, MSG, "out of memory");
        goto bad;
    }
    R->s = s;
    R->store = store;
    R->n_calls = parallel ? 1 << 30 : 1;
    R->sealed = sealed;
    R->conv = conv;
    conv = NULL;
    R->echo = rs_echo_fields(j, &s->gc, store, trunc_auto, bg);
    R->bg = bg;
    srv_job *job = srv_chat_submit_rendered(s, chat, &c, SRV_API_RESPONSES, body, logprobs ? (int)top : 0, out);
    if (!job && out->status == 400) name_param(out);
    if (job) {
        job->stream = stream;
        job->logprobs = logprobs;
        job->resp = R;
        R = NULL;
        out->stream = responses_stream;
        out->final = responses_final;
        if (bg) {  /* answered at once: the job runs on without this connection */
            out->job = NULL;
            out->stream = NULL;
            out->final = NULL;
            if ((status = rs_bg_start(s, job, out, msg))) goto bad;
        }
    }
    goto done;
bad:
    responses_error(out, status, param, msg);
done:
    srv_chat_free(&c);
    srv_resp_free(R);
    cJSON_Delete(conv);
    cJSON_Delete(chat);
    cJSON_Delete(j);
}

/* POST /v1/responses/input_tokens: the input tokens a create with these fields would take (the
 * same prompt: previous_response_id's items, instructions, tools, text.format, reasoning;
 * truncation auto applied), in OpenAI's shape. An input over the context is counted all the
 * same under truncation disabled (create would refuse it). */
void srv_responses_input_tokens(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    const char *param = NULL;
    int status = 400, n_prev = 0, trunc_auto = 0;
    cJSON *chat = NULL, *conv = NULL;
    srv_chat c = {0};
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) snprintf(msg, MSG, "the request body is not a JSON object");
    else if (!rs_refused_fields(j, &param, msg) && !rs_opt_type(j, "model", 0, msg))
        status = prepare(s, j, 0, &conv, &n_prev, &chat, &c, &trunc_auto, msg);
    if (status) {
        responses_error(out, status, param, msg);
    } else {
        out->status = 200;
        srv_buf_printf(&out->body, "{\"object\":\"response.input_tokens\",\"input_tokens\":%zu}", c.ids.n);
    }
    srv_chat_free(&c);
    cJSON_Delete(conv);
    cJSON_Delete(chat);
    cJSON_Delete(j);
}

/* An input item as input_items lists it: a message's string content as one text part
 * (input_text, output_text for an assistant's), type and status filled in. */
static cJSON *listed_item(const cJSON *x) {
    cJSON *o = cJSON_Duplicate(x, 1);
    if (!o) return NULL;
    const char *t = rs_item_type(o);
    if (!cJSON_GetObjectItemCaseSensitive(o, "type")) cJSON_AddStringToObject(o, "type", "message");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!strcmp(t, "message") && cJSON_IsString(c)) {
        const char *r = rs_str_field(o, "role");
        cJSON *part = r && !strcmp(r, "assistant") ? rs_text_part(c->valuestring, NULL) : cJSON_CreateObject();
        if (!(r && !strcmp(r, "assistant"))) {
            cJSON_AddStringToObject(part, "type", "input_text");
            cJSON_AddStringToObject(part, "text", c->valuestring);
        }
        cJSON *parts = cJSON_CreateArray();
        cJSON_AddItemToArray(parts, part);
        cJSON_ReplaceItemInObjectCaseSensitive(o, "content", parts);
    }
    if (strcmp(t, "reasoning") && !cJSON_GetObjectItemCaseSensitive(o, "status"))
        cJSON_AddStringToObject(o, "status", "completed");
    return o;
}

/* The position of the item called id in list, or -1. */
static int item_at(const cJSON *list, const char *id) {
    int k = 0;
    for (const cJSON *x = list->child; x; x = x->next, k++) {
        const char *xi = rs_str_field(x, "id");
        if (xi && !strcmp(xi, id)) return k;
    }
    return -1;
}

/* A query parameter's error: 400 in OpenAI's shape, naming it. */
static int bad_param(srv_buf *out, const char *param, const char *msg) {
    srv_openai_error_code(out, "invalid_request_error", param, NULL, msg);
    return 400;
}

/* GET /v1/responses/{id}/input_items: the items the response was made from (the stored
 * conversation before its output: previous_response_id's items too, truncation's cut
 * applied) as OpenAI's list object, a page of q->limit (1-100, default 20) in q->order (desc,
 * the default: the newest first; asc), after or before an item id of that order. With
 * before alone the page is the items nearest before it (has_more: more lie before them);
 * else the first after `after` (has_more: more lie after them, before `before`). */
static int input_items(srv *s, const char *id, const srv_list_query *q, srv_buf *out, int *oom) {
    char msg[300];
    long limit = 20;
    if (q->limit) {
        char *end;
        limit = strtol(q->limit, &end, 10);
        if (!strchr("0123456789", q->limit[0]) || !q->limit[0] || *end || limit < 1 || limit > 100)
            return bad_param(out, "limit", "'limit' must be an integer from 1 to 100");
    }
    const int asc = q->order && !strcmp(q->order, "asc");
    if (q->order && !asc && strcmp(q->order, "desc"))
        return bad_param(out, "order", "'order' must be \"asc\" or \"desc\"");
    int n_in = 0;
    char *t = rs_get(s->rstore, id, 1, &n_in, oom);
    if (!t) return 404;
    cJSON *conv = cJSON_Parse(t), *list = cJSON_CreateArray();
    free(t);
    /* the items in the order asked */
    int k = 0;
    for (cJSON *x = conv ? conv->child : NULL; list && x && k < n_in; x = x->next, k++) {
        cJSON *o = listed_item(x);
        if (asc || !list->child) cJSON_AddItemToArray(list, o);
        else cJSON_InsertItemInArray(list, 0, o);
    }
    cJSON_Delete(conv);
    if (!conv || !list) {
        cJSON_Delete(list);
        *oom = 1;
        return 500;
    }
    const int n = cJSON_GetArraySize(list);
    int lo = 0, hi = n, from, to;
    const int lim = (int)limit;
    const char *const cursor[2] = {q->after, q->before};
    for (int c = 0; c < 2; c++) {
        if (!cursor[c]) continue;
        const int at = item_at(list, cursor[c]);
        if (at < 0) {
            char name[201];
            srv_client_text(name, sizeof name, cursor[c]);
            snprintf(msg, sizeof msg, "'%s': no input item '%s' in this response", c ? "before" : "after", name);
            cJSON_Delete(list);
            return bad_param(out, c ? "before" : "after", msg);
        }
        if (c) hi = at;
        else lo = at + 1;
    }
    if (hi < lo) hi = lo;
    if (q->before && !q->after) {
        from = hi - lim > lo ? hi - lim : lo;
        to = hi;
    } else {
        from = lo;
        to = lo + lim < hi ? lo + lim : hi;
    }
    const int more = q->before && !q->after ? from > lo : to < hi;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = from; i < to; i++) cJSON_AddItemToArray(data, cJSON_DetachItemFromArray(list, from));
    const char *first = rs_str_field(data->child, "id");
    const char *last = rs_str_field(cJSON_GetArrayItem(data, to - from - 1), "id");
    cJSON_AddItemToObject(o, "first_id", first ? cJSON_CreateString(first) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "last_id", last ? cJSON_CreateString(last) : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_more", more);
    cJSON_Delete(list);
    srv_put_json(out, o);
    return 200;
}

/* A running background response as a poll sees it (under its request's mu): queued until its
 * first token, then in_progress with the items done so far and the one being written. */
static cJSON *snapshot(srv *s, srv_job *j) {
    const struct srv_resp *R = j->resp;
    if (R->cancel) return rs_response_object(s, j, "cancelled", NULL, NULL);  /* (its end is on its way) */
    cJSON *out = cJSON_Duplicate(R->items, 1);
    char *t = R->text.n ? strndup(R->text.s, R->text.n) : strdup("");
    if (out && t && R->open == OPEN_MESSAGE)
        cJSON_AddItemToArray(out, rs_message_item(j, R->n_out, t, "in_progress", R->lps ? cJSON_Duplicate(R->lps, 1) : NULL));
    else if (out && t && R->open == OPEN_REASONING)
        cJSON_AddItemToArray(out, rs_reasoning_item(j, R->n_out, t));
    free(t);
    return rs_response_object(s, j, j->r->n_ev ? "in_progress" : "queued", out, NULL);
}

/* id's entry handed to one of two answers: ended (its response object's text; bg: made in the
 * background) or running (under its job's request mu; *kill: cancel the request); one that
 * ends meanwhile is looked up again. The HTTP status; 404 (500 out of memory: *oom). */
static int with_entry(srv *s, const char *id, srv_buf *out, int *oom, int (*ended)(const char *t, int bg, srv_buf *out),
                      cJSON *(*running)(srv *s, srv_job *j, int *kill)) {
    for (int tries = 0; tries < 3; tries++) {
        rs_run *x;
        char *t;
        int bg = 0, kill = 0;
        if (!rs_find(s->rstore, id, &x, &t, &bg, oom)) return *oom ? 500 : 404;
        if (t) {
            const int status = ended(t, bg, out);
            free(t);
            return status;
        }
        srv_job *j = x->job;
        pthread_mutex_lock(&j->r->mu);
        cJSON *o = j->resp->ended ? NULL : running(s, j, &kill);
        pthread_mutex_unlock(&j->r->mu);
        if (kill) srv_sched_cancel(s->sched, j->r);
        rs_run_release(x);
        if (o) {
            srv_put_json(out, o);
            return 200;
        }
    }
    return 404;
}

/* GET: the stored response as it is. */
static int got_ended(const char *t, int bg, srv_buf *out) {
    (void)bg;
    srv_buf_puts(out, t);
    return 200;
}

static cJSON *got_running(srv *s, srv_job *j, int *kill) {
    (void)kill;
    return snapshot(s, j);
}

/* POST /v1/responses/{id}/cancel: a running background response is cancelled (its request
 * ends at the scheduler's next step, its sequence and cache pages freed; it ends with status
 * cancelled, no output) and answered so; one cancelled already answers the same again;
 * another ended one, or one not made in the background, is a 400 (OpenAI's). */
static int cancel_ended(const char *t, int bg, srv_buf *out) {
    cJSON *o = cJSON_Parse(t);
    const char *st = o ? rs_str_field(o, "status") : NULL;
    char msg[120];
    int status = 400;
    if (!bg) snprintf(msg, sizeof msg, "Cannot cancel a synchronous response (only one created with "
                      "background: true).");
    else if (st && !strcmp(st, "cancelled")) status = 200, srv_buf_puts(out, t);
    else snprintf(msg, sizeof msg, "Cannot cancel a%s %s response.", st && *st == 'i' ? "n" : "",
                  st ? st : "finished");
    if (status != 200) srv_openai_error_code(out, "invalid_request_error", NULL, NULL, msg);
    cJSON_Delete(o);
    return status;
}

static cJSON *cancel_running(srv *s, srv_job *j, int *kill) {
    j->resp->cancel = 1;
    *kill = 1;
    return rs_response_object(s, j, "cancelled", NULL, NULL);
}

int srv_responses_follow(srv *s, const char *id, const char *starting_after, srv_reply *out) {
    char msg[MSG];
    long long after = -1;
    int status = 400;
    const char *param = "starting_after";
    if (starting_after) {
        char *end;
        after = strtoll(starting_after, &end, 10);
        if (!starting_after[0] || !strchr("0123456789", starting_after[0]) || *end || after > 1 << 30) {
            snprintf(msg, MSG, "'starting_after' must be an event's sequence_number (a whole number)");
            goto bad;
        }
    }
    srv_rstore *st = s->rstore;
    rs_log *l = NULL;
    pthread_mutex_lock(&st->mu);
    const rs_entry *e = *rs_link(st, id);
    const int found = e != NULL, bg = e && e->bg, streamed = e && e->streamed;
    if (e && e->log) atomic_fetch_add(&(l = e->log)->refs, 1);
    pthread_mutex_unlock(&st->mu);
    param = "stream";
    if (!found) {
        char name[201];
        srv_client_text(name, sizeof name, id);
        snprintf(msg, MSG, "Response with id '%s' not found.", name);
        status = 404;
        param = NULL;
    } else if (!bg) {
        snprintf(msg, MSG, "This response cannot be streamed because it was not created with background=true.");
    } else if (!streamed) {
        snprintf(msg, MSG, "This response cannot be streamed because it was not created with stream=true.");
    } else if (!l) {
        snprintf(msg, MSG, "This response's events are no longer kept (the server ran out of memory for "
                 "them): its stream cannot be resumed; GET without stream polls it.");
    } else {
        srv_job *f = rs_follower(id, l, (int)(after + 1), &status, msg);
        rs_log_release(l);
        if (f) {
            out->job = f;
            out->stream = responses_stream;
            return 0;
        }
        param = "starting_after";
        if (status != 400) {
            srv_reply_error(out, SRV_API_RESPONSES, status, msg);
            return status;
        }
    }
bad:
    out->status = status;
    srv_buf_free(&out->body);
    srv_openai_error_code(&out->body, "invalid_request_error", param, NULL, msg);
    return status;
}

int srv_responses_lookup(srv *s, const char *method, const char *path, const srv_list_query *q,
                         srv_buf *out) {
    int oom = 0, status = 404;
    const char *slash = strchr(path, '/');
    const int cancel = slash && !strcmp(slash, "/cancel");
    if ((cancel && strcmp(method, "POST")) || (!cancel && !strcmp(method, "POST")) ||
        (slash && !cancel && (strcmp(slash, "/input_items") || strcmp(method, "GET")))) {
        srv_openai_error(out, 404, "no such route");
        return 404;
    }
    char *id = strndup(path, slash ? (size_t)(slash - path) : strlen(path));
    if (!id) {
        srv_openai_error(out, 500, "out of memory");
        return 500;
    }
    if (cancel) {
        status = with_entry(s, id, out, &oom, cancel_ended, cancel_running);
        if (status != 404 && !oom) goto done;
    } else if (slash) {
        status = input_items(s, id, q, out, &oom);
        if (status != 404 && !oom) goto done;
    } else if (!strcmp(method, "DELETE")) {
        const int d = rs_del(s->rstore, id);
        if (d > 0) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "id", id);
            cJSON_AddStringToObject(o, "object", "response");
            cJSON_AddTrueToObject(o, "deleted");
            srv_put_json(out, o);
            status = 200;
            goto done;
        }
        if (d < 0) {
            srv_openai_error_code(out, "invalid_request_error", NULL, NULL,
                                  "Cannot delete an in-flight response: cancel it first (POST "
                                  "/v1/responses/{id}/cancel), or wait for its end.");
            status = 400;
            goto done;
        }
    } else {
        status = with_entry(s, id, out, &oom, got_ended, got_running);
        if (status == 200) goto done;
    }
    if (oom) {
        srv_buf_free(out);
        srv_openai_error(out, 500, "out of memory");
        status = 500;
    } else {
        char msg[300], name[201];
        srv_client_text(name, sizeof name, id);
        snprintf(msg, sizeof msg, "Response with id '%s' not found.", name);
        srv_openai_error_code(out, "invalid_request_error", NULL, NULL, msg);
        status = 404;
    }
done:
    free(id);
    return status;
}
