/* sched_int.h — the scheduler's state, shared by scheduler.c (one rank's continuous
 * batching) and dp.c (a process group serving with data-parallel attention, where every
 * rank runs its own scheduler over the requests it is the home rank of). Internal to
 * those two files. */
#ifndef DSV4_SERVE_SCHED_INT_H
#define DSV4_SERVE_SCHED_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "serve/dp.h"
#include "serve/prefix_cache.h"
#include "serve/prio_victim.h"
#include "serve/scheduler.h"

struct srv_sched {
    dsv4_engine *e;
    const dsv4_model *m;
    const dsv4_tokenizer *tok;
    srv_sched_opts o;
    srv_dp *dp;                   /* data-parallel attention (dp.h), NULL: this rank alone
                                   * (one process, or rank 0 of a rank-0-home group) */
    char group_why[sizeof ((dsv4_err *)0)->msg];  /* rank 0 under dp: why the group is gone
                                                   * (written once, before group_failed) */
    atomic_int group_failed;      /* group_why is final: /health answers 503 (the HTTP side) */
    int stop_rc;                  /* the group's stop message (rank 0 under dp) */
    dsv4_err stop_err;
    srv_metrics *met;
    int V, D, HC;
    int32_t eos;
    int mtp;                      /* the engine keeps MTP caches: every request decodes with
                                   * MTP drafts (serving.md §e) */

    pthread_t thread;
    int started;
    /* ---- shared, under mu ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_req *in_head, *in_tail;   /* submitted, not yet seen by the thread */
    int stopping;
    int64_t next_id;
    double deadline;              /* when stopping: cancel what is left after this */
    int n_live;                   /* submitted and not ended */

    /* ---- scheduler thread only ---- */
    srv_req **wait;               /* (n_wait) by id: not admitted (new or preempted) */
    srv_req **run;                /* (n_run) by id: holding a sequence */
    int n_wait, n_run;
    int admit_hold;               /* after a preemption: admit nothing until pages are freed */
    int fork_hold;                /* a fork waits for pages (fork_wait): tried again once a
                                   * sequence is freed */
    dsv4_span *spans;             /* (max_seqs) one step */
    srv_req **span_req;           /* (max_seqs) */
    int *span_verify;             /* (max_seqs) 1: the span is an MTP verify span */
    float *hidden;                /* (step_tokens + 2 max_seqs, D) rows that need logits
                                   * (every row of a prompt chunk whose logprobs are wanted) */
    float *logits;                /* (2 max_seqs, V) */
    /* with MTP */
    float *streams;               /* (rows_cap, hc, D) last-block streams of MTP requests */
    dsv4_mtp_span *mtp_spans;     /* (max_seqs) */
    srv_req **mtp_req;            /* (max_seqs) */
    int *mtp_drafts;              /* (max_seqs) 1: the span's last row drafts */
    int *mtp_out;                 /* (max_seqs) DSV4_MTP_OUT_* of each MTP span */
    float *forced_row;            /* (V) the logits of a forced token */
    /* data-parallel attention with MTP: the choices 0 of n > 1 whose prompt ended in the
     * step, forking after its MTP call (late_fork): their logits rows and draws */
    float *late_rows;             /* (max_seqs / 2, V) */
    srv_req **late_req;           /* (max_seqs / 2) */
    int *late_draw;               /* (max_seqs / 2) */
    int n_late;
    /* a step's draws, made on the engine's threads before its rows are taken in order */
    int *span_draw;               /* (max_seqs) the span's draw, or -1: drawn in order */
    struct srv_draw *draws;       /* (max_seqs) */
    /* prompt log-probabilities (srv_req.plp) */
    int *span_lp;                 /* (max_seqs) 1: the span's rows score prompt tokens; -1:
                                   * that failed (lp_err), the request ends */
    dsv4_err lp_err;
    /* their scoring spread over the engine's threads: task k scores its share of a head
     * batch's rows with scorer k (a generation of its own, made at create: V-sized scratch,
     * the tokenizer's text mask, the same dsv4_gen_score code as the request's own) */
    dsv4_gen **scorers;           /* (n_scorers) */
    dsv4_err *score_err;          /* (n_scorers) */
    int n_scorers;
    struct srv_score_job {        /* the batch being scored (score_task's) */
        srv_req *r;
        int64_t pos;              /* the batch's first row's position */
        int rows;
    } score_job;
    /* prefix cache (serving.md §g) */
    srv_pcache *pc;
    int *span_snap;               /* (max_seqs) SNAP_* of each span */
    float *snap_hidden;           /* (max_seqs, D) the snapshot row of each span */
    float *snap_streams;          /* (max_seqs, hc, D) */
    float *restored;              /* (hc, D) streams of a restored prefix's last position */
    /* where each step's time goes (step_trace.h) */
    srv_step_times st;            /* the step running */
    double t0, prev_end;          /* the scheduler's start; the previous step's end */
    double prefill_rate;          /* rows a second of the forwards of steps with prompt rows
                                   * (a moving average; 0 before the first): priority
                                   * preemption prices a victim's recompute with it */
    long long n_steps;
};

/* A row drawn ahead (draw_rows): its span and logits row, and dsv4_gen_next's result. */
struct srv_draw {
    int span, row, rc;
    dsv4_gen_token tok;
    dsv4_err err;
};

/* Ends r (frees its sequence, takes it off the lists, drops the scheduler's reference). */
void srv_sched_finish(srv_sched *s, srv_req *r, int end, int fin, const char *msg);
/* r's end as the client and /metrics see it, and the scheduler's reference dropped: the tail
 * of srv_sched_finish, and rank 0's for a remote request whose home reported its end. */
void srv_sched_ended(srv_sched *s, srv_req *r, int end, int fin, const char *msg);
/* The requests that were cancelled (or all when expired) end. */
void srv_sched_sweep(srv_sched *s, int expired);
/* One step over this rank's requests, with its metrics, trace and load published. Under
 * data-parallel attention it runs (with no rows when there are none) whenever the group
 * steps. Returns 0 when there was nothing to run. */
int srv_sched_step(srv_sched *s);
/* Into the waiting list (the scheduler thread, or a follower's loop). */
void srv_sched_enqueue(srv_sched *s, srv_req *r);
/* The load gauges (waiting, running, by priority, the pools, the prefix caches) to /metrics
 * and the DP report. */
void srv_sched_publish_load(srv_sched *s);
/* dsv4_gen_create and the context of r (as at submit). */
int srv_sched_prepare(srv_sched *s, srv_req *r, dsv4_err *err);

#endif
