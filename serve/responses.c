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
 * request's instructions over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/srv.h"

#define MSG 1200
#define TOOLS_TAG "<" DSV4_DSML "tool_calls>"

/* ---- the store ------------------------------------------------------------------------- */

#define RS_BUCKETS 1024
/* One entry takes at most this share of the byte cap: a huge conversation is not kept
 * rather than evicting every other (the store then holds at least this many of the
 * largest; at the default 64 MiB an entry of 8 MiB still holds a 1M-token context's text). */
#define RS_ENTRY_SHARE 8

/* A stream following a background response's log: its place (under the log's mu). */
typedef struct rs_fol {
    srv_req *r;                    /* its request (a reference): the doorbell the worker rings */
    int cursor;                    /* the next event it sends */
    int cut;                       /* it fell two shares behind: its events from cursor were
                                    * trimmed unsent (it ends with an error event) */
} rs_fol;

/* The events of a background stream (their SSE text and where each begins), shared by its
 * entry, its run and the streams that follow it (a reference each). Bounded by its entry's
 * share of the store: the oldest events are trimmed (base, the first kept, is the watermark
 * below which a resume is refused), but not those a connected follower has not sent yet
 * unless it falls two more shares behind (log_trim), so a stream whose client reads never
 * loses one. Its mutex is a leaf taken under a following stream's request mu, never
 * with the store's mu held. */
typedef struct rs_log {
    pthread_mutex_t mu;
    atomic_int refs;
    srv_buf text;                  /* events base .. base + n - 1 */
    size_t *off;                   /* (n) where each kept event begins in text */
    int base;                      /* the first kept event's sequence number */
    int n, cap;
    int done;                      /* the last event is in */
    int lost;                      /* out of memory: its followers end with an error */
    rs_fol **fol;                  /* (n_fol) the following streams (each owned by its job) */
    int n_fol, cap_fol;
} rs_log;

/* A background response while it runs: its job, driven by the store's worker thread (not
 * by a connection). A reference each: its entry's (until its end), the worker's, a lookup's. */
typedef struct rs_run {
    atomic_int refs;
    srv *s;
    srv_job *job;
    rs_log *log;                   /* (streamed) its log (a reference), else NULL */
    struct rs_run *next;           /* in the worker's list (under the store's mu) */
    int news;                      /* its request has news (under the store's mu) */
} rs_run;

typedef struct rs_entry {
    char *id;
    char *resp;                    /* the response object's JSON text (NULL while running) */
    char *conv;                    /* its conversation: a JSON array of items (while running:
                                    * its input items) */
    int n_in;                      /* conv's first n_in items were its input (input_items) */
    size_t conv_len;               /* strlen(conv): what a previous_response_id renders */
    size_t bytes;                  /* all of it, log_bytes included */
    int bg;                        /* created with background: true */
    rs_run *run;                   /* a background response not ended (a reference): kept
                                    * whatever the LRU says */
    int streamed;                  /* created with stream: true too */
    rs_log *log;                   /* (streamed) its events, NULL once dropped (out of memory) */
    size_t log_bytes;
    struct rs_entry *prev, *next;  /* most recently used first */
    struct rs_entry *hnext;        /* in its bucket */
} rs_entry;

struct srv_rstore {
    pthread_mutex_t mu;
    size_t cap, used;
    rs_entry *head, *tail;
    rs_entry *bucket[RS_BUCKETS];
    /* background responses: the worker thread that drives their jobs (started by the first) */
    pthread_cond_t wcv;            /* the worker's sleep, cut by a run's news or the stop */
    pthread_cond_t idle;           /* signalled when the last run ended */
    rs_run *runs;                  /* running */
    int stepping;                  /* runs the worker took off the list for a step */
    int worker_on, wstop;
    pthread_t worker;
};

static unsigned rs_hash(const char *id) {
    unsigned h = 2166136261u;  /* FNV-1a */
    for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
    return h % RS_BUCKETS;
}

srv_rstore *srv_rstore_create(size_t cap) {
    srv_rstore *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->wcv, NULL);
    pthread_cond_init(&st->idle, NULL);
    st->cap = cap;
    return st;
}

static void worker_end(srv_rstore *st);

static void log_release(rs_log *l) {
    if (!l || atomic_fetch_sub(&l->refs, 1) > 1) return;
    srv_buf_free(&l->text);
    free(l->off);
    free(l->fol);  /* (empty: each follower holds a reference to l) */
    pthread_mutex_destroy(&l->mu);
    free(l);
}

static void run_release(rs_run *x) {
    if (!x || atomic_fetch_sub(&x->refs, 1) > 1) return;
    log_release(x->log);
    srv_job_free(x->job);
    free(x);
}

static void rs_entry_free(rs_entry *e) {
    free(e->id);
    free(e->resp);
    free(e->conv);
    run_release(e->run);
    log_release(e->log);
    free(e);
}

void srv_rstore_free(srv_rstore *st) {
    if (!st) return;
    worker_end(st);
    for (rs_entry *e = st->head, *n; e; e = n) {
        n = e->next;
        rs_entry_free(e);
    }
    pthread_cond_destroy(&st->wcv);
    pthread_cond_destroy(&st->idle);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* The link that points at id's entry (or at NULL, the bucket's end). Under mu. */
static rs_entry **rs_link(srv_rstore *st, const char *id) {
    rs_entry **l = &st->bucket[rs_hash(id)];
    while (*l && strcmp((*l)->id, id)) l = &(*l)->hnext;
    return l;
}

static void lru_unlink(srv_rstore *st, rs_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else st->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_front(srv_rstore *st, rs_entry *e) {
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
}

/* Out of the table and the list, freed. Under mu. */
static void rs_drop(srv_rstore *st, rs_entry **link) {
    rs_entry *e = *link;
    *link = e->hnext;
    lru_unlink(st, e);
    st->used -= e->bytes;
    rs_entry_free(e);
}

/* The least recently used entries go (but keep and running ones) until `more` bytes fit
 * under the cap; 0 when they cannot. Under mu. */
static int rs_room(srv_rstore *st, size_t more, const rs_entry *keep) {
    rs_entry *e = st->tail;
    while (st->used + more > st->cap && e) {
        rs_entry *prev = e->prev;
        if (e != keep && !e->run) rs_drop(st, rs_link(st, e->id));
        e = prev;
    }
    return st->used + more <= st->cap;
}

/* The bytes of e but its log. */
static size_t rs_base_bytes(const rs_entry *e) {
    return sizeof *e + strlen(e->id) + (e->resp ? strlen(e->resp) : 0) + (e->conv ? strlen(e->conv) : 0) + 3;
}

/* Keeps (id, resp, conv, n_in), taking the two texts (resp NULL: a background response that
 * starts running, run and log its own, a reference each taken); the least recently used
 * go until it fits. One larger than the cap's RS_ENTRY_SHARE-th part is not kept (an older
 * one of that id goes all the same: it is not this response). 1 when kept. */
static int rs_put(srv_rstore *st, const char *id, char *resp, char *conv, int n_in, rs_run *run, rs_log *log) {
    rs_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id))) {
        free(e);
        free(resp);
        free(conv);
        return 0;
    }
    e->resp = resp;
    e->conv = conv;
    e->conv_len = conv ? strlen(conv) : 0;
    e->n_in = n_in;
    e->bytes = rs_base_bytes(e);
    pthread_mutex_lock(&st->mu);
    rs_entry **l = rs_link(st, id);
    if (*l && !(*l)->run) rs_drop(st, l);
    if (*l || e->bytes > st->cap / RS_ENTRY_SHARE || !rs_room(st, e->bytes, NULL)) {
        pthread_mutex_unlock(&st->mu);
        rs_entry_free(e);
        return 0;
    }
    if (run) {
        e->bg = 1;
        atomic_fetch_add(&run->refs, 1);
        e->run = run;
        if (log) atomic_fetch_add(&log->refs, 1);
        e->log = log;
        e->streamed = log != NULL;
    }
    l = rs_link(st, id);
    *l = e;
    lru_front(st, e);
    st->used += e->bytes;
    pthread_mutex_unlock(&st->mu);
    return 1;
}

