/* openai.c — POST /v1/chat/completions: OpenAI request bodies in, OpenAI answers out (one
 * JSON body, or SSE chunks ending with [DONE]); and what it shares with completions.c's
 * /v1/completions (openai_int.h): the choices of one job (n > 1, a list of prompts), their
 * usage and stream, the fields both check, vLLM's prompt_logprobs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai_int.h"
#include "serve/srv.h"

#define MSG 1200

/* ---- JSON helpers shared with anthropic.c (srv.h) -------------------------------------- */

/* A JSON string of n bytes (valid UTF-8: the generation releases whole characters). */
cJSON *srv_json_str_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (!t) return NULL;
    memcpy(t, s, n);
    t[n] = '\0';
    cJSON *j = cJSON_CreateString(t);
    free(t);
    return j;
}

/* "event: E\ndata: JSON\n\n" (no event line when event is NULL); takes data. */
void srv_sse(srv_buf *out, const char *event, cJSON *data) {
    char *t = data ? cJSON_PrintUnformatted(data) : NULL;
    if (!t) { out->oom = 1; cJSON_Delete(data); return; }
    if (event) srv_buf_printf(out, "event: %s\n", event);
    srv_buf_puts(out, "data: ");
    srv_buf_puts(out, t);
    srv_buf_puts(out, "\n\n");
    free(t);
    cJSON_Delete(data);
}

const char *srv_finish_reason(const srv_req *r, int n_calls) {
    if (r->finish == DSV4_FINISH_LENGTH) return "length";
    return n_calls > 0 ? "tool_calls" : "stop";
}

void srv_put_json(srv_buf *out, cJSON *j) {
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    if (!t) out->oom = 1;
    else srv_buf_puts(out, t);
    free(t);
    cJSON_Delete(j);
}

static cJSON *token_str(const srv *s, int32_t id) {
    srv_buf b = {0};
    srv_token_text(s, id, &b);
    cJSON *j = cJSON_CreateString(b.s ? b.s : "");
    srv_buf_free(&b);
    return j;
}

static cJSON *token_bytes(const srv *s, int32_t id) {
    size_t n = 0;
    const char *t = dsv4_tok_id_bytes(s->tok, id, &n);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; t && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)t[i]));
    return a;
}

cJSON *srv_logprob_json(const srv *s, const srv_event *e, int bytes) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", token_str(s, e->token));
    cJSON_AddNumberToObject(o, "logprob", e->sample.logprob);
    if (bytes) cJSON_AddItemToObject(o, "bytes", token_bytes(s, e->token));
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    for (int i = 0; i < e->sample.n_top; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToObject(t, "token", token_str(s, e->sample.top_ids[i]));
        cJSON_AddNumberToObject(t, "logprob", e->sample.top_logprobs[i]);
        if (bytes) cJSON_AddItemToObject(t, "bytes", token_bytes(s, e->sample.top_ids[i]));
        cJSON_AddItemToArray(top, t);
    }
    return o;
}

/* A logprob as a JSON number: -inf (an id the tokenizer has no text for, which decoding
 * never samples, in a token-id prompt) as -9999.0, as vLLM clamps it (cJSON would print
 * null, which a client's sum fails on). */
cJSON *oa_lp_num(float x) { return cJSON_CreateNumber(isfinite(x) ? (double)x : -9999.0); }

/* One entry of vLLM's prompt_logprobs dict: "id": {logprob, rank, decoded_token}. */
static void plp_entry(const srv *s, cJSON *d, int32_t id, float lp, int rank) {
    char key[16];
    snprintf(key, sizeof key, "%d", (int)id);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "logprob", oa_lp_num(lp));
    cJSON_AddNumberToObject(e, "rank", rank);
    cJSON_AddItemToObject(e, "decoded_token", token_str(s, id));
    cJSON_AddItemToObject(d, key, e);
}

/* vLLM's prompt_logprobs of r's prompt (scored: r->plp): null for the first token, then per
 * token a dict of the token itself (first, its rank among all ids) and the best k (ranks
 * 1..k; the token once when it is one of them). The numbers are echo's. */
cJSON *oa_prompt_logprobs_json(const srv *s, const srv_req *r, int k) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < r->n_prompt; i++) {
        if (!i || !r->plp) {
            cJSON_AddItemToArray(a, cJSON_CreateNull());
            continue;
        }
        const dsv4_sample_out *o = &r->plp[i];
        cJSON *d = cJSON_CreateObject();
        plp_entry(s, d, r->prompt[i], o->logprob, o->rank);
        for (int t = 0; t < k && t < o->n_top; t++)
            if (o->top_ids[t] != r->prompt[i]) plp_entry(s, d, o->top_ids[t], o->top_logprobs[t], t + 1);
        cJSON_AddItemToArray(a, d);
    }
    return a;
}

