/* request.c — the request object shared by the HTTP side and the scheduler (request.h). */
#include "serve/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

srv_req *srv_req_new(const int32_t *prompt, int n_prompt) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->prompt = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *r->prompt);
    if (!r->prompt) { free(r); return NULL; }
    if (n_prompt > 0) memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    r->n_prompt = n_prompt;
    r->seq = -1;
    r->prio_victim_at = -1;
    r->stop_index = -1;
    atomic_init(&r->refs, 2);
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

int srv_req_set_stops(srv_req *r, const char *const *stops, int n) {
    if (n <= 0) return 0;
    r->stops = calloc((size_t)n, sizeof *r->stops);
    if (!r->stops) return -1;
    for (int i = 0; i < n; i++) {
        if (!(r->stops[i] = strdup(stops[i]))) return -1;
        r->gp.n_stop = i + 1;
    }
    r->gp.stop_strings = (const char *const *)r->stops;
    return 0;
}

int srv_req_set_bias(srv_req *r, const int32_t *ids, const float *bias, int n) {
    if (n <= 0) return 0;
    r->bias_ids = malloc((size_t)n * sizeof *ids);
    r->bias = malloc((size_t)n * sizeof *bias);
    if (!r->bias_ids || !r->bias) return -1;
    memcpy(r->bias_ids, ids, (size_t)n * sizeof *ids);
    memcpy(r->bias, bias, (size_t)n * sizeof *bias);
    r->gp.bias_ids = r->bias_ids;
    r->gp.bias = r->bias;
    r->gp.n_bias = n;
    return 0;
}

int srv_req_set_guide(srv_req *r, const char *regex, const char *const *choices, int n) {
    if (regex) {
        if (!(r->regex = strdup(regex))) return -1;
        r->gp.regex = r->regex;
    }
    if (n <= 0) return 0;
    if (!(r->choices = calloc((size_t)n, sizeof *r->choices))) return -1;
    for (int i = 0; i < n; i++) {
        if (!(r->choices[i] = strdup(choices[i]))) return -1;
        r->gp.n_choices = i + 1;
    }
    r->gp.choices = (const char *const *)r->choices;
    return 0;
}

int srv_req_set_stop_ids(srv_req *r, const int32_t *ids, int n) {
    if (n <= 0) return 0;
    if (!(r->stop_ids = malloc((size_t)n * sizeof *ids))) return -1;
    memcpy(r->stop_ids, ids, (size_t)n * sizeof *ids);
    r->gp.stop_tokens = r->stop_ids;
    r->gp.n_stop_tokens = n;
    return 0;
}

int srv_req_set_grammar(srv_req *r, const char *grammar) {
    free(r->grammar);
    r->gp.grammar = r->grammar = strdup(grammar);
    return r->grammar ? 0 : -1;
}

void srv_req_set_compiled_grammar(srv_req *r, dsv4_grammar *g) {
    dsv4_grammar_free(r->gram);
    r->gp.compiled_grammar = r->gram = g;
}

int srv_req_want_plp(srv_req *r, int n_top) {
    if (!(r->plp = calloc((size_t)r->n_prompt, sizeof *r->plp))) return -1;
    r->plp_top = n_top;
    return 0;
}

static char *dup_or_null(const char *t, int *oom) {
    char *d = t ? strdup(t) : NULL;
    if (t && !d) *oom = 1;
    return d;
}

srv_req *srv_req_clone(const srv_req *r) { return srv_req_clone_prompt(r, r->prompt, r->n_prompt); }

srv_req *srv_req_clone_prompt(const srv_req *r, const int32_t *prompt, int n_prompt) {
    srv_req *c = srv_req_new(prompt, n_prompt);
    if (!c) return NULL;
    int oom = srv_req_set_stops(c, r->gp.stop_strings, r->gp.n_stop) ||
              srv_req_set_bias(c, r->gp.bias_ids, r->gp.bias, r->gp.n_bias) ||
              srv_req_set_guide(c, r->gp.regex, r->gp.choices, r->gp.n_choices) ||
              srv_req_set_stop_ids(c, r->gp.stop_tokens, r->gp.n_stop_tokens);
    const dsv4_gen_params gp = c->gp;  /* stops, bias, guide, stop ids: the copies */
    c->gp = r->gp;
    c->gp.stop_strings = gp.stop_strings;
    c->gp.n_stop = gp.n_stop;
    c->gp.bias_ids = gp.bias_ids;
    c->gp.bias = gp.bias;
    c->gp.n_bias = gp.n_bias;
    c->gp.regex = gp.regex;
    c->gp.choices = gp.choices;
    c->gp.n_choices = gp.n_choices;
    c->gp.stop_tokens = gp.stop_tokens;
    c->gp.n_stop_tokens = gp.n_stop_tokens;
    c->gp.json_schema = c->json_schema = dup_or_null(r->json_schema, &oom);
    c->gp.tools = c->tools = dup_or_null(r->tools, &oom);
    c->gp.grammar = c->grammar = dup_or_null(r->grammar, &oom);
    c->gp.compiled_grammar = c->gram = r->gram ? dsv4_grammar_ref(r->gram) : NULL;
    if (r->n_prefix > 0) {
        if ((c->prefix = malloc((size_t)r->n_prefix * sizeof *c->prefix)))
            memcpy(c->prefix, r->prefix, (size_t)r->n_prefix * sizeof *c->prefix);
        else oom = 1;
        c->n_prefix = r->n_prefix;
    }
    c->priority = r->priority;
    c->forced = r->forced;  /* the server's script, not owned */
    c->n_forced = r->n_forced;
    c->forced_error = r->forced_error;  /* the script's too */
    if (oom) { srv_req_release(c); srv_req_release(c); return NULL; }
    return c;
}