/* A copy of id's response object (conv = 0) or conversation (1; *n_in: its input items,
 * when n_in is not NULL), the entry made the most recently used; NULL when there is none
 * (or out of memory: *oom = 1; a background response still running: *oom = 2). */
static char *rs_get(srv_rstore *st, const char *id, int conv, int *n_in, int *oom) {
    char *t = NULL;
    *oom = 0;
    pthread_mutex_lock(&st->mu);
    rs_entry *e = *rs_link(st, id);
    if (e && (e->run && (!conv || !n_in))) {
        *oom = 2;  /* (input_items, which asks n_in, may read a running one's input) */
        e = NULL;
    }
    if (e) {
        lru_unlink(st, e);
        lru_front(st, e);
        if (!(t = strdup(conv ? e->conv : e->resp))) *oom = 1;
        if (n_in) *n_in = e->n_in;
    }
    pthread_mutex_unlock(&st->mu);
    return t;
}

/* 1 deleted, 0 none, -1 a background response still running (not deleted). */
static int rs_del(srv_rstore *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    rs_entry **l = rs_link(st, id);
    const int found = !*l ? 0 : (*l)->run ? -1 : 1;
    if (found > 0) rs_drop(st, l);
    pthread_mutex_unlock(&st->mu);
    return found;
}

/* ---- a job's state ---------------------------------------------------------------------- */

enum { OPEN_NONE = 0, OPEN_REASONING, OPEN_MESSAGE, OPEN_CALL };

struct srv_resp {
    const srv *s;
    cJSON *echo;      /* the request's fields every response object repeats */
    cJSON *conv;      /* the conversation's items so far: previous, then this input */
    int store;
    int n_calls;      /* the most calls an answer keeps: 1 under parallel_tool_calls false */
    int sealed;       /* include reasoning.encrypted_content: reasoning items carry it */
    /* streaming */
    int seq;          /* the next sequence_number */
    int n_out;        /* output items opened so far (the next output_index) */
    int open;         /* OPEN_*: the item being streamed */
    int call;         /* the open function call's index in the tool stream */
    srv_buf text;     /* the open item's text (arguments of a call) so far */
    srv_buf name;     /* the open call's name */
    cJSON *items;     /* the output items done */
    cJSON *held;      /* calls whose arguments ended, held until the block parses: a
                       * malformed block makes them no calls at all */
    /* include message.output_text.logprobs (the job's logprobs): a message's tokens */
    int lp_next;      /* the next event not given to a message's delta yet */
    cJSON *lps;       /* the open message's logprobs so far (the output_text part's shape) */
    cJSON *lps_nb;    /* the same in the streamed events' shape (no bytes): output_text.done's */
    /* background */
    int bg;           /* its end updates its running entry (rs_end) */
    int cancel;       /* (bg) POST .../cancel asked: it ends cancelled (under the request's mu) */
    int ended;        /* its final response is made (finish) */
    int live;         /* (a stream) response.in_progress is out */
    /* a stream following a background response's log (GET ?stream=true, or the background
     * POST's own stream): no job of its own, its request a doorbell the worker rings */
    rs_log *flog;
    rs_fol *fol;      /* its place among the log's followers */
};

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
        log_release(l);
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

/* ---- request: input items -> OpenAI-style messages --------------------------------------- */

/* The text of a content field: a string, or its text parts (input_text, output_text, the
 * text of reasoning_text / summary_text) joined by "\n\n" (the chat encoding's rule for
 * parts). NULL with a message for another part or a wrong type. */
static char *parts_text(const cJSON *c, const char *where, char *msg) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) { snprintf(msg, MSG, "%s must be a string or a list of parts", where); return NULL; }
    srv_buf b = {0};
    srv_buf_puts(&b, "");
    int k = 0;
    for (const cJSON *x = c->child; x; x = x->next, k++) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text");
        const char *tn = cJSON_IsString(ty) ? ty->valuestring : "";
        if ((strcmp(tn, "input_text") && strcmp(tn, "output_text") && strcmp(tn, "reasoning_text") &&
             strcmp(tn, "summary_text")) || !cJSON_IsString(t)) {
            snprintf(msg, MSG, "%s[%d]: only text parts (input_text, output_text) are supported, "
                     "each with a string 'text'", where, k);
            srv_buf_free(&b);
            return NULL;
        }
        if (k) srv_buf_puts(&b, "\n\n");
        srv_buf_puts(&b, t->valuestring);
    }
    if (b.oom) { srv_buf_free(&b); snprintf(msg, MSG, "out of memory"); return NULL; }
    return b.s;
}

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

size_t srv_responses_prev_bytes(srv *s, const char *body, size_t len) {
    static const char key[] = "previous_response_id";
    if (!s->rstore || !len || !memmem(body, len, key, sizeof key - 1)) return 0;
    cJSON *j = cJSON_ParseWithLength(body, len);
    const char *id = str_field(j, key);
    size_t n = 0;
    if (id) {
        pthread_mutex_lock(&s->rstore->mu);
        const rs_entry *e = *rs_link(s->rstore, id);
        n = e ? e->conv_len : 0;
        pthread_mutex_unlock(&s->rstore->mu);
    }
    cJSON_Delete(j);
    return n;
}

/* ---- reasoning.encrypted_content ---------------------------------------------------------
 * OpenAI's stateless clients (store false: Codex, the Agents SDK) ask for each reasoning item's
 * encrypted_content and send the item back with it, to carry the reasoning into the next turn.
 * This server keeps no key, and the item's text is in the clear beside it anyway (content), so
 * it is an opaque wrapping, not a secret: SEAL then the text in base64. Read back, it is the
 * reasoning's text; a blob another server sealed is refused (it cannot be read). */
