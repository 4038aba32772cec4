/* bench_ep.c — decode throughput against the expert-parallel size, with the MoE exchange
 * volume per layer (spec/serving.md §d). Run under mpirun; EP = the number of ranks (one
 * rank = the single-process engine):
 *
 *   mpirun -np EP bench_ep MODEL_DIR [--seqs B] [--prefill P] [--steps S] [--threads T]
 *                                    [--wave W] [--dp 0|1] [--dp-head 0|1] [--cp 0|1] [--mix L]
 *
 * B sequences prefill P random tokens in one batched call, then S greedy decode steps of
 * B rows each (forward, greedy token through the vocabulary-sharded head, next step).
 * With --dp 1 (data-parallel attention, DSV4_PAR_DP) rank r is the home rank of sequences
 * [r B / EP, (r + 1) B / EP) of the same B: it prefills and decodes those alone (greedy
 * through its full head), so the group's attention runs on every rank; without it rank 0
 * is the home rank of all B and the others only join the MoE exchanges. --dp-head 1 (with
 * --dp 1) shards the DP head over the vocabulary (DSV4_PAR_DP_HEAD): each rank computes its
 * shard of every rank's rows and gets its own rows' greedy ids back. --cp 1 (with --dp 1) adds
 * DSV4_PAR_CP: a rank's prefill span of at least 2 granules a rank runs as a CP prefill over
 * the group with that rank as home. --mix L (with --dp 1) then runs 2 mixed steps: rank 0
 * prefills a new sequence's L-token chunks (positions [0, L), then [L, 2L)) in the same calls
 * as every rank's decode rows; mix_s gives each call's time.
 * Prints one JSON line on rank 0: decode tokens/s and ms per step, and per MoE layer and
 * decode step the rows dispatched and the bytes every rank together hands to MPI
 * (dispatch rows: D+4 floats, results: D floats; own-rank rows included); where the home
 * rank's decode time went (inside the MoE exchange's MPI calls, computing experts) and
 * the busiest other rank's expert time.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_mpi.h"
#include "dsv4.h"
#include "dsv4_internal.h"

int main(int argc, char **argv) {
    dsv4_dist *d = NULL;
    const int start = bench_mpi_start(&argc, &argv,
                                      "mpirun -np EP bench_ep MODEL_DIR [--seqs B] [--prefill P] [--steps S] [--threads T] [--wave W] "
                                      "[--dp 0|1] [--dp-head 0|1] [--cp 0|1] [--mix L]", &d);
    if (start) return start;
    dsv4_err err = {0};
    const int rank = dsv4_dist_rank(d), size = dsv4_dist_size(d);
    const int B = arg_int(argc, argv, "--seqs", 8), P = arg_int(argc, argv, "--prefill", 64);
    const int S = arg_int(argc, argv, "--steps", 32), T = arg_int(argc, argv, "--threads", 1);
    const int W = arg_int(argc, argv, "--wave", 0), DP = arg_int(argc, argv, "--dp", 0) != 0;
    const int DPH = DP && arg_int(argc, argv, "--dp-head", 0) != 0;
    const int CP = DP && arg_int(argc, argv, "--cp", 0) != 0, MIX = DP ? arg_int(argc, argv, "--mix", 0) : 0;
    /* this rank's sequences [i0, i0 + nb) of the B; every rank agrees on max_seqs */
    const int i0 = DP ? rank * B / size : 0, nb = DP ? (rank + 1) * B / size - i0 : B;
    const int max_seqs = DP ? (B + size - 1) / size + (MIX > 0) : B;
    const int c_max = P > MIX ? P : MIX;
    const int64_t ctx = P + S + 3 > 2 * MIX ? P + S + 3 : 2 * MIX;
    dsv4_model *m = NULL;
    dsv4_engine *e = NULL;
    int status = 1;
    if (dsv4_model_open(argv[1], &m, &err)) goto fail;
    const dsv4_model_info info = dsv4_model_get_info(m);
    dsv4_engine_opts o = {.max_context = ctx, .max_seqs = max_seqs, .c_max = c_max, .threads = T, .dist = d,
                          .parallel = size > 1 ? DSV4_PAR_EP | (DP ? DSV4_PAR_DP : 0) | (DPH ? DSV4_PAR_DP_HEAD : 0) |
                                                     (CP ? DSV4_PAR_CP : 0) : 0,
                          .ep_wave = W};
    if (dsv4_engine_create(m, &o, &e, &err)) goto fail;

    int *seq = malloc(sizeof(int) * B);
    int32_t *toks = malloc(sizeof(int32_t) * ((size_t)B * P + 2 * MIX)), *next = malloc(sizeof(int32_t) * B);
    float *hid = malloc(sizeof(float) * (B + 1) * info.hidden_size);
    dsv4_span *sp = malloc(sizeof(dsv4_span) * (B + 1));
    uint64_t r = 0x9e3779b97f4a7c15ull; /* the same prompts on every rank (SPMD) */
    for (int i = 0; i < B * P + 2 * MIX; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        toks[i] = (int32_t)(r % (uint64_t)info.vocab_size);
    }
    for (int i = 0; i < nb; i++) {
        if (dsv4_seq_create(e, &seq[i], &err)) goto fail;
        sp[i] = (dsv4_span){.seq = seq[i], .start = 0, .n_tokens = P, .tokens = toks + (size_t)(i0 + i) * P, .n_hidden = 1};
    }
    double t0 = MPI_Wtime();
    if (dsv4_forward(e, sp, nb, hid, NULL, &err)) goto fail;
    if (dsv4_lm_head_argmax(e, hid, nb, next, NULL, &err)) goto fail;
    const double prefill_s = MPI_Wtime() - t0;
    if (e->ep) dsv4_ep_reset_stats(e->ep);

    MPI_Barrier(d->comm);
    t0 = MPI_Wtime();
    double head_s = 0; /* this rank's time in the head calls (a sharded head's waits included) */
    uint64_t digest = 0; /* of every sequence's greedy tokens, the same with and without --dp */
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < nb; i++)
            sp[i] = (dsv4_span){.seq = seq[i], .start = P + s, .n_tokens = 1, .tokens = next + i, .n_hidden = 1};
        if (dsv4_forward(e, sp, nb, hid, NULL, &err)) goto fail;
        /* the greedy ids come back on every rank, so every rank feeds the same tokens (under
         * DP each rank its own sequences' ids) */
        const double th = MPI_Wtime();
        if (dsv4_lm_head_argmax(e, hid, nb, next, NULL, &err)) goto fail;
        head_s += MPI_Wtime() - th;
        for (int i = 0; i < nb && (DP || rank == 0); i++)
            digest += (uint64_t)(next[i] + 1) * 0x9e3779b97f4a7c15ull * (uint64_t)((i0 + i + 1) * 65537 + s);
    }
    MPI_Barrier(d->comm);
    const double decode_s = MPI_Wtime() - t0;

    /* mixed steps: every rank's decode rows, and on rank 0 a long chunk of a new sequence */
    double mix_s[2] = {0, 0};
    int xs = -1;
    if (MIX > 0 && rank == 0 && dsv4_seq_create(e, &xs, &err)) goto fail;
    for (int k = 0; k < 2 && MIX > 0; k++) {
        int n = 0;
        for (int i = 0; i < nb; i++, n++)
            sp[n] = (dsv4_span){.seq = seq[i], .start = P + S + k, .n_tokens = 1, .tokens = next + i, .n_hidden = 1};
        if (rank == 0)
            sp[n++] = (dsv4_span){.seq = xs, .start = (int64_t)k * MIX, .n_tokens = MIX,
                                  .tokens = toks + (size_t)B * P + (size_t)k * MIX, .n_hidden = 1};
        MPI_Barrier(d->comm);
        const double tm = MPI_Wtime();
        if (dsv4_forward(e, sp, n, hid, NULL, &err)) goto fail;
        MPI_Barrier(d->comm);
        mix_s[k] = MPI_Wtime() - tm;
        if (dsv4_lm_head_argmax(e, hid, nb, next, NULL, &err)) goto fail;
    }

    dsv4_ep_stats st = {0};
    if (e->ep) st = dsv4_ep_get_stats(e->ep);
    int64_t mine[3] = {st.bytes_sent, st.rows_sent, st.waves}, sum[3];
    MPI_Reduce(mine, sum, 3, MPI_INT64_T, MPI_SUM, 0, d->comm);
    uint64_t digest_all = 0;
    MPI_Reduce(&digest, &digest_all, 1, MPI_UINT64_T, MPI_SUM, 0, d->comm);
    double peer_expert = rank ? st.expert_s : 0.0, max_peer_expert = 0.0;
    MPI_Reduce(&peer_expert, &max_peer_expert, 1, MPI_DOUBLE, MPI_MAX, 0, d->comm);
    double max_head = 0.0;
    MPI_Reduce(&head_s, &max_head, 1, MPI_DOUBLE, MPI_MAX, 0, d->comm);
    const int moe_layers = info.n_layers; /* the MTP block does not run here */
    if (rank == 0) {
        const double steps_layers = (double)S * moe_layers;
        printf("{\"bench\":\"ep_decode\",\"model\":\"%s\",\"ep\":%d,\"dp\":%d,\"dp_head\":%d,\"seqs\":%d,\"prefill\":%d,\"steps\":%d,"
               "\"threads_per_rank\":%d,\"hidden\":%d,\"experts\":%d,\"moe_layers\":%d,"
               "\"prefill_s\":%.4f,\"decode_s\":%.4f,\"decode_tok_s\":%.2f,\"ms_per_step\":%.3f,"
               "\"rows_per_layer_step\":%.2f,\"bytes_per_layer_step\":%.0f,\"bytes_per_layer_token\":%.0f,"
               "\"waves_per_layer_step\":%.2f,\"home_moe_mpi_s\":%.4f,\"home_expert_s\":%.4f,"
               "\"max_peer_expert_s\":%.4f,\"head_ms_per_step\":%.3f,\"max_head_ms_per_step\":%.3f,"
               "\"tokens_digest\":\"%016llx\",\"cp\":%d,\"mix\":%d,\"mix_s\":[%.4f,%.4f]}\n",
               argv[1], size, DP, DPH, B, P, S, T, info.hidden_size, m->cfg.n_routed_experts, moe_layers, prefill_s,
               decode_s, (double)B * S / decode_s, 1e3 * decode_s / S, sum[1] / steps_layers,
               sum[0] / steps_layers, sum[0] / steps_layers / B, sum[2] / steps_layers / size, st.comm_s,
               st.expert_s, max_peer_expert, 1e3 * head_s / S, 1e3 * max_head / S, (unsigned long long)digest_all, CP, MIX, mix_s[0], mix_s[1]);
    }
    status = 0;
    free(seq); free(toks); free(next); free(hid); free(sp);
fail:
    if (status) {
        fprintf(stderr, "bench_ep: rank %d: %s\n", rank, err.msg);
        dsv4_dist_abort(d, 1);
    }
    dsv4_engine_free(e);
    dsv4_model_close(m);
    dsv4_dist_finalize(d);
    return status;
}
