/* step_msg.h — serving on a process group (dsv4_server.h, serving.md §d).
 *
 * Rank 0's scheduler makes every engine call that changes a sequence through a relay. A
 * relay records the call in the step message; right before each collective call (forward,
 * MTP forward) rank 0 broadcasts the message, and the followers (srv_follow) replay exactly
 * the recorded calls in the same order, so every rank's engine holds the same sequences
 * and joins the same collectives. The LM head and sampling stay on rank 0. A message is
 * the calls since the previous one plus the collective that ends it (or the stop), so an
 * idle server sends nothing and its followers wait, without a deadline, in the broadcast.
 * Without a group (or with one rank) the wrappers are the plain engine calls.
 */
#ifndef DSV4_SERVE_STEP_MSG_H
#define DSV4_SERVE_STEP_MSG_H

#include "dsv4.h"

typedef struct srv_relay srv_relay;

/* A relay for the calls rank 0 makes on e, over group d (NULL: no group). */
int srv_relay_create(dsv4_engine *e, dsv4_dist *d, srv_relay **out, dsv4_err *err);
void srv_relay_free(srv_relay *rl);


/* The engine calls, recorded for the followers. */
/* Rank 0 started seq at length n: empty (n = 0, dsv4_seq_create) or from a snapshot it
 * restored (dsv4_prefix_start, dsv4_snapshot_restore: n aligned). The followers hold no
 * caches (their forwards only join the MoE exchange), so they need no snapshot: they start
 * the same slot at the same lengths (dsv4_seq_mirror). The prefix cache itself (inserts,
 * evictions, the KV directory) lives on rank 0 alone and is never relayed. Fails, creating
 * nothing on the followers, when the group cannot serve any more. */
int srv_relay_started(srv_relay *rl, int seq, int64_t n, dsv4_err *err);
int srv_relay_seq_free(srv_relay *rl, int seq, dsv4_err *err);
/* dsv4_seq_fork of src into *dst (n > 1 choices share a prompt): the followers fork the
 * same slot, which on them is its lengths alone (no caches), at any length. */
int srv_relay_fork(srv_relay *rl, int src, int *dst, dsv4_err *err);
int srv_relay_forward(srv_relay *rl, const dsv4_span *spans, int n_spans, float *hidden,
                      float *streams, dsv4_err *err);
/* dsv4_mtp_forward_out: out[i] (DSV4_MTP_OUT_*; NULL: every row) says which rows of span i
 * yield a hidden state; the rest skip their MoE. It travels with the span so that a replay
 * is the call rank 0 made (the followers, idle ranks, compute no rows: they join the MoE
 * exchange with the rows rank 0 sends, so it changes nothing there). */
int srv_relay_mtp_forward(srv_relay *rl, const dsv4_mtp_span *spans, int n_spans, const int *out,
                          float *hidden, dsv4_err *err);
/* seq's pending speculative span was committed with k rows (dsv4_spec_verify_done called
 * dsv4_seq_commit): the followers commit it too. */
void srv_relay_committed(srv_relay *rl, int seq, int k);
/* The last message: the followers replay what is left and return. Once only; later calls
 * do nothing. */
int srv_relay_stop(srv_relay *rl, dsv4_err *err);

/* A follower rank: replays rank 0's messages on e until the stop message. Returns 0 then;
 * an error when the group failed or the replay diverged (a call that succeeded on rank 0
 * failed here). */
int srv_follow(dsv4_engine *e, dsv4_dist *d, dsv4_err *err);

#endif
