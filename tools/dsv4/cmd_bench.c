/* cmd_bench.c — `dsv4 bench`: prefill and decode speed against this machine's rooflines.
 *
 *   dsv4 bench --model DIR [--prompt-len N] [--gen N] [--batch B] [--threads T] [--json]
 *              [--batches LIST] [--contexts LIST [--fill-contexts]] [--chunk N] [--reps N] [--seed N]
 *              [--mtp on|off] [--accept LIST]
 *
 * In one run: the memory-bandwidth and FMA-peak probes (kernels/probe.h, with the engine's
 * threads, before and after the measurements), the prefill of a random prompt, and greedy
 * decode steps of B sequences at once. Decode is compared with the bandwidth roofline:
 * the weight bytes a step reads (bench/bench_model.h), counted from the routing the steps
 * really made: the hc streams after each attention sub-block are captured through the
 * engine's trace hook during an untimed repetition just before the timed ones (a copy per
 * row and layer, which the timed steps should not carry) and the router is rerun on them
 * afterwards. Prefill is compared with the FMA peak in useful
 * FLOPs. --batches runs the decode at several batch sizes, --contexts extends the
 * sequences to each length in turn and measures decode there (--fill-contexts: reached
 * by filling the caches with random rows instead, dsv4_seq_fill_synthetic). --mtp on measures MTP
 * speculative decoding against plain decoding instead (bench_mtp.c). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_mtp.h"
#include "cli_opts.h"
#include "cli_util.h"
#include "commands.h"
#include "dsv4_internal.h"

/* the engine internals this tool needs: its kernel context, for the probes to run on the
 * same threads as the model */

#define MAX_LIST 32

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The process's page faults and system time so far (every thread's): a timed span that
 * faults pays the kernel for first touches, which a warm server does not (the scratch
 * arena's pages cost an engine's first prefill 1.34x, BENCHMARKS.md session 34 pf). */
typedef struct ru_mark { double minflt, majflt, sys_s; } ru_mark;

static ru_mark ru_now(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return (ru_mark){0, 0, 0};
    return (ru_mark){(double)ru.ru_minflt, (double)ru.ru_majflt, (double)ru.ru_stime.tv_sec + 1e-6 * ru.ru_stime.tv_usec};
}

/* adds to *acc what the process did since mark r0 */
static void ru_add_since(ru_mark *acc, ru_mark r0) {
    const ru_mark z = ru_now();
    acc->minflt += z.minflt - r0.minflt, acc->majflt += z.majflt - r0.majflt, acc->sys_s += z.sys_s - r0.sys_s;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *p = strchr(line, ':');
        if (!p) break;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        snprintf(out, n, "%s", p);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* last-level cache size from sysfs (what sysconf reports inside some VMs is not the L3); -1
 * where the machine does not say (some VMs expose no cache index 3) */
static long l3_bytes(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    long v = -1;
    char unit = 0;
    if (f) {
        if (fscanf(f, "%ld%c", &v, &unit) < 1) v = -1;
        fclose(f);
    }
    if (v > 0 && (unit == 'K' || unit == 'k')) v <<= 10;
    else if (v > 0 && (unit == 'M' || unit == 'm')) v <<= 20;
    return v;
}

static int parse_list(const char *s, long long lo, long long hi, long long *out, int *n) {
    *n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= MAX_LIST || cli_parse_int(tok, lo, hi, &out[*n])) return -1;
        (*n)++;
    }
    return *n ? 0 : -1;
}