/* vLLM's prompt_logprobs field (0..DSV4_MAX_LOGPROBS: the best that many beside each prompt
 * token; not streamed, nor under data-parallel attention, as echo): *k = the count + 1, 0
 * when absent. 0, or -1 with a message. */
int oa_prompt_logprobs_field(const srv *s, const cJSON *body, int stream, int *k, char *msg) {
    double x = 0;
    const int got = srv_opt_num(body, "prompt_logprobs", 0, DSV4_MAX_LOGPROBS, &x, msg, MSG);
    *k = 0;
    if (got < 0 || (got > 0 && x != (double)(int)x)) {
        snprintf(msg, MSG, "'prompt_logprobs' must be a whole number from 0 to %d", DSV4_MAX_LOGPROBS);
        return -1;
    }
    if (!got) return 0;
    if (stream) {
        snprintf(msg, MSG, "'prompt_logprobs' cannot be streamed (ask with stream false)");
        return -1;
    }
    if (s->o.parallel & DSV4_PAR_DP) {
        snprintf(msg, MSG, "'prompt_logprobs' is not served under data-parallel attention");
        return -1;
    }
    *k = (int)x + 1;
    return 0;
}

/* chat logprobs entry of one token: {token, logprob, bytes, top_logprobs: [...]} */
static cJSON *chat_logprob(const srv *s, const srv_event *e) { return srv_logprob_json(s, e, 1); }

/* ---- n > 1: the choices of one job -------------------------------------------------------
 * Choice 0 is the job itself, choice k its more[k - 1]; the stream and final functions run
 * with choice 0's mu held and take each other choice's around its part. */

srv_job *oa_choice(srv_job *j, int k) { return k ? &j->more[k - 1] : j; }
void oa_choice_lock(srv_job *j, int k) { if (k) pthread_mutex_lock(&j->more[k - 1].r->mu); }
void oa_choice_unlock(srv_job *j, int k) { if (k) pthread_mutex_unlock(&j->more[k - 1].r->mu); }

/* The choices' sampled tokens together (OpenAI's completion_tokens). */
static int choices_tokens(srv_job *j) {
    int n = 0;
    for (int k = 0; k <= j->n_more; k++) {
        oa_choice_lock(j, k);
        n += oa_choice(j, k)->r->n_ev;
        oa_choice_unlock(j, k);
    }
    return n;
}

/* What a job's handler set on choice 0, on every choice. */
void oa_spread(srv_job *j) {
    for (int k = 0; k < j->n_more; k++) {
        srv_job *c = &j->more[k];
        c->stream = j->stream;
        c->include_usage = j->include_usage;
        c->logprobs = j->logprobs;
        c->thinking = j->thinking;
        c->tools = j->tools;
        c->split = j->split;
        c->token_ids = j->token_ids;
        c->prompt_lp = j->prompt_lp;
    }
}

/* A job's prompts (a completions list: several) and the choices of each. */
int oa_prompts_of(const srv_job *j) { return j->n_prompts > 1 ? j->n_prompts : 1; }
int oa_per_prompt(const srv_job *j) { return (1 + j->n_more) / oa_prompts_of(j); }

/* Each prompt counted once, the tokens of every choice. */
cJSON *oa_usage_json(srv_job *j) {
    const int n_gen = choices_tokens(j), per = oa_per_prompt(j);
    int n_prompt = 0, n_cached = 0;
    for (int p = 0; p < oa_prompts_of(j); p++) {
        oa_choice_lock(j, p * per);
        n_prompt += oa_choice(j, p * per)->r->n_prompt;
        n_cached += oa_choice(j, p * per)->r->n_cached;
        oa_choice_unlock(j, p * per);
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", n_prompt + n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", n_cached);
    return u;
}

cJSON *oa_head(const srv *s, const srv_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", "dsv4");
    return o;
}

/* The answer's text split into reasoning, content and tool calls (best effort when the
 * model wrote malformed DSML: the raw text stays in the content). Without tools offered
 * DSML is not read: the text after the reasoning is the content, whatever it holds. */
void srv_parse_answer(const srv_job *j, dsv4_parsed *p) {
    dsv4_err err = {0};
    dsv4_dsml_parse_opts(j->r->text ? j->r->text : "", j->r->text_len, j->thinking,
                         j->tools ? 0 : DSV4_DSML_TEXT_ONLY, p, &err);
}

