/* test_ep_untrusted.c — what an expert-parallel peer sends is checked like input (issue 14
 * item 1): rank 1 takes part in a MoE's opening exchange with forged rows instead of
 * running dsv4_ep_moe (a row count past the pair bound, a negative wave count, a failing
 * rank that does not exist); every other rank's call fails with DSV4_ERR_STATE naming
 * rank 1 and what it sent, without reading past a buffer (ASan) or waiting for rows that
 * never come; the next honest call on every rank then works.
 *
 * The forged rows follow the opening protocol of dist/ep.c: per receiver {rows of wave 0,
 * wave count, failing rank + 1 or 0, error info}.
 *
 *   mpirun -np N test_ep_untrusted MODEL_DIR   (N >= 2 dividing the experts)
 */
#include <stdint.h>
#include <stdlib.h>

#include "dist/dist.h"
#include "dist/ep.h"
#include "dsv4.h"
#include "kernels/kctx.h"
#include "model/model.h"
#include "model/numerics.h"
#include "test.h"

enum { OPEN_INTS = 4 };

int main(int argc, char **argv) {
    dsv4_err err = {0};
    dsv4_dist *d = NULL;
    if (dsv4_dist_init(&argc, &argv, &d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const int rank = dsv4_dist_rank(d), size = dsv4_dist_size(d);
    dsv4_model *m = NULL;
    if (argc < 2 || size < 2 || dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "usage: mpirun -np N>=2 test_ep_untrusted MODEL_DIR (%s)\n", err.msg);
        dsv4_dist_abort(d, 1);
        return 1;
    }
    const dsv4_config *c = &m->cfg;
    const int T = 4, R = 3, D = c->hidden_size, E_loc = c->n_routed_experts / size;
    const int cap = T * (c->num_experts_per_tok < E_loc ? c->num_experts_per_tok : E_loc);
    dsv4_kctx *k = NULL;
    dsv4_ep *ep = NULL;
    CHECK(dsv4_kctx_create(1, 4096, &k, &err) == 0);
    dsv4_arena routes; /* dsv4_ep_moe's scratch */
    CHECK(dsv4_arena_init(&routes, dsv4_ep_scratch_bytes(c, R), &err) == 0);
    CHECK_MSG(dsv4_ep_create(c, d, T, &ep, &err) == 0, "%s", err.msg);
    const dsv4_block_w *b = &m->layers[c->num_hidden_layers - 1]; /* a score-routed layer */
    float *x = malloc(sizeof(float) * (size_t)R * D), *y = malloc(sizeof(float) * (size_t)R * D); // (R, D)
    int32_t tok[3] = {1, 2, 3};
    for (int i = 0; i < R * D; i++) x[i] = (float)((i * 37 + rank * 11) % 19) / 19.0f - 0.5f;

    /* {rows, waves, failing rank + 1, info} sent to every receiver; what the message says */
    const struct { int row[OPEN_INTS]; const char *want; } forged[] = {
        {{cap + 1, 1, 0, 0}, "rows %d of at most %d"},
        {{0, -1, 0, 0}, "waves -1"},
        {{0, 1, size + 5, 0}, "failing rank"},
    };
    for (size_t f = 0; f < sizeof forged / sizeof forged[0] && ep; f++) {
        if (rank == 1) {
            int *s = malloc(sizeof(int) * OPEN_INTS * (size_t)size), *r = malloc(sizeof(int) * OPEN_INTS * (size_t)size);
            for (int p = 0; p < size; p++) memcpy(s + p * OPEN_INTS, forged[f].row, sizeof forged[f].row);
            /* non-blocking like the exchange it joins (blocking and non-blocking collectives
             * do not match each other) */
            MPI_Request rq;
            CHECK(MPI_Ialltoall(s, OPEN_INTS, MPI_INT, r, OPEN_INTS, MPI_INT, d->comm, &rq) == MPI_SUCCESS);
            CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE) == MPI_SUCCESS);
            free(s);
            free(r);
        } else {
            int rc = dsv4_ep_moe(ep, k, dsv4_numerics_exact(), b, x, tok, R, y, &routes, &err);
            char want[96];
            snprintf(want, sizeof want, forged[f].want, cap + 1, cap);
            CHECK_MSG(rc == DSV4_ERR_STATE && strstr(err.msg, "rank 1 sent an invalid opening") &&
                      strstr(err.msg, want), "forgery %zu: rc %d, '%s'", f, rc, err.msg);
        }
    }
    /* the group is intact: an honest call works everywhere */
    if (ep) CHECK_MSG(dsv4_ep_moe(ep, k, dsv4_numerics_exact(), b, x, tok, R, y, &routes, &err) == 0, "%s", err.msg);
    printf("rank %d/%d: forged openings refused\n", rank, size);
    free(x);
    free(y);
    dsv4_ep_free(ep);
    dsv4_kctx_free(k);
    dsv4_arena_free(&routes);
    dsv4_model_close(m);
    int failed = test_report();
    dsv4_dist_finalize(d);
    return failed;
}
