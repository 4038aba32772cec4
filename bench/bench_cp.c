/* bench_cp.c — prefill throughput of one long prompt against the context-parallel size,
 * with the exchange volume per layer (spec/serving.md §c). Run under mpirun; CP = the
 * number of ranks (one rank = the single-process engine):
 *
 *   mpirun -np CP bench_cp MODEL_DIR [--tokens N] [--s0 S] [--threads T] [--granule G]
 *                                    [--reps R]
 *
 * A sequence first gets S tokens the ordinary way (S > 0: the CP call continues it and
 * the home rank broadcasts its state), then one timed forward of N random tokens (hidden
 * of the last row only), R times on fresh sequences; the best time counts. Prints one JSON
 * line on rank 0: seconds, prefill tokens/s, the home rank's thread CPU seconds, the plan (granules, segment lengths), per
 * layer kind the floats crossing ranks (exchange A all-gathered by every rank, exchange B,
 * the state broadcast), and comm_replay_s: the same collectives with the same sizes run
 * alone (per layer: agreement allreduces, broadcast, all-gathers), i.e. the communication
 * time the call cannot avoid on this machine.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_mpi.h"
#include "dsv4.h"
#include "dsv4_internal.h"

/* per rank: compute CPU s, collective wall s, MiB in */
typedef struct rank_stat {
    double compute_cpu, comm_wall, mib_in;
} rank_stat;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The collectives of one CP call with the plan's sizes, without the compute. */
static double comm_replay(const dsv4_config *c, const dsv4_cp_plan *p, MPI_Comm comm, int size) {
    int64_t max_n = 1;
    dsv4_cp_volume v[DSV4_MAX_LAYERS];
    for (int l = 0; l < c->num_hidden_layers; l++) {
        v[l] = dsv4_cp_layer_volume(p, c, c->compress_ratios[l]);
        if (v[l].a > max_n) max_n = v[l].a;
        if (v[l].b > max_n) max_n = v[l].b;
        if (v[l].bcast > max_n) max_n = v[l].bcast;
    }
    float *buf = calloc((size_t)max_n + (size_t)size, sizeof(float));
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    for (int l = 0; l < c->num_hidden_layers; l++) {
        int flag = 0;
        MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, comm);
        if (v[l].bcast) MPI_Bcast(buf, (int)v[l].bcast, MPI_FLOAT, 0, comm);
        for (int pass = 0; pass < 2; pass++) {
            const int64_t n = pass ? v[l].b : v[l].a;
            if (!n) continue;
            for (int r = 0; r < size; r++) {
                counts[r] = (int)(n / size);
                displs[r] = (int)(r * (n / size));
            }
            MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, comm);
            MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, comm);
        }
    }
    const double t = MPI_Wtime() - t0;
    free(buf); free(counts); free(displs);
    return t;
}