/* The stem of a choice's tool call ids: the answer's id, with "-k" for choice k > 0 (the ids
 * stay unique across the choices of n > 1). buf: 64 bytes. */
static const char *call_stem(const srv_job *j, char *buf) {
    if (!j->index) return j->id;
    snprintf(buf, 64, "%s-%d", j->id, j->index);
    return buf;
}

static void add_tool_call_ids(const srv_job *j, cJSON *calls) {
    int i = 0;
    char stem[64];
    for (cJSON *c = calls ? calls->child : NULL; c; c = c->next, i++) {
        char id[96];
        snprintf(id, sizeof id, "call_%s_%d", call_stem(j, stem), i);
        cJSON_DeleteItemFromObjectCaseSensitive(c, "id");
        cJSON_AddStringToObject(c, "id", id);
    }
}

int srv_final_error(const srv_job *j, srv_buf *out, int *status) {
    const srv_req *r = j->r;
    /* n > 1: the first choice that failed, else the first that did not finish (one failed
     * choice cancels the others) (the caller holds every choice's mu) */
    for (int k = 0; k < j->n_more && r->end != SRV_END_ERROR; k++)
        if (j->more[k].r->end == SRV_END_ERROR) r = j->more[k].r;
    for (int k = 0; k < j->n_more && r->end == SRV_END_FINISHED; k++) r = j->more[k].r;
    if (r->end == SRV_END_FINISHED) return 0;
    /* an engine error, or cancelled by the shutdown's deadline */
    *status = r->end == SRV_END_ERROR ? 500 : 503;
    srv_openai_error(out, *status, r->errmsg[0] ? r->errmsg : "cancelled");
    return 1;
}

/* ---- chat completions ------------------------------------------------------------------ */

