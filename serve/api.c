/* api.c — what the OpenAI and Anthropic handlers share: sampling fields, chat prompts,
 * submission, errors (srv.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/srv.h"
#include "serve/util.h"

#define MAX_STOPS 16
#define MAX_STOP_IDS 64

long long srv_unix_time(void) { return (long long)time(NULL); }

int srv_opt_num(const cJSON *o, const char *key, double lo, double hi, double *v, char *msg,
                size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < lo ||
        x->valuedouble > hi) {
        snprintf(msg, n, "'%s' must be a number in [%g, %g]", key, lo, hi);
        return -1;
    }
    *v = x->valuedouble;
    return 1;
}

int srv_opt_bool(const cJSON *o, const char *key, int *v, char *msg, size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsBool(x)) {
        snprintf(msg, n, "'%s' must be a boolean", key);
        return -1;
    }
    *v = cJSON_IsTrue(x);
    return 1;
}

static int is_int(double x) { return x == floor(x); }

/* The range first: a cast of a double outside int32_t (1e20, NaN) is undefined. */
int srv_token_id(const srv *s, const cJSON *x, int32_t *id) {
    if (!cJSON_IsNumber(x)) return -1;
    const double v = x->valuedouble;
    if (!(v >= 0 && v < (double)s->V) || v != floor(v)) return -1;
    *id = (int32_t)v;
    return 0;
}

/* seeds for requests that give none, distinct per request */
static uint64_t next_seed(srv *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t z = (s->seed_state += 0x9e3779b97f4a7c15ull);
    pthread_mutex_unlock(&s->mu);
    return srv_splitmix64(z);
}

static int parse_stops(const cJSON *body, const char *key, srv_req *r, char *msg, size_t n) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(body, key);
    const char *list[MAX_STOPS];
    int k = 0;
    if (!st || cJSON_IsNull(st)) return 0;
    if (cJSON_IsString(st)) {
        list[k++] = st->valuestring;
    } else if (cJSON_IsArray(st)) {
        for (const cJSON *x = st->child; x; x = x->next) {
            if (!cJSON_IsString(x) || k == MAX_STOPS) {
                snprintf(msg, n, "'%s' must be a string or a list of at most %d strings", key,
                         MAX_STOPS);
                return -1;
            }
            list[k++] = x->valuestring;
        }
    } else {
        snprintf(msg, n, "'%s' must be a string or a list of strings", key);
        return -1;
    }
    int m = 0;  /* empty stop strings mean nothing */
    for (int i = 0; i < k; i++)
        if (*list[i]) list[m++] = list[i];
    if (srv_req_set_stops(r, list, m)) { snprintf(msg, n, "out of memory"); return -1; }
    return 0;
}

static int parse_bias(srv *s, const cJSON *body, srv_req *r, char *msg, size_t n) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(body, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb)) { snprintf(msg, n, "'logit_bias' must be an object"); return -1; }
    int cnt = cJSON_GetArraySize(lb);
    if (cnt > 1024) { snprintf(msg, n, "'logit_bias' has more than 1024 entries"); return -1; }
    int32_t *ids = malloc((size_t)(cnt + 1) * sizeof *ids);
    float *bias = malloc((size_t)(cnt + 1) * sizeof *bias);
    int k = 0, rc = -1;
    if (!ids || !bias) { snprintf(msg, n, "out of memory"); goto out; }
    for (const cJSON *x = lb->child; x; x = x->next) {
        char *end;
        long id = strtol(x->string, &end, 10);
        if (!*x->string || *end || id < 0 || id >= s->V) {
            snprintf(msg, n, "'logit_bias' key '%.40s' is not a token id in [0, %d)", x->string, s->V);
            goto out;
        }
        if (!cJSON_IsNumber(x) || x->valuedouble < -100 || x->valuedouble > 100) {
            snprintf(msg, n, "'logit_bias' values must be numbers in [-100, 100]");
            goto out;
        }
        ids[k] = (int32_t)id;
        bias[k++] = (float)x->valuedouble;
    }
    if (srv_req_set_bias(r, ids, bias, k)) { snprintf(msg, n, "out of memory"); goto out; }
    rc = 0;