int main(int argc, char **argv) {
    dsv4_dist *d = NULL;
    const int start = bench_mpi_start(&argc, &argv,
                                      "mpirun -np CP bench_cp MODEL_DIR [--tokens N] [--s0 S] [--threads T] [--granule G] [--reps R]", &d);
    if (start) return start;
    dsv4_err err = {0};
    const int rank = dsv4_dist_rank(d), size = dsv4_dist_size(d);
    const int N = arg_int(argc, argv, "--tokens", 8192), S0 = arg_int(argc, argv, "--s0", 0);
    const int T = arg_int(argc, argv, "--threads", 1), G = arg_int(argc, argv, "--granule", 0);
    const int R = arg_int(argc, argv, "--reps", 1);
    dsv4_model *m = NULL;
    dsv4_engine *e = NULL;
    int32_t *toks = NULL;
    float *hid = NULL;
    dsv4_cp_plan p = {0};
    int status = 1;
    if (dsv4_model_open(argv[1], &m, &err)) goto fail;
    const dsv4_model_info info = dsv4_model_get_info(m);
    const int c_max = N > S0 ? N : S0;
    dsv4_engine_opts o = {.max_context = S0 + N, .max_seqs = 1, .c_max = c_max > 0 ? c_max : 1,
                          .threads = T, .dist = d, .parallel = size > 1 ? DSV4_PAR_CP : 0,
                          .cp_granule = G};
    if (dsv4_engine_create(m, &o, &e, &err)) goto fail;
    toks = malloc(sizeof(int32_t) * (size_t)(S0 + N));
    hid = malloc(sizeof(float) * info.hidden_size);
    if (!toks || !hid) goto fail;
    uint64_t r = 0x9e3779b97f4a7c15ull; /* the same prompt on every rank (SPMD) */
    for (int i = 0; i < S0 + N; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)info.vocab_size);
    }
    double best = 1e30, best_cpu = 0;
    rank_stat mine = {0, 0, 0};
    for (int rep = 0; rep < R; rep++) {
        dsv4_cp_stats st = {0};
        int seq;
        if (dsv4_seq_create(e, &seq, &err)) goto fail;
        if (S0 > 0) {
            dsv4_span pre = {.seq = seq, .start = 0, .n_tokens = S0, .tokens = toks, .n_hidden = 1};
            if (dsv4_forward(e, &pre, 1, hid, NULL, &err)) goto fail;
        }
        dsv4_span sp = {.seq = seq, .start = S0, .n_tokens = N, .tokens = toks + S0, .n_hidden = 1};
        e->cp_stats = &st; /* the timed call only */
        MPI_Barrier(d->comm);
        const double t0 = MPI_Wtime(), c0 = thread_cpu();
        if (dsv4_forward(e, &sp, 1, hid, NULL, &err)) goto fail;
        const double cpu = thread_cpu() - c0;
        MPI_Barrier(d->comm);
        const double t = MPI_Wtime() - t0;
        e->cp_stats = NULL;
        if (t < best) {
            best = t;
            best_cpu = cpu;
            mine = (rank_stat){st.cpu_s - st.comm_cpu_s, st.comm_wall_s, st.floats_in * 4.0 / (1 << 20)};
        }
        if (dsv4_seq_free(e, seq, &err)) goto fail;
    }

    const int64_t gran = G > 0 ? G : dsv4_cp_default_granule(e->cfg);
    if (dsv4_cp_plan_make(size, S0, N, gran, &p, &err)) goto fail;
    const double replay = size > 1 && p.split ? comm_replay(e->cfg, &p, d->comm, size) : 0.0;
    rank_stat *all = rank == 0 ? malloc(sizeof(rank_stat) * size) : NULL;
    MPI_Gather(&mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, d->comm);
    if (rank == 0) {
        const dsv4_cp_volume sw = dsv4_cp_layer_volume(&p, e->cfg, 0);
        const dsv4_cp_volume cs = dsv4_cp_layer_volume(&p, e->cfg, 4);
        const dsv4_cp_volume hc = dsv4_cp_layer_volume(&p, e->cfg, 128);
        int64_t total = 0;
        for (int l = 0; l < e->cfg->num_hidden_layers; l++) {
            dsv4_cp_volume v = dsv4_cp_layer_volume(&p, e->cfg, e->cfg->compress_ratios[l]);
            total += v.a + v.b + v.bcast;
        }
        printf("{\"bench\":\"cp_prefill\",\"cp\":%d,\"threads\":%d,\"tokens\":%d,\"s0\":%d,"
               "\"granule\":%lld,\"granules\":%lld,\"split\":%d,\"seconds\":%.4f,"
               "\"tokens_per_s\":%.1f,\"cpu_s\":%.4f,\"segments\":[",
               size, T, N, S0, (long long)gran, (long long)p.q, p.split, best, N / best, best_cpu);
        for (int i = 0; i < p.n_seg; i++)
            printf("%s%lld", i ? "," : "", (long long)(p.seg[i].end - p.seg[i].start));
        printf("],\"floats_per_layer\":{\"swa\":{\"a\":%lld,\"b\":%lld,\"bcast\":%lld},"
               "\"csa\":{\"a\":%lld,\"b\":%lld,\"bcast\":%lld},\"hca128\":{\"a\":%lld,\"b\":%lld,"
               "\"bcast\":%lld}},\"mib_per_call\":%.3f,\"comm_replay_s\":%.4f",
               (long long)sw.a, (long long)sw.b, (long long)sw.bcast, (long long)cs.a,
               (long long)cs.b, (long long)cs.bcast, (long long)hc.a, (long long)hc.b,
               (long long)hc.bcast, total * 4.0 / (1 << 20), replay);
        if (p.split) {
            printf(",\"ranks\":[");
            for (int i = 0; i < size; i++)
                printf("%s{\"compute_cpu_s\":%.4f,\"comm_wall_s\":%.4f,\"mib_in\":%.3f}", i ? "," : "",
                       all[i].compute_cpu, all[i].comm_wall, all[i].mib_in);
            printf("]");
        }
        printf("}\n");
    }
    free(all);
    status = 0;
fail:
    if (status) {
        fprintf(stderr, "bench_cp rank %d: %s\n", rank, err.msg);
        dsv4_dist_abort(d, 1);
    }
    dsv4_cp_plan_free(&p);
    free(toks); free(hid);
    dsv4_engine_free(e);
    dsv4_model_close(m);
    dsv4_dist_finalize(d);
    return status;
}