static cJSON *chat_choice(srv *s, srv_job *j) {
    srv_req *r = j->r;
    dsv4_parsed p;
    srv_parse_answer(j, &p);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    cJSON *m = dsv4_parsed_to_json(&p);
    if (m) add_tool_call_ids(j, cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    cJSON_AddItemToObject(c, "message", m ? m : cJSON_CreateNull());
    if (j->logprobs) {
        cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
        cJSON *arr = cJSON_AddArrayToObject(lp, "content");
        for (int i = 0; i < r->n_ev; i++) cJSON_AddItemToArray(arr, chat_logprob(s, &r->ev[i]));
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", srv_finish_reason(r, p.n_calls));
    dsv4_parsed_free(&p);
    return c;
}

static void chat_final(srv *s, srv_job *j, srv_buf *out, int *status) {
    for (int k = 1; k <= j->n_more; k++) oa_choice_lock(j, k);
    if (!srv_final_error(j, out, status)) {
        cJSON *o = oa_head(s, j, "chat.completion");
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        for (int k = 0; k <= j->n_more; k++) cJSON_AddItemToArray(choices, chat_choice(s, oa_choice(j, k)));
        for (int k = j->n_more; k >= 1; k--) oa_choice_unlock(j, k);
        cJSON_AddItemToObject(o, "usage", oa_usage_json(j));
        if (j->prompt_lp) cJSON_AddItemToObject(o, "prompt_logprobs", oa_prompt_logprobs_json(s, j->r, j->prompt_lp - 1));
        *status = 200;
        srv_put_json(out, o);
        return;
    }
    for (int k = j->n_more; k >= 1; k--) oa_choice_unlock(j, k);
}

/* One chunk: delta {key: text}, optional logprobs entry, finish reason. */
static void chat_chunk(srv *s, srv_job *j, srv_buf *out, cJSON *delta, cJSON *lp,
                       const char *finish) {
    cJSON *o = oa_head(s, j, "chat.completion.chunk");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", j->index);
    cJSON_AddItemToObject(c, "delta", delta);
    if (lp) {
        cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
        cJSON *arr = cJSON_AddArrayToObject(l, "content");
        cJSON_AddItemToArray(arr, lp);
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
    srv_sse(out, NULL, o);
}

/* Releases the text up to `upto` as content / reasoning deltas; lp (may be NULL) rides on
 * the first chunk, or on an empty delta if there is no text. */
static void chat_text(srv *s, srv_job *j, srv_buf *out, size_t upto, int done, cJSON *lp) {
    int part;
    size_t off, n;
    while (srv_split_next(&j->split, j->r->text, upto, done, &part, &off, &n)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, part == SRV_PART_REASONING ? "reasoning_content" : "content",
                              srv_json_str_n(j->r->text + off, n));
        chat_chunk(s, j, out, d, lp, NULL);
        lp = NULL;
    }
    if (lp) chat_chunk(s, j, out, cJSON_CreateObject(), lp, NULL);
}

/* The tool_calls deltas of the DSML block in the text up to `upto` (done: the answer is
 * complete). Called per token, so the deltas do not depend on how often the connection's
 * thread wakes. */
static void chat_calls(srv *s, srv_job *j, srv_buf *out, size_t upto, int done) {
    char stem[64];
    cJSON *calls = srv_tool_stream_text(&j->calls, &j->split, j->r->text, upto, done, call_stem(j, stem));
    if (!calls) return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToObject(d, "tool_calls", calls);
    chat_chunk(s, j, out, d, NULL, NULL);
}

/* The SSE error event of a request that failed. */
static void stream_error(const srv_req *r, srv_buf *out) {
    cJSON *e = cJSON_CreateObject();
    cJSON *ee = cJSON_AddObjectToObject(e, "error");
    cJSON_AddStringToObject(ee, "message", r->errmsg);
    cJSON_AddStringToObject(ee, "type", "server_error");
    srv_sse(out, NULL, e);
}

/* The stream of every choice (one_fn: one choice's new chunks up to its finish chunk,
 * j->done set then): once all are done, the usage chunk (include_usage) and [DONE]. A
 * choice that failed ends the stream with its error and cancels the others (choice 0's
 * cancel is theirs: the scheduler's sweep, which runs while they do). */
void oa_stream_choices(srv *s, srv_job *j, srv_buf *out, int *finished, const char *object,
                       void (*one_fn)(srv *, srv_job *, srv_buf *)) {
    int all = 1, failed = 0;
    for (int k = 0; k <= j->n_more && !failed; k++) {
        srv_job *c = oa_choice(j, k);
        oa_choice_lock(j, k);
        if (!c->done) one_fn(s, c, out);
        if (c->r->end == SRV_END_ERROR) {
            stream_error(c->r, out);
            failed = 1;
        }
        all &= c->done;
        oa_choice_unlock(j, k);
    }
    if (failed) {
        j->r->cancel = 1;
    } else {
        if (!all) return;
        if (j->include_usage) {
            cJSON *o = oa_head(s, j, object);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", oa_usage_json(j));
            srv_sse(out, NULL, o);
        }
    }
    srv_buf_puts(out, "data: [DONE]\n\n");
    *finished = 1;
}

static void chat_stream_one(srv *s, srv_job *j, srv_buf *out) {
    srv_req *r = j->r;
    if (!j->began) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddStringToObject(d, "content", "");
        chat_chunk(s, j, out, d, NULL, NULL);
        j->began = 1;
    }
    for (; j->ev_sent < r->n_ev; j->ev_sent++) {
        const srv_event *e = &r->ev[j->ev_sent];
        chat_text(s, j, out, e->text_off + e->text_len, 0, j->logprobs ? chat_logprob(s, e) : NULL);
        chat_calls(s, j, out, e->text_off + e->text_len, 0);
    }
    /* an error is the group's (stream_choices) */
    if (r->end != SRV_END_FINISHED && r->end != SRV_END_CANCELLED) return;
    chat_text(s, j, out, r->text_len, 1, NULL);
    int n_calls = 0;
    if (j->split.part == SRV_PART_TOOLS) {
        chat_calls(s, j, out, r->text_len, 1);
        dsv4_parsed p;
        srv_parse_answer(j, &p);
        n_calls = p.n_calls;
        if (n_calls) {
            /* what the scan did not send yet (nothing when the block was well formed) */
            char stem[64];
            cJSON *rest = srv_tool_stream_finish(&j->calls, &p, call_stem(j, stem));
            if (rest) {
                cJSON *d = cJSON_CreateObject();
                cJSON_AddItemToObject(d, "tool_calls", rest);
                chat_chunk(s, j, out, d, NULL, NULL);
            }
        } else {
            /* malformed block: its raw text goes out as content, nothing is lost (calls
             * already announced stay as they are, finish_reason says "stop"); not once a
             * call was announced (a block cut by max_tokens: the text is that call's) */
            const char *from = strstr(r->text, "<｜DSML｜tool_calls>");
            if (from && !j->calls.n_calls) {
                cJSON *d = cJSON_CreateObject();
                cJSON_AddStringToObject(d, "content", from);
                chat_chunk(s, j, out, d, NULL, NULL);
            }
        }
        dsv4_parsed_free(&p);
    }
    chat_chunk(s, j, out, cJSON_CreateObject(), NULL, srv_finish_reason(r, n_calls));
    j->done = 1;
}

static void chat_stream(srv *s, srv_job *j, srv_buf *out, int *finished) {
    oa_stream_choices(s, j, out, finished, "chat.completion.chunk", chat_stream_one);
}

/* thinking: DeepSeek's "thinking" (bool or {"type": "enabled"|"disabled"}),
 * "reasoning_effort" (low|medium|high|max turn it on), vLLM's chat_template_kwargs.thinking.
 * Default off. (msg: MSG bytes) */
int srv_chat_thinking(const cJSON *body, dsv4_chat_opts *co, char *msg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(body, "thinking");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    const cJSON *kt = cJSON_IsObject(kw) ? cJSON_GetObjectItemCaseSensitive(kw, "thinking") : NULL;
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(body, "reasoning_effort");
    if (cJSON_IsBool(kt)) co->thinking = cJSON_IsTrue(kt);
    if (cJSON_IsBool(t)) {
        co->thinking = cJSON_IsTrue(t);
    } else if (cJSON_IsObject(t)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsString(ty) || (strcmp(ty->valuestring, "enabled") &&
                                    strcmp(ty->valuestring, "disabled"))) {
            snprintf(msg, MSG, "'thinking.type' must be \"enabled\" or \"disabled\"");
            return -1;
        }
        co->thinking = !strcmp(ty->valuestring, "enabled");
    } else if (t && !cJSON_IsNull(t)) {
        snprintf(msg, MSG, "'thinking' must be a boolean or {\"type\": ...}");
        return -1;
    }
    if (re && !cJSON_IsNull(re)) {
        const char *v = cJSON_IsString(re) ? re->valuestring : "";
        if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") && strcmp(v, "max")) {
            snprintf(msg, MSG, "'reasoning_effort' must be low, medium, high or max");
            return -1;
        }
        co->thinking = 1;
        co->effort_max = !strcmp(v, "max");
    }
    return 0;
}

