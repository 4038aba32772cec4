/* test_keys.c — the prefix-key sets of data-parallel serving's reports (serve/dp_wire.c): a
 * rank reports the keys gone and the keys new since its last report (srv_keys_minus both
 * ways), and rank 0 applies them to what it held (srv_keys_apply): that must give the rank's
 * new set exactly, for any old and new sets. Through the reports' bytes (srv_keys_put,
 * srv_keys_get): a change rank 0 fails to apply (the fault hook: out of memory) is caught by
 * the report's checksum at once, and the whole list asked for then (srv_keys_resend) makes
 * the two sets equal again with the next report; every other report leaves them equal. */
#include <stdint.h>
#include <stdio.h>

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

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* 300 reports of a rank whose set changes a little most steps (a delta), sometimes not at
 * all, sometimes wholly; rank 0 fails to apply the change at every 23rd step. */
static void test_reports(void) {
    enum { CAP = 256 };
    static uint64_t own[CAP], tmp[CAP];
    srv_keys_tx tx = {.n_sent = -1};
    srv_keys_rx rx = {0};
    srv_buf b = {0};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int64_t n = random_set(&x, own, CAP / 2, 300);
    int faults = 0, caught = 0, healed = 0, bad = 0, asked = 0, deltas = 0;
    for (int step = 0; step < 300; step++) {
        const uint64_t r = next(&x) % 10;
        if (r == 0) {
            n = random_set(&x, own, CAP / 2, 300);  /* wholly other */
        } else if (r < 8) {  /* a key gone, one new (ascending still) */
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++) {
                if (next(&x) % 16) tmp[m++] = own[i];
                if (next(&x) % 29 == 0 && m < CAP && (i + 1 == n || own[i] + 2 < own[i + 1])) tmp[m++] = own[i] + 2;
            }
            memcpy(own, tmp, (size_t)m * sizeof *own);
            n = m;
        }  /* else unchanged */
        b.n = 0;
        srv_keys_put(&tx, &b, own, n);
        int64_t kind;
        memcpy(&kind, b.s, sizeof kind);
        deltas += kind == -2;
        rx.fail_next = step % 23 == 22;
        srv_rd rd = {(const uint8_t *)b.s, (const uint8_t *)b.s + b.n, 0};
        const int rc = srv_keys_get(&rx, &rd);
        const int failed = rx.fail_next == 0 && step % 23 == 22 && kind == -2;
        const int same = rx.n == n && (!n || !memcmp(rx.k, own, (size_t)n * sizeof *own));
        CHECK_MSG(rc >= 0 && rd.p == rd.end, "step %d: report malformed (%d) or not read to its end", step, rc);
        faults += failed;
        if (failed) {
            caught += rc == 1;  /* the change was lost: the checksum says so */
        } else if (asked) {
            healed += rc == 0 && same;  /* the whole list after the ask */
            bad += !(rc == 0 && same);
        } else {
            bad += !(rc == 0 && same);
        }
        asked = rc == 1;
        if (rc == 1) srv_keys_resend(&tx);  /* rank 0's RESEND, with the next message */
    }
    CHECK_MSG(faults >= 5 && deltas > 100, "%d faults on %d deltas: the test does not reach them", faults, deltas);
    CHECK_MSG(caught == faults, "%d of %d failed changes caught by the checksum", caught, faults);
    CHECK_MSG(healed == faults, "%d of %d failed changes healed by the next report", healed, faults);
    CHECK_MSG(bad == 0, "%d reports left rank 0's set other than the rank's", bad);
    printf("reports: %d deltas, %d changes failed, %d caught, %d healed\n", deltas, faults, caught, healed);
    /* without the resend the set stays off, and every report says so */
    rx.fail_next = 1;
    own[n++] = UINT64_MAX;  /* one key new: a delta */
    b.n = 0;
    srv_keys_put(&tx, &b, own, n);
    srv_rd rd = {(const uint8_t *)b.s, (const uint8_t *)b.s + b.n, 0};
    CHECK(srv_keys_get(&rx, &rd) == 1);
    for (int i = 0; i < 2; i++) {
        b.n = 0;
        srv_keys_put(&tx, &b, own, n);  /* unchanged */
        rd = (srv_rd){(const uint8_t *)b.s, (const uint8_t *)b.s + b.n, 0};
        CHECK(srv_keys_get(&rx, &rd) == 1);
    }
    /* a checksum of one set is not that of the set one key less, more or other */
    const uint64_t s0 = srv_keys_sum(own, n);
    CHECK(s0 != srv_keys_sum(own, n - 1) && s0 == srv_keys_sum(own, n));
    own[0] ^= 1;
    CHECK(s0 != srv_keys_sum(own, n));
    srv_buf_free(&b);
    srv_keys_tx_free(&tx);
    srv_keys_rx_free(&rx);
}

int main(void) {
    test_reports();
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
