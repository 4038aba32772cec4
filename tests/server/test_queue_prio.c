/* test_queue_prio.c — dsv4_queue_depth_by_priority under data-parallel attention (serve/
 * metrics.c): every rank's queue, as its report carries it (its first 8 distinct priorities
 * with their counts, and the count past them), merged with rank 0's. Random queues on 1 to 4
 * ranks against a reference that sees every rank's whole queue: the rendered gauge must show
 * the 8 smallest priorities queued anywhere, each with its exact count over all ranks, and
 * "rest" the count of all the others. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/metrics.h"
#include "test.h"

#define MAXP 24  /* priorities 0..MAXP-1 */

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* A rank's queue (count[p] requests of priority p) as publish_load reports it. */
static void report(const int64_t *count, int *prio, int64_t *n, int *k, int64_t *rest) {
    *k = 0;
    *rest = 0;
    for (int p = 0; p < MAXP; p++) {
        if (!count[p]) continue;
        if (*k == SRV_PRIO_SHOWN) { *rest += count[p]; continue; }
        prio[*k] = p;
        n[(*k)++] = count[p];
    }
}

int main(void) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    srv_metrics *m = malloc(sizeof *m);
    int rounds_with_rest = 0;
    for (int round = 0; round < 400; round++) {
        srv_metrics_init(m);
        const int ranks = 1 + (int)(rnd(&x) % 4);
        int64_t want[MAXP] = {0};
        for (int r = 0; r < ranks; r++) {
            int64_t count[MAXP] = {0};
            const int spread = 2 + (int)(rnd(&x) % (MAXP - 1));  /* few or many distinct priorities (<= MAXP) */
            for (int i = (int)(rnd(&x) % 30); i > 0; i--) count[rnd(&x) % (uint64_t)spread]++;
            for (int p = 0; p < MAXP; p++) want[p] += count[p];
            srv_rank_load l = {0};
            int k;
            int64_t rest;
            report(count, l.prio, l.prio_n, &k, &rest);
            l.n_prio = k;
            l.prio_rest = rest;
            if (r == 0) {
                srv_metrics_queue_prio(m, l.prio, l.prio_n, k, rest);
                if (ranks > 1) srv_metrics_rank(m, 0, ranks, &l);
            } else {
                srv_metrics_rank(m, r, ranks, &l);
            }
        }
        char *text = srv_metrics_render(m);
        CHECK(text != NULL);
        if (!text) break;
        /* the reference: the 8 smallest priorities queued, the others as rest */
        char expect[1024] = "";
        int shown = 0;
        int64_t rest = 0;
        for (int p = 0; p < MAXP; p++) {
            if (!want[p]) continue;
            if (shown == SRV_PRIO_SHOWN) { rest += want[p]; continue; }
            snprintf(expect + strlen(expect), sizeof expect - strlen(expect),
                     "dsv4_queue_depth_by_priority{priority=\"%d\"} %lld\n", p, (long long)want[p]);
            shown++;
        }
        if (rest) {
            snprintf(expect + strlen(expect), sizeof expect - strlen(expect),
                     "dsv4_queue_depth_by_priority{priority=\"rest\"} %lld\n", (long long)rest);
            rounds_with_rest++;
        }
        /* the gauge's lines in the text, in order */
        char got[1024] = "";
        for (const char *s = strstr(text, "\ndsv4_queue_depth_by_priority{"); s; s = strstr(s + 1, "\ndsv4_queue_depth_by_priority{")) {
            const char *e = strchr(s + 1, '\n');
            snprintf(got + strlen(got), sizeof got - strlen(got), "%.*s\n", (int)(e - s - 1), s + 1);
        }
        CHECK_MSG(strcmp(got, expect) == 0, "round %d (%d ranks): got\n%swant\n%s", round, ranks, got, expect);
        free(text);
        srv_metrics_destroy(m);
    }
    free(m);
    CHECK(rounds_with_rest > 50);
    printf("test_queue_prio: 400 rounds, %d with a rest\n", rounds_with_rest);
    return test_report();
}
