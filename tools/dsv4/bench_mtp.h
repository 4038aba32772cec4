/* bench_mtp.h — `dsv4 bench --mtp on`: speculative decoding (serving.md §e) against plain
 * decoding of the same sequences, in tokens/s and in the weight bytes a step reads. */
#ifndef DSV4_TOOLS_BENCH_MTP_H
#define DSV4_TOOLS_BENCH_MTP_H

#include <stdint.h>

#define BENCH_MTP_MAX_P 16

typedef struct bench_mtp_opts {
    const char *model_dir;
    int64_t prompt_len;      /* random prompt tokens per sequence */
    int64_t gen;             /* timed steps per measurement */
    int64_t reps;            /* interleaved rounds of every measurement, medians kept */
    int64_t seed;            /* prompt tokens and forced drafts */
    int64_t threads;         /* 0 = the cores this process may use */
    int64_t chunk;           /* prefill chunk; 0 = min(2048, prompt_len) */
    const long long *batches;
    int n_batches;
    const double *accept;    /* forced acceptance probabilities p in [0, 1] */
    int n_accept;
    int json;                /* one JSON object per measurement per line instead of the table */
} bench_mtp_opts;

/* Returns the process exit status (0 ok, 1 runtime failure). */
int bench_mtp(const bench_mtp_opts *o);

#endif