static int cmp_ll(const void *a, const void *b) {
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* ---- state of a run -------------------------------------------------------------------- */

/* Streams captured by the trace hook: the input of each layer's MoE sub-block, per step. */
typedef struct census {
    int active;
    int rows, n_layers, width;   /* width = hc * D floats per row */
    int steps, max_steps;        /* steps captured / room */
    const int *row_of_seq;       /* (max_seqs) */
    float *streams;              /* (max_steps, L, rows, hc, D) */
    int32_t *tokens;             /* (max_steps, rows) */
} census;

static void on_trace(void *user, int seq, int64_t pos, int layer, int kind, const float *streams) {
    (void)pos;
    census *c = user;
    if (!c->active || kind != 0 || c->steps >= c->max_steps || layer >= c->n_layers) return;
    const int row = c->row_of_seq[seq];
    float *dst = c->streams + (((size_t)c->steps * c->n_layers + layer) * c->rows + row) * c->width;
    memcpy(dst, streams, (size_t)c->width * sizeof(float));
}

typedef struct bench {
    dsv4_model *model;
    dsv4_engine *eng;
    const dsv4_config *cfg;
    dsv4_step_weights w;
    int V, D, tty, json;
    int kv_dtype;       /* DSV4_KV_* of the engine (cache bytes per step) */
    int *seqs;          /* (max_seqs) handles */
    int *row_of_seq;    /* (max_seqs) */
    int32_t *next;      /* (max_seqs) next token of each sequence */
    float *hidden;      /* (max_seqs, D) */
    float *logits;      /* (max_seqs, V) */
    uint64_t rng;
    dsv4_probe *probe;  /* --paired-probes on: the passes taken beside each repetition; else NULL */
    dsv4_err err;
} bench;

/* The probes beside each repetition (--paired-probes). The host's bandwidth moves by up to
 * +-25 % from one minute to the next (BENCHMARKS.md, session 27), so the run's best probe and
 * its best repetition may come from different minutes, and the headline ratios then say more
 * about the host than about the engine. A probe mark is taken before every repetition and
 * after the last; each repetition is also compared with the better of the two marks around
 * it, and the median over repetitions is reported beside the headline ratios (never instead
 * of them). */
typedef struct probe_mark {
    double bw_gbs;      /* best of 3 streaming passes */
    double peak_gflops; /* best of 2 FMA passes */
} probe_mark;

#define MAX_REPS 64
#define BENCH_MAX_BATCH 1024 /* --batch and --batches allow up to this many sequences */

static probe_mark probe_mark_take(dsv4_probe *p) {
    probe_mark m = {0, 0};
    for (int i = 0; i < 3; i++) {
        const double v = dsv4_probe_stream(p);
        if (v > m.bw_gbs) m.bw_gbs = v;
    }
    for (int i = 0; i < 2; i++) {
        const double v = dsv4_probe_fma_pass(p);
        if (v > m.peak_gflops) m.peak_gflops = v;
    }
    return m;
}

/* the better of the marks before and after repetition r */
static probe_mark probe_mark_around(const probe_mark *marks, int r) {
    const probe_mark a = marks[r], z = marks[r + 1];
    return (probe_mark){a.bw_gbs > z.bw_gbs ? a.bw_gbs : z.bw_gbs, a.peak_gflops > z.peak_gflops ? a.peak_gflops : z.peak_gflops};
}

static double median_of(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* one decode measurement */
typedef struct decode_result {
    int batch;
    int64_t context;         /* mean sequence length at the start */
    double seconds;          /* best repetition, gen steps */
    double median_seconds;
    double cpu_util;         /* process CPU time / (wall x threads) in the best repetition */
    ru_mark ru;              /* faults and system time over every timed repetition */
    int steps;
    double bytes_per_step;   /* from the captured routing */
    double bytes_expected;   /* from K/E with uniform routing */
    double experts_per_layer, experts_expected;
    /* expert_rows[r - 1]: experts a layer that r of the step's rows chose (mean over the census
     * steps and layers; sums to experts_per_layer, and r-weighted to batch x K): how far a
     * step's expert work is from one-row GEMVs */
    double expert_rows[BENCH_MAX_BATCH];
    int census_steps;
    double cache_bytes_per_step;
    dsv4_indexer_stats idx;  /* rows each indexer path scored over the timed steps */
    double flops_per_step;   /* useful FLOPs of one step: every row's forward + the head */
    int n_reps;              /* repetitions timed */
    double rep_seconds[MAX_REPS];
    probe_mark marks[MAX_REPS + 1]; /* with paired probes: before each repetition and after the last */
} decode_result;

/* one prefill measurement */
typedef struct prefill_result {
    int64_t start, tokens;   /* positions [start, start + tokens) of the last sequence */
    int64_t total;           /* tokens over all sequences */
    int seqs;
    double seconds, flops;
    ru_mark ru;              /* faults and system time of the timed forwards */
    dsv4_indexer_stats idx;  /* rows each indexer path scored */
} prefill_result;

static uint64_t next_rand(bench *b) {
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

static void progress(const bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const bench *b, const char *fmt, ...) {
    if (!b->tty) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "\r\033[K");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

static void progress_done(const bench *b) {
    if (b->tty) fprintf(stderr, "\r\033[K");
}

/* the greedy ids, as a server samples them (dsv4_argmax_index, dsv4_argmax's: ties to the lowest id, NaN never
 * wins; a row of NaN only, which the forward's finite check rules out, gives token 0) */
static void argmax_rows(const float *logits, int n, int V, int32_t *ids) {
    for (int r = 0; r < n; r++) {
        const int32_t best = dsv4_argmax_index(logits + (size_t)r * V, V);
        ids[r] = best < 0 ? 0 : best;
    }
}

/* *acc += the indexer's path counts from i0 to i1 */
static void idx_add_since(dsv4_indexer_stats *acc, dsv4_indexer_stats i0, dsv4_indexer_stats i1) {
    acc->exact += i1.exact - i0.exact;
    acc->bounded_f32 += i1.bounded_f32 - i0.bounded_f32;
    acc->bounded_int += i1.bounded_int - i0.bounded_int;
    acc->bounded_unpack += i1.bounded_unpack - i0.bounded_unpack;
}

/* The counts as a JSON object, each divided by per (the steps: a mean per step) */
static cJSON *idx_json(dsv4_indexer_stats s, double per) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "exact", s.exact / per);
    cJSON_AddNumberToObject(o, "bounded_f32", s.bounded_f32 / per);
    cJSON_AddNumberToObject(o, "bounded_int", s.bounded_int / per);
    cJSON_AddNumberToObject(o, "bounded_unpack", s.bounded_unpack / per);
    return o;
}

/* Prefills sequence handles seqs[0 .. n_seqs) from their length to `to` positions with random
 * tokens, then takes the greedy next token from the last row; adds the time to *res. */
static int prefill_to(bench *b, int n_seqs, int64_t to, int chunk, prefill_result *res, const char *what) {
    int32_t *tok = malloc((size_t)chunk * sizeof *tok);
    if (!tok) { snprintf(b->err.msg, sizeof b->err.msg, "out of memory"); return 1; }
    int rc = 0;
    const dsv4_indexer_stats i0 = dsv4_engine_indexer_stats(b->eng);
    for (int s = 0; s < n_seqs && !rc; s++) {
        int64_t n = dsv4_seq_length(b->eng, b->seqs[s]);
        const int64_t from = n;
        const ru_mark r0 = ru_now();
        const double t0 = cli_now_s();
        while (n < to && !rc) {
            const int c = (int)(to - n < chunk ? to - n : chunk);
            for (int i = 0; i < c; i++) tok[i] = (int32_t)(next_rand(b) % (uint64_t)b->V);
            const int last = n + c == to;
            dsv4_span sp = {b->seqs[s], n, c, tok, last, NULL, 0, NULL, 0};
            rc = dsv4_forward(b->eng, &sp, 1, b->hidden, NULL, &b->err);
            if (!rc && last) rc = dsv4_lm_head(b->eng, b->hidden, 1, b->logits, &b->err);
            if (!rc && last) argmax_rows(b->logits, 1, b->V, &b->next[s]);
            n += c;
            progress(b, "bench: %s: sequence %d/%d, %lld/%lld tokens", what, s + 1, n_seqs,
                     (long long)(n - from), (long long)(to - from));
        }
        res->seconds += cli_now_s() - t0;
        ru_add_since(&res->ru, r0);
        res->tokens = to - from;
        res->total += to - from;
        res->start = from;
        res->flops += dsv4_forward_flops(b->cfg, from, to - from) + (to > from ? dsv4_head_flops(b->cfg, 1) : 0);
        res->seqs++;
    }
    idx_add_since(&res->idx, i0, dsv4_engine_indexer_stats(b->eng));
    progress_done(b);
    free(tok);
    return rc;
}

/* One greedy decode step of sequences seqs[0 .. n). */
static int decode_step(bench *b, int n, dsv4_span *spans) {
    for (int i = 0; i < n; i++) {
        const int s = b->seqs[i];
        spans[i] = (dsv4_span){s, dsv4_seq_length(b->eng, s), 1, &b->next[i], 1, NULL, 0, NULL, 0};
    }
    int rc = dsv4_forward(b->eng, spans, n, b->hidden, NULL, &b->err);
    if (!rc) rc = dsv4_lm_head(b->eng, b->hidden, n, b->logits, &b->err);
    if (!rc) argmax_rows(b->logits, n, b->V, b->next);
    return rc;
}

/* Decode of sequences [0, n) for `gen` steps, an untimed repetition that captures the
 * routing, then `reps` timed ones. */
static int decode_measure(bench *b, int n, int gen, int reps, int threads, decode_result *res) {
    memset(res, 0, sizeof *res);
    res->batch = n;
    res->steps = gen;
    const dsv4_config *c = b->cfg;
    const int L = c->num_hidden_layers, E = c->n_routed_experts, K = c->num_experts_per_tok;

    /* the census: at most 256 MiB of streams */
    census cs = {0};
    cs.rows = n;
    cs.n_layers = L;
    cs.width = c->hc_mult * c->hidden_size;
    const size_t per_step = (size_t)L * n * cs.width * sizeof(float);
    cs.max_steps = (int)(((size_t)256 << 20) / per_step);
    if (cs.max_steps > gen) cs.max_steps = gen;
    if (cs.max_steps < 1) cs.max_steps = 1;
    cs.row_of_seq = b->row_of_seq;
    cs.streams = malloc((size_t)cs.max_steps * per_step);
    cs.tokens = malloc((size_t)cs.max_steps * n * sizeof(int32_t));
    dsv4_span *spans = malloc((size_t)n * sizeof *spans);
    int rc = 0;
    if (!cs.streams || !cs.tokens || !spans) {
        snprintf(b->err.msg, sizeof b->err.msg, "decode: out of memory");
        rc = 1;
        goto out;
    }
    /* touched here, untimed: first-touch page faults in the copies would land in the first
     * timed repetition. A non-zero fill: GCC turns malloc + memset 0 into calloc, whose
     * pages stay untouched. */
    memset(cs.streams, 0xff, (size_t)cs.max_steps * per_step);
    for (int i = 0; i < n; i++) b->row_of_seq[b->seqs[i]] = i;
    /* one untimed step: the first touch of this batch size's scratch */
    if ((rc = decode_step(b, n, spans))) goto out;
    /* the census repetition, untimed: gen steps with the trace hook copying the streams */
    dsv4_engine_set_trace(b->eng, on_trace, &cs);
    for (int s = 0; s < gen && !rc; s++) {
        cs.active = cs.steps < cs.max_steps;
        if (cs.active) memcpy(cs.tokens + (size_t)cs.steps * n, b->next, (size_t)n * sizeof(int32_t));
        rc = decode_step(b, n, spans);
        if (cs.active) cs.steps++;
        if (b->tty && (s % 4 == 3 || s == gen - 1))
            progress(b, "bench: decode batch %d: routing census, step %d/%d", n, s + 1, gen);
    }
    cs.active = 0;
    dsv4_engine_set_trace(b->eng, NULL, NULL);
    if (rc) goto out;
    /* the timed repetitions start here: their context, cache reads and FLOPs */
    double len = 0;
    for (int i = 0; i < n; i++) len += (double)dsv4_seq_length(b->eng, b->seqs[i]);
    res->context = (int64_t)(len / n + 0.5);
    for (int i = 0; i < n; i++) res->cache_bytes_per_step += dsv4_decode_cache_bytes(c, dsv4_seq_length(b->eng, b->seqs[i]), b->kv_dtype);
    for (int i = 0; i < n; i++) res->flops_per_step += dsv4_forward_flops(c, dsv4_seq_length(b->eng, b->seqs[i]), 1);
    res->flops_per_step += dsv4_head_flops(c, n);
    double best_cpu = 0;
    const dsv4_indexer_stats i0 = dsv4_engine_indexer_stats(b->eng);
    if (b->probe) res->marks[0] = probe_mark_take(b->probe);
    for (int r = 0; r < reps && !rc; r++) {
        const ru_mark r0 = ru_now();
        const double t0 = cli_now_s(), c0 = cpu_s();
        for (int s = 0; s < gen && !rc; s++) {
            rc = decode_step(b, n, spans);
            if (b->tty && (s % 4 == 3 || s == gen - 1))
                progress(b, "bench: decode batch %d, context %lld: rep %d/%d, step %d/%d", n,
                         (long long)res->context, r + 1, reps, s + 1, gen);
        }
        const double dt = cli_now_s() - t0, dc = cpu_s() - c0;
        ru_add_since(&res->ru, r0);
        if (rc) break;
        if (b->probe) res->marks[r + 1] = probe_mark_take(b->probe);
        if (!res->n_reps || dt < res->seconds) {
            res->seconds = dt;
            best_cpu = dc / (dt * threads);
        }
        res->rep_seconds[res->n_reps++] = dt;
    }
    idx_add_since(&res->idx, i0, dsv4_engine_indexer_stats(b->eng));
    progress_done(b);
    if (rc) goto out;
    double sorted[MAX_REPS]; /* median_of sorts in place; rep_seconds keeps the order the marks pair with */
    memcpy(sorted, res->rep_seconds, sizeof(double) * (size_t)res->n_reps);
    res->median_seconds = median_of(sorted, res->n_reps);
    res->cpu_util = best_cpu;

    /* routing of the captured steps -> bytes */
    {
        uint8_t *used = malloc((size_t)L * E);
        uint16_t *rows = malloc((size_t)L * E * sizeof *rows); /* (L, E) rows of the step that chose it */
        int *sel = malloc((size_t)n * K * sizeof(int));
        if (!used || !rows || !sel) {
            free(used); free(rows); free(sel);
            snprintf(b->err.msg, sizeof b->err.msg, "census: out of memory");
            rc = 1;
            goto out;
        }
        double bytes = 0, distinct = 0;
        for (int s = 0; s < cs.steps && !rc; s++) {
            memset(rows, 0, (size_t)L * E * sizeof *rows);
            for (int l = 0; l < L && !rc; l++) {
                const float *st = cs.streams + ((size_t)s * L + l) * n * cs.width;
                rc = dsv4_route_from_streams(b->eng, l, st, cs.tokens + (size_t)s * n, n, sel, &b->err);
                for (int i = 0; !rc && i < n * K; i++) rows[(size_t)l * E + sel[i]]++;
            }
            for (size_t i = 0; i < (size_t)L * E; i++) { /* used: the flags dsv4_step_weights_bytes reads */
                used[i] = rows[i] > 0;
                distinct += used[i];
                if (used[i] && rows[i] <= BENCH_MAX_BATCH) res->expert_rows[rows[i] - 1] += 1;
            }
            bytes += dsv4_step_weights_bytes(&b->w, c, n, used);
        }
        free(used);
        free(rows);
        free(sel);
        if (rc) goto out;
        for (int r = 0; r < BENCH_MAX_BATCH; r++) res->expert_rows[r] /= (double)cs.steps * L;
        res->census_steps = cs.steps;
        res->bytes_per_step = bytes / cs.steps;
        res->experts_per_layer = distinct / ((double)cs.steps * L);
        res->bytes_expected = dsv4_step_weights_expected(&b->w, c, n);
        res->experts_expected = dsv4_expected_distinct_experts(E, K, n);
    }
out:
    dsv4_engine_set_trace(b->eng, NULL, NULL);
    free(cs.streams);
    free(cs.tokens);
    free(spans);
    return rc;
}

/* ---- output ---------------------------------------------------------------------------- */

/* A step can go no faster than its weight bytes allow at the measured bandwidth, nor than
 * its FLOPs allow at the measured FMA peak: a batch of B rows does B times the arithmetic
 * on (nearly) the same weights, so past a few rows decode is compute-bound, and the
 * bandwidth ratio alone would blame the engine for the machine's FMA peak. */
static double decode_bound_s(const decode_result *d, double bw_gbs, double peak_gflops) {
    const double t_bw = d->bytes_per_step / (bw_gbs * 1e9), t_fma = d->flops_per_step / (peak_gflops * 1e9);
    return t_bw > t_fma ? t_bw : t_fma;
}

/* A decode's repetitions against the probe marks around each (paired probes): the medians
 * over repetitions of the bandwidth ratio and of the bound ratio. */
typedef struct paired_ratios { double roofline, bound; } paired_ratios;

static paired_ratios decode_paired(const decode_result *d) {
    double roof[MAX_REPS], bound[MAX_REPS];
    for (int r = 0; r < d->n_reps; r++) {
        const probe_mark m = probe_mark_around(d->marks, r);
        const double steps_s = d->steps / d->rep_seconds[r];
        roof[r] = d->bytes_per_step * steps_s / (m.bw_gbs * 1e9);
        bound[r] = decode_bound_s(d, m.bw_gbs, m.peak_gflops) * steps_s;
    }
    return (paired_ratios){median_of(roof, d->n_reps), median_of(bound, d->n_reps)};
}

static cJSON *decode_paired_json(const decode_result *d) {
    cJSON *o = cJSON_CreateObject();
    const paired_ratios pr = decode_paired(d);
    cJSON_AddNumberToObject(o, "roofline_ratio_median", pr.roofline);
    cJSON_AddNumberToObject(o, "bound_ratio_median", pr.bound);
    cJSON *reps = cJSON_AddArrayToObject(o, "reps");
    for (int r = 0; r < d->n_reps; r++) {
        const probe_mark m = probe_mark_around(d->marks, r);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "ms_per_step", 1e3 * d->rep_seconds[r] / d->steps);
        cJSON_AddNumberToObject(e, "bandwidth_gbs", m.bw_gbs);
        cJSON_AddNumberToObject(e, "peak_gflops", m.peak_gflops);
        cJSON_AddItemToArray(reps, e);
    }
    return o;
}