#define SEAL "dsv4-reasoning-v1:"

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* text sealed (NULL: out of memory) */
static char *seal(const char *text) {
    const size_t n = strlen(text), sl = strlen(SEAL);
    char *o = malloc(sl + (n + 2) / 3 * 4 + 1), *w;
    if (!o) return NULL;
    memcpy(o, SEAL, sl);
    w = o + sl;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned a = (unsigned char)text[i], b = i + 1 < n ? (unsigned char)text[i + 1] : 0,
                       c = i + 2 < n ? (unsigned char)text[i + 2] : 0, v = a << 16 | b << 8 | c;
        *w++ = kB64[v >> 18];
        *w++ = kB64[v >> 12 & 63];
        *w++ = i + 1 < n ? kB64[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? kB64[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* The text of a sealed blob; NULL when it is not one (or out of memory: *oom). */
static char *unseal(const char *blob, int *oom) {
    const size_t sl = strlen(SEAL);
    *oom = 0;
    if (strncmp(blob, SEAL, sl)) return NULL;
    blob += sl;
    const size_t n = strlen(blob);
    if (n % 4) return NULL;
    char *o = malloc(n / 4 * 3 + 1);
    if (!o) { *oom = 1; return NULL; }
    size_t m = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char ch = blob[i + k], *at = ch ? strchr(kB64, ch) : NULL;
            if (ch == '=' && i + 4 == n && k >= 2 && (k == 3 || blob[i + 3] == '=')) pad++, v <<= 6;
            else if (at && !pad) v = v << 6 | (unsigned)(at - kB64);
            else { free(o); return NULL; }
        }
        o[m++] = (char)(v >> 16);
        if (pad < 2) o[m++] = (char)(v >> 8 & 255);
        if (pad < 1) o[m++] = (char)(v & 255);
    }
    o[m] = 0;
    if (strlen(o) != m) { free(o); return NULL; }  /* (a NUL inside: not a text this server sealed) */
    return o;
}

/* The last message of msgs when it is an assistant's (function calls of the same turn join
 * it: the model wrote its content and its calls as one answer). */
static cJSON *last_assistant(cJSON *msgs) {
    cJSON *m = msgs->child ? msgs->child->prev : NULL;  /* cJSON keeps the last in child->prev */
    const char *r = m ? str_field(m, "role") : NULL;
    return r && !strcmp(r, "assistant") ? m : NULL;
}

/* One input item appended to msgs; *reasoning: a reasoning item's text waiting for the
 * assistant message it belongs to. 0, or -1 with a message. */
static int item_message(const cJSON *x, int k, int n_prev, cJSON *msgs, char **reasoning, char *msg) {
    char where[80];
    if (k >= 0) snprintf(where, sizeof where, "input[%d]", k);
    else snprintf(where, sizeof where, "previous_response_id's conversation[%d]", k + n_prev);
    if (!cJSON_IsObject(x)) { snprintf(msg, MSG, "%s must be an object", where); return -1; }
    const cJSON *tyj = cJSON_GetObjectItemCaseSensitive(x, "type");
    if (tyj && !cJSON_IsString(tyj)) { snprintf(msg, MSG, "%s.type must be a string", where); return -1; }
    const char *ty = tyj ? tyj->valuestring : "message";
    cJSON *m = NULL;
    char *text = NULL;
    if (!strcmp(ty, "message")) {
        const char *role = str_field(x, "role");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer"))) {
            snprintf(msg, MSG, "%s: a message needs role \"user\", \"assistant\", \"system\" or "
                     "\"developer\"", where);
            return -1;
        }
        snprintf(where + strlen(where), sizeof where - strlen(where), ".content");
        if (!(text = parts_text(cJSON_GetObjectItemCaseSensitive(x, "content"), where, msg))) return -1;
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddStringToObject(m, "content", text);
        if (!strcmp(role, "assistant") && *reasoning) cJSON_AddStringToObject(m, "reasoning_content", *reasoning);
    } else if (!strcmp(ty, "function_call")) {
        const char *id = str_field(x, "call_id"), *name = str_field(x, "name"), *args = str_field(x, "arguments");
        const char *st = str_field(x, "status");
        if (!id || !name || !args) {
            snprintf(msg, MSG, "%s: a function_call needs string 'call_id', 'name' and 'arguments'", where);
            return -1;
        }
        if (st && !strcmp(st, "incomplete")) {
            /* a failed answer's call, cut midway: its arguments are not what the model meant */
            snprintf(msg, MSG, "%s: an incomplete function_call (its answer failed midway, its arguments "
                     "unfinished) cannot be part of a conversation; leave it out", where);
            return -1;
        }
        cJSON *a = *reasoning ? NULL : last_assistant(msgs);
        if (!a) {
            m = a = cJSON_CreateObject();
            cJSON_AddStringToObject(a, "role", "assistant");
            cJSON_AddStringToObject(a, "content", "");
            if (*reasoning) cJSON_AddStringToObject(a, "reasoning_content", *reasoning);
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(a, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(a, "tool_calls");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args);
        cJSON_AddItemToArray(calls, c);
    } else if (!strcmp(ty, "function_call_output")) {
        const char *id = str_field(x, "call_id");
        snprintf(where + strlen(where), sizeof where - strlen(where), ".output");
        if (!id) { snprintf(msg, MSG, "input[%d]: a function_call_output needs a string 'call_id'", k); return -1; }
        if (!(text = parts_text(cJSON_GetObjectItemCaseSensitive(x, "output"), where, msg))) return -1;
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", id);
        cJSON_AddStringToObject(m, "content", text);
    } else if (!strcmp(ty, "reasoning")) {
        /* its text (content, else its encrypted_content unsealed, else the summary) goes with
         * the assistant turn after it */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        const cJSON *sm = cJSON_GetObjectItemCaseSensitive(x, "summary");
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(x, "encrypted_content");
        const cJSON *src = cJSON_GetArraySize(c) ? c : sm;
        if (src != c && ec && !cJSON_IsNull(ec)) {
            int oom = 0;
            if (!cJSON_IsString(ec) || !(text = unseal(ec->valuestring, &oom))) {
                snprintf(msg, MSG, oom ? "out of memory" : "%s.encrypted_content was not made by this server "
                         "(it reads back only the reasoning it sealed; send the item's content instead)", where);
                return -1;
            }
            free(*reasoning);
            *reasoning = text;
            return 0;
        }
        snprintf(where + strlen(where), sizeof where - strlen(where), ".%s", src == c ? "content" : "summary");
        if (!(text = src ? parts_text(src, where, msg) : strdup(""))) return -1;
        free(*reasoning);
        *reasoning = text;
        return 0;
    } else {
        char t[41];
        srv_client_text(t, sizeof t, ty);
        snprintf(msg, MSG, "%s: item type '%s' is not supported (message, function_call, "
                 "function_call_output, reasoning)", where, t);
        return -1;
    }
    free(text);
    if (m) cJSON_AddItemToArray(msgs, m);
    free(*reasoning);
    *reasoning = NULL;
    return 0;
}

/* The conversation's items as messages, after the instructions (a system message). Its first
 * n_prev items are the stored ones: an error names the client's input[k - n_prev]. src
 * (room for the items + 1): the item that made each message (its index in conv; -1: the
 * instructions), for the chat path's errors. */
static cJSON *conv_messages(const cJSON *conv, int n_prev, const char *instructions, int *src, char *msg) {
    cJSON *msgs = cJSON_CreateArray();
    char *reasoning = NULL;
    int k = -n_prev;
    if (instructions) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", instructions);
        cJSON_AddItemToArray(msgs, m);
        src[0] = -1;
    }
    int n = instructions ? 1 : 0;  /* messages so far (a count: cJSON's is a walk) */
    for (const cJSON *x = conv->child; x; x = x->next, k++) {
        const cJSON *last = msgs->child ? msgs->child->prev : NULL;
        if (item_message(x, k, n_prev, msgs, &reasoning, msg)) {
            cJSON_Delete(msgs);
            msgs = NULL;
            break;
        }
        if (msgs->child && msgs->child->prev != last) src[n++] = k + n_prev;
    }
    free(reasoning);
    return msgs;
}

/* ---- request: the other fields in the chat endpoint's form ------------------------------- */

/* A function tool without "strict" (or null): strict when its parameters compile as a
 * strict tool's, else not. OpenAI's Responses API defaults `strict` to true (it normalizes
 * the schema into strict mode; Chat Completions stays non-strict); a schema our subset
 * cannot enforce is served best-effort instead of refused, as only an explicit
 * `strict: true` is (a 400 naming it). 0, or -1 out of memory. */
static int strict_default(cJSON *fn) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(fn, "strict");
    if (st && !cJSON_IsNull(st)) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(fn, "strict");
    cJSON *flag = cJSON_AddTrueToObject(fn, "strict");
    if (!flag) return -1;
    cJSON *one = cJSON_CreateArray(), *o = cJSON_CreateObject();
    if (!one || !o || !cJSON_AddItemToArray(one, o)) { /* (o is one's once added) */
        cJSON_Delete(one), cJSON_Delete(o);
        return -1;
    }
    char *text = NULL;
    if (cJSON_AddStringToObject(o, "type", "function") && cJSON_AddItemReferenceToObject(o, "function", fn))
        text = cJSON_PrintUnformatted(one);
    cJSON_Delete(one);
    if (!text) return -1;
    int strict = 0;
    dsv4_err err = {0};
    const int rc = dsv4_tools_check(text, strlen(text), &strict, &err);
    free(text);
    if (rc == DSV4_ERR_NOMEM) return -1;
    if (rc || !strict) flag->type = (flag->type & ~0xFF) | cJSON_False; /* in place: nothing to allocate */
    return 0;
}

/* tools [{type: "function", name, description, parameters, strict}] as chat tools. */
static int chat_tools(const cJSON *tools, cJSON *chat, char *msg) {
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) { snprintf(msg, MSG, "'tools' must be an array"); return -1; }
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        const char *ty = str_field(t, "type"), *name = str_field(t, "name");
        if (!ty || strcmp(ty, "function")) {
            char t[41];
            srv_client_text(t, sizeof t, ty ? ty : "");
            snprintf(msg, MSG, "tools[%d]: tool type '%s' is not supported (only \"function\")", k, t);
            return -1;
        }
        if (!name) { snprintf(msg, MSG, "tools[%d] needs a string 'name'", k); return -1; }
        cJSON *o = cJSON_CreateObject();
        cJSON *fn = o && cJSON_AddStringToObject(o, "type", "function") ? cJSON_AddObjectToObject(o, "function") : NULL;
        for (const cJSON *f = t->child; fn && f; f = f->next) {
            if (!strcmp(f->string, "type")) continue;
            cJSON *d = cJSON_Duplicate(f, 1);
            if (!d || !cJSON_AddItemToObject(fn, f->string, d)) cJSON_Delete(d), fn = NULL;
        }
        if (!fn || strict_default(fn) || !cJSON_AddItemToArray(out, o)) {
            cJSON_Delete(o);
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name": N}]} as the
 * chat's {"type": "allowed_tools", "allowed_tools": {"mode", "tools": [{"type": "function",
 * "function": {"name": N}}]}} (the chat path checks the mode, and the names against the
 * tools; its messages come back in these terms: kTerms) into o. */
