/* responses_answer.c — a Responses API answer: the engine's text split (as the chat stream
 * splits it) into output items (reasoning, a message with one output_text part, function
 * calls), the response object and its end (kept in the store), and the stream of OpenAI's
 * typed events, each with its sequence_number; a failed answer closes its open items
 * (incomplete) before response.failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/responses_int.h"
#include "serve/srv.h"

/* ---- answer: output items, the response object ------------------------------------------- */

static void item_id(const srv_job *j, const char *prefix, int k, char *id, size_t n) {
    snprintf(id, n, "%s_%s_%d", prefix, j->id + strlen("resp_"), k);
}

cJSON *rs_reasoning_item(const srv_job *j, int k, const char *text) {
    char id[80];
    item_id(j, "rs", k, id, sizeof id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "reasoning");
    cJSON_AddArrayToObject(o, "summary");
    if (text) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "reasoning_text");
        cJSON_AddStringToObject(p, "text", text);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "content"), p);
        char *sealed = j->resp->sealed ? rs_seal(text) : NULL;
        if (sealed) cJSON_AddStringToObject(o, "encrypted_content", sealed);
        free(sealed);
    }
    return o;
}

/* lps: its tokens' logprobs (taken; NULL: none asked, []) */
cJSON *rs_text_part(const char *text, cJSON *lps) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddItemToObject(p, "logprobs", lps ? lps : cJSON_CreateArray());
    return p;
}

/* Whether event e's token belongs to the answer's text [a, b): its text overlaps it, or (a
 * token that released no text: EOS, a byte of a character not whole yet) it sits there, or
 * at b when b is the answer's end (at_end). */
static int ev_in(const srv_event *e, size_t a, size_t b, int at_end) {
    if (e->text_len) return e->text_off < b && e->text_off + e->text_len > a;
    return e->text_off >= a && (e->text_off < b || (at_end && e->text_off == b));
}

/* The logprobs of the tokens of text [a, b) (the output_text part's shape), or NULL when the
 * request did not include them. */
static cJSON *range_logprobs(const srv_job *j, size_t a, size_t b) {
    if (!j->logprobs) return NULL;
    const srv_req *r = j->r;
    cJSON *l = cJSON_CreateArray();
    for (int i = 0; l && i < r->n_ev; i++)
        if (ev_in(&r->ev[i], a, b, b == r->text_len)) cJSON_AddItemToArray(l, srv_logprob_json(j->resp->s, &r->ev[i], 1));
    return l;
}

/* text NULL: the opening (no parts yet, in progress); lps: the part's logprobs (taken) */
cJSON *rs_message_item(const srv_job *j, int k, const char *text, const char *status, cJSON *lps) {
    char id[80];
    item_id(j, "msg", k, id, sizeof id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text) cJSON_AddItemToArray(c, rs_text_part(text, lps));
    else cJSON_Delete(lps);
    return o;
}

/* call i of the answer (its call_id is the chat's "call_<id>_<i>") */
static cJSON *call_item(const srv_job *j, int k, int i, const char *name, const char *args,
                        const char *status) {
    char id[80], cid[80];
    item_id(j, "fc", k, id, sizeof id);
    snprintf(cid, sizeof cid, "call_%s_%d", j->id, i);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function_call");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "call_id", cid);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "arguments", args);
    return o;
}

/* Tokens of the answer inside its reasoning (the text before "</think>"). */
static int reasoning_tokens(const srv_job *j) {
    const srv_req *r = j->r;
    if (!j->thinking || !r->text) return 0;
    const size_t end = srv_find(r->text, r->text_len, 0, DSV4_CHAT_THINK_CLOSE);
    int n = 0;
    for (int i = 0; i < r->n_ev; i++) n += r->ev[i].text_off + r->ev[i].text_len <= end && r->ev[i].text_len;
    return n;
}

static cJSON *usage_json(const srv_job *j) {
    const srv_req *r = j->r;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", r->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", r->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", r->n_ev);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            reasoning_tokens(j));
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_ev);
    return u;
}

static int incomplete(const srv_req *r) { return r->end && r->finish == DSV4_FINISH_LENGTH; }

/* The error of an answer that ended without finishing (an engine error, cancelled), or NULL. */
static const char *failure(const srv_req *r) {
    if (!r->end || r->end == SRV_END_FINISHED) return NULL;
    return r->errmsg[0] ? r->errmsg : "cancelled";
}