out:
    free(ids);
    free(bias);
    return rc;
}

/* stop_token_ids: ids that end generation as EOS does (their text not shown); the model's
 * generation_config.json eos_token_id adds its ids but the model's EOS, unless the request
 * sets ignore_eos (vLLM's update_from_generation_config) */
static int parse_stop_ids(srv *s, const cJSON *body, srv_req *r, char *msg, size_t n) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(body, "stop_token_ids");
    int32_t ids[MAX_STOP_IDS + DSV4_GENCFG_MAX_EOS];
    int k = 0;
    if (st && !cJSON_IsNull(st)) {
        if (!cJSON_IsArray(st)) goto bad;
        for (const cJSON *x = st->child; x; x = x->next)
            if (k == MAX_STOP_IDS || srv_token_id(s, x, &ids[k++])) goto bad;
    }
    for (int i = 0; !r->gp.ignore_eos && i < s->gc.n_eos; i++) {
        const int32_t id = s->gc.eos_token_id[i];
        int dup = id == s->eos;
        for (int q = 0; q < k && !dup; q++) dup = ids[q] == id;
        if (!dup) ids[k++] = id;
    }
    if (srv_req_set_stop_ids(r, ids, k)) { snprintf(msg, n, "out of memory"); return -1; }
    return 0;
bad:
    snprintf(msg, n, "'stop_token_ids' must be a list of at most %d token ids in [0, %d)", MAX_STOP_IDS, s->V);
    return -1;
}

/* The fields benchmark clients send (vLLM's SamplingParams: benchmark_serving, genai-perf,
 * SGLang's bench): ignore_eos, min_tokens, stop_token_ids, include_stop_str_in_output,
 * skip_special_tokens (absent: special tokens' text is shown, as before; true hides it). */
static int parse_bench(srv *s, const cJSON *body, srv_req *r, char *msg, size_t n) {
    int k, b;
    double x;
    if ((k = srv_opt_bool(body, "ignore_eos", &b, msg, n)) < 0) return -1;
    if (k) r->gp.ignore_eos = b;
    if ((k = srv_opt_bool(body, "include_stop_str_in_output", &b, msg, n)) < 0) return -1;
    if (k) r->gp.include_stop_str = b;
    if ((k = srv_opt_bool(body, "skip_special_tokens", &b, msg, n)) < 0) return -1;
    if (k) r->gp.skip_special = b;
    if ((k = srv_opt_num(body, "min_tokens", 0, (double)s->o.max_context, &x, msg, n)) < 0) return -1;
    if (k && !is_int(x)) { snprintf(msg, n, "'min_tokens' must be an integer"); return -1; }
    if (k && r->gp.max_tokens > 0 && x > r->gp.max_tokens) {
        snprintf(msg, n, "'min_tokens' (%d) must be at most the maximum number of tokens (%d)", (int)x, r->gp.max_tokens);
        return -1;
    }
    if (k) r->gp.min_tokens = (int)x;
    return parse_stop_ids(s, body, r, msg, n);
}

/* `priority` (vLLM's: an integer, lower is admitted first, default 0): only with
 * --scheduling-policy priority; first come, first served refuses any other value, as vLLM
 * does, rather than ignore what the client asked for. */
static int parse_priority(const srv *s, const cJSON *body, srv_req *r, char *msg, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "priority");
    if (!v || cJSON_IsNull(v)) return 0;
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    /* the bounds exactly (srv_opt_num's %g would round them): any int32 */
    if (!isfinite(x) || !is_int(x) || x < (double)INT32_MIN || x > (double)INT32_MAX) {
        snprintf(msg, n, "'priority' must be an integer in [%d, %d]", INT32_MIN, INT32_MAX);
        return -1;
    }
    if (x != 0 && !s->o.priority_sched) {
        snprintf(msg, n, "'priority' is %.0f but this server schedules first come, first served: "
                 "only 0 is accepted (start it with --scheduling-policy priority)", x);
        return -1;
    }
    r->priority = (int)x;
    return 0;
}