static int chat_allowed_tools(const cJSON *tc, cJSON *o, char *msg) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(tc, "tools");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(tc, "mode");
    cJSON *at = cJSON_AddObjectToObject(o, "allowed_tools");
    cJSON *out = at ? cJSON_AddArrayToObject(at, "tools") : NULL;
    if (!out || (mode && !cJSON_AddItemToObject(at, "mode", cJSON_Duplicate(mode, 0)))) {
        snprintf(msg, MSG, "out of memory");
        return -1;
    }
    if (!cJSON_IsArray(list)) {
        snprintf(msg, MSG, "'tool_choice.tools' must be an array of {\"type\": \"function\", \"name\": ...}");
        return -1;
    }
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        const char *ty = str_field(e, "type"), *name = str_field(e, "name");
        if (!ty || strcmp(ty, "function") || !name) {
            snprintf(msg, MSG, "'tool_choice.tools[%d]' must be {\"type\": \"function\", \"name\": ...} (only "
                     "function tools are served)", k);
            return -1;
        }
        cJSON *x = cJSON_CreateObject();
        cJSON *fn = x && cJSON_AddStringToObject(x, "type", "function") ? cJSON_AddObjectToObject(x, "function") : NULL;
        if (!fn || !cJSON_AddStringToObject(fn, "name", name) || !cJSON_AddItemToArray(out, x)) {
            cJSON_Delete(x);
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
    }
    return 0;
}

static int chat_tool_choice(const cJSON *tc, cJSON *chat, char *msg) {
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(tc, 0));
        return 0;  /* the chat endpoint checks the word */
    }
    const char *ty = str_field(tc, "type"), *name = str_field(tc, "name");
    if (ty && !strcmp(ty, "allowed_tools")) {
        cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
        if (!o || !cJSON_AddStringToObject(o, "type", "allowed_tools")) {
            snprintf(msg, MSG, "out of memory");
            return -1;
        }
        return chat_allowed_tools(tc, o, msg);
    }
    if (!ty || strcmp(ty, "function") || !name) {
        snprintf(msg, MSG, "'tool_choice' must be \"none\", \"auto\", \"required\", "
                 "{\"type\": \"function\", \"name\": ...} or {\"type\": \"allowed_tools\", \"mode\": ..., "
                 "\"tools\": [...]}");
        return -1;
    }
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name);
    return 0;
}

/* The optional object field key of j and its optional member sub (a string when str, else
 * an object): *out the member, NULL when either is absent or null; -1 with a message for
 * a wrong type. */
static int member(const cJSON *j, const char *key, const char *sub, int str, const cJSON **out, char *msg) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *m = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, sub) : NULL;
    *out = NULL;
    if ((o && !cJSON_IsNull(o) && !cJSON_IsObject(o)) ||
        (m && !cJSON_IsNull(m) && !(str ? cJSON_IsString(m) : cJSON_IsObject(m)))) {
        snprintf(msg, MSG, "'%s' must be an object and '%s.%s' %s", key, key, sub, str ? "a string" : "an object");
        return -1;
    }
    if (m && !cJSON_IsNull(m)) *out = m;
    return 0;
}

/* text.format {type: text | json_object | json_schema (name, schema, strict, description)}
 * as the chat's response_format. */
static int chat_format(const cJSON *j, cJSON *chat, char *msg) {
    const cJSON *f;
    if (member(j, "text", "format", 0, &f, msg)) return -1;
    if (!f) return 0;
    const char *ty = str_field(f, "type");
    if (!ty || (strcmp(ty, "text") && strcmp(ty, "json_object") && strcmp(ty, "json_schema"))) {
        snprintf(msg, MSG, "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        return -1;
    }
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddStringToObject(rf, "type", ty);
    if (strcmp(ty, "json_schema")) return 0;
    if (!str_field(f, "name")) {
        snprintf(msg, MSG, "'text.format' of type json_schema needs a string 'name'");
        return -1;
    }
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    for (const cJSON *x = f->child; x; x = x->next)
        if (strcmp(x->string, "type")) cJSON_AddItemToObject(js, x->string, cJSON_Duplicate(x, 1));
    return 0;
}

/* reasoning.effort: none / minimal: thinking off; low, medium, high (and "max", DeepSeek's)
 * on, as the chat's reasoning_effort. */
static int chat_reasoning(const cJSON *j, cJSON *chat, char *msg) {
    const cJSON *e;
    if (member(j, "reasoning", "effort", 1, &e, msg)) return -1;
    if (!e) return 0;
    const char *v = e->valuestring;
    if (!strcmp(v, "none") || !strcmp(v, "minimal")) {
        cJSON_AddFalseToObject(chat, "thinking");
        return 0;
    }
    if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") && strcmp(v, "max")) {
        snprintf(msg, MSG, "'reasoning.effort' must be none, minimal, low, medium, high or max");
        return -1;
    }
    cJSON_AddStringToObject(chat, "reasoning_effort", v);
    return 0;
}

/* An optional field that must be a string (or an object, want_obj) when present. */
static int opt_type(const cJSON *j, const char *key, int want_obj, char *msg) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x) || (want_obj ? cJSON_IsObject(x) : cJSON_IsString(x))) return 0;
    snprintf(msg, MSG, "'%s' must be %s", key, want_obj ? "an object" : "a string");
    return -1;
}

/* Fields OpenAI has that this server does not serve: a 400 naming the field (*param) rather
 * than a silent change of what was asked. (An empty context_management asks nothing.) */
static int refused_fields(const cJSON *j, const char **param, char *msg) {
    static const char *const no[][2] = {
        {"conversation", "this server has no Conversations API (previous_response_id continues a stored response)"},
        {"prompt", "this server keeps no prompt templates (send instructions and input)"},
        {"context_management", "this server does not compact a conversation (truncation \"auto\" drops its "
                               "oldest items to fit the context)"},
        {"moderation", "this server runs no moderation model"}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, no[i][0]);
        if (!x || cJSON_IsNull(x) || (cJSON_IsArray(x) && !x->child && !strcmp(no[i][0], "context_management")))
            continue;
        *param = no[i][0];
        snprintf(msg, MSG, "'%s' is not supported: %s", no[i][0], no[i][1]);
        return -1;
    }
    return 0;
}

/* Fields accepted and not acted on, each harmless here and echoed in the response object
 * when given: max_tool_calls (it bounds built-in tools; this server has none),
 * prompt_cache_key, prompt_cache_retention and prompt_cache_options (the prefix cache is
 * automatic: an identical prefix is reused whatever the key), safety_identifier (no usage
 * policy is enforced), service_tier (one tier: the response says "default", as OpenAI's says
 * the tier it used when one was asked), stream_options (include_obfuscation: no obfuscation field is sent). Their
 * types are checked: a 400 naming the field. */