/* An output item's status at its end: incomplete when the answer was cut short
 * (max_output_tokens) or failed. */
static const char *item_status(const srv_req *r) {
    return incomplete(r) || failure(r) ? "incomplete" : "completed";
}

/* The response object: status, output (taken; NULL: empty), usage once ended. */
cJSON *rs_response_object(srv *s, const srv_job *j, const char *status, cJSON *output,
                          const char *error) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)j->created);
    cJSON_AddStringToObject(o, "status", status);
    if (error) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", error);
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else
        cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    for (const cJSON *x = j->resp->echo->child; x; x = x->next)
        cJSON_AddItemToObject(o, x->string, cJSON_Duplicate(x, 1));
    if (strcmp(status, "in_progress") && strcmp(status, "queued")) cJSON_AddItemToObject(o, "usage", usage_json(j));
    else cJSON_AddNullToObject(o, "usage");
    return o;
}

/* The conversation's items that have no id (this request's input, unless the client gave
 * them one) get one, for input_items' cursors: <prefix>_<the response's>_in<k>. */
void rs_input_ids(const srv_job *j, cJSON *conv) {
    static const char *const prefix[][2] = {{"message", "msg"}, {"function_call", "fc"},
                                            {"function_call_output", "fco"}, {"reasoning", "rs"}};
    int k = 0;
    for (cJSON *x = conv->child; x; x = x->next, k++) {
        if (rs_str_field(x, "id")) continue;
        const char *p = "item", *t = rs_item_type(x);
        for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
            if (!strcmp(t, prefix[i][0])) p = prefix[i][1];
        char id[96];
        snprintf(id, sizeof id, "%s_%s_in%d", p, j->id + strlen("resp_"), k);
        cJSON_DeleteItemFromObjectCaseSensitive(x, "id");
        cJSON_AddStringToObject(x, "id", id);
    }
}

/* The ended response (output taken): completed, incomplete or failed (with its error); kept
 * in the store when asked, returned (its store false when it could not be kept: over the
 * per-entry cap, or out of memory). A background response asked to cancel ends cancelled
 * (OpenAI's: no output, no error), whatever its request did meanwhile; its running entry
 * takes the end (rs_end). */
static cJSON *finish(srv *s, srv_job *j, cJSON *output) {
    const char *err = failure(j->r);
    j->resp->ended = 1;
    if (j->resp->cancel) {
        cJSON_Delete(output);
        output = NULL;
        err = NULL;
    }
    cJSON *o = rs_response_object(s, j, j->resp->cancel ? "cancelled" : err ? "failed" : incomplete(j->r) ?
                               "incomplete" : "completed", output, err);
    if (!j->resp->store) return o;
    cJSON *conv = cJSON_Duplicate(j->resp->conv, 1);
    const int n_in = cJSON_GetArraySize(conv);
    if (conv) rs_input_ids(j, conv);
    for (const cJSON *x = output ? output->child : NULL; conv && x; x = x->next)
        cJSON_AddItemToArray(conv, cJSON_Duplicate(x, 1));
    char *ct = conv ? cJSON_PrintUnformatted(conv) : NULL;
    char *rt = ct ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(conv);
    int kept = 0;
    if (j->resp->bg) kept = rs_end(s->rstore, j->id, rt, ct, n_in);
    else if (ct && rt) kept = rs_put(s->rstore, j->id, rt, ct, n_in, NULL, NULL);
    else { free(ct); free(rt); }
    if (!kept) cJSON_ReplaceItemInObjectCaseSensitive(o, "store", cJSON_CreateFalse());
    return o;
}

static cJSON *failed_end(srv *s, srv_job *j, srv_buf *out);