/* k = 0 (the request omits a field): the model's default (*x) when its generation config
 * gives one (bit), then 1; else k. */
static int or_model(int k, const dsv4_gen_config *gc, unsigned bit, double v, double *x) {
    if (k || !(gc->has & bit)) return k;
    *x = v;
    return 1;
}

int srv_parse_sampling(srv *s, const cJSON *body, srv_req *r, const char *stop_key, char *msg,
                       size_t n) {
    dsv4_sample_params *p = &r->gp.sample;
    double x;
    int k;
    if (parse_priority(s, body, r, msg, n)) return -1;
    /* a field the request omits (or sends as null) takes the model's generation_config.json
     * value when the server applies it (vLLM's --generation-config auto), else the OpenAI
     * and Anthropic default */
    const dsv4_gen_config *gc = &s->gc;
    p->temperature = 1.0f;
    if ((k = srv_opt_num(body, "temperature", 0, 2, &x, msg, n)) < 0) return -1;
    k = or_model(k, gc, DSV4_GENCFG_TEMPERATURE, gc->temperature, &x);
    if (k) p->temperature = (float)x;
    if ((k = srv_opt_num(body, "top_p", 0, 1, &x, msg, n)) < 0) return -1;
    if (k && x <= 0) { snprintf(msg, n, "'top_p' must be in (0, 1]"); return -1; }
    k = or_model(k, gc, DSV4_GENCFG_TOP_P, gc->top_p, &x);
    if (k) p->top_p = x >= 1 ? 0.0f : (float)x;
    if ((k = srv_opt_num(body, "top_k", -1, 1e9, &x, msg, n)) < 0) return -1;
    if (k && !is_int(x)) { snprintf(msg, n, "'top_k' must be an integer"); return -1; }
    k = or_model(k, gc, DSV4_GENCFG_TOP_K, gc->top_k, &x);
    if (k) p->top_k = x < 0 ? 0 : (int)x;  /* -1: off (vLLM's convention) */
    if ((k = srv_opt_num(body, "min_p", 0, 1, &x, msg, n)) < 0) return -1;
    k = or_model(k, gc, DSV4_GENCFG_MIN_P, gc->min_p, &x);
    if (k) p->min_p = (float)x;
    if ((k = srv_opt_num(body, "presence_penalty", -2, 2, &x, msg, n)) < 0) return -1;
    if (k) p->presence_penalty = (float)x;
    if ((k = srv_opt_num(body, "frequency_penalty", -2, 2, &x, msg, n)) < 0) return -1;
    if (k) p->frequency_penalty = (float)x;
    if ((k = srv_opt_num(body, "repetition_penalty", 0, 10, &x, msg, n)) < 0) return -1;
    if (k && x <= 0) { snprintf(msg, n, "'repetition_penalty' must be > 0"); return -1; }
    k = or_model(k, gc, DSV4_GENCFG_REPETITION_PENALTY, gc->repetition_penalty, &x);
    if (k) p->repetition_penalty = (float)x;
    if ((k = srv_opt_num(body, "seed", -9.2e18, 1.8e19, &x, msg, n)) < 0) return -1;
    if (k && !is_int(x)) { snprintf(msg, n, "'seed' must be an integer"); return -1; }
    p->seed = k ? (x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x) : next_seed(s);
    const char *mt = "max_tokens";
    if ((k = srv_opt_num(body, mt, 1, (double)s->o.max_context, &x, msg, n)) == 0) {
        mt = "max_completion_tokens";
        k = srv_opt_num(body, mt, 1, (double)s->o.max_context, &x, msg, n);
    }
    if (k < 0) return -1;
    if (k && !is_int(x)) { snprintf(msg, n, "'%s' must be an integer", mt); return -1; }
    r->gp.max_tokens = k ? (int)x : 0;  /* 0: until a stop or the context is full */
    /* the model's max_new_tokens is a cap, as vLLM applies it: the least of the request's
     * and the file's */
    if ((gc->has & DSV4_GENCFG_MAX_NEW_TOKENS) && (!k || gc->max_new_tokens < r->gp.max_tokens))
        r->gp.max_tokens = gc->max_new_tokens;
    if (parse_stops(body, stop_key, r, msg, n) || parse_bench(s, body, r, msg, n)) return -1;
    return parse_bias(s, body, r, msg, n);
}

