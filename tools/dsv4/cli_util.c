/* cli_util.c — helpers shared by the subcommands (see cli_util.h). */
#include "cli_util.h"

#include "dsv4.h"
#include "dsv4_text.h"
#include "cli_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_parse_kv_dtype(const char *v, void *dst, char *msg, size_t n) {
    dsv4_err err = {0};
    if (!dsv4_kv_dtype_parse(v, dst, &err)) return 0;
    snprintf(msg, n, "%s", err.msg);
    return -1;
}

int cli_parse_fidelity(const char *v, void *dst, char *msg, size_t n) {
    dsv4_err err = {0};
    if (!dsv4_fidelity_parse(v, dst, &err)) return 0;
    snprintf(msg, n, "%s", err.msg);
    return -1;
}

int cli_parse_numa(const char *v, void *dst, char *msg, size_t n) {
    dsv4_err err = {0};
    if (!dsv4_numa_parse(v, dst, &err)) return 0;
    snprintf(msg, n, "%s", err.msg);
    return -1;
}

int cli_parse_fp4_layout(const char *v, void *dst, char *msg, size_t n) {
    dsv4_err err = {0};
    if (!dsv4_fp4_layout_parse(v, dst, &err)) return 0;
    snprintf(msg, n, "%s", err.msg);
    return -1;
}

int cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    int64_t v;
    if (cli_parse_i64(s, lo, hi, &v)) return -1;
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **out, char *errbuf, size_t errlen) {
    size_t cap = 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) { snprintf(errbuf, errlen, "out of memory"); return -1; }
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            snprintf(errbuf, errlen, "bad token id near '%.20s'", p);
            free(ids);
            return -1;
        }
        if (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            snprintf(errbuf, errlen, "bad token id near '%.20s'", p);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *grown = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!grown) { free(ids); snprintf(errbuf, errlen, "out of memory"); return -1; }
            ids = grown;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return (int)n;
}

int cli_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    return 0;
}

char *cli_read_input(const char *path, size_t limit, size_t *len, char *errbuf, size_t errlen) {
    const int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(errbuf, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    const char *name = is_stdin ? "standard input" : path;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap > limit) break;
        char *grown = realloc(buf, (cap *= 2) + 1);
        if (!grown) { free(buf); buf = NULL; }
        else buf = grown;
    }
    const int read_error = ferror(f);
    const int saved = errno;
    if (!is_stdin) fclose(f);
    if (!buf) { snprintf(errbuf, errlen, "%s: out of memory", name); return NULL; }
    if (read_error || n > limit) {
        if (read_error) snprintf(errbuf, errlen, "cannot read %s: %s", name, strerror(saved));
        else snprintf(errbuf, errlen, "%s is larger than the %zu MB this input may hold", name, limit >> 20);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

struct dsv4_tokenizer *cli_load_tokenizer(const char *cmd, const char *path) {
    char file[4200];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        path = file;
    }
    dsv4_err err = {0};
    dsv4_tokenizer *tok;
    if (dsv4_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
        return NULL;
    }
    return tok;
}

void cli_warn_threads(const char *cmd, int threads) {
    const int cores = dsv4_available_cores();
    if (threads > cores)
        fprintf(stderr, "dsv4 %s: warning: %d threads on %d available core%s: the threads will "
                        "wait on each other (leave --threads unset to use %d)\n", cmd, threads, cores,
                cores == 1 ? "" : "s", cores);
}

void cli_warn_fit(const char *cmd, const dsv4_model *m, const dsv4_engine_opts *eo) {
    dsv4_mem_fit f;
    dsv4_err err = {0};
    if (dsv4_mem_fit_model(m, eo, &f, &err) || !f.ram_bytes || f.fits) return;
    fprintf(stderr, "dsv4 %s: warning: weights %.1f GB + cache %.1f GB + scratch %.1f GB do not fit in "
                    "this machine's %.1f GB of memory: expect the system to read weights from disk on "
                    "every token", cmd, f.weights_bytes / 1e9, f.cache_bytes / 1e9, f.scratch_bytes / 1e9,
            f.ram_bytes / 1e9);
    if (f.ep_ranks) fprintf(stderr, " (expert parallelism over %d such machines would fit)", f.ep_ranks);
    fprintf(stderr, "\n");
}

static double since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

void cli_progress_start(cli_progress *w, const char *what) {
    memset(w, 0, sizeof *w);
    w->what = what;
    w->tty = isatty(2);
    clock_gettime(CLOCK_MONOTONIC, &w->t0);
}

void cli_progress_show(void *user, uint64_t done, uint64_t total) {
    cli_progress *w = user;
    const double s = since(&w->t0), rate = s > 0 ? done / s : 0;
    const int pct = total ? (int)(100 * done / total) : 100;
    if (w->tty) {
        char eta[32] = "";
        if (rate > 0 && done < total) snprintf(eta, sizeof eta, ", %.0f s left", (double)(total - done) / rate);
        fprintf(stderr, "\r%s: %3d%%  %.2f / %.2f GB, %.2f GB/s%s   ", w->what, pct, done / 1e9,
                total / 1e9, rate / 1e9, eta);
        if (done >= total) fputc('\n', stderr);
    } else if (pct / 10 > w->last_decile || (done >= total && w->last_decile < 10)) {
        w->last_decile = pct / 10;
        fprintf(stderr, "%s: %d%% (%.2f / %.2f GB, %.2f GB/s)\n", w->what, pct, done / 1e9, total / 1e9,
                rate / 1e9);
    }
}

int cli_prepare_weights(const char *cmd, const dsv4_model *m, int warmup, int mlock, int threads,
                        int rank, int n_ranks) {
    dsv4_err err = {0};
    if (warmup) {
        cli_progress w;
        cli_progress_start(&w, "warming up the weights");
        /* under MPI the home rank reports for all */
        if (dsv4_model_warmup(m, threads, rank, n_ranks, rank == 0 ? cli_progress_show : NULL, &w, &err)) {
            fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
            return -1;
        }
    }
    if (mlock && dsv4_model_mlock(m, rank, n_ranks, &err)) {
        fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double cli_loadavg(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}