/* The most choices of one request (n, best_of): every choice is a sequence, so at most
 * --max-seqs of them (SRV_MAX_CHOICES at most in any case). */
static int choices_cap(const srv *s) {
    return s->o.max_seqs < SRV_MAX_CHOICES ? s->o.max_seqs : SRV_MAX_CHOICES;
}

/* A count of choices (n, best_of): absent 1, else a whole number in [1, the cap] (under
 * data-parallel attention all on choice 0's home rank: dp.c). */
int oa_choices_field(const srv *s, const cJSON *body, const char *key, int *n, char *msg) {
    double x = 1;
    const int cap = choices_cap(s);
    int k = srv_opt_num(body, key, 1, cap, &x, msg, MSG);
    if (k > 0 && x != (double)(int)x) k = -1;
    if (k < 0) {
        snprintf(msg, MSG, "'%s' must be a whole number from 1 to %d (the server's --max-seqs: "
                 "each choice is a sequence)", key, cap);
        return -1;
    }
    *n = (int)x;
    return 0;
}

/* Fields both endpoints check the same way: n, stream, stream_options. *param: the field
 * at fault, for the error's "param" (NULL: none named). */
int oa_common_fields(const srv *s, const cJSON *body, srv_job *tmp, int *n, const char **param, char *msg) {
    *param = "n";
    if (oa_choices_field(s, body, "n", n, msg)) return -1;
    *param = NULL;
    if (srv_opt_bool(body, "stream", &tmp->stream, msg, MSG) < 0) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { snprintf(msg, MSG, "'stream_options' must be an object"); return -1; }
        if (srv_opt_bool(so, "include_usage", &tmp->include_usage, msg, MSG) < 0) return -1;
    }
    return 0;
}

/* allowed_tools {"mode": "auto" | "required", "tools": [...]}: SRV_TC_AUTO or
 * SRV_TC_REQUIRED, *list its tools (checked against the request's by allowed_subset), or -1
 * with a message. */
static int allowed_mode(const cJSON *at, const cJSON **list, char *msg) {
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(at, "mode");
    const char *m = cJSON_IsString(mode) ? mode->valuestring : "";
    const int tc = !strcmp(m, "auto") ? SRV_TC_AUTO : !strcmp(m, "required") ? SRV_TC_REQUIRED : -1;
    *list = cJSON_GetObjectItemCaseSensitive(at, "tools");
    if (!cJSON_IsObject(at)) {
        snprintf(msg, MSG, "'tool_choice.allowed_tools' must be an object {\"mode\": \"auto\" | \"required\", "
                 "\"tools\": [...]}");
        return -1;
    }
    if (tc < 0) {
        snprintf(msg, MSG, "'tool_choice.allowed_tools.mode' must be \"auto\" or \"required\"");
        return -1;
    }
    if (!cJSON_IsArray(*list) || !(*list)->child) {
        snprintf(msg, MSG, "'tool_choice.allowed_tools.tools' must be a non-empty array");
        return -1;
    }
    return tc;
}