/* the steps the timed repetitions ran (what d->ru covers) */
static double timed_steps(const decode_result *d) { return (double)d->steps * (d->n_reps > 0 ? d->n_reps : 1); }

/* the last r - 1 with experts chosen by r rows (0 when none) */
static int expert_rows_last(const decode_result *d) {
    int last = 0;
    for (int r = 0; r < BENCH_MAX_BATCH && r < d->batch; r++)
        if (d->expert_rows[r] > 0) last = r;
    return last;
}

static cJSON *decode_json(const decode_result *d, double bw_gbs, double peak_gflops, int paired) {
    cJSON *o = cJSON_CreateObject();
    const double tps = d->batch * d->steps / d->seconds;
    const double steps_s = d->steps / d->seconds;
    cJSON_AddNumberToObject(o, "batch", d->batch);
    cJSON_AddNumberToObject(o, "context", (double)d->context);
    cJSON_AddNumberToObject(o, "steps", d->steps);
    cJSON_AddNumberToObject(o, "decode_tokens_per_s", tps);
    cJSON_AddNumberToObject(o, "decode_tokens_per_s_median", d->batch * d->steps / d->median_seconds);
    cJSON_AddNumberToObject(o, "decode_ms_per_step", 1e3 * d->seconds / d->steps);
    cJSON_AddNumberToObject(o, "decode_bytes_per_step", d->bytes_per_step);
    cJSON_AddNumberToObject(o, "decode_bytes_per_token", d->bytes_per_step / d->batch);
    cJSON_AddNumberToObject(o, "decode_bytes_per_step_expected", d->bytes_expected);
    cJSON_AddNumberToObject(o, "decode_experts_per_layer", d->experts_per_layer);
    cJSON_AddNumberToObject(o, "decode_experts_per_layer_expected", d->experts_expected);
    cJSON *er = cJSON_AddArrayToObject(o, "decode_expert_rows"); /* [r - 1]: experts a layer chosen by r rows */
    for (int r = 0, last = expert_rows_last(d); er && r <= last; r++)
        cJSON_AddItemToArray(er, cJSON_CreateNumber(d->expert_rows[r]));
    cJSON_AddNumberToObject(o, "decode_routing_steps_counted", d->census_steps);
    cJSON_AddNumberToObject(o, "decode_weight_gbs", d->bytes_per_step * steps_s / 1e9);
    cJSON_AddNumberToObject(o, "decode_roofline_tokens_per_s", d->batch * bw_gbs * 1e9 / d->bytes_per_step);
    cJSON_AddNumberToObject(o, "decode_roofline_ratio", d->bytes_per_step * steps_s / (bw_gbs * 1e9));
    cJSON_AddNumberToObject(o, "decode_cache_bytes_per_step", d->cache_bytes_per_step);
    /* which way the indexer scored each row and CSA layer (dsv4_engine_indexer_stats) */
    cJSON_AddItemToObject(o, "decode_indexer_rows_per_step",
                          idx_json(d->idx, d->n_reps > 0 ? (double)d->n_reps * d->steps : 1.0));
    cJSON_AddNumberToObject(o, "decode_roofline_ratio_with_cache",
                            (d->bytes_per_step + d->cache_bytes_per_step) * steps_s / (bw_gbs * 1e9));
    cJSON_AddNumberToObject(o, "decode_flops_per_step", d->flops_per_step);
    cJSON_AddNumberToObject(o, "decode_gflops", d->flops_per_step * steps_s / 1e9);
    cJSON_AddNumberToObject(o, "decode_compute_roofline_tokens_per_s", d->batch * peak_gflops * 1e9 / d->flops_per_step);
    cJSON_AddNumberToObject(o, "decode_compute_ratio", d->flops_per_step * steps_s / (peak_gflops * 1e9));
    cJSON_AddNumberToObject(o, "decode_bound_tokens_per_s", d->batch / decode_bound_s(d, bw_gbs, peak_gflops));
    cJSON_AddNumberToObject(o, "decode_bound_ratio", decode_bound_s(d, bw_gbs, peak_gflops) * steps_s);
    cJSON_AddNumberToObject(o, "decode_cpu_utilization", d->cpu_util);
    cJSON_AddNumberToObject(o, "decode_minor_faults_per_step", d->ru.minflt / timed_steps(d));
    cJSON_AddNumberToObject(o, "decode_major_faults_per_step", d->ru.majflt / timed_steps(d));
    cJSON_AddNumberToObject(o, "decode_system_ms_per_step", 1e3 * d->ru.sys_s / timed_steps(d));
    if (paired) cJSON_AddItemToObject(o, "paired", decode_paired_json(d));
    return o;
}