static int ignored_fields(const cJSON *j, const char **param, char *msg) {
    static const char *const strs[] = {"prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                                       "service_tier"};
    static const char *const objs[] = {"prompt_cache_options", "stream_options"};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (opt_type(j, strs[i], 0, msg)) { *param = strs[i]; return -1; }
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        if (opt_type(j, objs[i], 1, msg)) { *param = objs[i]; return -1; }
    const char *si = str_field(j, "safety_identifier");
    double mtc = 0;
    int k;
    if (si && strlen(si) > 64) {
        *param = "safety_identifier";
        snprintf(msg, MSG, "'safety_identifier' must be at most 64 characters");
        return -1;
    }
    if ((k = srv_opt_num(j, "max_tool_calls", 0, 1e9, &mtc, msg, MSG)) < 0 || (k && mtc != (double)(long long)mtc)) {
        *param = "max_tool_calls";
        snprintf(msg, MSG, "'max_tool_calls' must be a whole number");
        return -1;
    }
    return 0;
}

/* include: what the response should carry besides its default fields. This server honours
 * message.output_text.logprobs (*logprobs = 1) and reasoning.encrypted_content (*sealed = 1:
 * SEAL's wrapping, read back from an input item); a value naming a tool or an input it does
 * not have is a 400 naming the value rather than a silent answer without them. */
static int includes(const cJSON *j, int *logprobs, int *sealed, char *msg) {
    static const char *const absent[] = {"file_search_call.results", "web_search_call.results",
                                         "web_search_call.action.sources", "code_interpreter_call.outputs",
                                         "computer_call_output.output.image_url", "message.input_image.image_url"};
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "include");
    *logprobs = *sealed = 0;
    if (!in || cJSON_IsNull(in)) return 0;
    if (!cJSON_IsArray(in)) { snprintf(msg, MSG, "'include' must be a list of strings"); return -1; }
    int k = 0;
    for (const cJSON *x = in->child; x; x = x->next, k++) {
        if (!cJSON_IsString(x)) { snprintf(msg, MSG, "'include[%d]' must be a string", k); return -1; }
        const char *v = x->valuestring;
        char t[81];
        srv_client_text(t, sizeof t, v);
        if (!strcmp(v, "message.output_text.logprobs")) {
            *logprobs = 1;
            continue;
        }
        if (!strcmp(v, "reasoning.encrypted_content")) {
            *sealed = 1;
            continue;
        }
        for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
            if (!strcmp(v, absent[i])) {
                snprintf(msg, MSG, "'include[%d]': \"%s\" cannot be included: this server has no such "
                         "tool or input (only function tools and text)", k, t);
                return -1;
            }
        snprintf(msg, MSG, "'include[%d]': unknown value \"%s\" (this server includes "
                 "\"message.output_text.logprobs\")", k, t);
        return -1;
    }
    return 0;
}

/* metadata: at most 16 string values (OpenAI's limits: keys 64, values 512 characters). */
static int check_metadata(const cJSON *md, char *msg) {
    if (!md || cJSON_IsNull(md)) return 0;
    int k = 0;
    for (const cJSON *x = cJSON_IsObject(md) ? md->child : NULL; x; x = x->next, k++)
        if (!cJSON_IsString(x) || strlen(x->string) > 64 || strlen(x->valuestring) > 512) k = 99;
    if (!cJSON_IsObject(md) || k > 16) {
        snprintf(msg, MSG, "'metadata' must be an object of at most 16 strings (keys up to 64, "
                 "values up to 512 characters)");
        return -1;
    }
    return 0;
}

/* e's field key, when null, becomes v (else v is freed): OpenAI's default. */
static void default_field(cJSON *e, const char *key, cJSON *v) {
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, key))) cJSON_ReplaceItemInObjectCaseSensitive(e, key, v);
    else cJSON_Delete(v);
}

/* truncation: "disabled" (the default: an input over the context is a 400) or "auto". */
static int truncation(const cJSON *j, int *is_auto, char *msg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "truncation");
    *is_auto = cJSON_IsString(t) && !strcmp(t->valuestring, "auto");
    if (!t || cJSON_IsNull(t) || *is_auto || (cJSON_IsString(t) && !strcmp(t->valuestring, "disabled"))) return 0;
    snprintf(msg, MSG, "'truncation' must be \"auto\" or \"disabled\"");
    return -1;
}

/* The response object's fields that repeat the request (null when not given; temperature and
 * top_p: the values sampled with, the model's generation config's when it gives them). */
static cJSON *echo_fields(const cJSON *j, const dsv4_gen_config *gc, int store, int trunc_auto, int bg) {
    static const char *const keys[] = {"instructions", "max_output_tokens", "metadata",
                                       "parallel_tool_calls", "previous_response_id", "reasoning",
                                       "temperature", "text", "tool_choice", "tools", "top_logprobs",
                                       "top_p", "user"};
    /* (ignored_fields': only when given, as OpenAI's service_tier) */
    static const char *const given[] = {"max_tool_calls", "prompt_cache_key", "prompt_cache_options",
                                        "prompt_cache_retention", "safety_identifier"};
    cJSON *e = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        cJSON_AddItemToObject(e, keys[i], x ? cJSON_Duplicate(x, 1) : cJSON_CreateNull());
    }
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, given[i]);
        if (x && !cJSON_IsNull(x)) cJSON_AddItemToObject(e, given[i], cJSON_Duplicate(x, 1));
    }
    /* OpenAI's defaults where the request gave none */
    default_field(e, "temperature", cJSON_CreateNumber(gc->has & DSV4_GENCFG_TEMPERATURE ? gc->temperature : 1));
    default_field(e, "top_p", cJSON_CreateNumber(gc->has & DSV4_GENCFG_TOP_P ? gc->top_p : 1));
    default_field(e, "top_logprobs", cJSON_CreateNumber(0));
    default_field(e, "parallel_tool_calls", cJSON_CreateTrue());
    default_field(e, "tool_choice", cJSON_CreateString("auto"));
    default_field(e, "tools", cJSON_CreateArray());
    default_field(e, "text", cJSON_CreateObject());
    cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "text");  /* (text.verbosity alone: format text) */
    if (cJSON_IsObject(text) && !cJSON_GetObjectItemCaseSensitive(text, "format"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(text, "format"), "type", "text");
    default_field(e, "metadata", cJSON_CreateObject());
    cJSON_AddBoolToObject(e, "store", store);
    cJSON_AddBoolToObject(e, "background", bg);
    cJSON_AddStringToObject(e, "truncation", trunc_auto ? "auto" : "disabled");
    const cJSON *tier = cJSON_GetObjectItemCaseSensitive(j, "service_tier");
    if (tier && !cJSON_IsNull(tier)) cJSON_AddStringToObject(e, "service_tier", "default");
    return e;
}

/* *status of an unknown previous_response_id: a 400 with OpenAI's code and param (proxies
 * and agents look for the code) */
#define PREV_NOT_FOUND 4001
/* ... and of one still running in the background: a 400 naming previous_response_id */
#define PREV_RUNNING 4003

/* The conversation this request continues (previous_response_id's stored items) with its
 * input appended, or NULL: *status 400 / PREV_NOT_FOUND / 500 with a message. */
static cJSON *conversation(srv *s, const cJSON *j, int *n_prev, int *status, char *msg) {
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const char *prev = str_field(j, "previous_response_id");
    *status = 400;
    if (opt_type(j, "previous_response_id", 0, msg)) return NULL;
    if (!cJSON_IsString(in) && !cJSON_IsArray(in)) {
        snprintf(msg, MSG, "'input' must be a string or a list of items");
        return NULL;
    }
    cJSON *conv = NULL;
    if (prev) {
        int oom = 0;
        char *t = rs_get(s->rstore, prev, 1, NULL, &oom);
        if (!t) {
            char name[201];
            srv_client_text(name, sizeof name, prev);
            *status = oom == 1 ? 500 : oom ? PREV_RUNNING : PREV_NOT_FOUND;
            snprintf(msg, MSG, oom == 1 ? "out of memory" : oom ? "Previous response with id '%s' is still "
                     "in progress (a background response): wait for its end (GET polls it)" :
                     "Previous response with id '%s' not found.", name);
            return NULL;
        }
        conv = cJSON_Parse(t);
        free(t);
        *n_prev = cJSON_GetArraySize(conv);
    } else {
        conv = cJSON_CreateArray();
    }
    if (!conv) { *status = 500; snprintf(msg, MSG, "out of memory"); return NULL; }
    if (cJSON_IsString(in)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", in->valuestring);
        cJSON_AddItemToArray(conv, m);
    } else {
        for (const cJSON *x = in->child; x; x = x->next) cJSON_AddItemToArray(conv, cJSON_Duplicate(x, 1));
    }
    return conv;
}

