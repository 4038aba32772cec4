/* dist.h — the engine's process group (internal view of dsv4_dist). All collectives of
 * context and expert parallelism go through the communicator kept here; nothing is global. */
#ifndef DSV4_DIST_DIST_H
#define DSV4_DIST_DIST_H

#include <stdint.h>

#include "dsv4.h"

#ifdef DSV4_HAVE_MPI
#include <mpi.h>
#endif

struct dsv4_dist {
    int rank, size;
    int owns_mpi;        /* dsv4_dist_init called MPI_Init */
    double timeout_s;    /* peer timeout of one collective inside a call; <= 0: none */
    int broken;          /* a collective timed out: the group cannot be used again */
    int last_refusal;    /* DSV4_DIST_* of the last agreement (dsv4_dist_last_refusal) */
#ifdef DSV4_HAVE_MPI
    MPI_Comm comm;       /* a duplicate of MPI_COMM_WORLD: library traffic stays apart */
    unsigned char *agreed; /* (size + 1, DSV4_DIST_AGREE_ROW) dsv4_dist_agree's gather, made
                            * once here so an agreement allocates nothing */
#endif
};

/* The most digests one dsv4_dist_agree compares, and the bytes of a rank's row. */
#define DSV4_DIST_AGREE_MAX 4
#define DSV4_DIST_AGREE_ROW (4 + 32 * DSV4_DIST_AGREE_MAX)

/* The default peer timeout (dsv4_dist_set_timeout). */
#define DSV4_DIST_TIMEOUT_DEFAULT 300.0

/* Ranks agree before they compute. Collective over d: every rank passes its local status
 * (0 or a DSV4_ERR_* code whose message is in err) and n digests of what must be equal on
 * every rank (names[i] says what digest i covers, for the message). Returns 0 on every
 * rank when all statuses are 0 and every digest equals rank 0's; otherwise the same
 * failure on every rank: a rank's own failure keeps its message, the others get
 * "<what>: rank R failed (<reason>): <rank R's message>" (R the lowest failing rank; its
 * message travels in a second collective on this failure path only) or "<what>: ranks
 * disagree: rank R has another
 * <names[i]> than rank 0" with code mismatch_code. A group broken by a peer timeout
 * fails at once. Without MPI or with one rank: returns local_rc. n <= DSV4_DIST_AGREE_MAX
 * (every rank passes the same n: a larger one fails on every rank without a collective). */
int dsv4_dist_agree(dsv4_dist *d, int local_rc, int n, const uint8_t (*digests)[32],
                    const char *const *names, int mismatch_code, const char *what, dsv4_err *err);

/* dsv4_dist_agree without digests, sharing values instead: every rank passes its status and
 * n int32 values (the same n everywhere, n <= DSV4_DIST_SHARE_MAX), and on success every
 * rank's values are in all (size, n), rank after rank, on every rank. They are the peers'
 * word, to be checked before use. Failures as dsv4_dist_agree's (all is then unset).
 * Without MPI or with one rank: all = mine (when local_rc is 0), returns local_rc. */
#define DSV4_DIST_SHARE_MAX (32 * DSV4_DIST_AGREE_MAX / 4)
int dsv4_dist_agree_share(dsv4_dist *d, int local_rc, int n, const int32_t *mine, int32_t *all,
                          const char *what, dsv4_err *err);

#ifdef DSV4_HAVE_MPI
/* Completes a non-blocking collective that MPI_I... started (mrc is that call's result)
 * within the peer timeout: 0, or DSV4_ERR_IO with "<what>: <MPI error>" or, after the
 * timeout, "<what>: no answer from rank(s) ... within the peer timeout of S s". On a
 * timeout the ranks that time out too are found by a short exchange of messages, the
 * others are named; the group is then marked broken (the pending operation cannot be
 * cancelled): the caller must end the job (dsv4_dist_abort). */
int dsv4_dist_complete(dsv4_dist *d, int mrc, MPI_Request *req, const char *what, dsv4_err *err);

/* Between two polls of a wait that has lasted `waited` seconds (wait.c): for the first
 * DSV4_DIST_BUSY_S the next poll follows at once, then up to DSV4_DIST_SPIN_S the core is
 * yielded between polls (a step's waits on a dedicated machine end within these and cost what
 * they did); after that the rank sleeps a sixteenth of the time waited, at most nap_max_s,
 * each nap followed by DSV4_DIST_QUICK_POLLS polls that only yield (an exchange that started
 * during the nap moves on only while this rank polls). b starts zeroed, one for each wait.
 * In-step waits (dsv4_dist_complete) nap at most DSV4_DIST_NAP_MAX_S. */
typedef struct {
    int quick; /* polls left that yield instead of sleeping */
} dsv4_dist_backoff;
#define DSV4_DIST_BUSY_S 300e-6
#define DSV4_DIST_SPIN_S 2e-3
#define DSV4_DIST_NAP_MAX_S 1e-3
#define DSV4_DIST_QUICK_POLLS 4
void dsv4_dist_pause(dsv4_dist_backoff *b, double waited, double nap_max_s);
#endif

#endif
