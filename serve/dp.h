/* dp.h — serving on a process group with data-parallel attention (`dsv4 serve --parallel ep
 * --attention dp`, serving.md §d; the engine's DSV4_PAR_EP | DSV4_PAR_DP).
 *
 * Every rank runs its own scheduler (scheduler.c) over the requests it is the home rank of:
 * their sequences, caches, prefix cache, sampler and MTP state live there, and a request
 * keeps its home for life. Rank 0 is also the front: it serves HTTP and places each new
 * request (the rank whose prefix cache most likely holds the longest part of its prompt,
 * else the one with the fewest live requests, then the most free pages).
 *
 * A step of the group:
 *   1. rank 0 broadcasts the step message: the requests placed on other ranks since the
 *      last one (prompt and everything their generation state is made of: sampling
 *      parameters with the seed, stop strings, logit bias, forced prefix, test script, the
 *      structured output's schema),
 *      the ids of remote requests the client cancelled, the shutdown's expiry, or the stop;
 *   2. every rank runs its scheduler's step: one dsv4_forward with its own spans, the head
 *      on its rows and its own requests' sampling, one dsv4_mtp_forward (with the MTP
 *      engine): each call on every rank, with no rows where a rank has none, so the group's
 *      call sequence is the same everywhere (the engine agrees on each call's kind);
 *   3. every rank's report goes to rank 0 (a gather): for each of its requests that has
 *      news, the tokens' events (id, logprobs, the text each released), text released
 *      without a token, the prompt tokens restored from its prefix cache, and how it
 *      ended; and the rank's load (running, waiting, rows, free pages, MTP and prefix
 *      counters). Rank 0 feeds them to the client-facing requests, so streaming, the
 *      thinking split and tool-call parsing stay on rank 0, on the same bytes.
 * A request's tokens are thus those of one process: its sampler draws on its home rank
 * from the rows its home rank computed, bitwise those of a single-process engine.
 *
 * A refusal (a rank's full cache, a bad span) fails the call on every rank; the rank whose
 * refusal it is preempts or fails only its own requests (scheduler.c), the others retry
 * the same spans. An idle group sends nothing: the followers wait for the next step
 * message without a deadline, as under rank-0-home (step_msg.h).
 */
#ifndef DSV4_SERVE_DP_H
#define DSV4_SERVE_DP_H

#include "dsv4.h"
#include "serve/request.h"

typedef struct srv_dp srv_dp;
typedef struct srv_sched srv_sched;

/* A rank's side of the group (d has more than one rank); s is its scheduler. */
int srv_dp_create(dsv4_dist *d, srv_sched *s, srv_dp **out, dsv4_err *err);
void srv_dp_free(srv_dp *dp);
int srv_dp_ranks(const srv_dp *dp);

/* After a failed collective call (a forward, an MTP forward), from the group's agreement
 * (dsv4_dist_last_refusal): 1 when only other ranks refused it, so nothing changed here and
 * this rank calls again as it is. */
int srv_dp_refused_elsewhere(const srv_dp *dp);
/* 1 when this rank's own status refused it before any rank computed (the others call
 * again); 0 for a failure after the compute (this rank's alone) or of the group itself. */
int srv_dp_refusal(const srv_dp *dp);

/* ---- rank 0, on its scheduler thread ---- */

/* Places new request r: returns its home rank. 0: the caller queues it here; else the
 * request is sent with the next step message and followed until its home reports its end. */
int srv_dp_place(srv_dp *dp, srv_req *r);
/* Remote requests not ended yet. */
int srv_dp_remote(const srv_dp *dp);
/* Starts a group step: the cancelled remote requests, the expiry (every remote request
 * then ends), the message broadcast. An error means the group cannot serve any more
 * (srv_dp_failed): every remote request has then ended with it, and the step must not run
 * (its engine calls are collective over a group that is gone); the caller ends this rank's
 * requests instead. A message that could not be recorded for memory is not sent: the
 * followers get the stop in its place and return. */
int srv_dp_begin(srv_dp *dp, int expired, dsv4_err *err);
/* 1 once the group cannot serve any more (or was stopped), err (if not NULL) then set to
 * the recorded reason. */
int srv_dp_failed(const srv_dp *dp, dsv4_err *err);
/* Tests: the next step message fails as when out of memory. */
void srv_dp_inject_oom(srv_dp *dp);
/* Ends a group step (after srv_sched_step on every rank): the reports gathered and handed
 * to the remote requests' clients. */
void srv_dp_end(srv_dp *dp);
/* The last message: every follower returns from srv_dp_follow. An error (the recorded
 * failure) when the group failed, also when its followers were stopped already then (a
 * message failed for memory, a malformed report). */
int srv_dp_stop(srv_dp *dp, dsv4_err *err);

/* ---- a follower rank ---- */

/* Runs rank 0's group steps on this rank's scheduler until the stop. Returns 0 then (the
 * caller ends what this rank still runs: after a failed message the stop comes early); an
 * error when the group failed. */
int srv_dp_follow(srv_dp *dp, dsv4_err *err);

#endif