/* tool_choice: absent, "none", "auto", "required", {"type": "function", "function":
 * {"name": N}} or {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}. Returns
 * SRV_TC_* (*name set for a named choice, *allowed the list of allowed_tools), or -1 with a
 * message. */
static int tool_choice(const cJSON *c, const char **name, const cJSON **allowed, char *msg) {
    if (!c || cJSON_IsNull(c)) return SRV_TC_AUTO;
    if (cJSON_IsString(c)) {
        if (!strcmp(c->valuestring, "none")) return SRV_TC_NONE;
        if (!strcmp(c->valuestring, "auto")) return SRV_TC_AUTO;
        if (!strcmp(c->valuestring, "required")) return SRV_TC_REQUIRED;
    } else if (cJSON_IsObject(c)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(c, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "function") && cJSON_IsString(nm)) {
            *name = nm->valuestring;
            return SRV_TC_NAMED;
        }
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "allowed_tools"))
            return allowed_mode(cJSON_GetObjectItemCaseSensitive(c, "allowed_tools"), allowed, msg);
    }
    snprintf(msg, MSG, "'tool_choice' must be \"none\", \"auto\", \"required\", "
             "{\"type\": \"function\", \"function\": {\"name\": ...}} or {\"type\": \"allowed_tools\", "
             "\"allowed_tools\": {\"mode\": ..., \"tools\": [...]}}");
    return -1;
}

/* The tools allowed_tools' list names ({"type": "function", "function": {"name": N}} each),
 * copied in the order of tools, into *out (every tool too: the list still constrains the
 * calls to the tools' names, strict or not). 0, -1 with a message naming the entry at
 * fault, or -2 out of memory. */
static int allowed_subset(const cJSON *tools, const cJSON *list, cJSON **out, char *msg) {
    *out = NULL;
    if (!tools) {
        snprintf(msg, MSG, "'tool_choice.allowed_tools' lists tools the request does not give (no 'tools')");
        return -1;
    }
    const int n = cJSON_GetArraySize(tools);
    char *pick = calloc((size_t)n, 1);
    if (!pick) return -2;
    int k = 0, rc = 0;
    for (const cJSON *e = list->child; e && !rc; e = e->next, k++) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "function"), "name");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm)) {
            snprintf(msg, MSG, "'tool_choice.allowed_tools.tools[%d]' must be {\"type\": \"function\", "
                     "\"function\": {\"name\": ...}}", k);
            rc = -1;
            break;
        }
        int i = 0, found = 0;
        for (const cJSON *t = tools->child; t; t = t->next, i++) {
            const cJSON *tn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            if (cJSON_IsString(tn) && !strcmp(tn->valuestring, nm->valuestring)) {
                pick[i] = found = 1;
            }
        }
        if (!found) {
            snprintf(msg, MSG, "'tool_choice.allowed_tools.tools[%d]': '%.200s' is not one of the tools", k,
                     nm->valuestring);
            rc = -1;
        }
    }
    if (!rc) {
        int i = 0;
        *out = cJSON_CreateArray();
        for (const cJSON *t = tools->child; *out && t; t = t->next, i++) {
            cJSON *d = pick[i] ? cJSON_Duplicate(t, 1) : NULL;
            if (pick[i] && !cJSON_AddItemToArray(*out, d)) {
                cJSON_Delete(d);
                cJSON_Delete(*out);
                *out = NULL;
            }
        }
        if (!*out) rc = -2;
    }
    free(pick);
    return rc;
}

int srv_answer_constraint(srv_req *r, const cJSON *tools, const cJSON *allowed, int tc, const char *name, char *schema,
                          int thinking, int single, char *msg, size_t n) {
    int rc;
    if (schema && tools && tc == SRV_TC_AUTO) {
        rc = srv_callable_tools(r, allowed ? allowed : tools, DSV4_TOOLS_AUTO, schema, thinking, single, msg, n);
        schema = NULL;
    } else if (allowed) {
        rc = srv_callable_tools(r, allowed, tc == SRV_TC_REQUIRED ? DSV4_TOOLS_REQUIRED : DSV4_TOOLS_AUTO, NULL,
                                thinking, single, msg, n);
    } else if (tc == SRV_TC_REQUIRED && tools) {
        /* a call is required: its name one of the tools' (strict or not), a free tool's
         * arguments free */
        rc = srv_callable_tools(r, tools, DSV4_TOOLS_REQUIRED, NULL, thinking, single, msg, n);
    } else {
        rc = srv_strict_tools(r, tools, tc, name, thinking, single, msg, n);
    }
    /* a required or named call has no text for the format to constrain: the tools alone */
    if (!rc && schema && !tools) {
        srv_req_set_json(r, schema, thinking);
        schema = NULL;
    }
    free(schema);
    return rc;
}