void responses_final(srv *s, srv_job *j, srv_buf *out, int *status) {
    srv_req *r = j->r;
    /* cancelled (the shutdown's deadline): the HTTP error (503); an engine error: the failed
     * response the stream ends with (its items incomplete) */
    if (r->end == SRV_END_CANCELLED && srv_final_error(j, out, status)) return;
    if (failure(r)) {
        srv_buf scratch = {0};
        cJSON *o = failed_end(s, j, &scratch);
        srv_buf_free(&scratch);
        *status = 200;
        srv_put_json(out, o);
        return;
    }
    dsv4_parsed p;
    srv_parse_answer(j, &p);
    const char *st = item_status(r);
    cJSON *output = cJSON_CreateArray();
    int k = 0;
    if (p.reasoning && *p.reasoning) cJSON_AddItemToArray(output, rs_reasoning_item(j, k++, p.reasoning));
    /* a malformed block: its raw text is a message of its own after the content, as the
     * stream sends it (the content's message closed when the block began) */
    const char *raw = !p.n_calls && j->tools && r->text ? strstr(r->text, TOOLS_TAG) : NULL;
    /* the message's tokens (logprobs): after the reasoning, before a tool block */
    const char *tag = j->tools && r->text ? strstr(r->text, TOOLS_TAG) : NULL;
    size_t a = 0, b = tag ? (size_t)(tag - r->text) : r->text_len;
    if (j->thinking) {
        a = srv_find(r->text ? r->text : "", r->text_len, 0, DSV4_CHAT_THINK_CLOSE);
        a = a < r->text_len ? a + strlen(DSV4_CHAT_THINK_CLOSE) : r->text_len;
    }
    if (raw) {
        const char *in = strstr(p.content, TOOLS_TAG);  /* the parse may keep it in the content */
        size_t n = in ? (size_t)(in - p.content) : strlen(p.content);
        if (in && n >= 2 && !strncmp(in - 2, "\n\n", 2)) n -= 2;
        char *head = n ? strndup(p.content, n) : NULL;
        if (head)  /* ended at the block */
            cJSON_AddItemToArray(output, rs_message_item(j, k++, head, "completed", range_logprobs(j, a, b)));
        free(head);
        cJSON_AddItemToArray(output, rs_message_item(j, k++, raw, st, range_logprobs(j, b, r->text_len)));
    } else if (*p.content || !p.n_calls) {
        cJSON_AddItemToArray(output, rs_message_item(j, k++, p.content, st, range_logprobs(j, a, b)));
    }
    for (int i = 0; i < p.n_calls && i < j->resp->n_calls; i++)
        cJSON_AddItemToArray(output, call_item(j, k++, i, p.calls[i].name, p.calls[i].arguments, "completed"));
    dsv4_parsed_free(&p);
    *status = 200;
    srv_put_json(out, finish(s, j, output));
}

/* ---- streaming --------------------------------------------------------------------------- */