/* The chat request of a Responses request j (conv: its conversation; src: conv_messages').
 * NULL with a message. */
static cJSON *chat_request(srv *s, const cJSON *j, const cJSON *conv, int n_prev, int *src, char *msg) {
    static const char *const sampling[] = {"temperature", "top_p", "top_k", "min_p", "seed",
                                           "presence_penalty", "frequency_penalty", "repetition_penalty",
                                           "priority"};
    cJSON *chat = cJSON_CreateObject();
    double mo = 0;
    int k;
    if (opt_type(j, "instructions", 0, msg)) goto bad;
    cJSON *msgs = conv_messages(conv, n_prev, str_field(j, "instructions"), src, msg);
    if (!msgs) goto bad;
    cJSON_AddItemToObject(chat, "messages", msgs);
    if (!msgs->child) { snprintf(msg, MSG, "'input' holds no message"); goto bad; }
    if (chat_tools(cJSON_GetObjectItemCaseSensitive(j, "tools"), chat, msg)) goto bad;
    if (chat_tool_choice(cJSON_GetObjectItemCaseSensitive(j, "tool_choice"), chat, msg)) goto bad;
    const cJSON *ptc = cJSON_GetObjectItemCaseSensitive(j, "parallel_tool_calls");
    if (cJSON_IsBool(ptc)) cJSON_AddItemToObject(chat, "parallel_tool_calls", cJSON_Duplicate(ptc, 0));
    if (chat_format(j, chat, msg) || chat_reasoning(j, chat, msg)) goto bad;
    for (size_t i = 0; i < sizeof sampling / sizeof sampling[0]; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, sampling[i]);
        if (x) cJSON_AddItemToObject(chat, sampling[i], cJSON_Duplicate(x, 1));
    }
    if ((k = srv_opt_num(j, "max_output_tokens", 1, (double)s->o.max_context, &mo, msg, MSG)) < 0) goto bad;
    if (k && mo != (double)(long long)mo) { snprintf(msg, MSG, "'max_output_tokens' must be an integer"); goto bad; }
    if (k) cJSON_AddNumberToObject(chat, "max_tokens", mo);
    return chat;
bad:
    cJSON_Delete(chat);
    return NULL;
}

/* ---- request: the prompt, its terms, truncation ----------------------------------------- */

/* The chat path's field names in the Responses request's terms (a message's prefix). */
static const char *const kTerms[][2] = {
    {"'response_format.json_schema.schema'", "'text.format.schema'"},
    {"'response_format.json_schema.strict'", "'text.format.strict'"},
    {"'response_format.json_schema'", "'text.format'"},
    {"'response_format'", "'text.format'"},
    {"'tool_choice.allowed_tools.", "'tool_choice."},
    {"'tool_choice.allowed_tools'", "'tool_choice'"},
    {"'max_tokens'", "'max_output_tokens'"},
    {"'messages'", "'input'"},
};

/* msg, an error of the chat path, in the Responses request's terms: "messages[K]" becomes
 * the item that made message K (src: conv_messages'; shift 1: a system message carrying
 * text.format went in front of them), a chat field its Responses name. */
static void responses_terms(char *msg, const int *src, int n_msgs, int n_prev, int shift) {
    char t[MSG];
    const char *rest = NULL;
    int k = 0;
    t[0] = 0;
    if (!strncmp(msg, "messages[", 9)) {
        char *end;
        const long m = strtol(msg + 9, &end, 10) - shift;
        if (*end != ']' || m >= n_msgs) return;
        rest = end + 1;
        if (m < 0) snprintf(t, sizeof t, "text.format");
        else if (src[m] < 0) snprintf(t, sizeof t, "instructions");
        else if (src[m] >= n_prev) snprintf(t, sizeof t, "input[%d]", src[m] - n_prev);
        else snprintf(t, sizeof t, "previous_response_id's conversation[%d]", src[m]);
    }
    for (size_t i = 0; !rest && i < sizeof kTerms / sizeof kTerms[0]; i++)
        if (!strncmp(msg, kTerms[i][0], strlen(kTerms[i][0]))) {
            rest = msg + strlen(kTerms[i][0]);
            snprintf(t, sizeof t, "%s", kTerms[i][1]);
        }
    if (!rest) return;
    k = (int)strlen(t);
    snprintf(t + k, sizeof t - (size_t)k, "%s", rest);
    snprintf(msg, MSG, "%s", t);
}

static const char *item_type(const cJSON *x) {
    const char *t = str_field(x, "type");
    return t ? t : "message";
}

/* A system or developer message: instructions, never dropped by truncation. */
static int instruction_item(const cJSON *x) {
    const char *r = str_field(x, "role");
    return !strcmp(item_type(x), "message") && r && (!strcmp(r, "system") || !strcmp(r, "developer"));
}

/* j's chat request for conv (its first n_prev items the stored ones) into *chat, rendered
 * into c (both replaced). 0, or 400 / 500 with a message in the Responses request's terms. */
static int render(srv *s, const cJSON *j, const cJSON *conv, int n_prev, cJSON **chat, srv_chat *c,
                  char *msg) {
    cJSON_Delete(*chat);
    srv_chat_free(c);
    memset(c, 0, sizeof *c);
    int *src = malloc(((size_t)cJSON_GetArraySize(conv) + 1) * sizeof *src);
    if (!src) { *chat = NULL; snprintf(msg, MSG, "out of memory"); return 500; }
    if (!(*chat = chat_request(s, j, conv, n_prev, src, msg))) { free(src); return 400; }
    const int rc = srv_openai_chat_prompt(s, *chat, c, msg);
    if (rc) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(*chat, "messages");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(*chat, "response_format");
        const char *fty = str_field(rf, "type");
        /* srv_messages_with_format puts a system message in front unless the first is one */
        const char *r0 = str_field(msgs->child, "role");
        const int shift = fty && strcmp(fty, "text") && !(r0 && (!strcmp(r0, "system") || !strcmp(r0, "developer")));
        responses_terms(msg, src, cJSON_GetArraySize(msgs), n_prev, shift);
    }
    free(src);
    return rc;
}

/* *status of an input over the context (truncation disabled, or nothing left to drop): a
 * 400 with OpenAI's code */
#define TOO_LONG 4002

static int too_long(srv *s, const srv_chat *c, int truncated, char *msg) {
    snprintf(msg, MSG, "the input renders to %lld tokens (instructions, tools and items%s) and this "
             "server's context is %lld: no room to generate%s", (long long)c->ids.n,
             truncated ? ", the items truncation may drop dropped" : "", (long long)s->o.max_context,
             truncated ? "" : " (truncation \"auto\" drops the conversation's oldest items to fit)");
    return TOO_LONG;
}

/* conv without its first k droppable items (drop[x]: item x is droppable) into *cut, in one
 * pass; *np its stored items left of n_prev; rendered as render does. */
static int render_cut(srv *s, const cJSON *j, const cJSON *conv, int n_prev, const char *drop, int k,
                      cJSON **cut, int *np, cJSON **chat, srv_chat *c, char *msg) {
    cJSON_Delete(*cut);
    *cut = cJSON_CreateArray();
    *np = n_prev;
    int x = 0, d = 0;
    for (const cJSON *it = conv->child; *cut && it; it = it->next, x++) {
        if (drop[x] && d++ < k) {
            *np -= x < n_prev;
            continue;
        }
        cJSON *dup = cJSON_Duplicate(it, 1);
        if (!dup || !cJSON_AddItemToArray(*cut, dup)) { cJSON_Delete(dup); cJSON_Delete(*cut); *cut = NULL; }
    }
    if (!*cut) { snprintf(msg, MSG, "out of memory"); return 500; }
    return render(s, j, *cut, *np, chat, c, msg);
}

typedef struct { const char *id; int d; } call_at;  /* a function_call's call_id, droppable index */

static int call_cmp(const void *a, const void *b) {
    return strcmp(((const call_at *)a)->id, ((const call_at *)b)->id);
}