/* A chat request's prompt as /v1/chat/completions renders it (messages, tools after
 * tool_choice, thinking, response_format shown to the model), shared with /tokenize so
 * that its count is the chat's usage.prompt_tokens. Returns 0, 400 (msg written) or 500. */
int srv_openai_chat_prompt(srv *s, const cJSON *j, srv_chat *c, char *msg) {
    dsv4_err err = {0};
    cJSON *fmsgs = NULL;   /* messages with the format shown to the model */
    int rc = 400;
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!cJSON_IsArray(messages) || !messages->child) {
        snprintf(msg, MSG, "'messages' must be a non-empty array");
        return 400;
    }
    for (const cJSON *m = messages->child; m; m = m->next)
        if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role"))) {
            snprintf(msg, MSG, "every message must be an object with a string 'role'");
            return 400;
        }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        snprintf(msg, MSG, "'tools' must be an array");
        return 400;
    }
    const cJSON *allowed = NULL;
    c->tc = tool_choice(cJSON_GetObjectItemCaseSensitive(j, "tool_choice"), &c->tc_name, &allowed, msg);
    if (c->tc < 0) return 400;
    if (!cJSON_IsArray(tools) || !tools->child || c->tc == SRV_TC_NONE) tools = NULL;
    c->tools = tools;
    /* allowed_tools: every tool stays in the prompt (as OpenAI keeps it, for the prompt
     * cache), the calls are restricted (srv_answer_constraint) */
    const int ac = allowed ? allowed_subset(tools, allowed, &c->allowed, msg) : 0;
    if (ac == -2) snprintf(msg, MSG, "out of memory");
    if (ac) return ac == -2 ? 500 : 400;
    if (srv_chat_thinking(j, &c->co, msg)) return 400;
    const cJSON *shown = NULL;
    /* with tools the answer is the document or a tool call (srv_answer_constraint) */
    c->json = srv_json_format(j, SRV_API_CHAT, &c->schema, &shown, msg, MSG);
    if (c->json < 0) return 400;
    if (c->json && !(fmsgs = srv_messages_with_format(messages, shown))) {
        snprintf(msg, MSG, "out of memory");
        return 500;
    }
    if (srv_chat_prompt(s, fmsgs ? fmsgs : messages, tools, &c->co, &c->ids, &err)) {
        snprintf(msg, MSG, "%s", err.msg);
        rc = err.code == DSV4_ERR_NOMEM ? 500 : 400;
    } else {
        rc = 0;
    }
    cJSON_Delete(fmsgs);
    return rc;
}

void srv_chat_free(srv_chat *c) {
    dsv4_tok_ids_free(&c->ids);
    free(c->schema);
    c->schema = NULL;
    cJSON_Delete(c->allowed);
    c->allowed = NULL;
}

/* A 400 in OpenAI's shape naming the field at fault (param; NULL: none). */
void oa_bad_field(srv_reply *out, const char *param, const char *msg) {
    out->status = 400;
    srv_buf_free(&out->body);
    srv_openai_error_code(&out->body, "invalid_request_error", param, NULL, msg);
}

