/* bench_prefix.c — the prefix cache and KV files (spec/serving.md §g, issue 11): time to
 * first token of a request whose first P tokens are a cached prefix against the same
 * request cold, snapshot bytes, and KV-file save / load throughput.
 *
 *   bench_prefix --model DIR [--prefix 4096,16384] [--tail 64] [--chunk 256] [--reps 2]
 *                [--threads T] [--dir /tmp]
 *
 * For each prefix length P: a random prompt of P + tail tokens.
 *   cold:    prefill in chunks of --chunk (the server's step), LM head on the last row, argmax;
 *   cached:  dsv4_prefix_start restores P tokens, prefill of the tail, LM head, argmax
 *            (the two first tokens must agree: printed as "same_token");
 *   file:    dsv4_snapshot_save of the prefix (temp file, fsync, rename) and, after the file's
 *            pages were dropped from the page cache (posix_fadvise DONTNEED on the synced
 *            file), dsv4_snapshot_load (read, every CRC) + dsv4_snapshot_restore into the pools.
 * Times are the best of --reps (wall clock, CLOCK_MONOTONIC). One JSON line per P on stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "dsv4.h"

static void die(const char *what, const dsv4_err *err) {
    fprintf(stderr, "bench_prefix: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

typedef struct {
    dsv4_engine *e;
    int D, HC, V, chunk;
    float *hidden;   /* (1, D) */
    float *streams;  /* (1, hc, D) */
    float *logits;   /* (V) */
} bench;

/* Prefills tokens [from, n) of seq in chunks; the last chunk gives the last row's hidden
 * (and streams); returns the argmax token of its logits. */
static int32_t prefill(bench *b, int seq, const int32_t *tok, int64_t from, int64_t n) {
    dsv4_err err = {0};
    for (int64_t s = from; s < n; s += b->chunk) {
        const int c = (int)(n - s < b->chunk ? n - s : b->chunk);
        dsv4_span sp = {.seq = seq, .start = s, .n_tokens = c, .tokens = tok + s,
                        .n_hidden = s + c == n, .n_streams = s + c == n};
        if (dsv4_forward(b->e, &sp, 1, b->hidden, b->streams, &err)) die("forward", &err);
    }
    if (dsv4_lm_head(b->e, b->hidden, 1, b->logits, &err)) die("lm head", &err);
    int32_t best = 0;
    for (int v = 1; v < b->V; v++)
        if (b->logits[v] > b->logits[best]) best = v;
    return best;
}

static int64_t file_bytes(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (int64_t)st.st_size;
}

/* Drops the (synced) file's pages from the page cache, so the next read comes from disk. */
static int drop_cached(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}