static void print_decode(const decode_result *d, double bw_gbs, double peak_gflops, int paired) {
    const double steps_s = d->steps / d->seconds;
    printf("decode  batch %2d ctx %6lld: %8.1f tokens/s (%6.2f ms/step, median %.1f tokens/s), "
           "%.1f MB weights/step (%.1f experts/layer), %.1f GB/s = %.0f%% of roofline, "
           "%.1f GFLOP/s = %.0f%% of FMA peak, %.0f%% of the bound, cache %.1f MB/step, cpu %.0f%%\n",
           d->batch, (long long)d->context, d->batch * steps_s, 1e3 / steps_s,
           d->batch * d->steps / d->median_seconds, d->bytes_per_step / 1e6, d->experts_per_layer,
           d->bytes_per_step * steps_s / 1e9, 100 * d->bytes_per_step * steps_s / (bw_gbs * 1e9),
           d->flops_per_step * steps_s / 1e9, 100 * d->flops_per_step * steps_s / (peak_gflops * 1e9),
           100 * decode_bound_s(d, bw_gbs, peak_gflops) * steps_s, d->cache_bytes_per_step / 1e6, 100 * d->cpu_util);
    if (d->batch > 1 && d->census_steps > 0) { /* what the experts' kernels see: rows an expert */
        printf("        experts a layer by the rows that chose them:");
        for (int r = 0, last = expert_rows_last(d); r <= last; r++) printf(" %d: %.1f", r + 1, d->expert_rows[r]);
        printf("\n");
    }
    if (d->ru.minflt + d->ru.majflt > 0) /* first touches in a warm engine's steps: worth a look */
        printf("        page faults in the timed steps: %.2f a step (%.2f ms system time a step)\n",
               (d->ru.minflt + d->ru.majflt) / timed_steps(d), 1e3 * d->ru.sys_s / timed_steps(d));
    if (paired) {
        const paired_ratios pr = decode_paired(d);
        printf("        paired probes: %.0f%% of roofline, %.0f%% of the bound (medians of %d repetitions, "
               "each against the probes beside it)\n", 100 * pr.roofline, 100 * pr.bound, d->n_reps);
    }
}

