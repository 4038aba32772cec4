/* wait.c — how a rank waits for its peers between polls (see dist/dist.h). Open MPI moves a
 * nonblocking collective only inside MPI_Test, so a wait polls. Between polls the waiting
 * rank first only polls again, then yields its core, then sleeps: a short wait (the common
 * case inside a step on a dedicated machine) is answered within microseconds, and a rank that
 * waits long for a slow peer leaves its core to whoever needs it (more ranks or threads than
 * cores, or another program's load, which sched_yield does not give way to). */
#include <sched.h>
#include <time.h>

#include "dist/dist.h"

#ifdef DSV4_HAVE_MPI

void dsv4_dist_pause(dsv4_dist_backoff *b, double waited, double nap_max_s) {
    /* not even a yield: on a core shared with another process a yield gives it the rest of
     * the time slice (milliseconds), while the peer's answer is often microseconds away */
    if (waited < DSV4_DIST_BUSY_S) return;
    if (waited < DSV4_DIST_SPIN_S || b->quick > 0) {
        if (b->quick > 0) b->quick--;
        sched_yield();
        return;
    }
    /* a sixteenth of the time waited so far: a wait that ends during a nap runs over by at
     * most a sixteenth (plus the kernel's timer slack and wake-up, ~80 us on this VM) */
    double nap = waited / 16;
    if (nap > nap_max_s) nap = nap_max_s;
    const struct timespec ts = {0, (long)(nap * 1e9)};
    nanosleep(&ts, NULL);
    b->quick = DSV4_DIST_QUICK_POLLS;
}

#endif