/* truncation "auto" for a conversation whose prompt leaves no room: the fewest whole items
 * dropped from its start (never a system or developer message; no function_call_output kept
 * whose function_call is dropped; the last item kept) for the prompt to leave room, found by
 * bisection (dropping more never lengthens it). *conv, *n_prev, *chat and c become the cut
 * conversation's. 0, or a status with a message. Linear in the items but for the renders. */
static int truncate_conv(srv *s, const cJSON *j, cJSON **conv, int *n_prev, cJSON **chat, srv_chat *c,
                         char *msg) {
    const int n = cJSON_GetArraySize(*conv);
    char *drop = calloc((size_t)n + 1, 1);
    int *bad = calloc((size_t)n + 2, sizeof *bad), *cuts = malloc(((size_t)n + 1) * sizeof *cuts);
    call_at *calls = malloc(((size_t)n + 1) * sizeof *calls);
    int nd = 0, nc = 0, ncall = 0, rc = 0, x = 0, np = 0;
    cJSON *cut = NULL;
    if (!drop || !bad || !cuts || !calls) { rc = 500; snprintf(msg, MSG, "out of memory"); goto done; }
    for (const cJSON *it = (*conv)->child; it; it = it->next, x++) {
        if (instruction_item(it)) continue;
        drop[x] = 1;
        const char *id = str_field(it, "call_id");
        if (id && !strcmp(item_type(it), "function_call")) calls[ncall++] = (call_at){id, nd};
        nd++;
    }
    qsort(calls, (size_t)ncall, sizeof *calls, call_cmp);
    /* a cut k (drops droppable items [0, k)) splits a call at p from its output at q > p when
     * p < k <= q: bad[k] counts such pairs (a difference array) */
    x = 0;
    int d = 0;
    for (const cJSON *it = (*conv)->child; it; it = it->next, x++) {
        if (!drop[x]) continue;
        const char *id = str_field(it, "call_id");
        if (id && !strcmp(item_type(it), "function_call_output")) {
            const call_at key = {id, 0}, *f = bsearch(&key, calls, (size_t)ncall, sizeof *calls, call_cmp);
            if (f && f->d < d) { bad[f->d + 1]++; bad[d + 1]--; }
        }
        d++;
    }
    for (int k = 1, run = bad[0]; k < nd; k++) {
        run += bad[k];
        if (!run) cuts[nc++] = k;
    }
    int lo = 0, hi = nc - 1, best = -1, last = -1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((rc = render_cut(s, j, *conv, *n_prev, drop, cuts[mid], &cut, &np, chat, c, msg))) goto done;
        last = mid;
        if ((int64_t)c->ids.n < s->o.max_context) { best = mid; hi = mid - 1; }
        else lo = mid + 1;
    }
    /* none fits: c holds the most cut (the last tried), or nothing could be dropped */
    if (best < 0) { rc = too_long(s, c, 1, msg); goto done; }
    if (last != best && (rc = render_cut(s, j, *conv, *n_prev, drop, cuts[best], &cut, &np, chat, c, msg)))
        goto done;
    cJSON_Delete(*conv);
    *conv = cut;
    cut = NULL;
    *n_prev = np;
done:
    cJSON_Delete(cut);
    free(drop);
    free(bad);
    free(cuts);
    free(calls);
    return rc;
}

/* ---- answer: output items, the response object ------------------------------------------- */

static void item_id(const srv_job *j, const char *prefix, int k, char *id, size_t n) {
    snprintf(id, n, "%s_%s_%d", prefix, j->id + strlen("resp_"), k);
}

static cJSON *reasoning_item(const srv_job *j, int k, const char *text) {
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
        char *sealed = j->resp->sealed ? seal(text) : NULL;
        if (sealed) cJSON_AddStringToObject(o, "encrypted_content", sealed);
        free(sealed);
    }
    return o;
}