int srv_chat_prompt(srv *s, const cJSON *messages, const cJSON *tools, const dsv4_chat_opts *co,
                    dsv4_tok_ids *ids, dsv4_err *err) {
    return dsv4_chat_encode_ids(messages, tools, co, s->tok, ids, err);
}

void srv_reply_error(srv_reply *out, int api, int status, const char *msg) {
    out->status = status;
    srv_buf_free(&out->body);
    if (api == SRV_API_MESSAGES) srv_anthropic_error(&out->body, status, msg);
    else srv_openai_error(&out->body, status, msg);
}

static void json_string(srv_buf *b, const char *s) { srv_buf_json_str(b, s, strlen(s)); }

void srv_openai_error(srv_buf *b, int status, const char *msg) {
    const char *type = status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status >= 500 ? "server_error" : "invalid_request_error";
    srv_openai_error_code(b, type, NULL, NULL, msg);
}

void srv_openai_error_code(srv_buf *b, const char *type, const char *param, const char *code,
                           const char *msg) {
    srv_buf_puts(b, "{\"error\":{\"message\":");
    json_string(b, msg);
    srv_buf_printf(b, ",\"type\":\"%s\",\"param\":", type);
    if (param) srv_buf_printf(b, "\"%s\"", param);
    else srv_buf_puts(b, "null");
    srv_buf_puts(b, ",\"code\":");
    if (code) srv_buf_printf(b, "\"%s\"}}", code);
    else srv_buf_puts(b, "null}}");
}

void srv_anthropic_error(srv_buf *b, int status, const char *msg) {
    const char *type = status == 401 ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large"
                       : status == 503 ? "overloaded_error"
                       : status >= 500 ? "api_error" : "invalid_request_error";
    srv_buf_printf(b, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", type);
    json_string(b, msg);
    srv_buf_puts(b, "}}");
}

int srv_force_tool_call(srv *s, srv_req *r, const cJSON *tools, int mode, const char *name,
                        int thinking, char *msg, size_t n) {
    if (mode != SRV_TC_REQUIRED && mode != SRV_TC_NAMED) return 0;
    if (!cJSON_IsArray(tools) || !tools->child) {
        snprintf(msg, n, "tool_choice demands a tool call but no tools are given");
        return -1;
    }
    if (mode == SRV_TC_NAMED) {
        int found = 0;
        for (const cJSON *t = tools->child; t && !found; t = t->next) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
            found = cJSON_IsString(nm) && !strcmp(nm->valuestring, name);
        }
        if (!found || strchr(name, '"') || strchr(name, '\n')) {
            snprintf(msg, n, "tool_choice names '%.200s', which is not one of the tools", name);
            return -1;
        }
    }
    srv_buf b = {0};
    if (thinking) srv_buf_puts(&b, "</think>");
    srv_buf_puts(&b, "\n\n<" DSV4_DSML "tool_calls>\n<" DSV4_DSML "invoke name=\"");
    if (mode == SRV_TC_NAMED) srv_buf_printf(&b, "%s\">\n", name);
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    const int oom = b.oom;
    const int rc = oom ? -1 : dsv4_tokenize(s->tok, b.s, b.n, &ids, &err);
    srv_buf_free(&b);
    if (rc) {
        snprintf(msg, n, "cannot encode the tool call opening: %s", oom ? "out of memory" : err.msg);
        return -1;
    }
    free(r->prefix);
    r->prefix = ids.ids;
    r->n_prefix = (int)ids.n;
    return 0;
}