/* srv_chat_submit_rendered of n choices (srv_submit_n). */
static srv_job *chat_submit_rendered(srv *s, const cJSON *j, srv_chat *c, int api, const char *body,
                                     int n_logprobs, int n, srv_reply *out) {
    char msg[MSG];
    srv_job *job = NULL;
    srv_req *r = srv_req_new(c->ids.ids, (int)c->ids.n);
    if (!r) { srv_reply_error(out, api, 500, "out of memory"); return NULL; }
    if (srv_parse_sampling(s, j, r, "stop", msg, MSG)) goto bad;
    if (srv_force_tool_call(s, r, c->allowed ? c->allowed : c->tools, c->tc, c->tc_name, c->co.thinking, msg, MSG))
        goto bad;
    int parallel = 1;
    if (srv_opt_bool(j, "parallel_tool_calls", &parallel, msg, MSG) < 0) goto bad;
    /* a guided JSON field beside tools is served as response_format is (the document or a
     * call): srv_guided gives its schema here instead of setting it */
    char *schema = NULL;
    const char *param = NULL;
    if (srv_guided(r, s->tok, j, c->json, c->tools ? &schema : NULL, c->co.thinking, &param, msg, MSG)) {
        if (api == SRV_API_CHAT) oa_bad_field(out, param, msg);
        else srv_reply_error(out, api, 400, msg);
        srv_req_release(r);
        srv_req_release(r);
        return NULL;
    }
    if (!schema) schema = c->schema;
    c->schema = NULL;
    if (srv_answer_constraint(r, c->tools, c->allowed, c->tc, c->tc_name, schema, c->co.thinking, !parallel, msg, MSG))
        goto bad;
    r->gp.sample.n_logprobs = n_logprobs;
    /* vLLM's prompt_logprobs (srv_openai_chat checked it): the prompt's tokens scored */
    const cJSON *pl = api == SRV_API_CHAT ? cJSON_GetObjectItemCaseSensitive(j, "prompt_logprobs") : NULL;
    if (cJSON_IsNumber(pl) && srv_req_want_plp(r, (int)pl->valuedouble)) {
        srv_reply_error(out, api, 500, "out of memory");
        srv_req_release(r);
        srv_req_release(r);
        return NULL;
    }
    job = srv_submit_n(s, r, n, api, body, out);
    if (job) {
        job->thinking = c->co.thinking;
        job->tools = c->tools != NULL;
        srv_split_init(&job->split, c->co.thinking, c->tools != NULL);
        oa_spread(job);
    }
    return job;
bad:
    srv_reply_error(out, api, 400, msg);
    srv_req_release(r);
    srv_req_release(r);
    return NULL;
}

srv_job *srv_chat_submit_rendered(srv *s, const cJSON *j, srv_chat *c, int api, const char *body,
                                  int n_logprobs, srv_reply *out) {
    return chat_submit_rendered(s, j, c, api, body, n_logprobs, 1, out);
}

srv_job *srv_chat_submit(srv *s, const cJSON *j, int api, const char *body, int n_logprobs, int n,
                         srv_reply *out) {
    char msg[MSG];
    srv_chat c = {0};
    srv_job *job = NULL;
    const int rc = srv_openai_chat_prompt(s, j, &c, msg);
    /* tool_choice's 400s name the part at fault (the quoted path that begins them) */
    char param[64];
    const int named = rc == 400 && api == SRV_API_CHAT && !strncmp(msg, "'tool_choice", 12);
    const size_t k = named ? strcspn(msg + 1, "'") : sizeof param;
    if (k < sizeof param) {
        memcpy(param, msg + 1, k);
        param[k] = 0;
        oa_bad_field(out, param, msg);
    } else if (rc) {
        srv_reply_error(out, api, rc == 500 ? 500 : 400, msg);
    } else {
        job = chat_submit_rendered(s, j, &c, api, body, n_logprobs, n, out);
    }
    srv_chat_free(&c);
    return job;
}

void srv_openai_chat(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    srv_job tmp = {0};
    cJSON *j = cJSON_ParseWithLength(body, len);
    double top = 0;
    int n = 1;
    const char *param = NULL;
    if (!cJSON_IsObject(j)) { snprintf(msg, MSG, "the request body is not a JSON object"); goto bad; }
    if (oa_common_fields(s, j, &tmp, &n, &param, msg)) goto bad;
    /* OpenAI's chat has no best_of (completions only): refused, not ignored */
    const cJSON *bo = cJSON_GetObjectItemCaseSensitive(j, "best_of");
    if (bo && !cJSON_IsNull(bo) && !(cJSON_IsNumber(bo) && bo->valuedouble == 1)) {
        param = "best_of";
        snprintf(msg, MSG, "'best_of' is not a chat completions field (use 'n', or best_of on "
                 "/v1/completions)");
        goto bad;
    }
    if (srv_opt_bool(j, "logprobs", &tmp.logprobs, msg, MSG) < 0) goto bad;
    if (srv_opt_num(j, "top_logprobs", 0, DSV4_MAX_LOGPROBS, &top, msg, MSG) < 0) goto bad;
    int plk = 0;
    param = "prompt_logprobs";
    if (oa_prompt_logprobs_field(s, j, tmp.stream, &plk, msg)) goto bad;
    param = NULL;
    srv_job *job = srv_chat_submit(s, j, SRV_API_CHAT, body, tmp.logprobs ? (int)top : 0, n, out);
    if (job) {
        job->prompt_lp = plk;
        job->stream = tmp.stream;
        job->include_usage = tmp.include_usage;
        job->logprobs = tmp.logprobs;
        oa_spread(job);
        out->stream = chat_stream;
        out->final = chat_final;
    }
    goto done;
bad:
    oa_bad_field(out, param, msg);
done:
    cJSON_Delete(j);
}
