/* bcast.c — rank 0's bytes to every rank (see dsv4.h): the step messages of a served
 * model, where the followers wait for the next step between requests, however long; and
 * the gathers that bring each rank's step results back (serving with data-parallel
 * attention, serve/dp.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "util/err.h"

#ifndef DSV4_HAVE_MPI

int dsv4_dist_bcast(dsv4_dist *d, void *buf, size_t n, int wait_forever, dsv4_err *err) {
    (void)d; (void)buf; (void)n; (void)wait_forever; (void)err;
    return DSV4_OK;
}

int dsv4_dist_allgather(dsv4_dist *d, const void *mine, size_t n, void *all, dsv4_err *err) {
    (void)d; (void)err;
    if (n) memmove(all, mine, n);
    return DSV4_OK;
}

int dsv4_dist_gatherv(dsv4_dist *d, const void *mine, size_t n, void *all, const size_t *counts,
                      dsv4_err *err) {
    (void)d; (void)counts; (void)err;
    if (n) memmove(all, mine, n);
    return DSV4_OK;
}

#else

/* A follower waits for the next step however long (an idle server): after the first
 * DSV4_DIST_SPIN_S it sleeps up to IDLE_NAP_S between polls (dsv4_dist_pause), so an idle
 * server's followers use no CPU and pick up a new step within a quarter of a millisecond. */
#define IDLE_NAP_S 250e-6

int dsv4_dist_bcast(dsv4_dist *d, void *buf, size_t n, int wait_forever, dsv4_err *err) {
    if (!d || d->size < 2) return DSV4_OK;
    if (d->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "broadcast: the process group is unusable after a "
                         "peer timeout; end the job");
    if (n > INT_MAX) return dsv4_fail(err, DSV4_ERR_ARG, "broadcast: %zu bytes exceed one message", n);
    if (n > 0 && !buf) return dsv4_fail(err, DSV4_ERR_ARG, "broadcast: NULL buffer");
    MPI_Request rq;
    const int mrc = MPI_Ibcast(buf, (int)n, MPI_BYTE, 0, d->comm, &rq);
    if (!wait_forever || mrc != MPI_SUCCESS) return dsv4_dist_complete(d, mrc, &rq, "broadcast", err);
    const double t0 = MPI_Wtime();
    dsv4_dist_backoff bo = {0};
    for (;;) {
        int done = 0;
        const int trc = MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        if (trc != MPI_SUCCESS) return dsv4_dist_complete(d, trc, &rq, "broadcast", err);
        if (done) return DSV4_OK;
        dsv4_dist_pause(&bo, MPI_Wtime() - t0, IDLE_NAP_S);
    }
}

int dsv4_dist_allgather(dsv4_dist *d, const void *mine, size_t n, void *all, dsv4_err *err) {
    if (!d || d->size < 2) {
        if (n) memmove(all, mine, n);
        return DSV4_OK;
    }
    if (d->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "allgather: the process group is unusable after a "
                         "peer timeout; end the job");
    if (n > INT_MAX / (size_t)d->size) return dsv4_fail(err, DSV4_ERR_ARG, "allgather: %zu bytes a rank", n);
    MPI_Request rq;
    return dsv4_dist_complete(d, MPI_Iallgather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, d->comm, &rq),
                              &rq, "allgather", err);
}

int dsv4_dist_gatherv(dsv4_dist *d, const void *mine, size_t n, void *all, const size_t *counts,
                      dsv4_err *err) {
    if (!d || d->size < 2) {
        if (n) memmove(all, mine, n);
        return DSV4_OK;
    }
    if (d->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "gather: the process group is unusable after a "
                         "peer timeout; end the job");
    if (n > INT_MAX) return dsv4_fail(err, DSV4_ERR_ARG, "gather: %zu bytes exceed one message", n);
    int *cnt = NULL, *displ = NULL;
    if (d->rank == 0) {
        /* (size) each; a server step's call, not inside a forward */
        cnt = malloc((size_t)d->size * sizeof *cnt);
        displ = malloc((size_t)d->size * sizeof *displ);
        if (!cnt || !displ) {
            free(cnt);
            free(displ);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "gather: out of memory");
        }
        size_t off = 0;
        for (int r = 0; r < d->size; r++) {
            if (counts[r] > INT_MAX || off > (size_t)INT_MAX - counts[r]) {
                free(cnt);
                free(displ);
                return dsv4_fail(err, DSV4_ERR_ARG, "gather: more than %d bytes in all", INT_MAX);
            }
            cnt[r] = (int)counts[r];
            displ[r] = (int)off;
            off += counts[r];
        }
    }
    MPI_Request rq;
    const int rc = dsv4_dist_complete(d, MPI_Igatherv(mine, (int)n, MPI_BYTE, all, cnt, displ, MPI_BYTE, 0,
                                                      d->comm, &rq), &rq, "gather", err);
    free(cnt);
    free(displ);
    return rc;
}

#endif
