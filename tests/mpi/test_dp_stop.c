/* test_dp_stop.c — the DP server's group after rank 0 could not record a step message for
 * memory (serve/dp.c): the followers get the stop in its place and return (they neither
 * wait for it without a deadline nor run a step rank 0 did not), rank 0 refuses every later
 * step without a collective, and its stop at shutdown sends nothing and returns the failure
 * (the server exits 1). The two ranks
 * meet in one more collective after that: the proof that no frame is left half exchanged.
 * Drives srv_dp alone (no scheduler: a follower that gets the stop first never steps).
 *
 *   mpirun -np 2 test_dp_stop
 */
#include "dist/dist.h"
#include "dsv4.h"
#include "serve/dp.h"
#include "test.h"

int main(int argc, char **argv) {
    dsv4_dist *d = NULL;
    dsv4_err err = {0};
    if (dsv4_dist_init(&argc, &argv, &d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int rank = dsv4_dist_rank(d);
    CHECK(dsv4_dist_size(d) >= 2);
    CHECK(dsv4_dist_set_timeout(d, 20, &err) == 0);
    srv_dp *dp = NULL;
    CHECK(srv_dp_create(d, NULL, &dp, &err) == 0);
    if (rank == 0) {
        srv_dp_inject_oom(dp);
        int rc = srv_dp_begin(dp, 0, &err);
        CHECK_ERR(err, DSV4_ERR_NOMEM, "out of memory for the step message (the group was stopped)");
        CHECK(rc == DSV4_ERR_NOMEM && srv_dp_failed(dp, NULL));
        dsv4_err e1 = {0};
        CHECK(srv_dp_failed(dp, &e1));  /* the reason, for the requests ended later */
        CHECK_ERR(e1, DSV4_ERR_STATE, "out of memory for the step message (the group was stopped)");
        dsv4_err e2 = {0};
        rc = srv_dp_begin(dp, 0, &e2);  /* no collective: the followers are gone */
        CHECK_ERR(e2, DSV4_ERR_STATE, "cannot serve any more");
        dsv4_err e3 = {0};
        /* the stop sends nothing (the followers returned) and reports the failure */
        CHECK(srv_dp_stop(dp, &e3) == DSV4_ERR_STATE);
        CHECK_ERR(e3, DSV4_ERR_STATE, "failed while serving (serve: out of memory for the step message");
        if (test_failed_) {
            test_report();
            dsv4_dist_abort(d, 1);  /* the followers may wait for a frame that never comes */
        }
    } else {
        dsv4_err e2 = {0};
        CHECK_MSG(srv_dp_follow(dp, &e2) == 0, "follower: %s", e2.msg);
    }
    int32_t mine = rank, all[64] = {0};
    CHECK(dsv4_dist_size(d) <= 64);
    CHECK_MSG(dsv4_dist_allgather(d, &mine, sizeof mine, all, &err) == 0, "rank %d: %s", rank, err.msg);
    for (int q = 0; q < dsv4_dist_size(d) && q < 64; q++) CHECK(all[q] == q);
    srv_dp_free(dp);
    const int status = test_report();
    dsv4_dist_finalize(d);
    return status;
}
