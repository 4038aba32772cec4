/* agree.c — ranks agree before they compute, and no collective waits forever (see
 * dist/dist.h). Peer input is untrusted: a rank's digests are only compared, never used. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "util/err.h"

int dsv4_dist_set_timeout(dsv4_dist *d, double seconds, dsv4_err *err) {
    if (!d) return dsv4_fail(err, DSV4_ERR_ARG, "dsv4_dist_set_timeout: NULL group");
    if (!(seconds >= 0) || seconds > 1e7)
        return dsv4_fail(err, DSV4_ERR_ARG, "peer timeout %g s: must be in [0, 1e7] (0 = none)", seconds);
    d->timeout_s = seconds;
    return DSV4_OK;
}

#ifndef DSV4_HAVE_MPI

int dsv4_dist_agree(dsv4_dist *d, int local_rc, int n, const uint8_t (*digests)[32],
                    const char *const *names, int mismatch_code, const char *what, dsv4_err *err) {
    (void)d; (void)n; (void)digests; (void)names; (void)mismatch_code; (void)what; (void)err;
    return local_rc;
}

int dsv4_dist_agree_share(dsv4_dist *d, int local_rc, int n, const int32_t *mine, int32_t *all,
                          const char *what, dsv4_err *err) {
    (void)d; (void)what; (void)err;
    if (!local_rc && n > 0) memcpy(all, mine, (size_t)n * sizeof *mine);
    return local_rc;
}

#else

#define TAG_TIMEOUT 0x7d54 /* "I timed out too": point-to-point beside the collectives */

/* After a timeout: every rank that times out tells the others; those not heard from within
 * a grace period are named in out ("1, 3"). Returns how many. */
static int name_silent(dsv4_dist *d, char *out, size_t n) {
    const int P = d->size;
    char *heard = calloc((size_t)P, 1);
    MPI_Request *sent = calloc((size_t)P, sizeof *sent);
    int me = d->rank;
    out[0] = 0;
    if (!heard || !sent) {
        free(heard);
        free(sent);
        snprintf(out, n, "(unknown: out of memory)");
        return 1;
    }
    for (int r = 0; r < P; r++) sent[r] = MPI_REQUEST_NULL;
    for (int r = 0; r < P; r++)
        if (r != me && MPI_Isend(&me, 1, MPI_INT, r, TAG_TIMEOUT, d->comm, &sent[r]) != MPI_SUCCESS)
            sent[r] = MPI_REQUEST_NULL;
    double grace = d->timeout_s / 2;
    if (grace > 5) grace = 5;
    const double start = MPI_Wtime(), end = start + grace;
    dsv4_dist_backoff bo = {0};
    for (double now = start; now < end; now = MPI_Wtime()) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_TIMEOUT, d->comm, &flag, &st) == MPI_SUCCESS && flag) {
            int who;
            MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, TAG_TIMEOUT, d->comm, MPI_STATUS_IGNORE);
            if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < P) heard[st.MPI_SOURCE] = 1;
        } else {
            dsv4_dist_pause(&bo, now - start, DSV4_DIST_NAP_MAX_S);
        }
    }
    int count = 0;
    size_t k = 0;
    for (int r = 0; r < P; r++) {
        if (r == me || heard[r]) continue;
        if (k < n) k += (size_t)snprintf(out + k, n - k, count ? ", %d" : "%d", r);
        count++;
    }
    /* sends to silent ranks never complete; the group is abandoned, so let them go */
    for (int r = 0; r < P; r++)
        if (sent[r] != MPI_REQUEST_NULL) MPI_Request_free(&sent[r]);
    free(heard);
    free(sent);
    return count;
}

int dsv4_dist_complete(dsv4_dist *d, int mrc, MPI_Request *req, const char *what, dsv4_err *err) {
    if (mrc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_Error_string(mrc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", mrc);
        return dsv4_fail(err, DSV4_ERR_IO, "%s: %s", what, s);
    }
    const double t0 = MPI_Wtime();
    const double deadline = d->timeout_s > 0 ? t0 + d->timeout_s : INFINITY;
    dsv4_dist_backoff bo = {0};
    for (;;) {
        int done = 0;
        mrc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS) return dsv4_dist_complete(d, mrc, req, what, err);
        if (done) return DSV4_OK;
        const double now = MPI_Wtime();
        if (now > deadline) break;
        dsv4_dist_pause(&bo, now - t0, DSV4_DIST_NAP_MAX_S);
    }
    d->broken = 1;
    char silent[512];
    int n_silent = name_silent(d, silent, sizeof silent);
    if (n_silent == 0)
        return dsv4_fail(err, DSV4_ERR_IO, "%s: rank %d waited longer than the peer timeout of %g s "
                         "(every rank timed out; the process group is unusable, end the job)",
                         what, d->rank, d->timeout_s);
    return dsv4_fail(err, DSV4_ERR_IO, "%s: no answer from rank%s %s within the peer timeout of %g s "
                     "(rank %d waited; the process group is unusable, end the job)",
                     what, n_silent > 1 ? "s" : "", silent, d->timeout_s, d->rank);
}

/* After the gather showed rank `first` (the lowest) failing with code peer: its message
 * reaches every rank in a second collective, only on this failure path, so that a refusal
 * on one rank names its cause everywhere ("rank 1 failed (invalid argument): span 0: start
 * 5 != sequence length 4"). The failing ranks keep their own error. */