void srv_req_release(srv_req *r) {
    if (!r) return;
    if (atomic_fetch_sub(&r->refs, 1) > 1) return;
    srv_req_release(r->lead);
    srv_req_release(r->waiter);
    for (int i = 0; i < r->gp.n_stop; i++) free(r->stops[i]);
    free(r->stops);
    free(r->bias_ids);
    free(r->bias);
    free(r->json_schema);
    free(r->tools);
    free(r->regex);
    free(r->grammar);
    dsv4_grammar_free(r->gram);
    for (int i = 0; i < r->gp.n_choices; i++) free(r->choices[i]);
    free(r->choices);
    free(r->stop_ids);
    free(r->prompt);
    free(r->prefix);
    free(r->forced_own);
    free(r->ev);
    free(r->text);
    free(r->ctx);
    free(r->fork_row);
    free(r->plp);
    dsv4_gen_free(r->gen);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Appends text under r->mu. */
static int put_text(srv_req *r, const char *text, size_t len) {
    if (r->text_len + len + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + len + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) return -1;
        r->text = t;
        r->text_cap = cap;
    }
    if (len) memcpy(r->text + r->text_len, text, len);
    r->text_len += len;
    r->text[r->text_len] = '\0';
    return 0;
}

/* The waker taken under r->mu (so it fires once) and called after the unlock: called under
 * it, the HTTP side woken would block at once on the mutex the scheduler still holds (a
 * connection thread did, session 38: the wake then came twice). r outlives the call: the
 * scheduler drops its reference only after it, and a waiting HTTP side holds its own. */
static void wake_unlock(srv_req *w, int ended) {
    void (*fn)(void *) = w->wake_end && !ended ? NULL : w->wake;
    void *arg = w->wake_arg;
    if (fn) w->wake = NULL;
    pthread_mutex_unlock(&w->mu);
    if (fn) fn(arg);
}

static void unlock_wake(srv_req *r) {
    srv_req *lead = srv_req_root(r);
    const int ended = r->end != SRV_END_NONE;
    wake_unlock(r, ended);
    if (!lead) return;
    /* another choice's (or prompt's) news go to the waiter on choice 0 (the HTTP side waits
     * there for them all); a waiter for the end only, at a choice's end once choice 0 ended
     * too */
    pthread_mutex_lock(&lead->mu);
    wake_unlock(lead, lead->end && ended);
}

int srv_req_push(srv_req *r, const dsv4_gen_token *t) {
    pthread_mutex_lock(&r->mu);
    int rc = -1;
    if (r->n_ev == r->cap_ev) {
        int cap = r->cap_ev ? 2 * r->cap_ev : 32;
        srv_event *ev = realloc(r->ev, (size_t)cap * sizeof *ev);
        if (!ev) goto out;
        r->ev = ev;
        r->cap_ev = cap;
    }
    srv_event *e = &r->ev[r->n_ev];
    e->token = t->token;
    e->text_off = r->text_len;
    e->text_len = t->text_len;
    e->sample = t->sample;
    if (put_text(r, t->text, t->text_len)) goto out;
    r->n_ev++;
    rc = 0;
out:
    unlock_wake(r);
    return rc;
}

int srv_req_push_text(srv_req *r, const char *text, size_t len) {
    if (!len) return 0;
    pthread_mutex_lock(&r->mu);
    int rc = put_text(r, text, len);
    /* held-back text released at the end belongs to the last token's event */
    if (!rc && r->n_ev) r->ev[r->n_ev - 1].text_len += len;
    unlock_wake(r);
    return rc;
}

void srv_req_end(srv_req *r, int end, int finish, const char *errmsg) {
    pthread_mutex_lock(&r->mu);
    r->end = end;
    r->finish = finish;
    if (errmsg) snprintf(r->errmsg, sizeof r->errmsg, "%s", errmsg);
    unlock_wake(r);
}

void srv_req_kick(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    unlock_wake(r);
}

void srv_req_wait(srv_req *r, void (*fn)(void *), void *arg, int end_only) {
    r->wake = fn;
    r->wake_arg = arg;
    r->wake_end = end_only;
}
