/* request.h — one generation request as the HTTP side and the scheduler share it.
 *
 * The HTTP side fills the immutable part (prompt ids, generation parameters), submits it,
 * then reads the events the scheduler appends (one per sampled token) under the request's
 * mutex until `end`. It never blocks for them: with nothing new it leaves a one-shot waker
 * (srv_req_wait) that the scheduler calls when news arrive. The scheduler-private part
 * (sequence, context tokens, gen state) is touched only by the scheduler thread. Two references (HTTP side, scheduler); the last
 * srv_req_release frees it.
 */
#ifndef DSV4_SERVE_REQUEST_H
#define DSV4_SERVE_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dsv4_text.h"

/* One sampled token as the client sees it. */
typedef struct srv_event {
    int32_t token;
    size_t text_off, text_len;  /* the text released with this token, in srv_req.text */
    dsv4_sample_out sample;     /* logprob and top logprobs */
} srv_event;

/* How a request ended (besides the DSV4_FINISH_* of the text layer). */
enum { SRV_END_NONE = 0, SRV_END_FINISHED, SRV_END_CANCELLED, SRV_END_ERROR };

typedef struct srv_req srv_req;
struct srv_req {
    /* ---- set before submit, read-only afterwards ---- */
    int64_t id;                     /* arrival order */
    int32_t *prompt;                /* (n_prompt) */
    int n_prompt;
    dsv4_gen_params gp;             /* pointers into the owned arrays below */
    char **stops;                   /* (gp.n_stop) */
    int32_t *bias_ids;              /* (gp.n_bias) */
    float *bias;                    /* (gp.n_bias) */
    char *json_schema;              /* gp.json_schema's text (structured output), or NULL */
    char *tools;                    /* gp.tools' text (strict tool calls), or NULL */
    char *regex;                    /* gp.regex's text (guided decoding), or NULL */
    char **choices;                 /* (gp.n_choices) gp.choices' strings (guided decoding) */
    char *grammar;                  /* gp.grammar's text (grammar-guided decoding), or NULL */
    dsv4_grammar *gram;             /* gp.compiled_grammar: one reference (compiled and its first
                                     * mask made at intake, shared by the choices), or NULL */
    int32_t *stop_ids;              /* (gp.n_stop_tokens) stop_token_ids */
    int32_t *prefix;                /* (n_prefix) owned: the answer's first tokens, forced (a
                                     * tool_choice that demands a call), then sampling */
    int n_prefix;
    const int32_t *forced;          /* test script: tokens to emit instead of sampling (after
                                     * the prefix), then EOS */
    int n_forced;
    const char *forced_error;       /* test script: after the forced tokens the request fails
                                     * with this message, as an engine error would end it,
                                     * instead of EOS (one process only: not on the DP wire) */
    int32_t *forced_own;            /* the copy `forced` points at on a follower rank (owned) */
    dsv4_sample_out *plp;           /* (n_prompt) prompt log-probabilities wanted (echo with
                                     * logprobs): entry i > 0 is prompt[i]'s, scored from row
                                     * i - 1 by the scheduler (which then runs the prompt cold:
                                     * no prefix cache restore), read after the end; NULL none.
                                     * Owned; choice 0's only (not cloned) */
    int plp_top;                    /* the best that many of each prompt row (0..20) */
    int prompt_only;                /* max_tokens 0 (echo): the prompt runs, nothing is
                                     * sampled, the request ends with LENGTH */
    double t_arrival;               /* seconds, monotonic */
    int priority;                   /* --scheduling-policy priority: lower is admitted first
                                     * and preempted last (0 under fcfs) */
    int home;                       /* the rank whose scheduler runs it (dp.h); 0 = this one */
    uint64_t place_key;             /* rank 0 under dp: the chain key of the prefix its home
                                     * rank's cache keeps of its prompt (srv_pcache_keys' last
                                     * below the prompt's length), 0 for none */
    srv_req *lead;                  /* choices 1..n-1 of a request with n > 1 (OpenAI's `n`):
                                     * choice 0's request, a reference held; NULL otherwise.
                                     * Its cancel is theirs, their news wake its waiter, and
                                     * the scheduler forks its prompt into them (scheduler.h) */
    srv_req *waiter;                /* a completions request of several prompts: every request
                                     * of prompts 1.. (and their choices) names prompt 0's
                                     * choice 0, where the HTTP side waits (a reference held):
                                     * their news wake it, its cancel is theirs; NULL otherwise
                                     * (a choice of prompt 0 has its lead for that) */

    /* ---- shared, under mu ---- */
    pthread_mutex_t mu;
    void (*wake)(void *arg);        /* the HTTP side's one-shot waker, NULL when none waits */
    void *wake_arg;
    int wake_end;                   /* the waker waits for the end only (a JSON answer) */
    srv_event *ev;                  /* (n_ev) */
    int n_ev, cap_ev;
    char *text;                     /* (text_len) all released text */
    size_t text_len, text_cap;
    int end;                        /* SRV_END_* once the scheduler is done with it */
    int finish;                     /* DSV4_FINISH_* (LENGTH also when the context filled) */
    int stop_index;                 /* after a STOP_STRING finish: which of stops[], else -1
                                     * (written before the end is published) */
    char errmsg[256];
    int cancel;                     /* set by the HTTP side: the client went away */
    int n_cached;                   /* prompt tokens restored from the prefix cache at the
                                     * first admission (their forward was skipped) */
    atomic_int refs;                /* atomic: the hang-up watcher takes one without mu */