/* lps: its tokens' logprobs (taken; NULL: none asked, []) */
static cJSON *text_part(const char *text, cJSON *lps) {
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
static cJSON *message_item(const srv_job *j, int k, const char *text, const char *status, cJSON *lps) {
    char id[80];
    item_id(j, "msg", k, id, sizeof id);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON *c = cJSON_AddArrayToObject(o, "content");
    if (text) cJSON_AddItemToArray(c, text_part(text, lps));
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
static cJSON *response_object(srv *s, const srv_job *j, const char *status, cJSON *output,
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
static void input_ids(const srv_job *j, cJSON *conv) {
    static const char *const prefix[][2] = {{"message", "msg"}, {"function_call", "fc"},
                                            {"function_call_output", "fco"}, {"reasoning", "rs"}};
    int k = 0;
    for (cJSON *x = conv->child; x; x = x->next, k++) {
        if (str_field(x, "id")) continue;
        const char *p = "item", *t = item_type(x);
        for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
            if (!strcmp(t, prefix[i][0])) p = prefix[i][1];
        char id[96];
        snprintf(id, sizeof id, "%s_%s_in%d", p, j->id + strlen("resp_"), k);
        cJSON_DeleteItemFromObjectCaseSensitive(x, "id");
        cJSON_AddStringToObject(x, "id", id);
    }
}

static int rs_end(srv_rstore *st, const char *id, char *resp, char *conv, int n_in);

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
    cJSON *o = response_object(s, j, j->resp->cancel ? "cancelled" : err ? "failed" : incomplete(j->r) ?
                               "incomplete" : "completed", output, err);
    if (!j->resp->store) return o;
    cJSON *conv = cJSON_Duplicate(j->resp->conv, 1);
    const int n_in = cJSON_GetArraySize(conv);
    if (conv) input_ids(j, conv);
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

static void responses_final(srv *s, srv_job *j, srv_buf *out, int *status) {
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
    if (p.reasoning && *p.reasoning) cJSON_AddItemToArray(output, reasoning_item(j, k++, p.reasoning));
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
            cJSON_AddItemToArray(output, message_item(j, k++, head, "completed", range_logprobs(j, a, b)));
        free(head);
        cJSON_AddItemToArray(output, message_item(j, k++, raw, st, range_logprobs(j, b, r->text_len)));
    } else if (*p.content || !p.n_calls) {
        cJSON_AddItemToArray(output, message_item(j, k++, p.content, st, range_logprobs(j, a, b)));
    }
    for (int i = 0; i < p.n_calls && i < j->resp->n_calls; i++)
        cJSON_AddItemToArray(output, call_item(j, k++, i, p.calls[i].name, p.calls[i].arguments, "completed"));
    dsv4_parsed_free(&p);
    *status = 200;
    srv_put_json(out, finish(s, j, output));
}

/* ---- streaming --------------------------------------------------------------------------- */

/* A new event's data {type, ...}; sent by emit. */
static cJSON *ev(const char *type) {
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
    cJSON *o = ev(type);
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", j->resp->n_out);
    if (content) cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static void item_added(srv_job *j, srv_buf *out, cJSON *item) {
    cJSON *o = ev("response.output_item.added");
    cJSON_AddNumberToObject(o, "output_index", j->resp->n_out);
    cJSON_AddItemToObject(o, "item", item);
    emit(j, out, o);
}

static void item_done(srv_job *j, srv_buf *out, cJSON *item) {
    struct srv_resp *R = j->resp;
    cJSON *o = ev("response.output_item.done");
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
        item_done(j, out, reasoning_item(j, R->n_out, t));
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
        cJSON_AddItemToObject(o, "part", text_part(t, lps ? cJSON_Duplicate(lps, 1) : NULL));
        emit(j, out, o);
        item_done(j, out, message_item(j, R->n_out, t, st, lps));
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
        cJSON *o = ev("response.function_call_arguments.done");
        cJSON_AddStringToObject(o, "item_id", str_field(c, "id"));
        cJSON_AddNumberToObject(o, "output_index", k);
        cJSON_AddStringToObject(o, "arguments", str_field(c, "arguments"));
        emit(j, out, o);
        o = ev("response.output_item.done");
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
        item_added(j, out, reasoning_item(j, R->n_out, NULL));
        return;
    }
    item_added(j, out, message_item(j, R->n_out, NULL, "in_progress", NULL));
    cJSON_Delete(R->lps);
    cJSON_Delete(R->lps_nb);
    R->lps = R->lps_nb = NULL;
    cJSON *o = item_ev(j, "response.content_part.added", "msg", 1);
    cJSON_AddItemToObject(o, "part", text_part("", NULL));
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
        const char *name = str_field(fn, "name"), *args = str_field(fn, "arguments");
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

static void follow_stream(srv_job *j, srv_buf *out, int *finished);

static void responses_stream(srv *s, srv_job *j, srv_buf *out, int *finished) {
    srv_req *r = j->r;
    struct srv_resp *R = j->resp;
    if (R->flog) {
        follow_stream(j, out, finished);
        return;
    }
    if (!j->began) {
        /* a background response is created queued, then says so (OpenAI's response.queued,
         * after response.created: the clients' stream helpers take their snapshot from the
         * first event, which must be created); in_progress once it runs */
        cJSON *o = ev("response.created");
        cJSON_AddItemToObject(o, "response", response_object(s, j, R->bg ? "queued" : "in_progress", NULL, NULL));
        emit(j, out, o);
        if (R->bg) {
            o = ev("response.queued");
            cJSON_AddItemToObject(o, "response", response_object(s, j, "queued", NULL, NULL));
            emit(j, out, o);
        }
        j->began = 1;
    }
    /* (a background one as a poll sees it: queued until its first token; one cancelled while
     * queued goes from queued to its end) */
    if (!R->live && (!R->bg || r->n_ev || (r->end && !R->cancel))) {
        cJSON *o = ev("response.in_progress");
        cJSON_AddItemToObject(o, "response", response_object(s, j, "in_progress", NULL, NULL));
        emit(j, out, o);
        R->live = 1;
    }
    stream_events(j, out);
    if (!r->end) return;
    if (failure(r) || R->cancel) {
        cJSON *o = ev("response.failed");
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
        if (strcmp(str_field(x, "type"), "reasoning")) any = 1;
    if (!any) open_text(j, out, OPEN_MESSAGE);
    close_open(j, out, 1);
    cJSON *fin = finish(s, j, cJSON_Duplicate(R->items, 1));
    cJSON *o = ev(incomplete(r) ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(o, "response", fin);
    emit(j, out, o);
    *finished = 1;
}

/* ---- background responses ------------------------------------------------------------------
 * background: true (with store): the POST answers at once (the response queued, or the
 * stream of its events); the job runs without a connection, driven by the store's worker
 * thread, which runs the stream function above on each batch of news (so a polled response
 * has its items so far, and its end is the stream's), keeps the events of a streamed one in
 * its log (GET ?stream=true&starting_after=N replays them after N, then follows live ones),
 * and rings the following streams' doorbells. The entry stays in the store, outside the LRU,
 * until the response ends; its log counts against the store's bytes, at most the entry's
 * share: past it the oldest events are trimmed (a resume before them is a 400), while each
 * connected follower still gets every event (up to two shares behind: log_trim). */

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
static int rs_end(srv_rstore *st, const char *id, char *resp, char *conv, int n_in) {
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
        if (finished) run_release(x);
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
static void worker_end(srv_rstore *st) {
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
static srv_job *follower(const char *id, rs_log *l, int cursor, int *status, char *msg) {
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
static void follow_stream(srv_job *j, srv_buf *out, int *finished) {
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
        cJSON *o = ev("error");
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
static int bg_start(srv *s, srv_job *job, srv_reply *out, char *msg) {
    srv_rstore *st = s->rstore;
    const struct srv_resp *R = job->resp;
    rs_run *x = calloc(1, sizeof *x);
    rs_log *l = job->stream ? log_new() : NULL;
    cJSON *in = cJSON_Duplicate(R->conv, 1);
    if (in) input_ids(job, in);
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
        if (!(f = follower(job->id, l, 0, &status, msg)))
            srv_sched_cancel(s->sched, job->r);  /* its entry ends failed (cancelled) */
    } else {
        out->status = 200;
        srv_put_json(&out->body, response_object(s, job, "queued", NULL, NULL));
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
    run_release(x);
    x = NULL;
    l = NULL;  /* (the run's reference, released with it) */
fail:
    free(conv);
    free(x);
    log_release(l);
    srv_sched_cancel(s->sched, job->r);
    srv_job_free(job);
    return status;
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
    const char *m = str_field(e, "message");
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
    if (truncation(j, trunc_auto, msg)) return 400;
    if (!(*conv = conversation(s, j, n_prev, &status, msg))) return status;
    if ((status = render(s, j, *conv, *n_prev, chat, c, msg))) return status;
    if ((int64_t)c->ids.n < s->o.max_context) return 0;
    if (*trunc_auto) return truncate_conv(s, j, conv, n_prev, chat, c, msg);
    return refuse_long ? too_long(s, c, 0, msg) : 0;
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
    if (refused_fields(j, &param, msg) || ignored_fields(j, &param, msg) ||
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
    if (opt_type(j, "user", 0, msg) || opt_type(j, "model", 0, msg) ||
        check_metadata(cJSON_GetObjectItemCaseSensitive(j, "metadata"), msg))
        goto bad;
    if (includes(j, &logprobs, &sealed, msg)) {
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
    R->echo = echo_fields(j, &s->gc, store, trunc_auto, bg);
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
            if ((status = bg_start(s, job, out, msg))) goto bad;
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
    else if (!refused_fields(j, &param, msg) && !opt_type(j, "model", 0, msg))
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
    const char *t = item_type(o);
    if (!cJSON_GetObjectItemCaseSensitive(o, "type")) cJSON_AddStringToObject(o, "type", "message");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!strcmp(t, "message") && cJSON_IsString(c)) {
        const char *r = str_field(o, "role");
        cJSON *part = r && !strcmp(r, "assistant") ? text_part(c->valuestring, NULL) : cJSON_CreateObject();
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
        const char *xi = str_field(x, "id");
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
    const char *first = str_field(data->child, "id");
    const char *last = str_field(cJSON_GetArrayItem(data, to - from - 1), "id");
    cJSON_AddItemToObject(o, "first_id", first ? cJSON_CreateString(first) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "last_id", last ? cJSON_CreateString(last) : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_more", more);
    cJSON_Delete(list);
    srv_put_json(out, o);
    return 200;
}

/* id's entry, the most recently used now: a running background response's run (*run, a
 * reference), else a copy of its response object (*resp) and whether it ran in the
 * background (*bg). 0 when there is none (or out of memory: *oom). */
static int rs_find(srv_rstore *st, const char *id, rs_run **run, char **resp, int *bg, int *oom) {
    *run = NULL;
    *resp = NULL;
    pthread_mutex_lock(&st->mu);
    rs_entry *e = *rs_link(st, id);
    if (e) {
        lru_unlink(st, e);
        lru_front(st, e);
        *bg = e->bg;
        if (e->run) {
            *run = e->run;
            atomic_fetch_add(&e->run->refs, 1);
        } else if (!(*resp = strdup(e->resp))) {
            *oom = 1;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return *run || *resp;
}

/* A running background response as a poll sees it (under its request's mu): queued until its
 * first token, then in_progress with the items done so far and the one being written. */
static cJSON *snapshot(srv *s, srv_job *j) {
    const struct srv_resp *R = j->resp;
    if (R->cancel) return response_object(s, j, "cancelled", NULL, NULL);  /* (its end is on its way) */
    cJSON *out = cJSON_Duplicate(R->items, 1);
    char *t = R->text.n ? strndup(R->text.s, R->text.n) : strdup("");
    if (out && t && R->open == OPEN_MESSAGE)
        cJSON_AddItemToArray(out, message_item(j, R->n_out, t, "in_progress", R->lps ? cJSON_Duplicate(R->lps, 1) : NULL));
    else if (out && t && R->open == OPEN_REASONING)
        cJSON_AddItemToArray(out, reasoning_item(j, R->n_out, t));
    free(t);
    return response_object(s, j, j->r->n_ev ? "in_progress" : "queued", out, NULL);
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
        run_release(x);
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
    const char *st = o ? str_field(o, "status") : NULL;
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
    return response_object(s, j, "cancelled", NULL, NULL);
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
        srv_job *f = follower(id, l, (int)(after + 1), &status, msg);
        log_release(l);
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
