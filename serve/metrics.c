/* metrics.c — counters and histograms in the Prometheus text format (metrics.h). */
#include "serve/metrics.h"

#include "serve/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* latency bucket upper bounds in seconds */
static const double kBounds[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1,    2.5,   5,    10,  30};
static const char *const kStatus[6] = {"2xx", "400", "401", "404", "413", "5xx"};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_request(srv_metrics *m, int s) {
    int k = s < 300 ? 0 : s == 401 ? 2 : s == 404 || s == 405 ? 3 : s == 413 ? 4 : s < 500 ? 1 : 5;
    pthread_mutex_lock(&m->mu);
    m->requests[k]++;
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(srv_hist *h, double x);

void srv_metrics_step(srv_metrics *m, const srv_step_times *t) {
    int b = 0;  /* bucket b holds decode counts in (2^(b-1), 2^b], b = 0 for 0 and 1 */
    while (b < SRV_ROWS_BUCKETS && (1 << b) < t->decode) b++;
    pthread_mutex_lock(&m->mu);
    m->steps++;
    m->step_rows += (uint64_t)t->rows;
    m->decode_rows += (uint64_t)t->decode;
    m->steps_by_decode_rows[b]++;
    hist_add(&m->step_time, srv_step_total(t));
    for (int i = 0; i < SRV_PH_N; i++) m->phase_s[i] += t->ph[i];
    if (t->decode > 0 && t->spans == t->decode) {  /* an admission always adds a prefill span */
        m->dec_steps++;
        m->dec_rows += (uint64_t)t->decode;
        m->dec_s += t->wait + srv_step_total(t);
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_mtp(srv_metrics *m, int drafted, int accepted) {
    pthread_mutex_lock(&m->mu);
    m->mtp_steps++;
    m->mtp_drafts += drafted != 0;
    m->mtp_accepted += accepted != 0;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_load(srv_metrics *m, int64_t queued, int64_t running, dsv4_cache_stats cache,
                      dsv4_indexer_stats idx) {
    pthread_mutex_lock(&m->mu);
    m->queue_depth = queued;
    m->running = running;
    m->cache = cache;
    m->idx = idx;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_queue_prio(srv_metrics *m, const int *prio, const int64_t *n, int k, int64_t rest) {
    pthread_mutex_lock(&m->mu);
    m->n_prio = k;
    memcpy(m->prio, prio, (size_t)k * sizeof *prio);
    memcpy(m->prio_n, n, (size_t)k * sizeof *n);
    m->prio_rest = rest;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t gen) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->gen_tokens += (uint64_t)gen;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prefix(srv_metrics *m, dsv4_prefix_stats engine, srv_pcache_stats server) {
    pthread_mutex_lock(&m->mu);
    m->prefix = engine;
    m->pcache = server;
    pthread_mutex_unlock(&m->mu);
}

static void hist_add(srv_hist *h, double x) {
    int b = 0;
    while (b < SRV_HIST_BUCKETS && x > kBounds[b]) b++;
    h->count[b]++;
    h->sum += x;
    h->n++;
}

void srv_metrics_latency(srv_metrics *m, double ttft, double itl) {
    pthread_mutex_lock(&m->mu);
    if (ttft >= 0) hist_add(&m->ttft, ttft);
    if (itl >= 0) hist_add(&m->itl, itl);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_event(srv_metrics *m, int cancelled, int preempted) {
    pthread_mutex_lock(&m->mu);
    m->cancelled += (uint64_t)cancelled;
    m->preemptions += (uint64_t)preempted;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prio_preempt(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->prio_preemptions++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_fork(srv_metrics *m, int64_t n) {
    pthread_mutex_lock(&m->mu);
    m->forks++;
    m->fork_tokens += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_guide_walks(srv_metrics *m, long n) {
    pthread_mutex_lock(&m->mu);
    m->guide_walks += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_rank(srv_metrics *m, int r, int n, const srv_rank_load *l) {
    if (r < 0 || r >= SRV_MAX_RANKS) return;
    pthread_mutex_lock(&m->mu);
    m->n_ranks = n < SRV_MAX_RANKS ? n : SRV_MAX_RANKS;
    m->rank[r] = *l;
    pthread_mutex_unlock(&m->mu);
}

/* The other ranks' cumulative counters added to rank 0's (data-parallel attention). */
void srv_metrics_fork_wait(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->fork_waits++;
    pthread_mutex_unlock(&m->mu);
}

static void add_ranks(const srv_metrics *m, uint64_t *mtp, uint64_t *forks, int64_t preempt[2],
                      srv_pcache_stats *pc, dsv4_prefix_stats *pf, dsv4_indexer_stats *idx) {
    for (int r = 1; r < m->n_ranks; r++) {
        const srv_rank_load *l = &m->rank[r];
        idx->exact += l->idx.exact;
        idx->bounded_f32 += l->idx.bounded_f32;
        idx->bounded_int += l->idx.bounded_int;
        idx->bounded_unpack += l->idx.bounded_unpack;
        mtp[0] += (uint64_t)l->mtp_steps;
        mtp[1] += (uint64_t)l->mtp_drafts;
        mtp[2] += (uint64_t)l->mtp_accepted;
        forks[0] += (uint64_t)l->forks;
        forks[1] += (uint64_t)l->fork_tokens;
        forks[2] += (uint64_t)l->fork_waits;
        preempt[0] += l->preemptions;
        preempt[1] += l->prio_preemptions;
        pc->hits += l->pcache.hits;
        pc->misses += l->pcache.misses;
        pc->reused_tokens += l->pcache.reused_tokens;
        pc->disk_files += l->pcache.disk_files;
        pc->disk_bytes += l->pcache.disk_bytes;
        pc->disk_loads += l->pcache.disk_loads;
        pc->disk_saves += l->pcache.disk_saves;
        pc->disk_bad += l->pcache.disk_bad;
        pf->evictions += l->prefix.evictions;
        pf->entries += l->prefix.entries;
        pf->host_bytes += l->prefix.host_bytes;
        pf->pool_bytes += l->prefix.pool_bytes;
    }
}

/* The queue by priority: rank 0's, and under data-parallel attention every rank's (their
 * reports carry each rank's first SRV_PRIO_SHOWN priorities and the count past them) merged:
 * the first SRV_PRIO_SHOWN priorities of the union, ascending, each summed over the ranks,
 * and the rest. Exact: a rank with requests past the priorities it shows shows
 * SRV_PRIO_SHOWN of them, so the union's first SRV_PRIO_SHOWN are all at most its last shown
 * one, and the priorities it hides are all past them. */
static void queue_by_prio(const srv_metrics *m, int *prio, int64_t *n, int *k, int64_t *rest) {
    const int n_ranks = m->n_ranks > 1 ? m->n_ranks : 1;
    int64_t total = 0, shown = 0;
    *k = 0;
    for (int r = 0; r < n_ranks; r++) {
        const int np = r ? (int)m->rank[r].n_prio : m->n_prio;
        const int *p = r ? m->rank[r].prio : m->prio;
        const int64_t *c = r ? m->rank[r].prio_n : m->prio_n;
        total += r ? m->rank[r].prio_rest : m->prio_rest;
        for (int i = 0; i < np && i < SRV_PRIO_SHOWN; i++) {
            total += c[i];
            int j = 0;
            while (j < *k && prio[j] < p[i]) j++;
            if (j < *k && prio[j] == p[i]) { n[j] += c[i]; continue; }
            if (j == SRV_PRIO_SHOWN) continue;  /* past the shown ones: in the rest */
            /* inserted at j; the last one drops to the rest when the list is full */
            const int move = (*k < SRV_PRIO_SHOWN ? *k : SRV_PRIO_SHOWN - 1) - j;
            memmove(prio + j + 1, prio + j, (size_t)move * sizeof *prio);
            memmove(n + j + 1, n + j, (size_t)move * sizeof *n);
            prio[j] = p[i];
            n[j] = c[i];
            if (*k < SRV_PRIO_SHOWN) (*k)++;
        }
    }
    for (int i = 0; i < *k; i++) shown += n[i];
    *rest = total - shown;
}

/* Appended to the step figures' help under data-parallel attention: they count rank 0's steps. */
#define RANK0_NOTE "; under data-parallel attention rank 0's steps only (each rank steps its own rows)"

/* Each rank's gauges (data-parallel attention). */
static void put_ranks(srv_buf *b, const srv_metrics *m) {
    static const char *const names[][2] = {
        {"dsv4_rank_requests_total", "requests placed on each rank (their home) since the start"},
        {"dsv4_rank_running_sequences", "sequences in the engine of each rank (its own requests)"},
        {"dsv4_rank_queue_depth", "requests placed on each rank and waiting for a sequence there"},
        {"dsv4_rank_step_rows", "rows of each rank's latest step"},
        {"dsv4_rank_cache_pages_free", "free window cache pages of each rank"},
        {"dsv4_rank_cp_prefills_total", "prompt chunks each rank was the home of that ran context-parallel "
                                        "over the group (--cp on)"},
        {"dsv4_rank_choices_forked_total", "choices (n > 1) each rank forked from their choice 0's prompt "
                                           "(every choice is placed on its choice 0's home)"},
        {"dsv4_rank_prefix_keys", "keys of the prefixes each rank can restore (entries and --kv-dir files), "
                                  "as its latest report counted them"},
        {"dsv4_rank_prefix_keys_seen", "those keys as rank 0 holds them for placement after that report"},
        {"dsv4_rank_prefix_key_resends_total", "times rank 0 asked each rank for its whole key list (what it "
                                               "held disagreed with the report's checksum)"}};
    for (int k = 0; k < 10; k++) {
        srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", names[k][0], names[k][1], names[k][0],
                       k == 0 || k == 5 || k == 6 || k == 9 ? "counter" : "gauge");
        for (int r = 0; r < m->n_ranks; r++) {
            const srv_rank_load *l = &m->rank[r];
            const int64_t v[10] = {l->requests, l->running, l->waiting, l->rows, l->pages_free, l->cp_prefills,
                                   l->forks, l->prefix_keys, l->prefix_keys_seen, l->prefix_key_resends};
            srv_buf_printf(b, "%s{rank=\"%d\"} %lld\n", names[k][0], r, (long long)v[k]);
        }
    }
}

void srv_metrics_stream_wait(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->stream_waits++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_intake(srv_metrics *m, int gone) {
    pthread_mutex_lock(&m->mu);
    m->intake[gone ? 1 : 0]++;
    m->intake_depth--;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_intake_queued(srv_metrics *m, int large) {
    pthread_mutex_lock(&m->mu);
    m->intake_lane[large != 0]++;
    m->intake_depth++;
    pthread_mutex_unlock(&m->mu);
}

static void put_hist(srv_buf *b, const char *name, const char *help, const srv_hist *h) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        srv_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, kBounds[i], (unsigned long long)cum);
    }
    cum += h->count[SRV_HIST_BUCKETS];
    srv_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
}

char *srv_metrics_render(srv_metrics *m) {
    srv_buf b = {0};
    pthread_mutex_lock(&m->mu);
    uint64_t mtp[3] = {m->mtp_steps, m->mtp_drafts, m->mtp_accepted};
    int64_t preempt[2] = {(int64_t)m->preemptions, (int64_t)m->prio_preemptions};
    srv_pcache_stats pcs = m->pcache;
    dsv4_prefix_stats pfs = m->prefix;
    uint64_t forks[3] = {m->forks, m->fork_tokens, m->fork_waits};
    dsv4_indexer_stats idx = m->idx;
    add_ranks(m, mtp, forks, preempt, &pcs, &pfs, &idx);
    srv_buf_printf(&b, "# HELP dsv4_requests_total HTTP requests answered, by status\n"
            "# TYPE dsv4_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        srv_buf_printf(&b, "dsv4_requests_total{status=\"%s\"} %llu\n", kStatus[i],
            (unsigned long long)m->requests[i]);
    srv_buf_printf(&b, "# HELP dsv4_requests_cancelled_total generations cancelled (client gone)\n"
            "# TYPE dsv4_requests_cancelled_total counter\n"
            "dsv4_requests_cancelled_total %llu\n", (unsigned long long)m->cancelled);
    srv_buf_printf(&b, "# HELP dsv4_stream_waits_total times a stream had nothing new to send and "
            "its connection waited, suspended, for its request's next token or end (about one a "
            "token)\n# TYPE dsv4_stream_waits_total counter\ndsv4_stream_waits_total %llu\n",
        (unsigned long long)m->stream_waits);
    srv_buf_printf(&b, "# HELP dsv4_intake_total requests the intake threads took off the HTTP "
            "thread: handled (parsed, rendered, tokenized, submitted or refused), gone (the client "
            "hung up while queued: never tokenized)\n# TYPE dsv4_intake_total counter\n"
            "dsv4_intake_total{outcome=\"handled\"} %llu\ndsv4_intake_total{outcome=\"gone\"} %llu\n",
        (unsigned long long)m->intake[0], (unsigned long long)m->intake[1]);
    srv_buf_printf(&b, "# HELP dsv4_intake_lane_total requests queued on each intake lane: small (a "
            "body of at most 64 KiB, with the stored conversation a previous_response_id renders), "
            "large (the rest)\n# TYPE dsv4_intake_lane_total counter\n"
            "dsv4_intake_lane_total{lane=\"small\"} %llu\ndsv4_intake_lane_total{lane=\"large\"} %llu\n",
        (unsigned long long)m->intake_lane[0], (unsigned long long)m->intake_lane[1]);
    srv_buf_printf(&b, "# HELP dsv4_intake_depth requests queued at the intake threads or in their "
            "handler\n# TYPE dsv4_intake_depth gauge\ndsv4_intake_depth %lld\n",
        (long long)m->intake_depth);
    srv_buf_printf(&b, "# HELP dsv4_preemptions_total sequences freed and requeued (their tokens recomputed "
            "when readmitted): the pools ran out, or a higher priority took the slot\n"
            "# TYPE dsv4_preemptions_total counter\ndsv4_preemptions_total %lld\n"
            "# HELP dsv4_priority_preemptions_total those preemptions that gave the slot to a request "
            "of a higher priority (--scheduling-policy priority) that had waited longer than the "
            "victim's recompute would take\n"
            "# TYPE dsv4_priority_preemptions_total counter\ndsv4_priority_preemptions_total %lld\n",
        (long long)preempt[0], (long long)preempt[1]);
    srv_buf_printf(&b, "# HELP dsv4_prompt_tokens_total prompt tokens admitted\n"
            "# TYPE dsv4_prompt_tokens_total counter\ndsv4_prompt_tokens_total %llu\n",
        (unsigned long long)m->prompt_tokens);
    srv_buf_printf(&b, "# HELP dsv4_guided_mask_walks_total regex / choice masks walked over the vocabulary "
            "(cache misses; the n choices of a request share one cache), this process's\n"
            "# TYPE dsv4_guided_mask_walks_total counter\ndsv4_guided_mask_walks_total %llu\n",
            (unsigned long long)m->guide_walks);
    srv_buf_printf(&b, "# HELP dsv4_choices_forked_total choices (n > 1) started as forks of their "
            "choice 0's prompt\n# TYPE dsv4_choices_forked_total counter\ndsv4_choices_forked_total %llu\n"
            "# HELP dsv4_prompt_tokens_forked_total prompt positions those forks shared instead of "
            "computing\n# TYPE dsv4_prompt_tokens_forked_total counter\n"
            "dsv4_prompt_tokens_forked_total %llu\n"
            "# HELP dsv4_fork_waits_total choices 0 of n > 1 whose forks waited for pages (the "
            "pools short at the prompt's end: forked once other requests gave some back)\n"
            "# TYPE dsv4_fork_waits_total counter\ndsv4_fork_waits_total %llu\n",
        (unsigned long long)forks[0], (unsigned long long)forks[1], (unsigned long long)forks[2]);
    srv_buf_printf(&b, "# HELP dsv4_generated_tokens_total tokens sampled\n"
            "# TYPE dsv4_generated_tokens_total counter\ndsv4_generated_tokens_total %llu\n",
        (unsigned long long)m->gen_tokens);
    srv_buf_printf(&b, "# HELP dsv4_queue_depth requests waiting for a sequence\n"
            "# TYPE dsv4_queue_depth gauge\ndsv4_queue_depth %lld\n", (long long)m->queue_depth);
    srv_buf_puts(&b, "# HELP dsv4_queue_depth_by_priority requests waiting for a sequence by their "
                 "priority (the first 8 priorities in admission order; \"rest\": those after them)\n"
                 "# TYPE dsv4_queue_depth_by_priority gauge\n");
    int prio[SRV_PRIO_SHOWN], n_prio = 0;
    int64_t prio_n[SRV_PRIO_SHOWN], prio_rest = 0;
    queue_by_prio(m, prio, prio_n, &n_prio, &prio_rest);
    for (int i = 0; i < n_prio; i++)
        srv_buf_printf(&b, "dsv4_queue_depth_by_priority{priority=\"%d\"} %lld\n", prio[i], (long long)prio_n[i]);
    if (prio_rest) srv_buf_printf(&b, "dsv4_queue_depth_by_priority{priority=\"rest\"} %lld\n", (long long)prio_rest);
    srv_buf_printf(&b, "# HELP dsv4_running_sequences sequences in the engine\n"
            "# TYPE dsv4_running_sequences gauge\ndsv4_running_sequences %lld\n",
        (long long)m->running);
    const dsv4_cache_stats *c = &m->cache;
    srv_buf_printf(&b, "# HELP dsv4_cache_pages cache pages by pool (window, compressed blocks) "
            "and state\n# TYPE dsv4_cache_pages gauge\n"
            "dsv4_cache_pages{pool=\"window\",state=\"used\"} %lld\n"
            "dsv4_cache_pages{pool=\"window\",state=\"free\"} %lld\n"
            "dsv4_cache_pages{pool=\"block\",state=\"used\"} %lld\n"
            "dsv4_cache_pages{pool=\"block\",state=\"free\"} %lld\n",
        (long long)c->win_used, (long long)(c->win_total - c->win_used), (long long)c->blk_used,
        (long long)(c->blk_total - c->blk_used));
    /* under data-parallel attention every rank steps its own rows; only rank 0's steps are
     * counted here (the reports carry each rank's latest step rows: dsv4_rank_step_rows) */
    const char *r0 = m->n_ranks > 1 ? RANK0_NOTE : "";
    srv_buf_printf(&b, "# HELP dsv4_steps_total engine steps (one forward each)%s\n"
            "# TYPE dsv4_steps_total counter\ndsv4_steps_total %llu\n"
            "# HELP dsv4_step_rows_total rows over all steps%s\n"
            "# TYPE dsv4_step_rows_total counter\ndsv4_step_rows_total %llu\n"
            "# HELP dsv4_decode_rows_total decode rows over all steps%s\n"
            "# TYPE dsv4_decode_rows_total counter\ndsv4_decode_rows_total %llu\n",
        r0, (unsigned long long)m->steps, r0, (unsigned long long)m->step_rows, r0,
        (unsigned long long)m->decode_rows);
    srv_buf_printf(&b, "# HELP dsv4_decode_steps_total steps that ran decode rows only (no prefill "
            "chunk, no admission)%s\n# TYPE dsv4_decode_steps_total counter\ndsv4_decode_steps_total %llu\n"
            "# HELP dsv4_decode_step_rows_total decode rows of those steps (one a sequence: an MTP "
            "verify span counts once)%s\n"
            "# TYPE dsv4_decode_step_rows_total counter\ndsv4_decode_step_rows_total %llu\n"
            "# HELP dsv4_decode_step_seconds_total wall time of those steps, each with the "
            "scheduler's time since the step before it (rows / seconds: the steady decode rate "
            "the server delivers)%s\n# TYPE dsv4_decode_step_seconds_total counter\n"
            "dsv4_decode_step_seconds_total %.6f\n",
        r0, (unsigned long long)m->dec_steps, r0, (unsigned long long)m->dec_rows, r0, m->dec_s);
    srv_buf_printf(&b, "# HELP dsv4_step_decode_rows steps by their number of decode rows%s\n"
            "# TYPE dsv4_step_decode_rows histogram\n", r0);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_ROWS_BUCKETS; i++) {
        cum += m->steps_by_decode_rows[i];
        srv_buf_printf(&b, "dsv4_step_decode_rows_bucket{le=\"%d\"} %llu\n", 1 << i, (unsigned long long)cum);
    }
    cum += m->steps_by_decode_rows[SRV_ROWS_BUCKETS];
    srv_buf_printf(&b, "dsv4_step_decode_rows_bucket{le=\"+Inf\"} %llu\ndsv4_step_decode_rows_sum %llu\n"
            "dsv4_step_decode_rows_count %llu\n", (unsigned long long)cum,
        (unsigned long long)m->decode_rows, (unsigned long long)m->steps);
    srv_buf_printf(&b, "# HELP dsv4_mtp_steps_total decoding steps of sequences with MTP\n"
            "# TYPE dsv4_mtp_steps_total counter\ndsv4_mtp_steps_total %llu\n"
            "# HELP dsv4_mtp_drafts_total MTP drafts verified\n"
            "# TYPE dsv4_mtp_drafts_total counter\ndsv4_mtp_drafts_total %llu\n"
            "# HELP dsv4_mtp_accepted_total MTP drafts accepted\n"
            "# TYPE dsv4_mtp_accepted_total counter\ndsv4_mtp_accepted_total %llu\n"
            "# HELP dsv4_mtp_acceptance_ratio accepted / verified drafts since start\n"
            "# TYPE dsv4_mtp_acceptance_ratio gauge\ndsv4_mtp_acceptance_ratio %.6f\n"
            "# HELP dsv4_mtp_tokens_per_step tokens committed per MTP decoding step since start\n"
            "# TYPE dsv4_mtp_tokens_per_step gauge\ndsv4_mtp_tokens_per_step %.6f\n",
        (unsigned long long)mtp[0], (unsigned long long)mtp[1], (unsigned long long)mtp[2],
        mtp[1] ? (double)mtp[2] / (double)mtp[1] : 0.0,
        mtp[0] ? (double)(mtp[0] + mtp[2]) / (double)mtp[0] : 0.0);
    const srv_pcache_stats *pc = &pcs;
    srv_buf_printf(&b, "# HELP dsv4_prefix_hits_total admissions that restored a cached prefix\n"
            "# TYPE dsv4_prefix_hits_total counter\ndsv4_prefix_hits_total %lld\n"
            "# HELP dsv4_prefix_misses_total admissions that restored nothing\n"
            "# TYPE dsv4_prefix_misses_total counter\ndsv4_prefix_misses_total %lld\n"
            "# HELP dsv4_prefix_reused_tokens_total positions restored instead of computed\n"
            "# TYPE dsv4_prefix_reused_tokens_total counter\ndsv4_prefix_reused_tokens_total %lld\n"
            "# HELP dsv4_prefix_evictions_total snapshots dropped (pool pressure or entry limit)\n"
            "# TYPE dsv4_prefix_evictions_total counter\ndsv4_prefix_evictions_total %lld\n"
            "# HELP dsv4_prefix_entries snapshots in the prefix cache\n"
            "# TYPE dsv4_prefix_entries gauge\ndsv4_prefix_entries %lld\n"
            "# HELP dsv4_prefix_memory_bytes bytes only the prefix cache holds (host copies and "
            "compressed blocks)\n# TYPE dsv4_prefix_memory_bytes gauge\ndsv4_prefix_memory_bytes %lld\n"
            "# HELP dsv4_prefix_disk_bytes bytes of snapshot files in --kv-dir\n"
            "# TYPE dsv4_prefix_disk_bytes gauge\ndsv4_prefix_disk_bytes %lld\n"
            "# HELP dsv4_prefix_disk_files snapshot files in --kv-dir\n"
            "# TYPE dsv4_prefix_disk_files gauge\ndsv4_prefix_disk_files %lld\n"
            "# HELP dsv4_prefix_disk_loads_total snapshot files read into the cache\n"
            "# TYPE dsv4_prefix_disk_loads_total counter\ndsv4_prefix_disk_loads_total %lld\n"
            "# HELP dsv4_prefix_disk_saves_total snapshot files written\n"
            "# TYPE dsv4_prefix_disk_saves_total counter\ndsv4_prefix_disk_saves_total %lld\n"
            "# HELP dsv4_prefix_disk_bad_total snapshot files that failed validation (set aside)\n"
            "# TYPE dsv4_prefix_disk_bad_total counter\ndsv4_prefix_disk_bad_total %lld\n",
        (long long)pc->hits, (long long)pc->misses, (long long)pc->reused_tokens,
        (long long)pfs.evictions, (long long)pfs.entries,
        (long long)(pfs.host_bytes + pfs.pool_bytes), (long long)pc->disk_bytes,
        (long long)pc->disk_files, (long long)pc->disk_loads, (long long)pc->disk_saves,
        (long long)pc->disk_bad);
    /* each process counts the rows its own attention scored: under data-parallel attention
     * every rank's are added */
    srv_buf_printf(&b, "# HELP dsv4_indexer_rows_total rows whose top-k the CSA indexer chose (a querying row of "
            "a CSA layer that sees more than index_topk entries), by path: every score exact, or bounded "
            "(approximate scores, exact ones near the boundary) over F32/BF16 keys, over FP4 keys by integer "
            "block dots, over FP4 keys unpacked\n# TYPE dsv4_indexer_rows_total counter\n"
            "dsv4_indexer_rows_total{path=\"exact\"} %lld\n"
            "dsv4_indexer_rows_total{path=\"bounded_f32\"} %lld\n"
            "dsv4_indexer_rows_total{path=\"bounded_int\"} %lld\n"
            "dsv4_indexer_rows_total{path=\"bounded_unpack\"} %lld\n",
        (long long)idx.exact, (long long)idx.bounded_f32, (long long)idx.bounded_int, (long long)idx.bounded_unpack);
    if (m->n_ranks > 1) put_ranks(&b, m);
    /* the whole process (engine, scheduler, connection threads): beside a load client's own
     * CPU time, what serving a level cost this machine */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        srv_buf_printf(&b, "# HELP process_cpu_seconds_total user and system CPU time of the server "
                "process\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.6f\n",
            (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec));
    put_hist(&b, "dsv4_time_to_first_token_seconds", "arrival to first sampled token", &m->ttft);
    put_hist(&b, "dsv4_inter_token_latency_seconds", "time between sampled tokens", &m->itl);
    put_hist(&b, "dsv4_step_seconds", m->n_ranks > 1 ? "wall time of one engine step, all phases" RANK0_NOTE
                                                     : "wall time of one engine step, all phases", &m->step_time);
    srv_buf_printf(&b, "# HELP dsv4_step_phase_seconds_total wall time of the engine steps by phase "
            "(admit, forward, head, sample, snapshot, mtp)%s\n"
            "# TYPE dsv4_step_phase_seconds_total counter\n", r0);
    for (int i = 0; i < SRV_PH_N; i++)
        srv_buf_printf(&b, "dsv4_step_phase_seconds_total{phase=\"%s\"} %.6f\n", srv_phase_names[i],
            m->phase_s[i]);
    pthread_mutex_unlock(&m->mu);
    if (b.oom) { free(b.s); return NULL; }
    return b.s;
}