    /* ---- scheduler-private ---- */
    dsv4_gen *gen;
    int seq;                        /* engine sequence, -1 when not admitted */
    dsv4_spec *spec;                /* MTP speculative decoding of seq, NULL without MTP */
    int32_t *ctx;                   /* (n_ctx) tokens the sequence must hold: prompt + fed */
    int n_ctx, cap_ctx;
    int n_done;                     /* tokens of ctx already in the sequence */
    int admitted;                   /* admitted at least once (n_cached is set) */
    int prompt_kept;                /* the prompt's snapshot is in the prefix cache */
    int forkable;                   /* choice 0 of n > 1: its choices wait for its prompt's
                                     * end to fork it (cleared then, or when it cannot) */
    int fork_wait;                  /* its prompt ran and a choice could not fork for want
                                     * of pages: it waits (its first token not taken, its
                                     * sequence at the prompt's end) until pages come back */
    float *fork_row;                /* (V) choice 0 of n > 1: its first token's logits row,
                                     * kept while fork_wait (allocated as its first wait
                                     * starts, freed with the request) */
    dsv4_snapshot *conv;            /* the conversation at its latest aligned length (a
                                     * private snapshot, to the prefix cache at the end) */
    int n_sampled;
    double t_last;                  /* latest token, for the inter-token latency histogram */
    srv_req *next;                  /* in the scheduler's waiting or running list */
    double t_wait;                  /* when it last entered the waiting list (monotonic s) */
    int prio_victim_at;             /* n_sampled when it was last preempted for a higher
                                     * priority, -1 never (it is not again until it samples) */
    /* data-parallel attention (dp.h): on the home rank, what its reports carried so far */
    int dp_sent_ev;
    size_t dp_sent_text;
    int dp_sent_cached;
    int dp_cancel_sent;             /* rank 0: the cancel went to the home rank */
};

/* A new request with its prompt copied and two references; NULL when out of memory. */
srv_req *srv_req_new(const int32_t *prompt, int n_prompt);

/* The request whose cancel is r's and whose waiter hears r's news: the list's waiter, else
 * the choice's lead, else NULL (r is its own). */
static inline srv_req *srv_req_root(const srv_req *r) { return r->waiter ? r->waiter : r->lead; }

/* A copy of r's set-before-submit part (prompt, generation parameters and what they point
 * at, forced prefix, test script) with two references: another choice of the same
 * request. NULL when out of memory. */
srv_req *srv_req_clone(const srv_req *r);
/* The same with another prompt (n_prompt ids): another prompt of a list (completions). */
srv_req *srv_req_clone_prompt(const srv_req *r, const int32_t *prompt, int n_prompt);
/* Copies stop strings and logit bias into the request and points gp at them; 0 or -1 (oom). */
int srv_req_set_stops(srv_req *r, const char *const *stops, int n);
int srv_req_set_bias(srv_req *r, const int32_t *ids, const float *bias, int n);
/* Copies a regex (NULL: none) or a choice list (n > 0) into the request and points gp at it;
 * the stop token ids likewise. 0 or -1 (oom). */
int srv_req_set_guide(srv_req *r, const char *regex, const char *const *choices, int n);
int srv_req_set_stop_ids(srv_req *r, const int32_t *ids, int n);
/* Asks for the prompt's log-probabilities (r->plp, the best n_top of each row); 0 or -1 (oom). */
int srv_req_want_plp(srv_req *r, int n_top);
/* Copies a grammar (GBNF text) into the request and points gp at it; 0 or -1 (oom). */
int srv_req_set_grammar(srv_req *r, const char *grammar);
/* Gives r a compiled grammar (the reference is taken) as gp.compiled_grammar. */
void srv_req_set_compiled_grammar(srv_req *r, dsv4_grammar *g);
void srv_req_release(srv_req *r);

/* Scheduler side, each under r->mu and waking the HTTP side's waiter (if any) after the
 * unlock: append one token's event, held-back text released at the end, end the request. 0
 * or -1 (oom). */
int srv_req_push(srv_req *r, const dsv4_gen_token *t);
int srv_req_push_text(srv_req *r, const char *text, size_t len);
void srv_req_end(srv_req *r, int end, int finish, const char *errmsg);

/* HTTP side, with r->mu held, when it found nothing new: fn(arg) is called once, without
 * r->mu, at the next push (unless end_only) or at the end. Not once r has ended (the caller
 * looks first, under the same hold). */
void srv_req_wait(srv_req *r, void (*fn)(void *), void *arg, int end_only);

/* HTTP side (the hang-up watcher), r->mu not held: calls the waiter's fn now, as a push
 * would (a stream's, to write its probe); nothing when none waits. */
void srv_req_kick(srv_req *r);

#endif
