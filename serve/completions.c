/* completions.c — POST /v1/completions: OpenAI's legacy completions (a prompt or a list of
 * prompts, as text or token ids; echo, logprobs with text_offset, vLLM's prompt_logprobs,
 * best_of), answered as one JSON body or SSE chunks ending with [DONE]. The choices' plumbing
 * it shares with chat completions is openai.c's (openai_int.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai_int.h"
#include "serve/srv.h"

#define MSG 1200

/* A token as completions' logprobs name it: its text, or with vLLM's
 * return_tokens_as_token_ids "token_id:ID" (tokens whose text is not valid UTF-8 alone, or
 * that share a text, stay apart). */
static void lp_token(const srv *s, const srv_job *lead, int32_t id, srv_buf *b) {
    if (lead->token_ids) srv_buf_printf(b, "token_id:%d", (int)id);
    else srv_token_text(s, id, b);
}

static cJSON *lp_token_json(const srv *s, const srv_job *lead, int32_t id) {
    srv_buf b = {0};
    lp_token(s, lead, id, &b);
    cJSON *j = cJSON_CreateString(b.s ? b.s : "");
    srv_buf_free(&b);
    return j;
}

/* A token's top_logprobs entry: {token: logprob} of the best ones (a text that two tokens
 * share: the better one's). */
static cJSON *top_dict(const srv *s, const srv_job *lead, const dsv4_sample_out *o, int n) {
    cJSON *t = cJSON_CreateObject();
    for (int k = 0; k < o->n_top && k < n; k++) {
        srv_buf b = {0};
        lp_token(s, lead, o->top_ids[k], &b);
        if (!cJSON_GetObjectItemCaseSensitive(t, b.s ? b.s : ""))
            cJSON_AddItemToObject(t, b.s ? b.s : "", oa_lp_num(o->top_logprobs[k]));
        srv_buf_free(&b);
    }
    return t;
}

/* The characters (code points) in n bytes of UTF-8: the bytes that begin one. text_offset
 * counts characters, as OpenAI's and vLLM's do. */
static size_t utf8_chars(const char *t, size_t n) {
    size_t c = 0;
    for (size_t i = 0; t && i < n; i++) c += ((unsigned char)t[i] & 0xC0) != 0x80;
    return c;
}

/* The characters prompt token i adds to the echoed text (none for the BOS the server put
 * before a text prompt): those its bytes begin (a character split over two tokens counts in
 * the first; the bytes of a token-id prompt that are not UTF-8 are repaired in the text,
 * one U+FFFD where this counts the bytes that begin characters). */
static size_t echo_chars(const srv *s, const srv_job *lead, int i) {
    size_t n = 0;
    if (i == 0 && lead->echo_bos) return 0;
    const char *t = dsv4_tok_id_bytes(s->tok, lead->r->prompt[i], &n);
    return utf8_chars(t, n);
}

/* The prompt's entries of an echo's logprobs (choice 0's request scored them: every choice
 * has the same prompt): the first token's logprob and top_logprobs null (nothing before it
 * to predict it), each text_offset where the token's text begins in the echoed text. */
static void prompt_entries(srv *s, const srv_job *lead, cJSON *toks, cJSON *tlp, cJSON *top, cJSON *off) {
    const srv_req *r = lead->r;
    size_t at = 0;
    for (int i = 0; i < r->n_prompt; i++) {
        cJSON_AddItemToArray(toks, lp_token_json(s, lead, r->prompt[i]));
        const int known = i > 0 && r->plp;
        cJSON_AddItemToArray(tlp, known ? oa_lp_num(r->plp[i].logprob) : cJSON_CreateNull());
        cJSON_AddItemToArray(top, known ? top_dict(s, lead, &r->plp[i], r->gp.sample.n_logprobs) : cJSON_CreateNull());
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        at += echo_chars(s, lead, i);
    }
}

/* logprobs of the sampled tokens [from, to) of r, after the prompt's when lead echoes it. */
static cJSON *completion_logprobs(srv *s, const srv_job *lead, const srv_req *r, int from, int to) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(lp, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(lp, "text_offset");
    if (lead->echo) prompt_entries(s, lead, toks, tlp, top, off);
    /* in characters of the answer's text (the echo's, then r's text before token from) */
    size_t at = from < to ? utf8_chars(lead->echo, lead->echo_len) + utf8_chars(r->text, r->ev[from].text_off) : 0;
    for (int i = from; i < to; i++) {
        const srv_event *e = &r->ev[i];
        cJSON_AddItemToArray(toks, lp_token_json(s, lead, e->token));
        cJSON_AddItemToArray(tlp, oa_lp_num(e->sample.logprob));
        cJSON_AddItemToArray(top, top_dict(s, lead, &e->sample, e->sample.n_top));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        at += r->text ? utf8_chars(r->text + e->text_off, e->text_len) : 0;
    }
    return lp;
}

