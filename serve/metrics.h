/* metrics.h — the server's counters and histograms, written by the HTTP thread and the
 * scheduler, read as Prometheus text at GET /metrics. One mutex; every update is a few
 * additions. */
#ifndef DSV4_SERVE_METRICS_H
#define DSV4_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "dsv4_text.h"
#include "serve/prefix_cache.h"
#include "serve/step_trace.h"

#define SRV_HIST_BUCKETS 12
#define SRV_ROWS_BUCKETS 8

typedef struct srv_hist {
    uint64_t count[SRV_HIST_BUCKETS + 1];  /* per bucket (last: +Inf), not cumulative */
    double sum;
    uint64_t n;
} srv_hist;

/* One rank's load and cumulative counters under data-parallel attention (dp.h): rank 0
 * fills its own and takes the others' from their step reports. */
#define SRV_MAX_RANKS 64
#define SRV_PRIO_SHOWN 8  /* distinct priorities /metrics lists the queue by */
typedef struct srv_rank_load {
    int64_t requests;               /* requests placed on it since the start */
    int64_t running, waiting;       /* its requests holding a sequence / queued there */
    int64_t rows;                   /* rows of its latest step */
    int64_t pages_free;               /* free pages of its window pool */
    int64_t mtp_steps, mtp_drafts, mtp_accepted, preemptions;
    int64_t prio_preemptions;       /* those of them for a higher priority waiting */
    int64_t forks, fork_tokens;     /* choices (n > 1) forked there, prompt positions shared */
    int64_t fork_waits;             /* choices 0 that waited there for pages to fork */
    int64_t cp_prefills;            /* prompt chunks it was the home of that ran context-parallel */
    int64_t prefix_keys;            /* the restorable prefixes' keys it holds (its report's count) */
    int64_t prefix_keys_seen;       /* rank 0's: those keys rank 0 holds of it after the report
                                     * (the same count unless the reports lost some) */
    int64_t prefix_key_resends;     /* rank 0's: times it asked the rank for its whole key list
                                     * (what it held of them disagreed with the report's checksum) */
    dsv4_indexer_stats idx;         /* the rows its indexer scored, by path */
    int64_t n_prio;                 /* its queue by priority (srv_metrics_queue_prio): DP */
    int prio[SRV_PRIO_SHOWN];       /* placement counts the requests a new one would overtake */
    int64_t prio_n[SRV_PRIO_SHOWN], prio_rest;  /* (no padding: the struct goes on the wire) */
    srv_pcache_stats pcache;
    dsv4_prefix_stats prefix;
} srv_rank_load;