/* ---- the command ----------------------------------------------------------------------- */

/* a --batches / --contexts list */
typedef struct num_list { long long *v; int *n; long long lo, hi; } num_list;

static int parse_list_opt(const char *v, void *dst, char *msg, size_t n) {
    num_list *l = dst;
    if (!parse_list(v, l->lo, l->hi, l->v, l->n)) return 0;
    snprintf(msg, n, "needs up to %d whole numbers in [%lld, %lld], comma-separated, not '%s'",
             MAX_LIST, l->lo, l->hi, v);
    return -1;
}

static int parse_on_off(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "on")) *(int *)dst = 1;
    else if (!strcmp(v, "off")) *(int *)dst = 0;
    else { snprintf(msg, n, "needs on or off, not '%s'", v); return -1; }
    return 0;
}

/* a --accept list: probabilities in [0, 1] */
typedef struct p_list { double *v; int *n; } p_list;

static int parse_p_list(const char *v, void *dst, char *msg, size_t n) {
    p_list *l = dst;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    *l->n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        const double p = strtod(tok, &end);
        if (*l->n >= BENCH_MTP_MAX_P || end == tok || *end || !(p >= 0 && p <= 1)) {
            snprintf(msg, n, "needs up to %d probabilities in [0, 1], comma-separated, not '%s'",
                     BENCH_MTP_MAX_P, v);
            return -1;
        }
        l->v[(*l->n)++] = p;
    }
    if (*l->n) return 0;
    snprintf(msg, n, "needs at least one probability");
    return -1;
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL;
    int64_t prompt_len = 512, gen = 32, batch = 1, threads = 0, chunk = 0, reps = 2, probe_mb = 512, seed = 1;
    long long batches[MAX_LIST], contexts[MAX_LIST];
    int fill = 0;
    int n_batches = 0, n_contexts = 0, json = 0, mtp = 0, paired = 1, n_accept = 0, pin_threads = 0, kv_dtype = 0, numa = 0, fp4_layout = 0;
    unsigned fidelity = 0;
    double accept[BENCH_MTP_MAX_P];
    p_list accept_list = {accept, &n_accept};
    num_list batch_list = {batches, &n_batches, 1, BENCH_MAX_BATCH}, context_list = {contexts, &n_contexts, 1, 1 << 24};
    const cli_opt opts[] = {
        CLI_STR_OPT("model", 'm', &dir, "DIR", "model directory"),
        CLI_I64_OPT("prompt-len", 0, &prompt_len, 1, 1 << 24, "N", "prompt tokens per sequence"),
        CLI_I64_OPT("gen", 0, &gen, 1, 1 << 20, "N", "decode steps per measurement"),
        CLI_I64_OPT("batch", 0, &batch, 1, BENCH_MAX_BATCH, "B", "sequences decoded together"),
        CLI_I64_OPT("threads", 't', &threads, 0, 4096, "N", "worker threads", .def = "the cores this process may use"),
        CLI_FN_OPT("numa", 0, &numa, cli_parse_numa, "auto|none|interleave", "auto", "NUMA placement of the weights: interleave spreads their pages over the memory nodes; auto = interleave when there are several, none = the OS default"),
        CLI_FN_OPT("kv-dtype", 0, &kv_dtype, cli_parse_kv_dtype, "f32|bf16|fp8[+fp4]", "bf16", "KV cache storage: f32 (the reference), bf16 (half the bytes) or fp8 (FP8-split rows, BF16 indexer keys); +fp4: FP4 indexer keys (with --fidelity F3 only)"),
        CLI_FP4_LAYOUT_OPT(&fp4_layout),
        CLI_FN_OPT("fidelity", 0, &fidelity, cli_parse_fidelity, "SET", "none", "the official model's roundings (official, none, "
                   "or a comma list of F1..F5; F3 allows --kv-dtype ...+fp4)"),
        CLI_FLAG_OPT("pin-threads", 0, &pin_threads, 1, "pin worker thread i to the i-th CPU of the affinity mask (CPU 0 stays with the calling thread)"),
        CLI_FN_OPT("batches", 0, &batch_list, parse_list_opt, "LIST", "", "decode at each of these batch sizes, e.g. 1,2,4,8,16 "
                   "(the top-level figures are those of --batch, added if missing)"),
        CLI_FN_OPT("contexts", 0, &context_list, parse_list_opt, "LIST", "", "then extend the --batch sequences to each context "
                   "length (ascending, e.g. 1024,4096,16384) and decode there"),
        CLI_FLAG_OPT("fill-contexts", 0, &fill, 1, "reach each --contexts length without its prefill: the --batch "
                     "sequences made anew and their caches filled with random rows of the right shapes "
                     "(dsv4_seq_fill_synthetic; the step's cost but for the indexer's choice of entries)"),
        CLI_I64_OPT("chunk", 0, &chunk, 0, 1 << 20, "N", "prefill chunk (the engine's c_max)", .def = "min(2048, longest)"),
        CLI_I64_OPT("reps", 0, &reps, 1, 64, "N", "timed repetitions of each measurement, best kept (decode: after an untimed one that records the routing; MTP measurements: interleaved rounds, medians)"),
        CLI_I64_OPT("probe-mb", 0, &probe_mb, 1, 1 << 16, "N", "bandwidth probe buffer in MiB"),
        CLI_FN_OPT("paired-probes", 0, &paired, parse_on_off, "on|off", "on", "also probe before every timed "
                   "repetition and after the last, and report each measurement's median ratio against the "
                   "probes beside each repetition (the host's minute), next to the run's best probes"),
        CLI_I64_OPT("seed", 's', &seed, 0, INT64_MAX, "N", "prompt token seed"),
        CLI_FLAG_OPT("json", 0, &json, 1, "one JSON object on stdout instead of the summary "
                     "(with --mtp on: one per measurement and line)"),
        CLI_FN_OPT("mtp", 0, &mtp, parse_on_off, "on|off", "off", "on: MTP speculative decoding against "
                   "plain decoding at each batch size (acceptance, tokens per step, tokens/s, bytes "
                   "per step, the ideal gain); no probes, no contexts"),
        CLI_FN_OPT("accept", 0, &accept_list, parse_p_list, "LIST", "", "with --mtp on, also forced drafts: the "
                   "plain run's token with probability p, else a wrong one, for each p (e.g. 0,0.5,0.8,0.9,1)"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"bench", "--model DIR [options]",
                         "Times prefill and batched greedy decode on DIR and compares them with this\n"
                         "machine's measured memory bandwidth and FP32 FMA peak (probed in the same run).",
                         {opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if (!dir) {
        fprintf(stderr, "dsv4 bench: --model DIR is required\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    cli_warn_threads("bench", (int)threads);
    /* batch list: sorted, --batch included, duplicates dropped */
    int have = 0;
    for (int i = 0; i < n_batches; i++) have |= batches[i] == batch;
    if (!have) {
        if (n_batches == MAX_LIST) {
            fprintf(stderr, "dsv4 bench: too many batch sizes\n");
            return 2;
        }
        batches[n_batches++] = batch;
    }
    qsort(batches, (size_t)n_batches, sizeof batches[0], cmp_ll);
    int nb = 0;
    for (int i = 0; i < n_batches; i++)
        if (!nb || batches[i] != batches[nb - 1]) batches[nb++] = batches[i];
    n_batches = nb;
    qsort(contexts, (size_t)n_contexts, sizeof contexts[0], cmp_ll);
    const int max_batch = (int)batches[n_batches - 1];
    if (!mtp && n_accept) {
        fprintf(stderr, "dsv4 bench: --accept needs --mtp on\n");
        return 2;
    }
    if (mtp) {
        if (n_contexts) {
            fprintf(stderr, "dsv4 bench: --contexts does not go with --mtp on\n");
            return 2;
        }
        const bench_mtp_opts mo = {dir, prompt_len, gen, reps, seed, threads, chunk, batches, n_batches,
                                   accept, n_accept, json};
        return bench_mtp(&mo);
    }

    /* the longest a sequence gets: prompt or last context, plus every decode step */
    const long long steps_total = (gen * (reps + 1) + 1) * (n_batches + n_contexts);
    long long longest = prompt_len;
    if (n_contexts && contexts[n_contexts - 1] > longest) longest = contexts[n_contexts - 1];
    const long long max_context = longest + steps_total + 1;
    if (!chunk) chunk = longest < 2048 ? longest : 2048;
    if (chunk > max_context) chunk = max_context;

    bench b = {0};
    b.json = json;
    b.kv_dtype = kv_dtype;
    b.tty = isatty(2);
    b.rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0xbf58476d1ce4e5b9ull);
    if (!b.rng) b.rng = 1;
    int status = 1;
    const double load_start = cli_loadavg();
    progress(&b, "bench: loading %s", dir);
    if (dsv4_model_open(dir, &b.model, &b.err)) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        return 1;
    }
    b.cfg = &b.model->cfg;
    b.V = b.cfg->vocab_size;
    b.D = b.cfg->hidden_size;
    dsv4_engine_opts eo = {0};
    eo.max_context = max_context;
    eo.max_seqs = max_batch;
    eo.c_max = (int)chunk;
    eo.max_rows = (int)(chunk > max_batch ? chunk : max_batch); /* a prefill chunk or a decode batch */
    eo.threads = (int)threads;
    eo.pin_threads = pin_threads;
    eo.kv_dtype = kv_dtype;
    eo.fidelity = fidelity;
    eo.numa = numa;
    eo.fp4_layout = fp4_layout;
    eo.scratch_resident = 1; /* as dsv4 serve: no timed call pays the arena's page faults */
    const double t_create = cli_now_s();
    if (dsv4_engine_create(b.model, &eo, &b.eng, &b.err) || dsv4_step_weights_init(b.eng, &b.w, &b.err)) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out;
    }
    const double create_s = cli_now_s() - t_create; /* with --weights-memory copy/lanes: the copy */
    int64_t fp4_lanes, fp4_natural;
    dsv4_engine_fp4_counts(b.eng, &fp4_lanes, &fp4_natural);
    const int T = dsv4_kctx_threads(b.eng->k);
    b.seqs = calloc((size_t)max_batch, sizeof *b.seqs);
    b.row_of_seq = calloc((size_t)max_batch, sizeof *b.row_of_seq);
    b.next = calloc((size_t)max_batch, sizeof *b.next);
    const int max_rows = (int)(chunk > max_batch ? chunk : max_batch);
    b.hidden = malloc((size_t)max_rows * b.D * sizeof(float));
    b.logits = malloc((size_t)max_batch * b.V * sizeof(float));
    decode_result *dec = calloc((size_t)(n_batches + n_contexts), sizeof *dec);
    prefill_result *ctx_pf = calloc((size_t)(n_contexts ? n_contexts : 1), sizeof *ctx_pf);
    if (!b.seqs || !b.row_of_seq || !b.next || !b.hidden || !b.logits || !dec || !ctx_pf) {
        fprintf(stderr, "dsv4 bench: out of memory\n");
        free(dec);
        free(ctx_pf);
        goto out;
    }

    /* 1. probes, on the engine's threads */
    dsv4_probe_result bw0, bw1, fma;
    progress(&b, "bench: probing memory bandwidth and FMA peak");
    if (dsv4_probe_bandwidth(b.eng->k, (size_t)probe_mb << 20, 0, &bw0, &b.err) ||
        dsv4_probe_fma(b.eng->k, 0, 0, &fma, &b.err)) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out_free;
    }
    /* paired probes: the same buffer size, FMA passes of 50 ms (one mark ~0.15 s) */
    if (paired && dsv4_probe_create(b.eng->k, (size_t)probe_mb << 20, 0.05, &b.probe, &b.err)) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out_free;
    }
    progress_done(&b);

    /* 2. prefill: sequence 0, `reps` times from scratch, best kept; then the others once */
    prefill_result pf = {0};
    int rc = 0, pf_reps = 0;
    prefill_result pf_rep[MAX_REPS]; /* each repetition, in the order run */
    probe_mark pf_marks[MAX_REPS + 1];
    if (b.probe) pf_marks[0] = probe_mark_take(b.probe);
    for (int r = 0; r < reps && !rc; r++) {
        if (r > 0 && (rc = dsv4_seq_free(b.eng, b.seqs[0], &b.err))) break;
        if ((rc = dsv4_seq_create(b.eng, &b.seqs[0], &b.err))) break;
        prefill_result one = {0};
        rc = prefill_to(&b, 1, prompt_len, (int)chunk, &one, "prefill");
        if (!rc && (r == 0 || one.seconds < pf.seconds)) pf = one;
        if (!rc) pf_rep[pf_reps++] = one;
        if (!rc && b.probe) pf_marks[r + 1] = probe_mark_take(b.probe);
    }
    for (int s = 1; s < max_batch && !rc; s++) rc = dsv4_seq_create(b.eng, &b.seqs[s], &b.err);
    if (!rc && max_batch > 1) {
        prefill_result rest = {0};
        /* prefill_to walks seqs[0..n); sequence 0 is already at prompt_len */
        rc = prefill_to(&b, max_batch, prompt_len, (int)chunk, &rest, "prefill of the batch");
    }
    /* 3. decode at each batch size */
    for (int i = 0; i < n_batches && !rc; i++)
        rc = decode_measure(&b, (int)batches[i], (int)gen, (int)reps, T, &dec[i]);
    /* 4. longer contexts */
    for (int i = 0; i < n_contexts && !rc; i++) {
        int64_t len = dsv4_seq_length(b.eng, b.seqs[0]);
        if (fill) {
            progress(&b, "bench: filling %lld sequence(s) to %lld positions", (long long)batch, contexts[i]);
            for (int s = 0; s < (int)batch && !rc; s++) {
                rc = dsv4_seq_free(b.eng, b.seqs[s], &b.err);
                if (!rc) rc = dsv4_seq_create(b.eng, &b.seqs[s], &b.err);
                if (!rc) rc = dsv4_seq_fill_synthetic(b.eng, b.seqs[s], contexts[i], (uint64_t)seed + (uint64_t)s, &b.err);
            }
            progress_done(&b);
        } else if (contexts[i] > len) {
            char what[64];
            snprintf(what, sizeof what, "extend to %lld", contexts[i]);
            rc = prefill_to(&b, (int)batch, contexts[i], (int)chunk, &ctx_pf[i], what);
        }
        if (!rc) rc = decode_measure(&b, (int)batch, (int)gen, (int)reps, T, &dec[n_batches + i]);
    }
    if (rc) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out_free;
    }
    progress(&b, "bench: probing memory bandwidth again");
    if (dsv4_probe_bandwidth(b.eng->k, (size_t)probe_mb << 20, 0, &bw1, &b.err)) {
        progress_done(&b);
        fprintf(stderr, "dsv4 bench: %s\n", b.err.msg);
        goto out_free;
    }
    progress_done(&b);
    const double load_end = cli_loadavg();

    /* figures */
    const double bw = bw0.best > bw1.best ? bw0.best : bw1.best;
    const decode_result *top = NULL;
    for (int i = 0; i < n_batches; i++)
        if (batches[i] == batch) top = &dec[i];
    const double pf_tps = pf.tokens / pf.seconds, pf_gflops = pf.flops / pf.seconds / 1e9;
    double pf_paired = 0; /* the median over prefill repetitions against the FMA marks beside each */
    if (b.probe) {
        double v[MAX_REPS];
        for (int r = 0; r < pf_reps; r++) v[r] = pf.flops / pf_rep[r].seconds / 1e9 / probe_mark_around(pf_marks, r).peak_gflops;
        pf_paired = median_of(v, pf_reps);
    }
    const double dec_tps = top->batch * top->steps / top->seconds;
    const double dec_ratio = top->bytes_per_step * (top->steps / top->seconds) / (bw * 1e9);
    double all_w = (double)b.w.global + (double)b.V * b.w.embed_row;
    for (int l = 0; l < b.w.n_layers; l++) {
        all_w += (double)b.w.layer_fixed[l];
        for (int x = 0; x < b.w.n_experts; x++) all_w += (double)b.w.expert[(size_t)l * b.w.n_experts + x];
    }
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    const long l3 = l3_bytes();

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", dir);
        cJSON *m = cJSON_AddObjectToObject(o, "machine");
        cJSON_AddStringToObject(m, "cpu", cpu);
        cJSON_AddNumberToObject(m, "online_cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
        if (l3 > 0) cJSON_AddNumberToObject(m, "l3_bytes", (double)l3);
        else cJSON_AddNullToObject(m, "l3_bytes"); /* unknown, not a size */
        cJSON_AddNumberToObject(m, "loadavg_start", load_start);
        cJSON_AddNumberToObject(m, "loadavg_end", load_end);
        cJSON_AddNumberToObject(o, "threads", T);
        cJSON_AddStringToObject(o, "simd", dsv4_simd_name(dsv4_kctx_simd(b.eng->k)));
        cJSON_AddStringToObject(o, "kv_dtype", dsv4_kv_dtype_name(kv_dtype));
        cJSON_AddNumberToObject(o, "fidelity", fidelity);
        /* what the engine did (on one node: none, whatever was asked) */
        cJSON_AddStringToObject(o, "numa", dsv4_numa_name(dsv4_engine_get_opts(b.eng).numa));
        cJSON_AddNumberToObject(o, "numa_nodes", dsv4_engine_numa_nodes(b.eng));
        /* weights_memory: --weights-memory as run; fp4_layout: the same value under its old key */
        cJSON_AddStringToObject(o, "weights_memory", dsv4_fp4_layout_name(dsv4_engine_get_opts(b.eng).fp4_layout));
        cJSON_AddStringToObject(o, "fp4_layout", dsv4_fp4_layout_name(dsv4_engine_get_opts(b.eng).fp4_layout));
        cJSON_AddNumberToObject(o, "fp4_lanes", (double)fp4_lanes);
        cJSON_AddNumberToObject(o, "fp4_natural", (double)fp4_natural);
        cJSON_AddNumberToObject(o, "engine_create_s", create_s);
        cJSON_AddNumberToObject(o, "prompt_len", (double)prompt_len);
        cJSON_AddNumberToObject(o, "gen", (double)gen);
        cJSON_AddNumberToObject(o, "batch", (double)batch);
        cJSON_AddNumberToObject(o, "reps", (double)reps);
        cJSON_AddNumberToObject(o, "chunk", (double)chunk);
        cJSON_AddNumberToObject(o, "model_weight_bytes", all_w);
        {
            /* what a step's bytes are made of: per step, per row, per selected expert */
            double fixed = 0, experts = 0;
            for (int l = 0; l < b.w.n_layers; l++) {
                fixed += (double)b.w.layer_fixed[l];
                for (int x = 0; x < b.w.n_experts; x++) experts += (double)b.w.expert[(size_t)l * b.w.n_experts + x];
            }
            cJSON *wb = cJSON_AddObjectToObject(o, "step_weights");
            cJSON_AddNumberToObject(wb, "head_norm_hc_head_bytes", (double)b.w.global);
            cJSON_AddNumberToObject(wb, "layers_non_expert_bytes", fixed);
            cJSON_AddNumberToObject(wb, "embed_row_bytes", (double)b.w.embed_row);
            cJSON_AddNumberToObject(wb, "routed_expert_bytes_mean",
                                    b.w.n_layers > 0 && b.w.n_experts > 0 ? experts / ((double)b.w.n_layers * b.w.n_experts) : 0);
            cJSON_AddNumberToObject(wb, "routed_experts_all_layers_bytes", experts);
        }
        cJSON_AddNumberToObject(o, "measured_bandwidth_gbs", bw);
        cJSON_AddNumberToObject(o, "bandwidth_gbs_start", bw0.best);
        cJSON_AddNumberToObject(o, "bandwidth_gbs_end", bw1.best);
        cJSON_AddNumberToObject(o, "bandwidth_gbs_median", bw0.median);
        cJSON_AddNumberToObject(o, "measured_peak_gflops", fma.best);
        cJSON_AddNumberToObject(o, "peak_gflops_median", fma.median);
        cJSON_AddStringToObject(o, "peak_simd", dsv4_simd_name(fma.simd));
        cJSON_AddNumberToObject(o, "prefill_tokens", (double)pf.tokens);
        cJSON_AddNumberToObject(o, "prefill_seconds", pf.seconds);
        cJSON_AddNumberToObject(o, "prefill_tokens_per_s", pf_tps);
        cJSON_AddNumberToObject(o, "prefill_flops", pf.flops);
        cJSON_AddNumberToObject(o, "prefill_gflops", pf_gflops);
        cJSON_AddNumberToObject(o, "prefill_roofline_ratio", pf_gflops / fma.best);
        cJSON *prr = cJSON_AddArrayToObject(o, "prefill_reps"); /* in order: the engine's first prefill first */
        for (int r = 0; r < pf_reps; r++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "seconds", pf_rep[r].seconds);
            cJSON_AddNumberToObject(e, "minor_faults", pf_rep[r].ru.minflt);
            cJSON_AddNumberToObject(e, "major_faults", pf_rep[r].ru.majflt);
            cJSON_AddNumberToObject(e, "system_seconds", pf_rep[r].ru.sys_s);
            cJSON_AddItemToArray(prr, e);
        }
        cJSON_AddBoolToObject(o, "paired_probes", b.probe != NULL);
        if (b.probe) {
            cJSON_AddNumberToObject(o, "prefill_roofline_ratio_paired", pf_paired);
            cJSON *pm = cJSON_AddArrayToObject(o, "prefill_paired_reps");
            for (int r = 0; r < pf_reps; r++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "seconds", pf_rep[r].seconds);
                cJSON_AddNumberToObject(e, "peak_gflops", probe_mark_around(pf_marks, r).peak_gflops);
                cJSON_AddItemToArray(pm, e);
            }
            const paired_ratios pr = decode_paired(top);
            cJSON_AddNumberToObject(o, "decode_roofline_ratio_paired", pr.roofline);
            cJSON_AddNumberToObject(o, "decode_bound_ratio_paired", pr.bound);
        }
        cJSON_AddNumberToObject(o, "decode_tokens_per_s", dec_tps);
        cJSON_AddNumberToObject(o, "decode_ms_per_step", 1e3 * top->seconds / top->steps);
        cJSON_AddNumberToObject(o, "decode_bytes_per_step", top->bytes_per_step);
        cJSON_AddNumberToObject(o, "decode_bytes_per_token", top->bytes_per_step / top->batch);
        cJSON_AddStringToObject(o, "decode_bytes_source", "routing of the timed steps (trace census)");
        cJSON_AddNumberToObject(o, "decode_roofline_tokens_per_s", top->batch * bw * 1e9 / top->bytes_per_step);
        cJSON_AddNumberToObject(o, "decode_roofline_ratio", dec_ratio);
        cJSON *arr = cJSON_AddArrayToObject(o, "batches");
        for (int i = 0; i < n_batches; i++) cJSON_AddItemToArray(arr, decode_json(&dec[i], bw, fma.best, b.probe != NULL));
        arr = cJSON_AddArrayToObject(o, "contexts");
        for (int i = 0; i < n_contexts; i++) {
            cJSON *d = decode_json(&dec[n_batches + i], bw, fma.best, b.probe != NULL);
            cJSON_AddBoolToObject(d, "context_filled", fill);
            if (ctx_pf[i].seconds > 0) {
                cJSON_AddNumberToObject(d, "prefill_from", (double)ctx_pf[i].start);
                cJSON_AddNumberToObject(d, "prefill_tokens", (double)ctx_pf[i].total);
                cJSON_AddNumberToObject(d, "prefill_tokens_per_s", ctx_pf[i].total / ctx_pf[i].seconds);
                cJSON_AddNumberToObject(d, "prefill_gflops", ctx_pf[i].flops / ctx_pf[i].seconds / 1e9);
                cJSON_AddItemToObject(d, "prefill_indexer_rows", idx_json(ctx_pf[i].idx, 1.0));
            }
            cJSON_AddItemToArray(arr, d);
        }
        char *s = cJSON_Print(o);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        char l3s[32];
        if (l3 > 0) snprintf(l3s, sizeof l3s, "%.0f MiB", l3 / 1048576.0);
        else snprintf(l3s, sizeof l3s, "unknown");
        printf("machine: %s, %ld cores online, L3 %s, load %.2f -> %.2f; %d threads, %s, numa %s (%d node%s)\n",
               cpu, sysconf(_SC_NPROCESSORS_ONLN), l3s, load_start, load_end, T,
               dsv4_simd_name(dsv4_kctx_simd(b.eng->k)), dsv4_numa_name(dsv4_engine_get_opts(b.eng).numa),
               dsv4_engine_numa_nodes(b.eng), dsv4_engine_numa_nodes(b.eng) == 1 ? "" : "s");
        printf("engine:  weights memory %s (%lld FP4 matrices in lanes, %lld in natural order), created in %.3f s\n",
               dsv4_fp4_layout_name(dsv4_engine_get_opts(b.eng).fp4_layout), (long long)fp4_lanes,
               (long long)fp4_natural, create_s);
        printf("model:   %s, %.1f MB of weights as run\n", dir, all_w / 1e6);
        printf("probes:  bandwidth %.1f GB/s (start %.1f, end %.1f), FMA peak %.1f GFLOP/s (%s)\n", bw,
               bw0.best, bw1.best, fma.best, dsv4_simd_name(fma.simd));
        printf("prefill: %lld tokens in %.3f s: %.1f tokens/s, %.1f GFLOP/s useful = %.0f%% of FMA peak\n",
               (long long)pf.tokens, pf.seconds, pf_tps, pf_gflops, 100 * pf_gflops / fma.best);
        printf("         repetitions (the engine's first first):");
        for (int r = 0; r < pf_reps; r++)
            printf("%s %.3f s (%.0f page faults, %.3f s system)", r ? "," : "", pf_rep[r].seconds,
                   pf_rep[r].ru.minflt + pf_rep[r].ru.majflt, pf_rep[r].ru.sys_s);
        printf("\n");
        for (int i = 0; i < n_batches; i++) print_decode(&dec[i], bw, fma.best, b.probe != NULL);
        for (int i = 0; i < n_contexts; i++) {
            if (ctx_pf[i].seconds > 0)
                printf("prefill %lld -> %lld: %.1f tokens/s, %.1f GFLOP/s\n", (long long)ctx_pf[i].start,
                       (long long)(ctx_pf[i].start + ctx_pf[i].tokens),
                       ctx_pf[i].total / ctx_pf[i].seconds, ctx_pf[i].flops / ctx_pf[i].seconds / 1e9);
            print_decode(&dec[n_batches + i], bw, fma.best, b.probe != NULL);
        }
        printf("roofline: decode %.0f%% of bandwidth (%.1f MB/token), prefill %.0f%% of FMA peak\n",
               100 * dec_ratio, top->bytes_per_step / top->batch / 1e6, 100 * pf_gflops / fma.best);
        if (b.probe) {
            const paired_ratios pr = decode_paired(top);
            printf("paired:  decode %.0f%% of bandwidth, %.0f%% of the bound; prefill %.0f%% of FMA peak "
                   "(medians over repetitions, each against the probes beside it)\n",
                   100 * pr.roofline, 100 * pr.bound, 100 * pf_paired);
        }
    }
    status = 0;
out_free:
    dsv4_probe_free(b.probe);
    free(dec);
    free(ctx_pf);
out:
    dsv4_step_weights_free(&b.w);
    free(b.seqs);
    free(b.row_of_seq);
    free(b.next);
    free(b.hidden);
    free(b.logits);
    dsv4_engine_free(b.eng);
    dsv4_model_close(b.model);
    return status;
}
