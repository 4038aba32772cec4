/* test_prio_victim.c — the priority scheduler's choice of a victim (serve/prio_victim.c), rule
 * by rule, without a server's timing: never an equal or higher priority; the newest of the
 * lowest priority first; no thrash (a victim readmitted keeps its slot until it sampled a
 * token); nothing unless all the slots needed come free; and only once the waiting request
 * has waited longer than the victim's recompute. Then random lists against a reference that
 * states the rules as sets rather than as the scan. */
#include <stdint.h>
#include <string.h>

#include "serve/prio_victim.h"
#include "test.h"

/* a running request: priority, sampled tokens, n_sampled at its last priority preemption
 * (-1 none), positions to recompute */
typedef struct {
    int priority, n_sampled, prio_victim_at, n_done;
} spec;
#define R(p, ns, at, nd) ((spec){(p), (ns), (at), (nd)})

/* srv_prio_victim over running requests made from run[] (n <= 16) */
static int victim(const spec *run, int n, int h, int short_of, double waited, double rate) {
    static srv_req req[16];
    const srv_req *ptr[16];
    for (int k = 0; k < n; k++) {
        memset(&req[k], 0, sizeof req[k]);
        req[k].priority = run[k].priority;
        req[k].n_sampled = run[k].n_sampled;
        req[k].prio_victim_at = run[k].prio_victim_at;
        req[k].n_done = run[k].n_done;
        ptr[k] = &req[k];
    }
    return srv_prio_victim(ptr, n, h, short_of, waited, rate);
}

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* The rules as sets: the candidates are every request of a strictly lower priority that was
 * never a victim or has sampled since; the victim is the last of them in list order (the list
 * is sorted by priority, then arrival); none when fewer candidates than slots needed, or when
 * the wait does not exceed the victim's recompute. */
static int reference(const spec *run, int n, int h, int short_of, double waited, double rate) {
    if (short_of <= 0 || rate <= 0) return -1;
    int count = 0, last = -1;
    for (int k = 0; k < n; k++) {
        const int progressed = run[k].prio_victim_at < 0 || run[k].n_sampled > run[k].prio_victim_at;
        if (run[k].priority > h && progressed) { count++; last = k; }
    }
    if (count == 0 || count < short_of) return -1;
    return waited > run[last].n_done / rate ? last : -1;
}

int main(void) {
    /* never a request of the waiting one's priority, nor of a higher one */
    const spec same[] = {R(1, 4, -1, 50), R(1, 9, -1, 80)};
    CHECK(victim(same, 2, 1, 1, 1e9, 100) == -1);
    const spec higher[] = {R(0, 4, -1, 50)};
    CHECK(victim(higher, 1, 1, 1, 1e9, 100) == -1);

    /* the newest of the lowest priority; only strictly lower ones count */
    const spec mixed[] = {R(1, 3, -1, 10), R(2, 3, -1, 10), R(3, 3, -1, 10), R(3, 3, -1, 10)};
    CHECK(victim(mixed, 4, 0, 1, 10, 100) == 3);
    CHECK(victim(mixed, 4, 2, 1, 10, 100) == 3);
    CHECK(victim(mixed, 4, 2, 2, 10, 100) == 3);   /* both priority-3 ones free 2 */
    CHECK(victim(mixed, 4, 2, 3, 10, 100) == -1);  /* 3 slots: only two are lower */
    CHECK(victim(mixed, 4, 1, 3, 10, 100) == 3);   /* now three are lower */
    CHECK(victim(mixed, 4, 3, 1, 10, 100) == -1);

    /* the wait must exceed the victim's recompute (n_done / rate), strictly */
    const spec one[] = {R(0, 1, -1, 10), R(2, 7, -1, 100)};
    CHECK(victim(one, 2, 1, 1, 1.0, 100) == -1);   /* waited exactly the recompute */
    CHECK(victim(one, 2, 1, 1, 1.001, 100) == 1);
    CHECK(victim(one, 2, 1, 1, 0.5, 100) == -1);
    CHECK(victim(one, 2, 1, 1, 0.5, 400) == 1);     /* a faster prefill: 0.25 s */
    /* ... the recompute of the victim chosen, not of a cheaper one before it */
    const spec costly_last[] = {R(3, 2, -1, 10), R(3, 2, -1, 1000)};
    CHECK(victim(costly_last, 2, 0, 1, 5, 100) == -1);
    CHECK(victim(costly_last, 2, 0, 1, 10.5, 100) == 1);

    /* no thrash: a victim that has sampled nothing since its preemption keeps its slot and the
     * next newest goes instead; once it sampled a token it may go again */
    spec thrash[] = {R(2, 10, -1, 50), R(2, 5, 5, 60)};
    CHECK(victim(thrash, 2, 0, 1, 10, 100) == 0);
    CHECK(victim(thrash, 2, 0, 2, 10, 100) == -1);  /* it cannot free two slots now */
    thrash[1].n_sampled = 6;
    CHECK(victim(thrash, 2, 0, 1, 10, 100) == 1);
    CHECK(victim(thrash, 2, 0, 2, 10, 100) == 1);
    thrash[0].prio_victim_at = 10;  /* both protected: nobody */
    thrash[1].prio_victim_at = 6;
    CHECK(victim(thrash, 2, 0, 1, 10, 100) == -1);

    /* nothing to do */
    CHECK(victim(one, 2, 1, 0, 10, 100) == -1);   /* a free slot already */
    CHECK(victim(one, 0, 1, 1, 10, 100) == -1);
    CHECK(victim(one, 2, 1, 1, 10, 0) == -1);     /* no prefill rate measured yet */

    /* random running lists (sorted as the scheduler keeps them) against the reference */
    uint64_t x = 0x2545F4914F6CDD1Dull;
    int chosen = 0, declined = 0, mismatches = 0;
    for (int round = 0; round < 20000; round++) {
        spec run[16];
        const int n = 1 + (int)(rnd(&x) % 16);
        int p = (int)(rnd(&x) % 3);
        for (int k = 0; k < n; k++) {
            p += (int)(rnd(&x) % 3 == 0);  /* non-decreasing: the list's order */
            const int ns = (int)(rnd(&x) % 6);
            const int at = rnd(&x) % 3 ? -1 : (int)(rnd(&x) % 6);
            run[k] = R(p, ns, at, (int)(rnd(&x) % 400));
        }
        const int h = (int)(rnd(&x) % 6) - 1;
        const int short_of = (int)(rnd(&x) % 5);
        const double waited = (double)(rnd(&x) % 500) / 100.0, rate = 100.0;
        const int got = victim(run, n, h, short_of, waited, rate);
        const int want = reference(run, n, h, short_of, waited, rate);
        if (got != want && mismatches++ < 5)
            fprintf(stderr, "round %d: n %d h %d short_of %d waited %.2f: got %d, want %d\n", round, n, h,
                    short_of, waited, got, want);
        if (want >= 0) chosen++;
        else declined++;
    }
    CHECK_MSG(mismatches == 0, "%d of 20000 lists chose another victim than the reference", mismatches);
    /* the lists must reach both outcomes often, or the comparison proves little */
    CHECK_MSG(chosen > 2000 && declined > 2000, "chosen %d, declined %d", chosen, declined);
    return test_report();
}