static int failed_rank(dsv4_dist *d, int local_rc, int first, int32_t peer, const char *what, dsv4_err *err) {
    char msg[sizeof err->msg]; /* the first failing rank's message, then untrusted text */
    memset(msg, 0, sizeof msg);
    if (d->rank == first && err) memcpy(msg, err->msg, sizeof msg);
    MPI_Request rq;
    dsv4_err lost = {0};
    const int brc = dsv4_dist_complete(d, MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, first, d->comm, &rq), &rq,
                                       what, &lost);
    if (local_rc) return local_rc;
    if (brc) return dsv4_fail(err, brc, "%s: rank %d failed, and then: %s", what, first, lost.msg);
    msg[sizeof msg - 1] = 0;
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    /* the peer's code is untrusted: name it only if it is one */
    const int code = peer > 0 && peer <= DSV4_ERR_NUMERIC ? peer : DSV4_ERR_STATE;
    return dsv4_fail(err, code, "%s: rank %d failed (%s)%s%s", what, first, dsv4_strerror(code), msg[0] ? ": " : "",
                     msg);
}

/* The shared start of an agreement: d->agreed's last row (row bytes, the status first) is
 * filled; every rank's row is gathered into d->agreed and every status checked. 0, or the
 * same failure on every rank. */
static int agree_gather(dsv4_dist *d, int local_rc, size_t row, const char *what, dsv4_err *err) {
    const size_t P = (size_t)d->size;
    uint8_t *all = d->agreed; /* (P + 1, row): own row last */
    uint8_t *mine = all + row * P;
    const int32_t rc32 = local_rc;
    memcpy(mine, &rc32, 4);
    MPI_Request rq;
    int rc = dsv4_dist_complete(d, MPI_Iallgather(mine, (int)row, MPI_BYTE, all, (int)row, MPI_BYTE, d->comm, &rq),
                                &rq, what, err);
    if (rc) return local_rc ? local_rc : rc;
    for (size_t r = 0; r < P; r++) {
        int32_t peer;
        memcpy(&peer, all + row * r, 4);
        if (peer) {
            d->last_refusal = local_rc ? DSV4_DIST_REFUSED_HERE : DSV4_DIST_REFUSED_ELSEWHERE;
            return failed_rank(d, local_rc, (int)r, peer, what, err);
        }
    }
    return DSV4_OK;
}

/* A group that cannot agree: broken by a timeout, or asked for more than a row holds. */
static int agree_refused(dsv4_dist *d, int n, int most, const char *items, const char *what, dsv4_err *err) {
    d->last_refusal = DSV4_DIST_PASSED; /* every agreement starts here */
    if (d->broken)
        return dsv4_fail(err, DSV4_ERR_STATE, "%s: the process group is unusable after a peer "
                         "timeout; end the job", what);
    if (n < 0 || n > most) return dsv4_fail(err, DSV4_ERR_ARG, "%s: %d %s to agree on (at most %d)", what, n, items, most);
    return DSV4_OK;
}

int dsv4_dist_agree_share(dsv4_dist *d, int local_rc, int n, const int32_t *mine, int32_t *all,
                          const char *what, dsv4_err *err) {
    if (!d || d->size < 2) {
        if (!local_rc && n > 0) memcpy(all, mine, (size_t)n * sizeof *mine);
        return local_rc;
    }
    int rc = agree_refused(d, n, DSV4_DIST_SHARE_MAX, "values", what, err);
    if (rc) return rc;
    const size_t row = 4 + (size_t)n * 4, P = (size_t)d->size;
    memcpy(d->agreed + row * P + 4, mine, (size_t)n * 4);
    if ((rc = agree_gather(d, local_rc, row, what, err))) return rc;
    for (size_t r = 0; r < P; r++) memcpy(all + r * (size_t)n, d->agreed + row * r + 4, (size_t)n * 4);
    return DSV4_OK;
}

int dsv4_dist_agree(dsv4_dist *d, int local_rc, int n, const uint8_t (*digests)[32],
                    const char *const *names, int mismatch_code, const char *what, dsv4_err *err) {
    if (!d || d->size < 2) return local_rc;
    int rc = agree_refused(d, n, DSV4_DIST_AGREE_MAX, "digests", what, err);
    if (rc) return rc;
    const size_t row = 4 + (size_t)n * 32, P = (size_t)d->size;
    uint8_t *all = d->agreed; /* (P + 1, row): own row last */
    for (int i = 0; i < n; i++) memcpy(all + row * P + 4 + (size_t)i * 32, digests[i], 32);
    if ((rc = agree_gather(d, local_rc, row, what, err))) return rc;
    char msg[768];
    size_t k = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *ref = all + 4 + (size_t)i * 32;
        for (size_t r = 1; r < P; r++)
            if (memcmp(all + row * r + 4 + (size_t)i * 32, ref, 32) != 0) {
                if (k < sizeof msg)
                    k += (size_t)snprintf(msg + k, sizeof msg - k, "%srank %zu has another %s than rank 0",
                                          bad ? "; " : "", r, names[i]);
                bad++;
            }
    }
    if (bad) return dsv4_fail(err, mismatch_code, "%s: ranks disagree: %s", what, msg);
    return DSV4_OK;
}

#endif
