/* responses_int.h — what the files of OpenAI's Responses API share (responses.c: the job's
 * state and the routes; responses_store.c: the stored responses; responses_request.c: a
 * request turned into a chat request; responses_answer.c: the answer's items, response object
 * and stream; responses_bg.c: background runs). Messages are MSG (1200) bytes. */
#ifndef DSV4_SERVE_RESPONSES_INT_H
#define DSV4_SERVE_RESPONSES_INT_H

#include "serve/srv.h"

#define MSG 1200
#define TOOLS_TAG "<" DSV4_DSML "tool_calls>"

/* ---- the store of responses (srv_rstore; responses_store.c) ------------------------------ */

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

/* The link that points at id's entry (or at NULL, the bucket's end). Under mu. */
rs_entry **rs_link(srv_rstore *st, const char *id);
/* A copy of id's response object (conv = 0) or conversation (1; *n_in: its input items,
 * when n_in is not NULL), the entry made the most recently used; NULL when there is none
 * (or out of memory: *oom = 1; a background response still running: *oom = 2). */
char *rs_get(srv_rstore *st, const char *id, int conv, int *n_in, int *oom);
/* Keeps (id, resp, conv, n_in), taking the two texts (resp NULL: a background response that
 * starts running, run and log its own, a reference each taken); 1 when kept. */
int rs_put(srv_rstore *st, const char *id, char *resp, char *conv, int n_in, rs_run *run, rs_log *log);
/* A background response's end: its running entry gets its response and conversation (taken);
 * 1 when kept. Under the job's request mu. */
int rs_end(srv_rstore *st, const char *id, char *resp, char *conv, int n_in);

/* references dropped (the last frees) */
void rs_log_release(rs_log *l);
void rs_run_release(rs_run *x);
/* Out of the table and the list, freed. Under mu. */
void rs_drop(srv_rstore *st, rs_entry **link);
/* The least recently used entries go (but keep and running ones) until `more` bytes fit
 * under the cap; 0 when they cannot. Under mu. */
int rs_room(srv_rstore *st, size_t more, const rs_entry *keep);
/* The bytes of e but its log. */
size_t rs_base_bytes(const rs_entry *e);
/* 1 deleted, 0 none, -1 a background response still running (not deleted). */
int rs_del(srv_rstore *st, const char *id);
/* id's entry, the most recently used now: a running background response's run (*run, a
 * reference), else a copy of its response object (*resp) and whether it ran in the
 * background (*bg). 0 when there is none (or out of memory: *oom). */
int rs_find(srv_rstore *st, const char *id, rs_run **run, char **resp, int *bg, int *oom);

/* ---- a job's state ------------------------------------------------------------------------ */

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

/* ---- the request: input items and fields in the chat endpoint's form (responses_request.c) */

/* o's string member key, or NULL */
const char *rs_str_field(const cJSON *o, const char *key);
/* a reasoning text sealed as its encrypted_content (NULL: out of memory) */
char *rs_seal(const char *text);
/* An optional field that must be a string (or an object, want_obj) when present; 0 or -1 */
int rs_opt_type(const cJSON *j, const char *key, int want_obj, char *msg);
/* OpenAI's fields this server does not serve (a 400) / accepts and ignores (their types
 * checked): 0, or -1 naming the field in *param */
int rs_refused_fields(const cJSON *j, const char **param, char *msg);
int rs_ignored_fields(const cJSON *j, const char **param, char *msg);
/* include[]: *logprobs (message.output_text.logprobs), *sealed (reasoning.encrypted_content) */
int rs_includes(const cJSON *j, int *logprobs, int *sealed, char *msg);
/* metadata: at most 16 string values (OpenAI's limits: keys 64, values 512 characters) */
int rs_check_metadata(const cJSON *md, char *msg);
/* truncation: "disabled" (the default: an input over the context is a 400) or "auto" */
int rs_truncation(const cJSON *j, int *is_auto, char *msg);
/* the request's fields every response object repeats */
cJSON *rs_echo_fields(const cJSON *j, const dsv4_gen_config *gc, int store, int trunc_auto, int bg);

/* *status of an unknown previous_response_id: a 400 with OpenAI's code and param (proxies
 * and agents look for the code) */
#define PREV_NOT_FOUND 4001
/* ... and of one still running in the background: a 400 naming previous_response_id */
#define PREV_RUNNING 4003
/* *status of an input over the context (truncation disabled, or nothing left to drop): a
 * 400 with OpenAI's code */
#define TOO_LONG 4002

/* The conversation this request continues (previous_response_id's stored items) with its
 * input appended, or NULL: *status 400 / PREV_NOT_FOUND / PREV_RUNNING / 500 with a message. */
cJSON *rs_conversation(srv *s, const cJSON *j, int *n_prev, int *status, char *msg);
/* an input item's type ("message" when it has none) */
const char *rs_item_type(const cJSON *x);
/* j's chat request for conv (its first n_prev items the stored ones) into *chat, rendered
 * into c; 0, or 400 / 500 with a message in the Responses request's terms */
int rs_render(srv *s, const cJSON *j, const cJSON *conv, int n_prev, cJSON **chat, srv_chat *c,
              char *msg);
/* the message of a prompt over the context; returns TOO_LONG */
int rs_too_long(srv *s, const srv_chat *c, int truncated, char *msg);
/* truncation auto: the fewest oldest items dropped for the prompt to leave room (*conv,
 * *n_prev, *chat and c become the cut conversation's); 0, or a status with a message */
int rs_truncate_conv(srv *s, const cJSON *j, cJSON **conv, int *n_prev, cJSON **chat, srv_chat *c,
                     char *msg);

/* ---- the answer: output items, the response object, the stream (responses_answer.c) ----- */

/* the output items (k: the output_index; lps: a message's logprobs, taken) */
cJSON *rs_reasoning_item(const srv_job *j, int k, const char *text);
cJSON *rs_text_part(const char *text, cJSON *lps);
cJSON *rs_message_item(const srv_job *j, int k, const char *text, const char *status, cJSON *lps);
/* The response object: status, output (taken; NULL: empty), usage once ended. */
cJSON *rs_response_object(srv *s, const srv_job *j, const char *status, cJSON *output,
                          const char *error);
/* the conversation's items that have no id get one, for input_items' cursors */
void rs_input_ids(const srv_job *j, cJSON *conv);
/* the job's final function (a JSON body) and stream function (typed events) */
void responses_final(srv *s, srv_job *j, srv_buf *out, int *status);
void responses_stream(srv *s, srv_job *j, srv_buf *out, int *finished);
/* A new event's data {type, ...}. */
cJSON *rs_ev(const char *type);
/* A following stream's news: the log's events from its cursor (responses.c). */
void rs_follow_stream(srv_job *j, srv_buf *out, int *finished);

/* ---- background responses (responses_bg.c) ----------------------------------------------- */

/* A submitted background job (taken) handed to the worker: its entry stored (running), and
 * the POST's answer in out. 0, or a status with a message (the job cancelled). */
int rs_bg_start(srv *s, srv_job *job, srv_reply *out, char *msg);
/* A stream following log l from its event `cursor` (a job of its own); NULL with *status
 * and a message (400: the log no longer holds the event at the cursor). */
srv_job *rs_follower(const char *id, rs_log *l, int cursor, int *status, char *msg);
/* The worker told to end once no run is left, and joined (srv_rstore_free). */
void rs_worker_end(srv_rstore *st);

#endif
