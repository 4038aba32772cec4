/* test_keys.c — the prefix-key sets of data-parallel serving's reports (serve/dp_wire.c): a
 * rank reports the keys gone and the keys new since its last report (srv_keys_minus both
 * ways), and rank 0 applies them to what it held (srv_keys_apply): that must give the rank's
 * new set exactly, for any old and new sets. */
#include <stdint.h>

#include "serve/dp_wire.h"
#include "test.h"

/* A random ascending set of at most cap keys below lim (xorshift state *x). */
static int64_t random_set(uint64_t *x, uint64_t *out, int64_t cap, uint64_t lim) {
    int64_t n = 0;
    for (uint64_t k = 0; k < lim && n < cap; k++) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        if (*x % 3 == 0) out[n++] = (k << 40) + 8 * k + 1;
    }
    return n;
}

static int ascending(const uint64_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        if (a[i - 1] >= a[i]) return 0;
    return 1;
}

int main(void) {
    {
        const uint64_t a[] = {1, 3, 5, 7}, b[] = {3, 4, 7};
        uint64_t out[8];
        CHECK(srv_keys_minus(a, 4, b, 3, out) == 2 && out[0] == 1 && out[1] == 5);
        CHECK(srv_keys_minus(b, 3, a, 4, out) == 1 && out[0] == 4);
        CHECK(srv_keys_minus(a, 4, NULL, 0, out) == 4 && out[3] == 7);
        CHECK(srv_keys_minus(NULL, 0, a, 4, out) == 0);
    }
    {
        /* a deleted key not held and an added one held already change nothing */
        const uint64_t held[] = {1, 3, 5, 7}, del[] = {3, 9}, add[] = {0, 4, 5, 8};
        const uint64_t want[] = {0, 1, 4, 5, 7, 8};
        uint64_t out[8];
        const int64_t n = srv_keys_apply(held, 4, del, 2, add, 4, out);
        CHECK(n == 6 && !memcmp(out, want, sizeof want));
        CHECK(srv_keys_apply(held, 4, held, 4, NULL, 0, out) == 0);
        CHECK(srv_keys_apply(NULL, 0, NULL, 0, add, 4, out) == 4 && !memcmp(out, add, sizeof add));
    }
    {
        /* add overlapping held at its first, a middle and its last key, one of them deleted
         * too, and repeated: each kept once (rv-srv6) */
        const uint64_t held[] = {2, 4, 6}, del[] = {4}, add[] = {2, 4, 4, 6, 6, 9};
        const uint64_t want[] = {2, 4, 6, 9};
        uint64_t out[9];
        CHECK(srv_keys_apply(held, 3, del, 1, add, 6, out) == 4 && !memcmp(out, want, sizeof want));
        CHECK(srv_keys_apply(held, 3, NULL, 0, held, 3, out) == 3 && !memcmp(out, held, sizeof held));
    }
    /* old -> new for random sets: the delta applied to old is new */
    enum { CAP = 300 };
    static uint64_t old[CAP], neu[CAP], delta[2 * CAP], got[2 * CAP];
    uint64_t x = 0x2545f4914f6cdd1dull;
    int bad = 0, deltas = 0;
    for (int round = 0; round < 500; round++) {
        const uint64_t lim = round % 7 == 0 ? 3 : 400;
        const int64_t no = random_set(&x, old, CAP / 2, lim);
        int64_t nn = 0;
        if (round % 2) {
            nn = random_set(&x, neu, CAP / 2, lim);  /* unrelated */
        } else {
            /* a few gone, a few new (between old's: ascending still) */
            for (int64_t i = 0; i < no; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                if (x % 10) neu[nn++] = old[i];
                if (x % 7 == 0) neu[nn++] = old[i] + 1;
            }
        }
        const int64_t gone = srv_keys_minus(old, no, neu, nn, delta);
        const int64_t added = srv_keys_minus(neu, nn, old, no, delta + gone);
        deltas += gone + added < nn;
        const int64_t n = srv_keys_apply(old, no, delta, gone, delta + gone, added, got);
        bad += n != nn || !ascending(got, n) || (n && memcmp(got, neu, (size_t)n * sizeof *got));
    }
    CHECK_MSG(bad == 0, "%d of 500 rounds differ", bad);
    CHECK(deltas > 100);  /* the small changes are shorter as a delta */
    return test_report();
}