srv_job *srv_submit(srv *s, srv_req *r, int api, const char *body, srv_reply *out) {
    return srv_submit_n(s, r, 1, api, body, out);
}

/* The job's other requests: choice k = p n + c (prompt p of n_prompts, its choice c) is
 * rs[p] for c = 0, else a clone of rs[p] seeded with its seed + c whose lead is rs[p];
 * those of prompts p > 0 have waiter rs[0] (job->r). The slots are all filled (rs[p] taken)
 * before any clone is made, so a failure leaves every request in the job. 0 or -1. */
static int add_choices(srv_job *j, srv_req *const *rs, int n_prompts, int n) {
    const int total = n_prompts * n;
    if (total <= 1) return 0;
    if (!(j->more = calloc((size_t)total - 1, sizeof *j->more))) return -1;
    j->n_more = total - 1;
    for (int k = 1; k < total; k++) {
        srv_job *c = &j->more[k - 1];
        *c = *j;
        c->more = NULL;
        c->n_more = 0;
        c->index = k;
        c->r = k % n ? NULL : rs[k / n];
    }
    for (int k = 1; k < total; k++) {
        srv_job *c = &j->more[k - 1];
        srv_req *r = rs[k / n];
        if (k % n) {
            if (!(c->r = srv_req_clone(r))) return -1;
            c->r->gp.sample.seed = r->gp.sample.seed + (uint64_t)(k % n);
            atomic_fetch_add(&r->refs, 1);
            c->r->lead = r;
        }
        if (k >= n) {
            atomic_fetch_add(&j->r->refs, 1);
            c->r->waiter = j->r;
        }
    }
    return 0;
}

/* Refuses (400 in out) a prompt the model cannot take: an id outside its vocabulary (a
 * tokenizer larger than the model's head can make ids the engine would refuse in the
 * middle of a batched step, failing every request of that step), or no room to generate.
 * which: the prompt's place in a list, -1 alone. */
static int prompt_fits(srv *s, const srv_req *r, int which, int api, srv_reply *out) {
    char msg[240], at[32] = "";
    if (which >= 0) snprintf(at, sizeof at, "prompt %d: ", which);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->V) {
            snprintf(msg, sizeof msg, "%sthe prompt's token %d (id %d) is outside this model's "
                     "vocabulary of %d ids", at, i, (int)r->prompt[i], s->V);
            srv_reply_error(out, api, 400, msg);
            return 0;
        }
    if (r->n_prompt >= s->o.max_context) {
        snprintf(msg, sizeof msg, "%sthe prompt has %d tokens and max_context is %lld: no room to "
                 "generate", at, r->n_prompt, (long long)s->o.max_context);
        srv_reply_error(out, api, 400, msg);
        return 0;
    }
    return 1;
}

srv_job *srv_submit_n(srv *s, srv_req *r, int n, int api, const char *body, srv_reply *out) {
    return srv_submit_list(s, &r, 1, n, api, body, out);
}