/* Choice j's entry; lead: choice 0's job (its echo: the text and logprobs begin with the
 * prompt's). */
static cJSON *completion_choice(srv *s, const srv_job *lead, srv_job *j, int index, const char *text, size_t n,
                                int from, int to, const char *finish) {
    cJSON *c = cJSON_CreateObject();
    if (lead->echo) {
        srv_buf b = {0};
        srv_buf_put(&b, lead->echo, lead->echo_len);
        srv_buf_put(&b, text, n);
        cJSON_AddItemToObject(c, "text", b.oom ? NULL : srv_json_str_n(b.s ? b.s : "", b.n));
        srv_buf_free(&b);
    } else {
        cJSON_AddItemToObject(c, "text", srv_json_str_n(text, n));
    }
    cJSON_AddNumberToObject(c, "index", index);
    if (j->logprobs) cJSON_AddItemToObject(c, "logprobs", completion_logprobs(s, lead, j->r, from, to));
    else cJSON_AddNullToObject(c, "logprobs");
    if (lead->prompt_lp) cJSON_AddItemToObject(c, "prompt_logprobs", oa_prompt_logprobs_json(s, lead->r, lead->prompt_lp - 1));
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

/* A choice's cumulative log-probability: its sampled tokens' logprobs summed (best_of). */
static double cumulative_logprob(const srv_req *r) {
    double sum = 0;
    for (int i = 0; i < r->n_ev; i++) sum += r->ev[i].sample.logprob;
    return sum;
}

/* The answer: every choice in index order, or with best_of (j->best_of choices generated)
 * the n of the highest cumulative log-probability, best first (ties: the lower index),
 * numbered 0..n-1 in that order; a list's prompt p answers choices p n .. p n + n - 1 so
 * (OpenAI's and vLLM's order), each prompt's choice 0 giving its echo. usage counts every
 * choice generated, as OpenAI's does. */
static void completion_final(srv *s, srv_job *j, srv_buf *out, int *status) {
    for (int k = 1; k <= j->n_more; k++) oa_choice_lock(j, k);
    if (!srv_final_error(j, out, status)) {
        const int per = oa_per_prompt(j), n = j->best_n ? j->best_n : per;
        cJSON *o = oa_head(s, j, "text_completion");
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        for (int p = 0; p < oa_prompts_of(j); p++) {
            int order[SRV_MAX_CHOICES];
            double score[SRV_MAX_CHOICES];
            for (int k = 0; k < per; k++) {
                score[k] = j->best_n ? cumulative_logprob(oa_choice(j, p * per + k)->r) : 0;
                int i = k;
                for (; i > 0 && score[order[i - 1]] < score[k]; i--) order[i] = order[i - 1];
                order[i] = k;
            }
            const srv_job *lead = oa_choice(j, p * per);
            for (int i = 0; i < n; i++) {
                srv_job *c = oa_choice(j, p * per + order[i]);
                const srv_req *r = c->r;
                cJSON_AddItemToArray(choices, completion_choice(s, lead, c, p * n + i, r->text ? r->text : "",
                                                                r->text_len, 0, r->n_ev, srv_finish_reason(r, 0)));
            }
        }
        for (int k = j->n_more; k >= 1; k--) oa_choice_unlock(j, k);
        cJSON_AddItemToObject(o, "usage", oa_usage_json(j));
        *status = 200;
        srv_put_json(out, o);
        return;
    }
    for (int k = j->n_more; k >= 1; k--) oa_choice_unlock(j, k);
}

static void completion_stream_one(srv *s, srv_job *j, srv_buf *out) {
    srv_req *r = j->r;
    for (; j->ev_sent < r->n_ev; j->ev_sent++) {
        const srv_event *e = &r->ev[j->ev_sent];
        cJSON *o = oa_head(s, j, "text_completion");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"),
                             completion_choice(s, j, j, j->index, r->text + e->text_off, e->text_len,
                                               j->ev_sent, j->ev_sent + 1, NULL));
        srv_sse(out, NULL, o);
        j->began = 1;
    }
    /* an error is the group's (stream_choices) */
    if (r->end != SRV_END_FINISHED && r->end != SRV_END_CANCELLED) return;
    cJSON *o = oa_head(s, j, "text_completion");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"),
                         completion_choice(s, j, j, j->index, "", 0, 0, 0, srv_finish_reason(r, 0)));
    srv_sse(out, NULL, o);
    j->done = 1;
}