/* A new event's data {type, ...}; sent by emit. */
cJSON *rs_ev(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void emit(srv_job *j, srv_buf *out, cJSON *o) {
    cJSON_AddNumberToObject(o, "sequence_number", j->resp->seq++);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    char type[64];
    snprintf(type, sizeof type, "%s", cJSON_IsString(t) ? t->valuestring : "");
    srv_sse(out, type, o);
}

/* An event about the open item: {type, item_id, output_index[, content_index]}. */
static cJSON *item_ev(srv_job *j, const char *type, const char *prefix, int content) {
    char id[80];
    item_id(j, prefix, j->resp->n_out, id, sizeof id);
    cJSON *o = rs_ev(type);
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", j->resp->n_out);
    if (content) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void item_added(srv_job *j, srv_buf *out, cJSON *item) {
    cJSON *o = rs_ev("response.output_item.added");
    cJSON_AddNumberToObject(o, "output_index", j->resp->n_out);
    cJSON_AddItemToObject(o, "item", item);
    emit(j, out, o);
}

static void item_done(srv_job *j, srv_buf *out, cJSON *item) {
    struct srv_resp *R = j->resp;
    cJSON *o = rs_ev("response.output_item.done");
    cJSON_AddNumberToObject(o, "output_index", R->n_out);
    cJSON_AddItemToObject(o, "item", cJSON_Duplicate(item, 1));
    emit(j, out, o);
    cJSON_AddItemToArray(R->items, item);
    R->n_out++;
    R->open = OPEN_NONE;
    R->text.n = 0;
}

static const char *text_of(const srv_buf *b) { return b->s && b->n ? b->s : ""; }

/* The logprobs of a message delta of text [a, b) (the streamed events' shape: no bytes):
 * the tokens not given to a delta yet whose text begins before b, but for those wholly
 * before a (the reasoning's); all: every token left (at the message's end: a token that
 * released no text, EOS). They join the open message's (R->lps, and R->lps_nb in this shape).
 * [] when not included. */
static cJSON *delta_logprobs(srv_job *j, size_t a, size_t b, int all) {
    struct srv_resp *R = j->resp;
    const srv_req *r = j->r;
    cJSON *d = cJSON_CreateArray();
    if (!j->logprobs || !d) return d;
    if ((!R->lps && !(R->lps = cJSON_CreateArray())) || (!R->lps_nb && !(R->lps_nb = cJSON_CreateArray())))
        return d;
    for (; R->lp_next < r->n_ev; R->lp_next++) {
        const srv_event *e = &r->ev[R->lp_next];
        if (!all && e->text_off >= b) break;
        if (!all && (e->text_len ? e->text_off + e->text_len <= a : e->text_off < a)) continue;
        cJSON *nb = srv_logprob_json(R->s, e, 0);
        cJSON_AddItemToArray(R->lps, srv_logprob_json(R->s, e, 1));
        cJSON_AddItemToArray(R->lps_nb, cJSON_Duplicate(nb, 1));
        cJSON_AddItemToArray(d, nb);
    }
    return d;
}

/* The open item's closing events; it joins the items done. */
static void close_open(srv_job *j, srv_buf *out, int at_end) {
    struct srv_resp *R = j->resp;
    /* an item closed because the next began ended whole; at the answer's end its status is
     * the answer's (so it does not depend on when the stream caught up) */
    const char *st = at_end ? item_status(j->r) : "completed";
    if (R->text.s) R->text.s[R->text.n] = 0;
    const char *t = text_of(&R->text);
    if (R->open == OPEN_REASONING) {
        cJSON *o = item_ev(j, "response.reasoning_text.done", "rs", 1);
        cJSON_AddStringToObject(o, "text", t);
        emit(j, out, o);
        item_done(j, out, rs_reasoning_item(j, R->n_out, t));
    } else if (R->open == OPEN_MESSAGE) {
        cJSON *o;
        if (at_end && j->logprobs && R->lp_next < j->r->n_ev) {
            /* tokens that released no text at the end (EOS) ride on an empty delta, as
             * the chat stream's on an empty chunk */
            o = item_ev(j, "response.output_text.delta", "msg", 1);
            cJSON_AddStringToObject(o, "delta", "");
            cJSON_AddItemToObject(o, "logprobs", delta_logprobs(j, 0, 0, 1));
            emit(j, out, o);
        }
        cJSON *lps = j->logprobs ? R->lps : NULL, *nb = j->logprobs ? R->lps_nb : NULL;
        R->lps = R->lps_nb = NULL;
        o = item_ev(j, "response.output_text.done", "msg", 1);
        cJSON_AddStringToObject(o, "text", t);
        cJSON_AddItemToObject(o, "logprobs", nb ? nb : cJSON_CreateArray());
        emit(j, out, o);
        o = item_ev(j, "response.content_part.done", "msg", 1);
        cJSON_AddItemToObject(o, "part", rs_text_part(t, lps ? cJSON_Duplicate(lps, 1) : NULL));
        emit(j, out, o);
        item_done(j, out, rs_message_item(j, R->n_out, t, st, lps));
    } else if (R->open == OPEN_CALL) {
        /* held: only a block that parses makes it a call (release_calls) */
        cJSON_AddItemToArray(R->held, call_item(j, R->n_out, R->call, text_of(&R->name), t, "completed"));
        R->n_out++;
        R->open = OPEN_NONE;
        R->text.n = 0;
    }
}

/* The first n held calls' closing events with their status (the block parsed into n calls:
 * completed; the answer failed: incomplete); they join the items done. The others (cut by
 * max_output_tokens: the parse leaves them out) are dropped. */
static void release_calls(srv_job *j, srv_buf *out, int n, const char *status) {
    struct srv_resp *R = j->resp;
    const int first = R->n_out - cJSON_GetArraySize(R->held);
    R->n_out = first;
    for (cJSON *c; n-- > 0 && (c = cJSON_DetachItemFromArray(R->held, 0));) {
        const int k = R->n_out++;
        cJSON_ReplaceItemInObjectCaseSensitive(c, "status", cJSON_CreateString(status));
        cJSON *o = rs_ev("response.function_call_arguments.done");
        cJSON_AddStringToObject(o, "item_id", rs_str_field(c, "id"));
        cJSON_AddNumberToObject(o, "output_index", k);
        cJSON_AddStringToObject(o, "arguments", rs_str_field(c, "arguments"));
        emit(j, out, o);
        o = rs_ev("response.output_item.done");
        cJSON_AddNumberToObject(o, "output_index", k);
        cJSON_AddItemToObject(o, "item", cJSON_Duplicate(c, 1));
        emit(j, out, o);
        cJSON_AddItemToArray(R->items, c);
    }
    cJSON_Delete(R->held);
    R->held = cJSON_CreateArray();
}

/* The held calls, and an open one, dropped (a malformed block): their output indexes go to
 * what follows. */
static void drop_calls(srv_job *j, srv_buf *out) {
    struct srv_resp *R = j->resp;
    if (R->open == OPEN_CALL) close_open(j, out, 1);
    R->n_out -= cJSON_GetArraySize(R->held);
    cJSON_Delete(R->held);
    R->held = cJSON_CreateArray();  /* NULL (out of memory): cJSON's calls take it as empty */
}

/* Opens a reasoning or message item unless it is the open one. */
static void open_text(srv_job *j, srv_buf *out, int kind) {
    struct srv_resp *R = j->resp;
    if (R->open == kind) return;
    close_open(j, out, 0);
    R->open = kind;
    if (kind == OPEN_REASONING) {
        item_added(j, out, rs_reasoning_item(j, R->n_out, NULL));
        return;
    }
    item_added(j, out, rs_message_item(j, R->n_out, NULL, "in_progress", NULL));
    cJSON_Delete(R->lps);
    cJSON_Delete(R->lps_nb);
    R->lps = R->lps_nb = NULL;
    cJSON *o = item_ev(j, "response.content_part.added", "msg", 1);
    cJSON_AddItemToObject(o, "part", rs_text_part("", NULL));
    emit(j, out, o);
}

/* t[0, n) as a delta of the reasoning or message item, opened unless it is the open one. */
static void text_delta(srv_job *j, srv_buf *out, int reasoning, const char *t, size_t n) {
    open_text(j, out, reasoning ? OPEN_REASONING : OPEN_MESSAGE);
    cJSON *o = item_ev(j, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta",
                       reasoning ? "rs" : "msg", 1);
    cJSON_AddItemToObject(o, "delta", srv_json_str_n(t, n));
    if (!reasoning) {
        const size_t a = (size_t)(t - j->r->text);
        cJSON_AddItemToObject(o, "logprobs", delta_logprobs(j, a, a + n, 0));
    }
    emit(j, out, o);
    srv_buf_put(&j->resp->text, t, n);
}

/* The reasoning and content of the text up to `upto` as deltas. */
static void stream_text(srv_job *j, srv_buf *out, size_t upto, int done) {
    int part;
    size_t off, n;
    while (srv_split_next(&j->split, j->r->text, upto, done, &part, &off, &n))
        text_delta(j, out, part == SRV_PART_REASONING, j->r->text + off, n);
}

/* Tool-call deltas in the chat's form (srv_tool_stream; taken) as function_call items and
 * their arguments' deltas. A fragment for a call already closed (only a malformed block's
 * repair can make one) is left out. */
static void stream_calls(srv_job *j, srv_buf *out, cJSON *deltas) {
    struct srv_resp *R = j->resp;
    for (const cJSON *d = deltas ? deltas->child : NULL; d; d = d->next) {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(d, "index");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(d, "function");
        const char *name = rs_str_field(fn, "name"), *args = rs_str_field(fn, "arguments");
        const int i = cJSON_IsNumber(ix) ? ix->valueint : -1;
        if (i >= R->n_calls) continue;  /* parallel_tool_calls false: the first call only */
        if (name) {
            close_open(j, out, 0);
            R->open = OPEN_CALL;
            R->call = i;
            R->name.n = 0;
            srv_buf_puts(&R->name, name);
            item_added(j, out, call_item(j, R->n_out, i, name, "", "in_progress"));
        }
        if (R->open != OPEN_CALL || R->call != i || !args || !*args) continue;
        cJSON *o = item_ev(j, "response.function_call_arguments.delta", "fc", 0);
        cJSON_AddStringToObject(o, "delta", args);
        emit(j, out, o);
        srv_buf_puts(&R->text, args);
    }
    cJSON_Delete(deltas);
}

/* The items' events of the answer's tokens not sent yet. */
static void stream_events(srv_job *j, srv_buf *out) {
    const srv_req *r = j->r;
    for (; j->ev_sent < r->n_ev; j->ev_sent++) {
        const srv_event *e = &r->ev[j->ev_sent];
        stream_text(j, out, e->text_off + e->text_len, 0);
        stream_calls(j, out, srv_tool_stream_text(&j->calls, &j->split, r->text, e->text_off + e->text_len, 0, j->id));
    }
}

/* A failed answer's end, streamed or not (the non-streamed answer runs the stream's events
 * into a scratch buffer: the same items either way): what the split held back goes out,
 * then every open item closes (incomplete), the calls announced too, so each
 * output_item.added has its done. Returns the failed response (stored). */
static cJSON *failed_end(srv *s, srv_job *j, srv_buf *out) {
    struct srv_resp *R = j->resp;
    stream_events(j, out);
    if (j->split.part != SRV_PART_TOOLS) stream_text(j, out, j->r->text_len, 1);
    close_open(j, out, 1);
    release_calls(j, out, cJSON_GetArraySize(R->held), "incomplete");
    return finish(s, j, cJSON_Duplicate(R->items, 1));
}

void responses_stream(srv *s, srv_job *j, srv_buf *out, int *finished) {
    srv_req *r = j->r;
    struct srv_resp *R = j->resp;
    if (R->flog) {
        rs_follow_stream(j, out, finished);
        return;
    }
    if (!j->began) {
        /* a background response is created queued, then says so (OpenAI's response.queued,
         * after response.created: the clients' stream helpers take their snapshot from the
         * first event, which must be created); in_progress once it runs */
        cJSON *o = rs_ev("response.created");
        cJSON_AddItemToObject(o, "response", rs_response_object(s, j, R->bg ? "queued" : "in_progress", NULL, NULL));
        emit(j, out, o);
        if (R->bg) {
            o = rs_ev("response.queued");
            cJSON_AddItemToObject(o, "response", rs_response_object(s, j, "queued", NULL, NULL));
            emit(j, out, o);
        }
        j->began = 1;
    }
    /* (a background one as a poll sees it: queued until its first token; one cancelled while
     * queued goes from queued to its end) */
    if (!R->live && (!R->bg || r->n_ev || (r->end && !R->cancel))) {
        cJSON *o = rs_ev("response.in_progress");
        cJSON_AddItemToObject(o, "response", rs_response_object(s, j, "in_progress", NULL, NULL));
        emit(j, out, o);
        R->live = 1;
    }
    stream_events(j, out);
    if (!r->end) return;
    if (failure(r) || R->cancel) {
        cJSON *o = rs_ev("response.failed");
        cJSON_AddItemToObject(o, "response", failed_end(s, j, out));
        emit(j, out, o);
        *finished = 1;
        return;
    }
    stream_text(j, out, r->text_len, 1);
    if (j->split.part == SRV_PART_TOOLS) {
        stream_calls(j, out, srv_tool_stream_text(&j->calls, &j->split, r->text, r->text_len, 1, j->id));
        dsv4_parsed p;
        srv_parse_answer(j, &p);
        if (p.n_calls) {
            stream_calls(j, out, srv_tool_stream_finish(&j->calls, &p, j->id));
            close_open(j, out, 1);
            release_calls(j, out, p.n_calls < R->n_calls ? p.n_calls : R->n_calls, "completed");
        } else {
            /* a malformed block: no call (those announced are dropped: their
             * output_item.done never went out); its raw text is a message, nothing is lost */
            const char *from = strstr(r->text, TOOLS_TAG);
            drop_calls(j, out);
            if (from) text_delta(j, out, 0, from, strlen(from));
        }
        dsv4_parsed_free(&p);
    }
    /* an answer with no message and no call still has its (empty) message, as the
     * non-streamed one */
    int any = R->open == OPEN_MESSAGE || R->open == OPEN_CALL;
    for (const cJSON *x = R->items->child; x; x = x->next)
        if (strcmp(rs_str_field(x, "type"), "reasoning")) any = 1;
    if (!any) open_text(j, out, OPEN_MESSAGE);
    close_open(j, out, 1);
    cJSON *fin = finish(s, j, cJSON_Duplicate(R->items, 1));
    cJSON *o = rs_ev(incomplete(r) ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(o, "response", fin);
    emit(j, out, o);
    *finished = 1;
}