srv_job *srv_submit_list(srv *s, srv_req *const *rs, int n_prompts, int n, int api, const char *body,
                         srv_reply *out) {
    srv_req *r = rs[0];
    srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        for (int p = 0; p < n_prompts; p++) {
            srv_req_release(rs[p]);
            srv_req_release(rs[p]);
        }
        srv_reply_error(out, api, 500, "out of memory");
        return NULL;
    }
    j->api = api;
    j->r = r;
    j->block = -1;
    j->tool_block = -1;
    j->created = srv_unix_time();
    j->n_prompts = n_prompts;
    pthread_mutex_lock(&s->mu);
    unsigned long long no = ++s->n_jobs;
    pthread_mutex_unlock(&s->mu);
    if (api == SRV_API_RESPONSES) {
        /* a stored response is found by its id: unique across restarts and not the next
         * number (splitmix64 of the server's random salt and the number) */
        const uint64_t z = srv_splitmix64(s->id_salt + no * 0x9e3779b97f4a7c15ull);
        snprintf(j->id, sizeof j->id, "resp_%016llx%llu", (unsigned long long)z, no);
    } else {
        snprintf(j->id, sizeof j->id, "%s%llu",
                 api == SRV_API_CHAT ? "chatcmpl-" : api == SRV_API_COMPLETION ? "cmpl-" : "msg_", no);
    }
    const dsv4_server_script *sc = s->o.script;
    for (int p = 0; p < n_prompts; p++)
        for (int i = 0; sc && i < sc->n; i++)
            if (strstr(body, sc->match[i])) {
                rs[p]->forced = s->script_ids[i];
                rs[p]->n_forced = s->script_len[i];
                rs[p]->forced_error = sc->error ? sc->error[i] : NULL;
                break;
            }
    int fits = 1;
    for (int p = 0; p < n_prompts && fits; p++) fits = prompt_fits(s, rs[p], n_prompts > 1 ? p : -1, api, out);
    /* the prompts' requests are the job's from here on (freed with it) */
    if (!fits || add_choices(j, rs, n_prompts, n)) {
        /* refused, or no room for the slots: prompts 1.. were never placed */
        for (int p = 1; !j->n_more && p < n_prompts; p++) {
            srv_req_release(rs[p]);
            srv_req_release(rs[p]);
        }
        if (fits) srv_reply_error(out, api, 500, "out of memory");
        goto fail;
    }
    srv_req *one[1] = {r}, **reqs = j->n_more ? malloc((size_t)(1 + j->n_more) * sizeof *reqs) : one;
    if (!reqs) {
        srv_reply_error(out, api, 500, "out of memory");
        goto fail;
    }
    reqs[0] = r;
    for (int i = 0; i < j->n_more; i++) reqs[i + 1] = j->more[i].r;
    dsv4_err err = {0};
    int rc = srv_sched_submit_n(s->sched, reqs, 1 + j->n_more, &err);
    if (reqs != one) free(reqs);
    if (rc) {
        srv_reply_error(out, api, rc == DSV4_ERR_ARG ? 400 : 503, err.msg);
        goto fail;
    }
    out->job = j;
    return j;
fail:
    /* the scheduler's references, never handed over */
    srv_req_release(r);
    for (int i = 0; i < j->n_more; i++) srv_req_release(j->more[i].r);
    srv_job_free(j);
    return NULL;
}

int srv_job_ended(const srv_job *j) {
    if (!j->r->end) return 0;
    for (int i = 0; i < j->n_more; i++) {
        srv_req *r = j->more[i].r;
        pthread_mutex_lock(&r->mu);
        const int end = r->end;
        pthread_mutex_unlock(&r->mu);
        if (!end) return 0;
    }
    return 1;
}

static void job_parts_free(srv_job *j) {
    srv_req_release(j->r);
    srv_tool_stream_free(&j->calls);
    free(j->echo);  /* a list's prompts: each prompt's choice 0 holds its echo */
}

void srv_job_free(srv_job *j) {
    if (!j) return;
    job_parts_free(j);
    for (int i = 0; i < j->n_more; i++) job_parts_free(&j->more[i]);
    free(j->more);
    srv_resp_free(j->resp);
    free(j);
}

void srv_token_text(const srv *s, int32_t id, srv_buf *b) {
    size_t n = 0;
    const char *t = dsv4_tok_id_bytes(s->tok, id, &n);
    if (t) srv_buf_put_utf8(b, t, n);
}
