/* dp_wire.h — the bytes of data-parallel serving (dp.h): a request as rank 0 sends it to its
 * home rank, and a request's news as the home rank reports them back. Native byte order
 * and struct layouts: the ranks of a group run one build on one kind of host (engine
 * create's agreement checks it). */
#ifndef DSV4_SERVE_DP_WIRE_H
#define DSV4_SERVE_DP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/util.h"

/* r's prompt and everything its generation state is made of (sampling parameters and seed,
 * stop strings, logit bias, forced prefix, test script, the structured output's schema),
 * and the id of its choice 0 when it is another choice of n > 1. A new dsv4_gen_params
 * field must travel here too. */
void srv_wire_put_req(srv_buf *b, const srv_req *r);
/* A new request from those bytes (two references; id set), or NULL (bad bytes: r->bad
 * set; or out of memory); *lead: its choice 0's id, -1 for none (r->lead is left NULL). */
srv_req *srv_wire_get_req(srv_rd *rd, int64_t *lead);

/* Home rank: r's news since the last report (events, text released without a token, the
 * prompt tokens restored, the end), when there are any; call on the scheduler's thread.
 * Returns 1 when r has ended and its end is now written. */
int srv_wire_put_news(srv_buf *b, srv_req *r);
/* Rank 0: the id of the next news record (then srv_wire_apply_news with the request). */
int64_t srv_wire_news_id(srv_rd *rd);
/* Applies one record's news to r (the client-facing request), with the latencies in met as
 * rank 0 sees them. Returns 1 when r ended: its end, finish and message (msg: room for
 * r->errmsg's bytes, "" for none) are then in the out-arguments, for srv_sched_ended. */
int srv_wire_apply_news(srv_rd *rd, srv_req *r, srv_metrics *met, int *end, int *fin, char *msg);

/* Sets of prefix keys, ascending and distinct (a rank's report sends what changed since its
 * last, rank 0 applies it to what it holds):
 * the keys of a (na) that are not in b (nb), to out (room for na); their count. */
int64_t srv_keys_minus(const uint64_t *a, int64_t na, const uint64_t *b, int64_t nb, uint64_t *out);
/* (held less del) with add, ascending and distinct, to out (room for n + na); its count.
 * Any ascending del and add (a key of del not held, one of add held already: nothing). */
int64_t srv_keys_apply(const uint64_t *held, int64_t n, const uint64_t *del, int64_t nd,
                       const uint64_t *add, int64_t na, uint64_t *out);
/* An order-free checksum of a set of distinct keys (the sum of a bijective mix of each key,
 * mod 2^64): what rank 0 holds of a rank is checked against the rank's own. */
uint64_t srv_keys_sum(const uint64_t *k, int64_t n);

/* A rank's side of its key reports: the set its last report gave (n_sent -1: none yet, or
 * the next report must carry the whole list), the scratch for the change. */
typedef struct srv_keys_tx {
    uint64_t *sent, *delta;
    int64_t n_sent, cap_sent, cap_delta;
    uint64_t sum;              /* srv_keys_sum of the set the reports gave so far */
} srv_keys_tx;
/* The keys part of a report for the set own[0, n) (ascending): n_held(i64) then, when own
 * differs from the last report's set, what changed (n_held -2: n_gone gone[] n_new new[])
 * when that is shorter than the whole list, else the whole list (n_held = n, keys[]); -1
 * alone when nothing changed; then the checksum of the set the reports give (u64). */
void srv_keys_put(srv_keys_tx *tx, srv_buf *b, const uint64_t *own, int64_t n);
/* Rank 0 found what it holds of this rank differs from it: the next report carries the
 * whole list. */
void srv_keys_resend(srv_keys_tx *tx);
void srv_keys_tx_free(srv_keys_tx *tx);

/* Rank 0's side: what it holds of one rank's keys (ascending), and their checksum. */
typedef struct srv_keys_rx {
    uint64_t *k;
    int64_t n, cap;
    uint64_t sum;
    int fail_next;             /* tests: the next change applied fails as out of memory */
} srv_keys_rx;
/* Makes h the set of n keys at k (ascending; k need not be aligned); 0, or -1 when out of
 * memory (then h is empty). */
int srv_keys_set(srv_keys_rx *h, const void *k, int64_t n);
/* Reads a report's keys part (srv_keys_put) into h. 0: h is the rank's set (the checksums
 * agree); 1: h differs from it (a change that could not be applied for memory: the rank
 * must be asked for its whole list, srv_keys_resend); -1: the part is malformed. */
int srv_keys_get(srv_keys_rx *h, srv_rd *rd);
void srv_keys_rx_free(srv_keys_rx *h);

#endif
