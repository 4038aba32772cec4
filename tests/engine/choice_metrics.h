/* choice_metrics.h — the discrete choices of a run (spec/serving.md §f): router top-K per
 * (layer, token) and CSA selections, captured through the engine's choice hook, and how two
 * runs' choices agree. Shared by the P2 (test_w8a8_accuracy) and P3
 * (test_fidelity_accuracy) tests. */
#ifndef DSV4_TESTS_CHOICE_METRICS_H
#define DSV4_TESTS_CHOICE_METRICS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"

typedef struct {
    int N, L, K, topk;
    int *route;    /* (L, N, K) routed experts in k order, -1 = not reported */
    int *csa;      /* (L, N, topk) CSA selections, ascending */
    int *csa_n;    /* (L, N) count, -1 = not reported */
} choices;

/* 0, or -1 when out of memory */
static inline int choices_init(choices *c, int N, int L, int K, int topk) {
    *c = (choices){N, L, K, topk > 0 ? topk : 1, malloc(sizeof(int) * (size_t)L * N * K),
                   malloc(sizeof(int) * (size_t)L * N * (topk > 0 ? topk : 1)), malloc(sizeof(int) * (size_t)L * N)};
    if (!c->route || !c->csa || !c->csa_n) return -1;
    for (size_t i = 0; i < (size_t)L * N * K; i++) c->route[i] = -1;
    for (size_t i = 0; i < (size_t)L * N; i++) c->csa_n[i] = -1;
    return 0;
}

static inline void choices_free(choices *c) {
    free(c->route); free(c->csa); free(c->csa_n);
    memset(c, 0, sizeof *c);
}

/* dsv4_choice_fn: user is a choices; rows of the MTP block are ignored */
static inline void choices_hook(void *user, int seq, int64_t pos, int layer, int kind, const int *ids, int n) {
    (void)seq;
    choices *c = user;
    if (layer < 0 || layer >= c->L || pos < 0 || pos >= c->N) return;
    const size_t at = (size_t)layer * c->N + (size_t)pos;
    if (kind == DSV4_CHOICE_EXPERTS && n == c->K) {
        memcpy(c->route + at * c->K, ids, sizeof(int) * (size_t)n);
    } else if (kind == DSV4_CHOICE_CSA && n <= c->topk) {
        memcpy(c->csa + at * c->topk, ids, sizeof(int) * (size_t)n);
        c->csa_n[at] = n;
    }
}

/* The same expert set (order aside) in both (K) lists */
static inline int same_experts(const int *x, const int *y, int K) {
    for (int i = 0; i < K; i++) {
        int found = 0;
        for (int j = 0; j < K; j++) found |= x[i] == y[j];
        if (!found) return 0;
    }
    return 1;
}

/* Fraction of (score-routed layer, token) pairs with the same expert set; a, b (L, N, K). */
static inline double route_agreement(int hash_layers, int L, int N, int K, const int *a, const int *b) {
    long same = 0, total = 0;
    for (int l = hash_layers; l < L; l++)
        for (int t = 0; t < N; t++, total++)
            same += same_experts(a + ((size_t)l * N + t) * K, b + ((size_t)l * N + t) * K, K);
    return total ? (double)same / total : 1.0;
}

/* Mean Jaccard |A n B| / |A u B| of the CSA selections over (CSA layer, token) pairs with a
 * non-empty selection; *pairs gets their number, *exact those with identical sets. */
static inline double csa_jaccard(const choices *a, const choices *b, long *pairs, long *exact) {
    double sum = 0;
    *pairs = *exact = 0;
    for (size_t at = 0; at < (size_t)a->L * a->N; at++) {
        const int na = a->csa_n[at], nb = b->csa_n[at];
        if (na <= 0 && nb <= 0) continue;
        const int *x = a->csa + at * a->topk, *y = b->csa + at * b->topk;
        int inter = 0, i = 0, j = 0; /* both ascending */
        while (i < na && j < nb) {
            if (x[i] == y[j]) { inter++; i++; j++; }
            else if (x[i] < y[j]) i++;
            else j++;
        }
        const int uni = (na > 0 ? na : 0) + (nb > 0 ? nb : 0) - inter;
        sum += uni ? (double)inter / uni : 1.0;
        *exact += inter == na && inter == nb;
        (*pairs)++;
    }
    return *pairs ? sum / *pairs : 1.0;
}

/* Prints the router top-K agreement of the score-routed layers and the CSA selections'
 * Jaccard overlap of run a against run b; returns the number of CSA (layer, token) pairs. */
static inline long print_choice_metrics(int hash_layers, int L, int N, int K, const int *route_a,
                                        const int *route_b, const choices *a, const choices *b) {
    const double ra = route_agreement(hash_layers, L, N, K, route_a, route_b);
    printf("  router top-%d agreement (score layers %d..%d): %.2f%%\n", K, hash_layers, L - 1, 100 * ra);
    long pairs, exact;
    const double jac = csa_jaccard(a, b, &pairs, &exact);
    printf("  CSA selections: mean Jaccard %.4f, identical in %ld of %ld (layer, token) pairs\n", jac, exact,
           pairs);
    return pairs;
}

#endif