typedef struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t requests[6];           /* by status class: 2xx, 400, 401, 404/405, 413, 5xx */
    uint64_t cancelled, preemptions;
    uint64_t prio_preemptions;      /* preemptions for a higher priority waiting (among them) */
    uint64_t stream_waits;          /* a stream found nothing new and its connection waited */
    uint64_t intake[2];             /* requests the intake threads took: handled, gone (the
                                     * client hung up while queued) */
    int64_t intake_depth;           /* requests queued at the intake or in its handler */
    uint64_t intake_lane[2];        /* requests queued on the small lane, the large lane */
    uint64_t prompt_tokens, gen_tokens;
    uint64_t forks, fork_tokens;    /* choices (n > 1) started as forks of choice 0's prompt,
                                     * and the prompt positions they shared, not computed */
    uint64_t fork_waits;            /* choices 0 whose forks waited for pages */
    uint64_t guide_walks;           /* regex / choice masks walked (dsv4_gen_guide_walks) */
    uint64_t steps, step_rows, decode_rows;
    uint64_t steps_by_decode_rows[SRV_ROWS_BUCKETS + 1];  /* decode rows 1, 2, 3-4, 5-8, ... */
    int64_t queue_depth, running;
    /* the waiting requests by priority (--scheduling-policy priority): the first
     * SRV_PRIO_SHOWN distinct priorities in admission order, the rest in prio_rest */
    int n_prio;
    int prio[SRV_PRIO_SHOWN];
    int64_t prio_n[SRV_PRIO_SHOWN], prio_rest;
    dsv4_cache_stats cache;
    dsv4_indexer_stats idx;         /* the engine's rows by indexer path, copied after each step
                                     * on the scheduler's thread (the engine's own counters are
                                     * written by its threads during a step) */
    srv_hist ttft, itl;             /* seconds */
    srv_hist step_time;             /* seconds per engine step, all phases */
    double phase_s[SRV_PH_N];       /* seconds per step phase, summed over steps */
    uint64_t dec_steps, dec_rows;   /* steps of decode spans only (no prefill, no admission),
                                     * their decode spans */
    double dec_s;                   /* their wall time and the scheduler's time between the
                                     * step before and them: decode as the server delivers it */
    uint64_t mtp_steps, mtp_drafts, mtp_accepted;  /* MTP decoding steps, drafts verified,
                                                    * drafts accepted */
    dsv4_prefix_stats prefix;       /* the engine's prefix cache (entries, evictions, bytes) */
    srv_pcache_stats pcache;        /* the server's lookups and the KV directory */
    int n_ranks;                    /* > 1: data-parallel attention; the totals above are rank
                                     * 0's, and rank[1..] are added to them when rendered */
    srv_rank_load rank[SRV_MAX_RANKS];
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, int http_status);
/* One engine step: its rows (t->decode single-token decode rows among them) and the
 * seconds of each of its phases. */
void srv_metrics_step(srv_metrics *m, const srv_step_times *t);
/* The gauges: requests waiting and running, cache pages; and the engine's indexer rows by
 * path (dsv4_engine_indexer_stats, read between steps on the scheduler's thread). */
void srv_metrics_load(srv_metrics *m, int64_t queued, int64_t running, dsv4_cache_stats cache,
                      dsv4_indexer_stats idx);
/* The waiting requests by priority: k distinct priorities (k <= SRV_PRIO_SHOWN) and their
 * counts, and the count of those beyond them. */
void srv_metrics_queue_prio(srv_metrics *m, const int *prio, const int64_t *n, int k, int64_t rest);
void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t gen);
void srv_metrics_latency(srv_metrics *m, double ttft, double itl);  /* < 0: skip that one */
void srv_metrics_event(srv_metrics *m, int cancelled, int preempted);
/* One of those preemptions gave its slot to a request of a higher priority. */
void srv_metrics_prio_preempt(srv_metrics *m);
/* A choice started as a fork of choice 0's prompt of n tokens. */
void srv_metrics_fork(srv_metrics *m, int64_t n);
void srv_metrics_guide_walks(srv_metrics *m, long n);
/* A choice 0 waits for pages to fork its choices (the pools were short at its prompt's end). */
void srv_metrics_fork_wait(srv_metrics *m);
/* A stream's read callback found nothing new: its connection waits, suspended. */
void srv_metrics_stream_wait(srv_metrics *m);
void srv_metrics_intake(srv_metrics *m, int gone);  /* one taken: depth - 1 */
void srv_metrics_intake_queued(srv_metrics *m, int large);  /* one queued (on the large
                                                             * lane: 1): depth + 1 */
/* One MTP decoding step of a sequence: drafted (a draft was verified), accepted. */
void srv_metrics_mtp(srv_metrics *m, int drafted, int accepted);
/* The prefix cache's gauges and counters (published with the load after each step). */
void srv_metrics_prefix(srv_metrics *m, dsv4_prefix_stats engine, srv_pcache_stats server);
/* Rank r's load under data-parallel attention (n ranks in all). */
void srv_metrics_rank(srv_metrics *m, int r, int n, const srv_rank_load *l);
/* The Prometheus text exposition (malloc'ed), or NULL when out of memory. */
char *srv_metrics_render(srv_metrics *m);

#endif