static int parse_list(const char *s, int64_t *out, int cap) {
    int n = 0;
    for (;;) {
        char *end;
        const long long v = strtoll(s, &end, 10);
        if (end == s || v < 1 || n == cap) return -1;
        out[n++] = v;
        if (!*end) return n;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *dir = "/tmp";
    int64_t prefixes[8] = {4096, 16384};
    int n_prefix = 2, tail = 64, reps = 2, threads = 0;
    bench b = {.chunk = 256};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "bench_prefix: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prefix")) n_prefix = parse_list(v, prefixes, 8);
        else if (!strcmp(a, "--tail")) tail = atoi(v);
        else if (!strcmp(a, "--chunk")) b.chunk = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--dir")) dir = v;
        else { fprintf(stderr, "bench_prefix: unknown option %s\n", a); return 2; }
        i++;
    }
    if (!model_dir || n_prefix < 1 || tail < 1 || b.chunk < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_prefix --model DIR [--prefix 4096,16384] [--tail 64] "
                "[--chunk 256] [--reps 2] [--threads T] [--dir /tmp]\n");
        return 2;
    }
    dsv4_err err = {0};
    dsv4_model *m;
    if (dsv4_model_open(model_dir, &m, &err)) die("model", &err);
    const dsv4_model_info info = dsv4_model_get_info(m);
    b.D = info.hidden_size;
    b.HC = info.hc_mult;
    b.V = info.vocab_size;
    int64_t longest = 0;
    for (int i = 0; i < n_prefix; i++) longest = prefixes[i] > longest ? prefixes[i] : longest;
    dsv4_engine_opts o = {0};
    o.max_context = longest + tail + 8;
    o.max_seqs = 2;
    o.c_max = b.chunk;
    o.max_rows = b.chunk;
    o.threads = threads;
    /* no MTP: the bench's prefill does not run MTP rows (a snapshot then needs m = n - 1) */
    if (dsv4_engine_create(m, &o, &b.e, &err)) die("engine", &err);
    b.hidden = malloc((size_t)b.D * sizeof(float));
    b.streams = malloc((size_t)b.HC * b.D * sizeof(float));
    b.logits = malloc((size_t)b.V * sizeof(float));
    const int A = dsv4_engine_alignment(b.e);
    uint64_t rng = 0x9e3779b97f4a7c15ull;

    for (int pi = 0; pi < n_prefix; pi++) {
        const int64_t P = prefixes[pi] / A * A, N = P + tail;
        int32_t *tok = malloc((size_t)N * sizeof *tok);
        for (int64_t i = 0; i < N; i++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            tok[i] = (int32_t)(2 + (rng >> 11) % (uint64_t)(b.V - 2));
        }
        double cold = 1e30, cached = 1e30, save_s = 1e30, load_s = 1e30, restore_s = 1e30;
        int32_t t_cold = -1, t_cached = -1, t_file = -1;
        int64_t bytes = 0;
        char path[4096];
        snprintf(path, sizeof path, "%s/bench_prefix_%lld.kv", dir, (long long)P);
        for (int r = 0; r < reps; r++) {
            /* cold: the whole prompt; on the way its prefix goes into the cache */
            int seq;
            if (dsv4_seq_create(b.e, &seq, &err)) die("seq", &err);
            double t0 = now_s();
            t_cold = prefill(&b, seq, tok, 0, N);
            double t = now_s() - t0;
            cold = t < cold ? t : cold;
            if (dsv4_seq_free(b.e, seq, &err)) die("free", &err);
            /* the prefix state (outside the timed runs) */
            if (dsv4_seq_create(b.e, &seq, &err)) die("seq", &err);
            prefill(&b, seq, tok, 0, P);
            dsv4_snapshot *snap;
            if (dsv4_snapshot_take(b.e, seq, tok, b.hidden, b.streams, &snap, &err)) die("take", &err);
            if (dsv4_prefix_insert(b.e, seq, tok, b.hidden, b.streams, &err)) die("insert", &err);
            if (dsv4_seq_free(b.e, seq, &err)) die("free", &err);
            /* cached: restore P, prefill the tail */
            int64_t got;
            t0 = now_s();
            if (dsv4_prefix_start(b.e, tok, N, &seq, &got, NULL, NULL, &err)) die("start", &err);
            if (got != P) { fprintf(stderr, "bench_prefix: restored %lld, not %lld\n", (long long)got, (long long)P); return 1; }
            t_cached = prefill(&b, seq, tok, P, N);
            t = now_s() - t0;
            cached = t < cached ? t : cached;
            if (dsv4_seq_free(b.e, seq, &err)) die("free", &err);
            /* the file */
            t0 = now_s();
            if (dsv4_snapshot_save(b.e, snap, path, &err)) die("save", &err);
            t = now_s() - t0;
            save_s = t < save_s ? t : save_s;
            dsv4_snapshot_free(b.e, snap);
            bytes = file_bytes(path);
            if (drop_cached(path)) fprintf(stderr, "bench_prefix: posix_fadvise failed: the load may read the page cache\n");
            t0 = now_s();
            if (dsv4_snapshot_load(b.e, path, &snap, &err)) die("load", &err);
            t = now_s() - t0;
            load_s = t < load_s ? t : load_s;
            t0 = now_s();
            if (dsv4_snapshot_restore(b.e, snap, &seq, NULL, NULL, &err)) die("restore", &err);
            t = now_s() - t0;
            restore_s = t < restore_s ? t : restore_s;
            t_file = prefill(&b, seq, tok, P, N);
            dsv4_snapshot_free(b.e, snap);
            if (dsv4_seq_free(b.e, seq, &err)) die("free", &err);
        }
        unlink(path);
        const dsv4_prefix_stats st = dsv4_prefix_get_stats(b.e);
        printf("{\"bench\":\"prefix\",\"model\":\"%s\",\"threads\":%d,\"chunk\":%d,"
               "\"prefix\":%lld,\"tail\":%d,\"reps\":%d,\"ttft_cold_s\":%.4f,\"ttft_cached_s\":%.4f,"
               "\"speedup\":%.2f,\"same_token\":%s,\"file_bytes\":%lld,\"file_bytes_per_token\":%.1f,"
               "\"save_s\":%.4f,\"save_GBps\":%.3f,\"load_s\":%.4f,\"load_GBps\":%.3f,"
               "\"restore_s\":%.4f,\"cache_host_bytes\":%lld,\"cache_pool_bytes\":%lld}\n",
               model_dir, dsv4_engine_get_opts(b.e).threads, b.chunk, (long long)P, tail, reps,
               cold, cached, cold / cached, t_cold == t_cached && t_cold == t_file ? "true" : "false",
               (long long)bytes, (double)bytes / (double)P, save_s, bytes / save_s * 1e-9, load_s,
               bytes / load_s * 1e-9, restore_s, (long long)st.host_bytes, (long long)st.pool_bytes);
        fflush(stdout);
        free(tok);
    }
    free(b.hidden); free(b.streams); free(b.logits);
    dsv4_engine_free(b.e);
    dsv4_model_close(m);
    return 0;
}
