/* bench_head.c — the LM head a decode step under data-parallel attention (DSV4_PAR_DP): every
 * rank's full head for its own rows against a vocabulary-sharded head over the group
 * (spec/serving.md §b, §d). Run under mpirun, K ranks:
 *
 *   mpirun -np K bench_head MODEL_DIR [--rows N] [--rows0 N0] [--reps R] [--rounds U] [--threads T]
 *
 * Each rank holds N hidden rows of its own (rank 0: N0, default N). Two engines on the
 * model: A with DSV4_PAR_EP | DSV4_PAR_DP (each rank's full head, locally), B with
 * DSV4_PAR_DP_HEAD too (the head sharded over the vocabulary, collective). Per round, in an
 * order that alternates between rounds, R calls of each mode (a call's time: a barrier,
 * then the slowest rank's call):
 *   full      A: dsv4_lm_head_argmax on the own rows (the whole head on every rank)
 *   full2     the same again (the A/A beside the comparison)
 *   dp        B: dsv4_lm_head_argmax (rows allgathered, each rank its shard of all rows,
 *             the argmax pairs back to the home ranks)
 *   dp_lg     B: dsv4_lm_head_dist (the shards' columns back: the full logits of the own rows)
 *   full_lg   A: dsv4_lm_head_dist
 * Prints one JSON line a (round, mode) on rank 0: the median and least ms of the R calls,
 * and whether B's ids and logits equal A's bitwise on every rank.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_mpi.h"
#include "bench_util.h"
#include "dsv4.h"

/* 64-byte aligned, as the engine's arena gives the head its rows (a split line a load costs
 * the BF16 GEMV ~1.27x, lmhead.h) */
static void *amalloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

enum { FULL, FULL2, DP, DP_LG, FULL_LG, N_MODES };
static const char *const mode_names[N_MODES] = {"full", "full2", "dp", "dp_lg", "full_lg"};

/* One call of mode on this rank's n rows. */
static int run_mode(dsv4_engine *a, dsv4_engine *b, int mode, const float *h, int n, int32_t *ids, float *lg,
                    dsv4_err *err) {
    switch (mode) {
    case FULL: case FULL2: return dsv4_lm_head_argmax(a, h, n, ids, NULL, err);
    case DP: return dsv4_lm_head_argmax(b, h, n, ids, NULL, err);
    case DP_LG: return dsv4_lm_head_dist(b, h, n, lg, err);
    default: return dsv4_lm_head_dist(a, h, n, lg, err);
    }
}

int main(int argc, char **argv) {
    dsv4_dist *d = NULL;
    const int start = bench_mpi_start(&argc, &argv,
                                      "mpirun -np K bench_head MODEL_DIR [--rows N] [--rows0 N0] [--reps R] [--rounds U] [--threads T]", &d);
    if (start) return start;
    dsv4_err err = {0};
    const int rank = dsv4_dist_rank(d), K = dsv4_dist_size(d);
    const int N = rank == 0 ? arg_int(argc, argv, "--rows0", arg_int(argc, argv, "--rows", 1))
                            : arg_int(argc, argv, "--rows", 1);
    const int R = arg_int(argc, argv, "--reps", 5), U = arg_int(argc, argv, "--rounds", 4);
    const int T = arg_int(argc, argv, "--threads", 1);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    dsv4_model *m = NULL;
    dsv4_engine *ea = NULL, *eb = NULL;
    int status = 1;
    if (dsv4_model_open(argv[1], &m, &err)) goto fail;
    const dsv4_model_info info = dsv4_model_get_info(m);
    dsv4_engine_opts o = {.max_context = 64, .max_seqs = 1, .c_max = 16, .max_rows = 16, .threads = T, .dist = d,
                          .parallel = K > 1 ? DSV4_PAR_EP | DSV4_PAR_DP : 0};
    if (dsv4_engine_create(m, &o, &ea, &err)) goto fail;
    o.parallel |= K > 1 ? DSV4_PAR_DP_HEAD : 0;
    if (dsv4_engine_create(m, &o, &eb, &err)) goto fail;
    const int V = info.vocab_size, D = info.hidden_size;
    float *h = amalloc(sizeof(float) * (N + 1) * D), *lg = amalloc(sizeof(float) * (N + 1) * V);
    float *ref_lg = malloc(sizeof(float) * (N + 1) * V);
    int32_t *ids = malloc(sizeof(int32_t) * (N + 1)), *ref_ids = malloc(sizeof(int32_t) * (N + 1));
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    for (int i = 0; i < N * D; i++) { /* rows of norm ~1, other on every rank */
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        h[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * 0.06f;
    }
    /* the references (A), B's results against them, one warm call of every mode */
    if (dsv4_lm_head_argmax(ea, h, N, ref_ids, NULL, &err) || dsv4_lm_head_dist(ea, h, N, ref_lg, &err)) goto fail;
    int bad = 0;
    for (int md = 0; md < N_MODES; md++) {
        if (run_mode(ea, eb, md, h, N, ids, lg, &err)) goto fail;
        if (md == DP) bad += memcmp(ids, ref_ids, sizeof(int32_t) * N) != 0;
        if (md == DP_LG) bad += memcmp(lg, ref_lg, sizeof(float) * N * V) != 0;
    }
    int bad_all = 0;
    MPI_Allreduce(&bad, &bad_all, 1, MPI_INT, MPI_SUM, comm);
    double *t = malloc(sizeof(double) * R);
    for (int u = 0; u < U; u++) {
        for (int i = 0; i < N_MODES; i++) {
            const int md = u & 1 ? N_MODES - 1 - i : i;
            for (int r = 0; r < R; r++) {
                MPI_Barrier(comm);
                const double t0 = MPI_Wtime();
                if (run_mode(ea, eb, md, h, N, ids, lg, &err)) goto fail;
                double dt = MPI_Wtime() - t0, mx = 0;
                MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, comm);
                t[r] = mx;
            }
            qsort(t, R, sizeof *t, cmp_double);
            if (rank == 0)
                printf("{\"bench\":\"dp_head\",\"model\":\"%s\",\"ranks\":%d,\"threads_per_rank\":%d,\"vocab\":%d,"
                       "\"hidden\":%d,\"rows_rank0\":%d,\"rows_per_rank\":%d,\"round\":%d,\"mode\":\"%s\",\"reps\":%d,"
                       "\"ms_median\":%.3f,\"ms_min\":%.3f,\"exact\":%d}\n",
                       argv[1], K, T, V, D, N, arg_int(argc, argv, "--rows", 1), u, mode_names[md], R,
                       1e3 * t[R / 2], 1e3 * t[0], bad_all == 0);
            fflush(stdout);
        }
    }
    status = 0;
fail:
    if (status) {
        fprintf(stderr, "bench_head: rank %d: %s\n", rank, err.msg);
        dsv4_dist_abort(d, 1);
    }
    dsv4_engine_free(eb);
    dsv4_engine_free(ea);
    dsv4_model_close(m);
    MPI_Comm_free(&comm);
    dsv4_dist_finalize(d);
    return status;
}