static void completion_stream(srv *s, srv_job *j, srv_buf *out, int *finished) {
    oa_stream_choices(s, j, out, finished, "text_completion", completion_stream_one);
}

/* One prompt p: a string (BOS + its tokens; a raw prompt, so special-token strings in it
 * are control tokens, as in `dsv4 generate` without --chat) or token ids (used as given).
 * Chat messages are the place for untrusted text. which: its place in a list (named in the
 * errors), -1 alone. */
static int completion_prompt(srv *s, const cJSON *p, int which, dsv4_tok_ids *ids, int *is_text, char *msg) {
    char at[32] = "prompt";
    if (which >= 0) snprintf(at, sizeof at, "prompt[%d]", which);
    *is_text = cJSON_IsString(p);
    if (cJSON_IsString(p)) {
        dsv4_err err = {0};
        int32_t bos = s->bos;
        ids->ids = malloc(16 * sizeof *ids->ids);
        if (!ids->ids) { snprintf(msg, MSG, "out of memory"); return -1; }
        ids->cap = 16;
        ids->ids[ids->n++] = bos;
        if (dsv4_tokenize(s->tok, p->valuestring, strlen(p->valuestring), ids, &err)) {
            snprintf(msg, MSG, "%s: %s", at, err.msg);
            return -1;
        }
        return 0;
    }
    if (cJSON_IsArray(p) && p->child && !cJSON_IsArray(p->child) && !cJSON_IsString(p->child)) {
        int n = cJSON_GetArraySize(p), k = 0;
        if (!(ids->ids = malloc((size_t)n * sizeof *ids->ids))) {
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
        ids->cap = (size_t)n;
        for (const cJSON *x = p->child; x; x = x->next, k++) {
            if (srv_token_id(s, x, &ids->ids[ids->n])) {
                snprintf(msg, MSG, "%s[%d] is not a token id in [0, %d)", at, k, s->V);
                return -1;
            }
            ids->n++;
        }
        return 0;
    }
    if (which >= 0) snprintf(msg, MSG, "'%s' must be a non-empty string or a non-empty list of token ids", at);
    else snprintf(msg, MSG, "'prompt' must be a non-empty string, a non-empty list of token ids, or a list of those");
    return -1;
}

/* The prompts of completions' prompt field: a list of strings or of token-id lists holds
 * several (*list: its first), anything else is one (itself). The count, or -1 (msg): the
 * server takes at most --max-seqs + 64 prompts x choices (per) a request (and no more than
 * --max-queue), all queued at once: each holds its generation's V-sized scratch (~2 MB at
 * Flash's vocabulary) from its submission on. */
static int completion_prompts(const srv *s, const cJSON *p, int per, const cJSON **list, char *msg) {
    *list = p;
    if (!cJSON_IsArray(p) || !p->child || (!cJSON_IsString(p->child) && !cJSON_IsArray(p->child))) return 1;
    const int n = cJSON_GetArraySize(p);
    const int cap = s->o.max_seqs + 64 < s->o.max_queue ? s->o.max_seqs + 64 : s->o.max_queue;
    *list = p->child;
    if (n > 1 && (int64_t)n * per > cap) {
        snprintf(msg, MSG, "'prompt' holds %d prompts x %d choices: a request takes at most %d (the server's "
                 "--max-seqs + 64, at most --max-queue; each is a sequence)", n, per, cap);
        return -1;
    }
    return n;
}

/* echo (OpenAI's legacy completions, vLLM's): the answer's text begins with the prompt's,
 * and with logprobs, its logprobs with the prompt tokens' (scored as they run). Not
 * streamed (a clear 400: the prompt's entries would be one chunk ahead of the rest), nor
 * under data-parallel attention (the LM head is sharded over the group there). max_tokens
 * 0 answers the prompt alone, finish_reason "length" (one choice: n and best_of 1); the
 * field is taken off the body then (its range for generation starts at 1). */
static int echo_fields(const srv *s, cJSON *j, const srv_job *tmp, int n, int best_of, double lp, int *prompt_only,
                       const char **param, char *msg) {
    *param = "echo";
    if (tmp->stream) {
        snprintf(msg, MSG, "'echo' cannot be streamed (ask with stream false)");
        return -1;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
    *prompt_only = cJSON_IsNumber(mt) && mt->valuedouble == 0;
    if ((lp >= 0 || *prompt_only) && (s->o.parallel & DSV4_PAR_DP)) {
        snprintf(msg, MSG, "'echo' with 'logprobs' or max_tokens 0 is not served under data-parallel attention");
        return -1;
    }
    if (*prompt_only && (n > 1 || best_of > 1)) {
        *param = "max_tokens";
        snprintf(msg, MSG, "max_tokens 0 (the prompt alone) takes one choice ('n' and 'best_of' 1)");
        return -1;
    }
    if (*prompt_only) cJSON_DeleteItemFromObjectCaseSensitive(j, "max_tokens");
    *param = NULL;
    return 0;
}

/* The echoed text of a prompt (its tokens' bytes, the BOS put before a text prompt left
 * out) into *echo (owned, NUL-terminated) and *len: 0, or -1 out of memory. */
static int echo_text(const srv *s, const dsv4_tok_ids *ids, int is_text, char **echo, size_t *len) {
    srv_buf raw = {0}, b = {0};
    for (size_t i = is_text ? 1 : 0; i < ids->n; i++) {
        size_t k = 0;
        const char *t = dsv4_tok_id_bytes(s->tok, ids->ids[i], &k);
        if (t) srv_buf_put(&raw, t, k);
    }
    srv_buf_put_utf8(&b, raw.s ? raw.s : "", raw.n);
    const int oom = raw.oom || b.oom;
    srv_buf_free(&raw);
    *len = b.n;
    *echo = oom ? NULL : b.s ? b.s : calloc(1, 1);
    if (!*echo) srv_buf_free(&b);
    return *echo ? 0 : -1;
}

/* A completions request's prompts (n_prompts, each its ids, whether text, its echo). */
typedef struct {
    int n;
    dsv4_tok_ids *ids;
    int *is_text;
    char **echo;
    size_t *echo_len;
    srv_req **r;
} completion_list;

static void completion_list_free(completion_list *l) {
    for (int p = 0; p < l->n; p++) {
        if (l->ids) dsv4_tok_ids_free(&l->ids[p]);
        if (l->echo) free(l->echo[p]);
        if (l->r && l->r[p]) { srv_req_release(l->r[p]); srv_req_release(l->r[p]); }
    }
    free(l->ids);
    free(l->is_text);
    free(l->echo);
    free(l->echo_len);
    free(l->r);
}

/* Prompt p's request: prompt 0's made from the body's fields (the caller's), the others
 * its clones with their own prompt; each scores its prompt for an echo with logprobs. 0, or
 * -1 out of memory. */
static int completion_more(const srv *s, completion_list *l, int echo, int plp_top, int prompt_only) {
    for (int p = 0; p < l->n; p++) {
        if (p && !(l->r[p] = srv_req_clone_prompt(l->r[0], l->ids[p].ids, (int)l->ids[p].n))) return -1;
        l->r[p]->prompt_only = prompt_only;
        if (echo && echo_text(s, &l->ids[p], l->is_text[p], &l->echo[p], &l->echo_len[p])) return -1;
        /* echo with logprobs, prompt_logprobs: the prompt's tokens scored too (the
         * scheduler's prompt rows), the best plp_top of each */
        if (plp_top >= 0 && srv_req_want_plp(l->r[p], plp_top)) return -1;
    }
    return 0;
}

void srv_openai_completion(srv *s, const char *body, size_t len, srv_reply *out) {
    char msg[MSG];
    srv_job tmp = {0};
    completion_list l = {0};
    char *schema = NULL;
    const cJSON *shown = NULL;
    double lp = -1;
    int n = 1, best_of = 0;
    const char *param = NULL;
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) { snprintf(msg, MSG, "the request body is not a JSON object"); goto bad; }
    if (oa_common_fields(s, j, &tmp, &n, &param, msg)) goto bad;
    /* best_of: that many choices generated, the n of the highest cumulative log-probability
     * answered (OpenAI's; not with stream, at least n) */
    const cJSON *bo = cJSON_GetObjectItemCaseSensitive(j, "best_of");
    if (bo && !cJSON_IsNull(bo)) {
        param = "best_of";
        if (oa_choices_field(s, j, "best_of", &best_of, msg)) goto bad;
        if (best_of < n) {
            snprintf(msg, MSG, "'best_of' (%d) must be at least 'n' (%d)", best_of, n);
            goto bad;
        }
        if (best_of > 1 && tmp.stream) {
            snprintf(msg, MSG, "'best_of' > 1 cannot be streamed (the best choices are known at the end)");
            goto bad;
        }
        param = NULL;
    }
    const int per = best_of > n ? best_of : n;
    int echo = 0, prompt_only = 0;
    if (srv_opt_bool(j, "echo", &echo, msg, MSG) < 0) goto bad;
    if (srv_opt_num(j, "logprobs", 0, DSV4_MAX_LOGPROBS, &lp, msg, MSG) < 0) goto bad;
    if (echo && echo_fields(s, j, &tmp, n, best_of, lp, &prompt_only, &param, msg)) goto bad;
    int token_ids = 0, plk = 0;
    if (srv_opt_bool(j, "return_tokens_as_token_ids", &token_ids, msg, MSG) < 0) goto bad;
    param = "prompt_logprobs";
    if (oa_prompt_logprobs_field(s, j, tmp.stream, &plk, msg)) goto bad;
    param = NULL;
    /* not in OpenAI's completions API: the chat field, accepted here too (a raw prompt:
     * nothing is added to it, the prompt should ask for the JSON itself) */
    const int json = srv_json_format(j, SRV_API_COMPLETION, &schema, &shown, msg, MSG);
    if (json < 0) goto bad;
    const cJSON *item;
    param = "prompt";
    if ((l.n = completion_prompts(s, cJSON_GetObjectItemCaseSensitive(j, "prompt"), per, &item, msg)) < 0) {
        l.n = 0;
        goto bad;
    }
    l.ids = calloc((size_t)l.n, sizeof *l.ids);
    l.is_text = calloc((size_t)l.n, sizeof *l.is_text);
    l.echo = calloc((size_t)l.n, sizeof *l.echo);
    l.echo_len = calloc((size_t)l.n, sizeof *l.echo_len);
    l.r = calloc((size_t)l.n, sizeof *l.r);
    if (!l.ids || !l.is_text || !l.echo || !l.echo_len || !l.r) goto oom;
    for (int p = 0; p < l.n; p++, item = item->next)
        if (completion_prompt(s, item, l.n > 1 ? p : -1, &l.ids[p], &l.is_text[p], msg)) goto bad;
    param = NULL;
    srv_req *r = l.r[0] = srv_req_new(l.ids[0].ids, (int)l.ids[0].n);
    if (!r) goto oom;
    if (srv_parse_sampling(s, j, r, "stop", msg, MSG)) goto bad;
    if (json) srv_req_set_json(r, schema, 0);
    schema = NULL;
    const char *gparam = NULL;
    if (srv_guided(r, s->tok, j, json, NULL, 0, &gparam, msg, MSG)) {
        param = gparam;
        goto bad;
    }
    r->gp.sample.n_logprobs = lp > 0 ? (int)lp : 0;
    /* the prompt's rows scored for echo's logprobs and prompt_logprobs: the best of both */
    const int plp_top = plk - 1 > (echo ? (int)lp : -1) ? plk - 1 : echo ? (int)lp : -1;
    if (completion_more(s, &l, echo, plp_top, prompt_only)) goto oom;
    srv_job *job = srv_submit_list(s, l.r, l.n, per, SRV_API_COMPLETION, body, out);
    for (int p = 0; p < l.n; p++) l.r[p] = NULL;  /* the job's (or freed) */
    if (job) {
        job->stream = tmp.stream;
        job->include_usage = tmp.include_usage;
        job->logprobs = lp >= 0;
        job->best_n = best_of > n ? n : 0;
        job->token_ids = token_ids;
        job->prompt_lp = plk;
        oa_spread(job);
        for (int p = 0; p < l.n; p++) {
            srv_job *c = oa_choice(job, p * per);
            c->echo = l.echo[p];
            c->echo_len = l.echo_len[p];
            c->echo_bos = l.is_text[p];
            l.echo[p] = NULL;
        }
        out->stream = completion_stream;
        out->final = completion_final;
    }
    goto done;
oom:
    srv_reply_error(out, SRV_API_COMPLETION, 500, "out of memory");
    goto done;
bad:
    oa_bad_field(out, param, msg);
done:
    completion_list_free(&l);
    free(schema);
    cJSON_Delete(j);
}
