/* scheduler.h — continuous batching: one thread owns the engine and runs steps.
 *
 * Each step is one dsv4_forward over every admitted request's pending rows (a decode row,
 * or a chunk of a prompt still being prefilled, at most --step-tokens rows in all), one
 * dsv4_lm_head over the rows that need logits, then dsv4_gen_next per such request. New
 * requests join at the next step; finished and cancelled ones free their sequence at once.
 * Requests are admitted in (priority, arrival) order (the priority is 0 for all under the
 * default first come, first served). When the cache pools run out, the newest request of the
 * lowest priority running is preempted: its sequence is freed and
 * it is requeued to be recomputed later from its tokens (prompt + generated), its generation
 * state (sampler, stop strings, text) kept, so its output does not change.
 */
#ifndef DSV4_SERVE_SCHEDULER_H
#define DSV4_SERVE_SCHEDULER_H

#include <stdio.h>

#include "dsv4_text.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/step_msg.h"

typedef struct srv_sched srv_sched;

typedef struct srv_sched_opts {
    int step_tokens;          /* most rows per forward */
    int c_max;                /* the engine's most rows per span */
    int max_seqs;             /* the engine's sequence slots */
    int64_t max_context;      /* the engine's max_context */
    int max_queue;            /* most requests waiting beyond max_seqs (then "busy") */
    int no_prefix_cache;      /* 1: every request starts cold, nothing is kept */
    int priority_sched;       /* --scheduling-policy priority: a request waiting for a slot
                               * may preempt one of a lower priority (preempt_for_priority) */
    const char *kv_dir;       /* snapshots on disk (prefix_cache.h); NULL = memory only */
    uint64_t kv_dir_bytes;    /* its budget; 0 = unlimited */
    srv_relay *relay;         /* every call that changes a sequence goes through it (to the
                               * follower ranks under MPI) */
    FILE *trace;              /* one JSON line per step (step_trace.h); NULL = none */
    dsv4_dist *dp_group;      /* data-parallel attention over this group (dp.h): every rank
                               * the home rank of its own requests; NULL = none */
    int test_key_fault;       /* tests, under dp_group: rank 0 fails to apply the first change
                               * of each rank's prefix keys (as out of memory), which the
                               * reports' checksum and RESEND then heal */
} srv_sched_opts;

/* Starts the scheduler thread; until srv_sched_free it is the only user of the engine (the
 * caller keeps ownership and frees the engine afterwards). */
int srv_sched_start(dsv4_engine *e, const dsv4_model *m, const dsv4_tokenizer *tok,
                    const srv_sched_opts *o, srv_metrics *metrics, srv_sched **out,
                    dsv4_err *err);
/* A scheduler without its thread, for a follower rank under data-parallel attention
 * (o->dp_group set): srv_sched_follow runs rank 0's group steps on it until the stop. */
int srv_sched_create(dsv4_engine *e, const dsv4_model *m, const dsv4_tokenizer *tok,
                     const srv_sched_opts *o, srv_metrics *metrics, srv_sched **out,
                     dsv4_err *err);
int srv_sched_follow(srv_sched *s, dsv4_err *err);
/* After srv_sched_stop under data-parallel attention: the error of the group's stop (the
 * stop message failed, or the group had failed before; the followers may still wait). */
int srv_sched_group_stopped(const srv_sched *s, dsv4_err *err);
/* Any thread: under data-parallel attention, once the group failed (its requests end with
 * this reason), the reason; else NULL. */
const char *srv_sched_group_failed(srv_sched *s);
/* Hands a request to the scheduler (which then holds one reference); creates its
 * generation state first: DSV4_ERR_ARG (bad parameters) or DSV4_ERR_STATE (shutting
 * down) leave the request untouched and the reference with the caller. */
int srv_sched_submit(srv_sched *s, srv_req *r, dsv4_err *err);
/* The n requests of one API request submitted at once: its choices (OpenAI's `n`; a choice
 * k > 0 has lead = its choice 0) and, for a completions list, its prompts (those of prompts
 * 1.. have waiter = r[0]); admitted only when all n fit (the slots and the queue). A choice 0
 * runs the prompt; its other choices wait for it and start as forks of its sequence at the
 * prompt's end, the prompt's KV shared (not under a process group: there, and for a choice
 * that finds no slot free at that moment, a choice computes the prompt itself, with the
 * prefix cache's help). r[0]'s cancel cancels them all. Errors as srv_sched_submit. */
int srv_sched_submit_n(srv_sched *s, srv_req *const *r, int n, dsv4_err *err);
/* The client went away: the request ends at the next step. */
void srv_sched_cancel(srv_sched *s, srv_req *r);
/* Stops taking requests; lets running ones finish for up to grace_s seconds, cancels the
 * rest, and joins the thread. */
void srv_sched_stop(srv_sched *s, double grace_s);
void srv_sched_free(srv_sched *s);

#endif
