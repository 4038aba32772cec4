/* scheduler.c — continuous batching over one engine (scheduler.h): the lists, one step (plan,
 * forward, head, sampling, forks, MTP, prompt scoring, snapshots) and the ends of requests;
 * sched_thread.c runs the steps on the scheduler's thread and holds the API around it. */
#include "serve/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/dp.h"
#include "serve/prefix_cache.h"
#include "serve/sched_int.h"
#include "serve/util.h"

/* What a span leaves for the prefix cache: nothing, the prompt's snapshot point (its last
 * row's hidden state is not a logits row), or a conversation's aligned length (a decode
 * row reaching it). */
enum { SNAP_NONE = 0, SNAP_PROMPT, SNAP_CONV };

/* ---- lists ------------------------------------------------------------------------------ */

/* 1 when a goes after b: a lower priority (a larger number; all 0 first come, first served),
 * then a later arrival. The waiting list is admitted, and the running list's prefill chunks
 * planned, in this order; a preemption takes from its end. */
static int after(const srv_req *a, const srv_req *b) {
    return a->priority != b->priority ? a->priority > b->priority : a->id > b->id;
}

/* Inserts r into list (n entries, room for one more) keeping the order of `after`. */
static void list_insert(srv_req **list, int *n, srv_req *r) {
    int i = *n;
    while (i > 0 && after(list[i - 1], r)) { list[i] = list[i - 1]; i--; }
    list[i] = r;
    (*n)++;
}

static void list_remove(srv_req **list, int *n, srv_req *r) {
    int i = 0;
    while (i < *n && list[i] != r) i++;
    if (i == *n) return;
    memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    (*n)--;
}

/* ---- ending requests -------------------------------------------------------------------- */

/* r failed: when it is one of n > 1 choices (or of a list's prompts), the others are
 * cancelled at once (choice 0's cancel is theirs), as the stream does, rather than run to
 * their end before the 500. */
static void cancel_choices(srv_sched *s, srv_req *r) {
    srv_req *lead = srv_req_root(r);
    for (int i = 0; i < s->n_run && !lead; i++) lead = s->run[i]->lead == r || s->run[i]->waiter == r ? r : NULL;
    for (int i = 0; i < s->n_wait && !lead; i++) lead = s->wait[i]->lead == r || s->wait[i]->waiter == r ? r : NULL;
    if (!lead) return;
    pthread_mutex_lock(&lead->mu);
    lead->cancel = 1;
    pthread_mutex_unlock(&lead->mu);
}

/* Frees r's sequence (if any), takes it off both lists, ends it, drops our reference. */
void srv_sched_finish(srv_sched *s, srv_req *r, int end, int fin, const char *msg) {
    if (r->gen && s->met) srv_metrics_guide_walks(s->met, dsv4_gen_guide_walks(r->gen));
    r->forkable = 0;  /* its other choices compute the prompt themselves */
    r->fork_wait = 0;
    dsv4_spec_free(r->spec);
    r->spec = NULL;
    /* the conversation's aligned prefix: kept (and saved when it ended normally) */
    srv_pcache_release(s->pc, &r->conv, end == SRV_END_FINISHED);
    if (r->seq >= 0) {
        dsv4_err err = {0};
        srv_relay_seq_free(s->o.relay, r->seq, &err);
        r->seq = -1;
        list_remove(s->run, &s->n_run, r);
        s->admit_hold = 0;  /* pages came back */
        s->fork_hold = 0;
    } else {
        list_remove(s->wait, &s->n_wait, r);
    }
    if (r->gen) {
        /* release the text still held back (nothing after a normal finish) */
        const char *t = NULL;
        size_t n = 0;
        dsv4_gen_end(r->gen, &t, &n);
        srv_req_push_text(r, t, n);
    }
    if (end == SRV_END_ERROR) cancel_choices(s, r);
    srv_sched_ended(s, r, end, fin, msg);
}

void srv_sched_ended(srv_sched *s, srv_req *r, int end, int fin, const char *msg) {
    srv_metrics_tokens(s->met, r->n_prompt, r->n_sampled);
    if (end == SRV_END_CANCELLED) srv_metrics_event(s->met, 1, 0);
    srv_req_end(r, end, fin, msg);
    srv_req_release(r);
    pthread_mutex_lock(&s->mu);
    s->n_live--;
    pthread_mutex_unlock(&s->mu);
}

static int cancelled(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    int c = r->cancel;
    pthread_mutex_unlock(&r->mu);
    if (r->lead && !c) c = cancelled(r->lead);  /* a client gone cancels every choice */
    if (r->waiter && !c) c = cancelled(r->waiter);  /* and every prompt of a list */
    return c;
}

/* Into the waiting list, its wait timed from now (preempt_for_priority). */
static void wait_insert(srv_sched *s, srv_req *r) {
    r->t_wait = srv_now();
    list_insert(s->wait, &s->n_wait, r);
}

/* Frees the sequence of s->run[k] and requeues it; its tokens are kept, so it is recomputed
 * from them when admitted again. short_of_pages: the pools ran out (admit nothing until
 * pages come back); else a higher priority takes its slot. */
static void preempt(srv_sched *s, int k, int short_of_pages) {
    srv_req *r = s->run[k];
    dsv4_err err = {0};
    r->fork_wait = 0;
    dsv4_spec_free(r->spec);
    r->spec = NULL;
    /* evictable from now on; the readmission restores from it when it is still there */
    srv_pcache_release(s->pc, &r->conv, 0);
    srv_relay_seq_free(s->o.relay, r->seq, &err);
    r->seq = -1;
    r->n_done = 0;
    list_remove(s->run, &s->n_run, r);
    wait_insert(s, r);
    if (short_of_pages) s->admit_hold = 1;
    s->fork_hold = 0;  /* its pages came back */
    srv_metrics_event(s->met, 0, 1);
}

/* The pools ran out: preempts the running request of the lowest priority (the newest of
 * those; first come, first served: the newest). Never one of a higher priority while one of
 * a lower runs. Among the lowest priority's, a choice 0 waiting for pages to fork (fork_wait:
 * it adds no rows) goes last; one preempted all the same took no token yet, so it computes
 * its prompt again when readmitted and forks its choices then. */
static void preempt_newest(srv_sched *s) {
    int k = s->n_run - 1;
    const int low = s->run[k]->priority;  /* the list's end: the lowest priority */
    while (k > 0 && s->run[k]->fork_wait && s->run[k - 1]->priority == low) k--;
    preempt(s, k, 1);
}

/* The token r must emit as its j-th answer token (its forced prefix, then a test script
 * and EOS), or -1 when it samples freely. */
static int32_t forced_token(const srv_req *r, int64_t j, int32_t eos) {
    if (j < 0) return -1;
    if (j < r->n_prefix) return r->prefix[j];
    if (!r->forced) return -1;
    return j - r->n_prefix < r->n_forced ? r->forced[j - r->n_prefix] : eos;
}

/* The drafts of forced tokens are those tokens, so verify spans accept them (the tests reach
 * the two-token step with random weights, whose own drafts are nearly always wrong). */
static int32_t forced_draft(void *user, int64_t pos, int32_t draft) {
    const srv_req *r = user;
    const int32_t t = forced_token(r, pos - r->n_prompt, -1);
    return t >= 0 ? t : draft;
}

/* ---- one step --------------------------------------------------------------------------- */

/* Adds a span for r's next pending rows, at most `room` of them; returns the rows added.
 * A prefill chunk ends at the prompt's snapshot point, which it then leaves behind.
 * decoding: the step being planned has decode rows. */
static int add_span(srv_sched *s, int *n_spans, srv_req *r, int room, int decoding) {
    int pending = r->n_ctx - r->n_done;
    /* a prompt scored beside decoding requests: each of its rows also runs the LM head (2 D V
     * flops a row: on the bench model about a forward row's cost, on Flash a few percent of
     * it) and is scored, so it is charged two rows of the step's budget: the step, and the
     * neighbours' inter-token latency, stay near a plain chunk's */
    const int charge = r->plp && r->n_done + 1 < r->n_prompt && decoding ? 2 : 1;
    if (charge > 1) room = room > 1 ? room / 2 : 1;
    int n = pending < room ? pending : room;
    if (n > s->o.c_max) n = s->o.c_max;
    if (n <= 0) return 0;
    const int64_t point = r->prompt_kept ? 0 : srv_pcache_prompt_point(s->pc, r->n_prompt);
    int snap = SNAP_NONE;
    if (r->n_done < point && r->n_done + n >= point) {
        n = (int)(point - r->n_done);
        snap = SNAP_PROMPT;
    } else if (n == 1 && pending == 1 && r->n_done + 1 > r->n_prompt &&
               srv_pcache_aligned(s->pc, r->n_done + 1)) {
        snap = SNAP_CONV;
    }
    dsv4_span *sp = &s->spans[*n_spans];
    memset(sp, 0, sizeof *sp);
    sp->seq = r->seq;
    sp->start = r->n_done;
    sp->n_tokens = n;
    sp->tokens = r->ctx + r->n_done;
    sp->n_hidden = n == pending || snap;  /* logits only once the whole context has run */
    /* prompt logprobs: every row while a row's next token is a prompt token (the rows
     * scored, then only those above kept for the head: score_prompt) */
    s->span_lp[*n_spans] = r->plp && r->n_done + 1 < r->n_prompt;
    if (s->span_lp[*n_spans]) sp->n_hidden = n;
    sp->n_streams = r->spec ? n : snap ? 1 : 0;  /* MTP rows need every row's streams */
    s->span_verify[*n_spans] = 0;
    s->span_snap[*n_spans] = snap;
    s->span_req[(*n_spans)++] = r;
    return charge * n;
}

/* The decode span of an MTP request: its pending token and, when there is one, the draft
 * (a speculative 2-row span). Returns the rows added. */
static int add_verify(srv_sched *s, int *n_spans, srv_req *r) {
    dsv4_err err = {0};
    if (dsv4_spec_verify_span(r->spec, &s->spans[*n_spans], &err)) return add_span(s, n_spans, r, 1, 0);
    s->span_verify[*n_spans] = 1;
    s->span_lp[*n_spans] = 0;
    /* its first row may reach an aligned length (kept when only that row is accepted) */
    s->span_snap[*n_spans] = r->n_done + 1 > r->n_prompt &&
                             srv_pcache_aligned(s->pc, r->n_done + 1) ? SNAP_CONV : SNAP_NONE;
    s->span_req[(*n_spans)++] = r;
    return s->spans[*n_spans - 1].n_tokens;
}

/* 1 for a choice waiting in the queue for its choice 0's prompt, to fork it. */
static int fork_waits(const srv_req *r) { return r->lead && r->lead->forkable && !r->admitted; }

/* The choices of r waiting in the queue from position `from` on to fork r's prompt. */
static int forks_waiting(const srv_sched *s, const srv_req *r, int from) {
    int n = 0;
    for (int k = from; r->forkable && k < s->n_wait; k++) n += fork_waits(s->wait[k]) && s->wait[k]->lead == r;
    return n;
}

/* The slots held by choices waiting to fork a running choice 0 (fork_choices needs them
 * free: admitting the next request into them made the choices compute the prompt). */
static int slots_held(const srv_sched *s) {
    int held = 0;
    for (int w = 0; w < s->n_wait; w++) held += fork_waits(s->wait[w]) && s->wait[w]->lead->seq >= 0;
    return held;
}

/* 1 when a running request's fork waits for pages (nothing is admitted meanwhile: plan_step) */
static int fork_waits_for_pages(const srv_sched *s) {
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i]->fork_wait) return 1;
    return 0;
}

/* --scheduling-policy priority: the first waiting request (h) finds every slot taken, and a
 * request of a strictly lower priority runs. The newest of the lowest priority running (v)
 * gives h its slot once h has waited longer than v's recompute would take (its positions at
 * the measured prefill rate): a short wait for a slot costs nobody any work, a long one (up
 * to a whole generation of the running requests) is worth v's recompute. Never a request of
 * h's priority or a higher one; never a request preempted for a priority before that has
 * not sampled a token since (no thrash: a readmitted victim keeps its slot until it made
 * progress, and the next newest goes instead); not unless enough such requests run to free
 * every slot h needs (its choices waiting to fork it count). Not when the pools are short
 * (admit_hold, a fork waiting for pages): those preemptions are preempt_newest's.
 * At most one a step; the plan that follows admits h. */
static void preempt_for_priority(srv_sched *s) {
    if (!s->o.priority_sched || s->admit_hold || s->prefill_rate <= 0 || !s->n_run) return;
    int w = 0;
    while (w < s->n_wait && fork_waits(s->wait[w])) w++;
    if (w == s->n_wait) return;
    const srv_req *h = s->wait[w];
    /* the run list's last is of its lowest priority (list_insert's order): no victim */
    if (s->run[s->n_run - 1]->priority <= h->priority || fork_waits_for_pages(s)) return;
    /* the slots h needs (with its choices waiting to fork it) beyond the free ones */
    const int short_of = s->n_run + slots_held(s) + 1 + forks_waiting(s, h, w + 1) - s->o.max_seqs;
    if (short_of <= 0) return;
    const int victim = srv_prio_victim((const srv_req *const *)s->run, s->n_run, h->priority, short_of, srv_now() - h->t_wait,
                                       s->prefill_rate);
    if (victim < 0) return;
    srv_req *v = s->run[victim];
    v->prio_victim_at = v->n_sampled;
    preempt(s, victim, 0);
    srv_metrics_prio_preempt(s->met);
}

/* The step's spans: every running decode row first (they never wait), then prefill chunks
 * of running requests, then newly admitted requests, oldest first, within step_tokens rows.
 * All admission and prefill chunking happens here. Choice 0 of n > 1 is admitted only with
 * a slot free for each of its choices waiting to fork it (they hold them until the fork),
 * so the prompt is computed once; until then nothing behind it is admitted (first come,
 * first served: a big n is never passed by a stream of small requests; n <= max_seqs, so
 * the running requests' ends free enough). Returns the span count; *rows and *decode
 * receive the row counts. */
static int plan_step(srv_sched *s, int *rows, int *decode) {
    int n_spans = 0, budget = s->o.step_tokens;
    *decode = 0;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i]->n_ctx - s->run[i]->n_done == 1) {
            budget -= s->run[i]->spec ? add_verify(s, &n_spans, s->run[i])
                                      : add_span(s, &n_spans, s->run[i], 1, 0);
            (*decode)++;
        }
    for (int i = 0; i < s->n_run && budget > 0; i++)
        if (s->run[i]->n_ctx - s->run[i]->n_done > 1)
            budget -= add_span(s, &n_spans, s->run[i], budget, *decode > 0);
    /* the choices waiting to fork a running choice 0 hold their slots (slots_held) */
    int held = slots_held(s);
    /* nor is anything admitted behind a waiting fork: it waits only when the block pool has
     * no page left for the one it copies (its open block), the prefix cache evicted first, so
     * a request admitted meanwhile would fail its first forward and be preempted (test_preempt
     * sees no page free during the wait); the pages that come back go to the fork first
     * (resume_forks runs before the plan), then admission goes on */
    const int forks_short = fork_waits_for_pages(s);
    for (int w = 0; budget > 0 && w < s->n_wait && !s->admit_hold && !forks_short &&
                    s->n_run + held < s->o.max_seqs;) {
        srv_req *r = s->wait[w];
        /* a choice waiting for choice 0's prompt to fork it */
        if (fork_waits(r)) { w++; continue; }
        const int forks = forks_waiting(s, r, w + 1);
        if (s->n_run + held + 1 + forks > s->o.max_seqs) break;
        dsv4_err err = {0};
        int64_t n_cached = 0;
        /* the prefix cache is rank 0's (step_msg.h): the followers start the sequence at
         * the length restored here */
        /* a request scoring its prompt runs it cold: a restored prefix has no rows to score */
        if (s->pc && !r->plp ? srv_pcache_start(s->pc, r->ctx, r->n_ctx, &r->seq, &n_cached, s->restored, &err)
                             : dsv4_seq_create(s->e, &r->seq, &err)) {
            r->seq = -1;
            break;
        }
        if (srv_relay_started(s->o.relay, r->seq, n_cached, &err)) {
            dsv4_seq_free(s->e, r->seq, NULL);
            r->seq = -1;
            break;
        }
        if (s->mtp && (n_cached ? dsv4_spec_resume(s->e, r->seq, s->restored, &r->spec, &err)
                                : dsv4_spec_create(s->e, r->seq, &r->spec, &err))) {
            srv_relay_seq_free(s->o.relay, r->seq, &err);
            r->seq = -1;
            break;
        }
        r->n_done = (int)n_cached;
        if (n_cached >= srv_pcache_prompt_point(s->pc, r->n_prompt)) r->prompt_kept = 1;
        if (!r->admitted) {
            r->admitted = 1;
            pthread_mutex_lock(&r->mu);
            r->n_cached = (int)(n_cached < r->n_prompt ? n_cached : r->n_prompt);
            pthread_mutex_unlock(&r->mu);
        }
        if (r->spec && (r->forced || r->prefix)) dsv4_spec_set_draft_hook(r->spec, forced_draft, r);
        list_remove(s->wait, &s->n_wait, r);
        list_insert(s->run, &s->n_run, r);
        s->st.admitted++;
        held += forks;
        budget -= add_span(s, &n_spans, r, budget, *decode > 0);
    }
    *rows = 0;  /* the budget charged scored rows twice: the rows themselves */
    for (int i = 0; i < n_spans; i++) *rows += s->spans[i].n_tokens;
    return n_spans;
}

static int ctx_append(srv_req *r, int32_t tok) {
    if (r->n_ctx == r->cap_ctx) {
        int cap = 2 * r->cap_ctx + 16;
        int32_t *c = realloc(r->ctx, (size_t)cap * sizeof *c);
        if (!c) return -1;
        r->ctx = c;
        r->cap_ctx = cap;
    }
    r->ctx[r->n_ctx++] = tok;
    return 0;
}

/* Samples r's next token from its logits row (or takes draw d's, made ahead: -1 for none)
 * and hands it to the client. Returns 1 while r runs on (0: it ended and may be gone), with
 * the token in *t. */
static int take_token(srv_sched *s, srv_req *r, const float *row, int d, dsv4_gen_token *t_out) {
    dsv4_gen_token t;
    dsv4_err err = {0};
    if (r->forced_error && r->n_sampled - r->n_prefix == r->n_forced) {
        /* the test script's failure after its text, where its EOS would come (a scripted
         * row is never drawn ahead: forced_token holds its text, then EOS) */
        srv_sched_finish(s, r, SRV_END_ERROR, 0, r->forced_error);
        return 0;
    }
    if (d >= 0) {
        t = s->draws[d].tok;
        if (s->draws[d].rc) { srv_sched_finish(s, r, SRV_END_ERROR, 0, s->draws[d].err.msg); return 0; }
    } else {
        const int32_t forced = forced_token(r, r->n_sampled, s->eos);
        if (forced >= 0) {
            /* a forced token (prefix or test script): the only one possible, one sampler draw
             * all the same */
            for (int v = 0; v < s->V; v++) s->forced_row[v] = -INFINITY;
            s->forced_row[forced] = 0.0f;
            row = s->forced_row;
        }
        if (dsv4_gen_next(r->gen, row, &t, &err)) { srv_sched_finish(s, r, SRV_END_ERROR, 0, err.msg); return 0; }
    }
    *t_out = t;
    double now = srv_now();
    srv_metrics_latency(s->met, r->n_sampled ? -1 : now - r->t_arrival,
                        r->n_sampled ? now - r->t_last : -1);
    r->t_last = now;
    r->n_sampled++;
    if (srv_req_push(r, &t)) { srv_sched_finish(s, r, SRV_END_ERROR, 0, "out of memory"); return 0; }
    if (t.finish) {
        r->stop_index = dsv4_gen_stop_matched(r->gen);
        srv_sched_finish(s, r, SRV_END_FINISHED, t.finish, NULL);
        return 0;
    }
    if (t.feed && ctx_append(r, t.token)) { srv_sched_finish(s, r, SRV_END_ERROR, 0, "out of memory"); return 0; }
    if (r->n_ctx >= s->o.max_context) {
        /* the context is full: the last token is shown but cannot run */
        const char *txt = NULL;
        size_t n = 0;
        dsv4_gen_end(r->gen, &txt, &n);
        srv_req_push_text(r, txt, n);
        srv_sched_finish(s, r, SRV_END_FINISHED, DSV4_FINISH_LENGTH, NULL);
        return 0;
    }
    return 1;
}

static int running(const srv_sched *s, const srv_req *r) {
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i] == r) return 1;
    return 0;
}

/* Before r's forks: r's MTP rows that need no sampled token (all but the prompt's last,
 * whose x_n is each choice's own first token) run now, r alone, so the forks copy one
 * pending row and compute it once each, not r's whole last span each (n x span rows in one
 * MTP call passed max_rows). Under data-parallel attention none may run here (an MTP
 * call is collective: every rank makes one a step), and none is left (late_fork). Returns
 * nonzero when they could not run: then nothing forks (the choices compute the prompt when
 * admitted) and r goes on as a request alone. */
static int mtp_settle(srv_sched *s, srv_req *r) {
    int rc = 0;
    srv_step_lap(&s->st, SRV_PH_SAMPLE);
    for (int64_t done = -1;;) {
        dsv4_mtp_span ms;
        int drafts, out = DSV4_MTP_OUT_NONE;
        dsv4_err err = {0};
        dsv4_spec_mtp_span(r->spec, &ms, &drafts);
        if (!ms.n) break;
        /* a draft is not reached (the first token is not drawn yet); a span that did not
         * move on means the call did not take */
        if (drafts || ms.start == done || s->dp ||
            srv_relay_mtp_forward(s->o.relay, &ms, 1, &out, s->hidden, &err)) { rc = -1; break; }
        done = ms.start;
        dsv4_spec_mtp_done(r->spec, -1);
    }
    srv_step_lap(&s->st, SRV_PH_MTP);
    return rc;
}

/* 1 when a running request other than r and the choices 0 waiting to fork (fork_wait) holds
 * pages: its end or preemption will give some back. */
static int pages_will_come(const srv_sched *s, const srv_req *r) {
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i] != r && !s->run[i]->fork_wait) return 1;
    return 0;
}

/* r (choice 0 of n > 1) has run its whole prompt, row holding its first token's logits:
 * its other choices still waiting start as forks of its sequence (the prompt's KV computed
 * once, shared: dsv4_seq_fork, relayed to a group's followers) and each samples its first
 * token from the same row with its own sampler, as a request of its own would from its own
 * prompt's last row (with MTP its MTP side forked too: dsv4_spec_fork). Their slots were
 * held since r's admission (plan_step). When the pools are short of the pages a fork copies
 * (the open blocks; the engine already dropped what the prefix cache could give) and
 * another running request will give some back, r waits (returns 1: fork_wait, its row kept,
 * its own token not taken, so its sequence stays at the prompt's end; nothing is admitted
 * meanwhile) and resume_forks forks the rest once pages come back: the prompt is computed
 * once. Only a choice that could never fork (no other request holds pages, or another
 * failure) is admitted later like any request, computing the prompt (what the prefix cache
 * holds of it restored). Returns 0 when r takes its own token now, which may end r and free
 * its sequence. */
static int fork_choices(srv_sched *s, srv_req *r, const float *row) {
    for (int i = 0; i < s->n_wait && s->n_run < s->o.max_seqs;) {
        srv_req *c = s->wait[i];
        dsv4_err err = {0};
        if (c->lead != r || c->admitted) { i++; continue; }
        if (r->spec && mtp_settle(s, r)) break;
        const int rc = srv_relay_fork(s->o.relay, r->seq, &c->seq, &err);
        if (rc) {
            c->seq = -1;
            if (rc != DSV4_ERR_CACHE_FULL || !pages_will_come(s, r)) break;
            if (row != r->fork_row) {
                /* the row kept for the wait, allocated when a wait first starts (not at
                 * submit, where every queued n > 1 request would hold V floats); out of
                 * memory: the choices left compute the prompt, as when no pages will come */
                if (!r->fork_row && !(r->fork_row = malloc((size_t)s->V * sizeof *row))) break;
                memcpy(r->fork_row, row, (size_t)s->V * sizeof *row);
            }
            if (!r->fork_wait) srv_metrics_fork_wait(s->met);
            r->fork_wait = 1;
            s->fork_hold = 1;
            return 1;
        }
        if (r->spec && dsv4_spec_fork(r->spec, c->seq, &c->spec, &err)) {
            srv_relay_seq_free(s->o.relay, c->seq, NULL);
            c->seq = -1;
            break;
        }
        if (c->spec && (c->forced || c->prefix)) dsv4_spec_set_draft_hook(c->spec, forced_draft, c);
        c->n_done = r->n_done;
        c->admitted = 1;
        c->prompt_kept = 1;  /* r keeps the prompt's snapshot */
        pthread_mutex_lock(&c->mu);
        c->n_cached = c->n_prompt;
        pthread_mutex_unlock(&c->mu);
        list_remove(s->wait, &s->n_wait, c);
        list_insert(s->run, &s->n_run, c);
        s->st.admitted++;
        srv_metrics_fork(s->met, c->n_prompt);
        dsv4_gen_token t;
        if (take_token(s, c, row, -1, &t) && c->spec && c->n_ctx - c->n_done == 1)
            dsv4_spec_set_next(c->spec, c->ctx[c->n_done]);
    }
    r->forkable = 0;
    r->fork_wait = 0;
    return 0;
}

/* r's first token, from its prompt's last row (d: its draw, or -1), after its forks; the
 * next pending token gives its MTP side the next draft. */
static void first_token(srv_sched *s, srv_req *r, const float *row, int d) {
    dsv4_gen_token t;
    if (take_token(s, r, row, d, &t) && r->spec && r->n_ctx - r->n_done == 1)
        dsv4_spec_set_next(r->spec, r->ctx[r->n_done]);
}

/* Before a step's plan: the choices 0 waiting to fork (fork_wait) try again once pages came
 * back (a sequence freed: fork_hold cleared), or when no other request holds any (then
 * fork_choices gives up and the choices left compute the prompt); those whose forks all
 * went take their own first token from the kept row. */
static void resume_forks(srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i]->fork_wait) s->span_req[n++] = s->run[i];  /* free until plan_step */
    if (!n || (s->fork_hold && pages_will_come(s, NULL))) return;
    s->fork_hold = 0;
    for (int k = 0; k < n; k++) {
        srv_req *r = s->span_req[k];
        if (!running(s, r) || !r->fork_wait || fork_choices(s, r, r->fork_row)) continue;
        first_token(s, r, r->fork_row, -1);
    }
}

/* r's verify span ran: its first token, the commit of the rows accepted (serving.md §e),
 * and when the draft was right the token after it from row 1. Returns 1 while r runs on. */
static int take_verified(srv_sched *s, srv_req *r, const dsv4_span *sp, const float *rows,
                         const float *streams) {
    dsv4_gen_token t;
    dsv4_err err = {0};
    if (!take_token(s, r, rows, -1, &t)) return 0;  /* ended: freeing the sequence drops the span */
    int k;
    if (dsv4_spec_verify_done(r->spec, t.token, t.feed, streams, &k, &err)) {
        srv_sched_finish(s, r, SRV_END_ERROR, 0, err.msg);
        return 0;
    }
    if (sp->speculative) srv_relay_committed(s->o.relay, r->seq, k);
    srv_metrics_mtp(s->met, sp->speculative, k == 2);
    r->n_done += k;
    return k == 2 ? take_token(s, r, rows + s->V, -1, &t) : 1;
}

/* The LM head over n packed hidden rows: under data-parallel attention on every rank at
 * every step, with no rows too (dsv4_lm_head_dist may be collective over the group). */
static int head(srv_sched *s, int n, dsv4_err *err) {
    return s->dp ? dsv4_lm_head_dist(s->e, s->hidden, n, s->logits, err)
                 : dsv4_lm_head(s->e, s->hidden, n, s->logits, err);
}

/* After a failed MTP call of n > 1 requests: one call each, in order, the drafting rows
 * packed as before; a request whose own call fails ends, the others stay (compacted in
 * place). Returns the drafting rows; *n becomes the requests kept. */
static int mtp_alone(srv_sched *s, int *n) {
    const size_t hd = (size_t)s->D;
    int kept = 0, n_d = 0;
    for (int i = 0; i < *n; i++) {
        dsv4_err err = {0};
        if (srv_relay_mtp_forward(s->o.relay, &s->mtp_spans[i], 1, &s->mtp_out[i],
                                  s->hidden + n_d * hd, &err)) {
            srv_sched_finish(s, s->mtp_req[i], SRV_END_ERROR, 0, err.msg);
            continue;
        }
        s->mtp_spans[kept] = s->mtp_spans[i];
        s->mtp_out[kept] = s->mtp_out[i];
        s->mtp_drafts[kept] = s->mtp_drafts[i];
        s->mtp_req[kept++] = s->mtp_req[i];
        n_d += s->mtp_drafts[i];
    }
    *n = kept;
    return n_d;
}

/* The MTP rows of every MTP request that has some ready, in one dsv4_mtp_forward_out that
 * computes only the drafting rows to the end (the rest fill the MTP cache), and the drafts
 * from those rows' logits (one dsv4_lm_head). */
static void run_mtp(srv_sched *s) {
    int n = 0, n_d = 0;
    dsv4_err err = {0};
    for (int i = 0; i < s->n_run; i++) {
        srv_req *r = s->run[i];
        if (!r->spec) continue;
        dsv4_spec_mtp_span(r->spec, &s->mtp_spans[n], &s->mtp_drafts[n]);
        if (!s->mtp_spans[n].n) continue;
        s->mtp_out[n] = s->mtp_drafts[n] ? DSV4_MTP_OUT_LAST : DSV4_MTP_OUT_NONE;
        n_d += s->mtp_drafts[n];
        s->mtp_req[n++] = r;
    }
    if (!n && !s->dp) return;
    /* the drafting rows' hidden states, packed in span order (hidden is free again after
     * the step's head) */
    /* No preemption here: the MTP call cannot run short of pages. Its compressed blocks lie
     * inside the range the step's main forward of the same sequence reserved (an MTP span
     * ends at or before the committed length), and the WIN pool holds w_live pages for every
     * sequence slot (cache plan: max_seqs x w_live, w_live sized with the MTP cache lag of one), the most
     * one sequence holds in any call. A failure here is an error of those requests. */
    int rc;
    while ((rc = srv_relay_mtp_forward(s->o.relay, s->mtp_spans, n, s->mtp_out, s->hidden, &err))) {
        /* data-parallel attention: another rank's refusal: every rank calls again */
        if (s->dp && srv_dp_refused_elsewhere(s->dp)) continue;
        /* one rank: each request alone, so a failure (a refusal: nothing ran) ends only the
         * requests whose own rows fail */
        if (!s->dp && n > 1) { n_d = mtp_alone(s, &n); break; }
        for (int i = 0; i < n; i++) srv_sched_finish(s, s->mtp_req[i], SRV_END_ERROR, 0, err.msg);
        const int again = s->dp && n > 0 && srv_dp_refusal(s->dp);
        n = n_d = 0;
        if (!again) break;
    }
    /* under data-parallel attention the head runs on every rank even after a failure of
     * this rank's alone (it may be collective); a failure left n = n_d = 0 */
    if ((n_d || s->dp) && head(s, n_d, &err)) {
        for (int i = 0; i < n; i++) srv_sched_finish(s, s->mtp_req[i], SRV_END_ERROR, 0, err.msg);
        return;
    }
    for (int i = 0, j = 0; i < n; i++)
        dsv4_spec_mtp_done(s->mtp_req[i]->spec,
                           s->mtp_drafts[i] ? dsv4_argmax(s->logits + (size_t)j++ * s->V, s->V) : -1);
}

/* Under data-parallel attention with MTP, r (choice 0 of n > 1) forks after the step's MTP
 * call, which runs its MTP rows but the prompt's last (whose x_n is each choice's own first
 * token: not drawn yet), as mtp_settle does alone in one process: its logits row is kept
 * aside with its draw, and r takes its token in late_forks. Returns 1 when deferred. */
static int late_fork(srv_sched *s, srv_req *r, const float *row, int d) {
    if (!s->dp || !r->spec || s->n_late == s->o.max_seqs / 2) return 0;
    memcpy(s->late_rows + (size_t)s->n_late * s->V, row, (size_t)s->V * sizeof *row);
    s->late_req[s->n_late] = r;
    s->late_draw[s->n_late++] = d;
    return 1;
}

/* After the step's MTP call: the deferred forks (late_fork), then choice 0's own token. */
static void late_forks(srv_sched *s) {
    for (int k = 0; k < s->n_late; k++) {
        srv_req *r = s->late_req[k];
        const float *row = s->late_rows + (size_t)k * s->V;
        if (!running(s, r)) continue;  /* its MTP call failed: it ended, its choices cancelled */
        if (!fork_choices(s, r, row)) first_token(s, r, row, s->late_draw[k]);
    }
    s->n_late = 0;
}

/* Task k of a scored batch (score_job): rows [k rows / n, (k + 1) rows / n) of s->logits,
 * row j giving prompt[pos + j + 1]'s logprobs (r->plp), with scorer k alone (each row's
 * figures are dsv4_gen_score's on that row: the same bits whichever task takes it). */
static void score_task(void *arg, int k) {
    srv_sched *s = arg;
    const struct srv_score_job *jb = &s->score_job;
    const int n = s->n_scorers < jb->rows ? s->n_scorers : jb->rows;
    const int a = (int)((int64_t)k * jb->rows / n), b = (int)((int64_t)(k + 1) * jb->rows / n);
    srv_req *r = jb->r;
    for (int j = a; j < b; j++) {
        const int64_t pos = jb->pos + j;
        if (dsv4_gen_score(s->scorers[k], s->logits + (size_t)j * s->V, r->prompt[pos + 1], r->plp_top,
                           &r->plp[pos + 1], &s->score_err[k]))
            return;  /* score_err[k].code set: the task's own slot */
    }
}

/* The rows of s->logits [0, rows) scored for r's prompt from position pos on, over the
 * engine's threads (one task per scorer, each its share of the rows). 0, or -1 (lp_err). */
static int score_rows(srv_sched *s, srv_req *r, int64_t pos, int rows) {
    s->score_job = (struct srv_score_job){.r = r, .pos = pos, .rows = rows};
    const int n = s->n_scorers < rows ? s->n_scorers : rows;
    for (int k = 0; k < n; k++) s->score_err[k].code = DSV4_OK;
    if (n > 1) dsv4_engine_for_each(s->e, n, score_task, s);
    else if (n == 1) score_task(s, 0);
    for (int k = 0; k < n; k++)
        if (s->score_err[k].code) {
            s->lp_err = s->score_err[k];
            return -1;
        }
    return 0;
}

/* Span i scores prompt tokens (span_lp): its rows at positions p with p + 1 < n_prompt,
 * hidden rows [h, h + n), give prompt[p + 1]'s logprobs (r->plp[p + 1]), a batch of at
 * most 2 max_seqs rows at a time through the LM head into s->logits (free until the
 * step's head), each batch's rows' log-softmax and best ones taken on the engine's threads
 * (score_rows). Returns the rows
 * the span keeps for the step's head: its last when it reached the context's end or a
 * snapshot point (add_span's n_hidden without the scoring), else none. span_lp[i] = -1
 * (lp_err) when it failed. */
static int score_prompt(srv_sched *s, int i, const float *hidden) {
    const dsv4_span *sp = &s->spans[i];
    srv_req *r = s->span_req[i];
    const int pending = r->n_ctx - (int)sp->start;
    const int keep = sp->n_tokens == pending || s->span_snap[i];
    int n = r->n_prompt - 1 - (int)sp->start;
    if (n > sp->n_tokens) n = sp->n_tokens;
    const int batch = 2 * s->o.max_seqs;
    /* the trace charges the head's share to the head, the scoring's to sampling */
    srv_step_lap(&s->st, SRV_PH_SNAPSHOT);
    for (int a = 0; a < n; a += batch) {
        const int b = n - a < batch ? n - a : batch;
        if (dsv4_lm_head(s->e, hidden + (size_t)a * s->D, b, s->logits, &s->lp_err)) { s->span_lp[i] = -1; break; }
        srv_step_lap(&s->st, SRV_PH_HEAD);
        if (score_rows(s, r, sp->start + a, b)) s->span_lp[i] = -1;
        srv_step_lap(&s->st, SRV_PH_SAMPLE);
        if (s->span_lp[i] < 0) break;
    }
    return keep;
}

/* Copies the snapshot rows of the step's spans aside (hidden of the row, its streams) and
 * packs the hidden rows that need logits; returns their count. A span scoring prompt
 * tokens is scored first (score_prompt) and keeps its head row only (n_hidden becomes
 * that). */
static int take_snapshot_rows(srv_sched *s, int n_spans) {
    const size_t hd = (size_t)s->D, sd = (size_t)s->HC * s->D;
    int n_rows = 0;
    for (int i = 0, h = 0, srow = 0; i < n_spans; i++) {
        dsv4_span *sp = &s->spans[i];
        if (s->span_snap[i] && sp->n_hidden) {
            /* a verify span's snapshot row is its first; a plain span's its last */
            const int row = s->span_verify[i] ? 0 : sp->n_hidden - 1;
            const int st_row = s->span_verify[i] ? 0 : sp->n_streams - 1;
            memcpy(s->snap_hidden + i * hd, s->hidden + (size_t)(h + row) * hd, hd * sizeof(float));
            memcpy(s->snap_streams + i * sd, s->streams + (size_t)(srow + st_row) * sd, sd * sizeof(float));
        }
        const int all = sp->n_hidden;
        if (s->span_lp[i]) {
            sp->n_hidden = score_prompt(s, i, s->hidden + (size_t)h * hd);
        }
        const size_t from = (size_t)(h + all - sp->n_hidden);
        if (s->span_snap[i] != SNAP_PROMPT) {
            if ((size_t)n_rows != from) memmove(s->hidden + (size_t)n_rows * hd, s->hidden + from * hd,
                                                (size_t)sp->n_hidden * hd * sizeof(float));
            n_rows += sp->n_hidden;
        }
        h += all;
        srow += sp->n_streams;
    }
    return n_rows;
}

/* The prompts' snapshot points reached in this step go to the prefix cache (after the MTP
 * rows ran: a snapshot needs m = n - 1). */
static void keep_prompts(srv_sched *s, int n_spans) {
    for (int i = 0; i < n_spans; i++) {
        srv_req *r = s->span_req[i];
        if (s->span_snap[i] != SNAP_PROMPT || !r || !running(s, r)) continue;
        srv_pcache_keep(s->pc, r->seq, r->ctx, s->snap_hidden + (size_t)i * s->D,
                        s->snap_streams + (size_t)i * s->HC * s->D);
        r->prompt_kept = 1;
    }
}

/* r's sequence reached an aligned length past its prompt in span i: the conversation so
 * far replaces r's private snapshot. */
static void hold_conv(srv_sched *s, srv_req *r, int i) {
    const int64_t n = s->spans[i].start + 1;
    if (dsv4_seq_length(s->e, r->seq) != n) return;  /* a verify span accepted its draft too */
    srv_pcache_hold(s->pc, r->seq, r->ctx, s->snap_hidden + (size_t)i * s->D,
                    s->snap_streams + (size_t)i * s->HC * s->D, &r->conv);
}

/* hold_conv inside the sampling loop, its time charged to the snapshot phase. */
static void conv_snapshot(srv_sched *s, srv_req *r, int i) {
    srv_step_lap(&s->st, SRV_PH_SAMPLE);
    hold_conv(s, r, i);
    srv_step_lap(&s->st, SRV_PH_SNAPSHOT);
}

/* Draw j: dsv4_gen_next of its request on its logits row (each request's own sampler, stop
 * state and detokenizer: no two draws share one). */
static void draw_task(void *arg, int j) {
    srv_sched *s = arg;
    struct srv_draw *d = &s->draws[j];
    d->rc = dsv4_gen_next(s->span_req[d->span]->gen, s->logits + (size_t)d->row * s->V, &d->tok, &d->err);
}

/* The step's plain decode rows (not a verify span, no forced token) drawn on the engine's
 * threads: their sampling and stop strings take a row ~0.3 ms at Flash's vocabulary, one
 * row after another on this thread while the pool waited. The rows are then taken in span
 * order as before, each with its draw: the same tokens, since each request's draws are its
 * own and in its order. */
static void draw_rows(srv_sched *s, int n_spans) {
    int nd = 0;
    for (int i = 0, k = 0; i < n_spans; i++) {
        const srv_req *r = s->span_req[i];
        const dsv4_span *sp = &s->spans[i];
        s->span_draw[i] = -1;
        if (s->span_snap[i] == SNAP_PROMPT) continue;
        k += sp->n_hidden;
        if (!sp->n_hidden || !r || r->prompt_only || s->span_verify[i] || forced_token(r, r->n_sampled, s->eos) >= 0)
            continue;
        /* choice 0 of n > 1 at its prompt's end draws after its forks, which may wait */
        if (r->forkable && r->n_sampled == 0 && r->n_done == r->n_prompt) continue;
        s->draws[nd].span = i;
        s->draws[nd].row = k - sp->n_hidden;
        s->span_draw[i] = nd++;
    }
    if (nd > 1) dsv4_engine_for_each(s->e, nd, draw_task, s);
    else if (nd == 1) draw_task(s, 0);
}

/* One step; returns 0 when there was nothing to run. Its phases are lapped in s->st. */
static int step(srv_sched *s) {
    int rows, decode, n_spans;
    dsv4_err err = {0};
    srv_step_times *st = &s->st;
    int planned = 0;
    resume_forks(s);
    preempt_for_priority(s);
    for (;;) {
        n_spans = plan_step(s, &rows, &decode);
        srv_step_lap(st, SRV_PH_ADMIT);
        planned |= n_spans > 0;
        /* under data-parallel attention every rank makes the group's calls, with no rows too */
        if (n_spans == 0 && !s->dp) return 0;
        int rc = srv_relay_forward(s->o.relay, s->spans, n_spans, s->hidden, s->streams, &err);
        srv_step_lap(st, SRV_PH_FORWARD);
        if (rc == DSV4_OK) break;
        /* another rank refused the call (nothing changed anywhere): it requeues or fails its
         * own requests, and every rank calls again */
        if (s->dp && srv_dp_refused_elsewhere(s->dp)) continue;
        if (rc == DSV4_ERR_CACHE_FULL && s->n_run > 1) { preempt_newest(s); continue; }
        /* alone and still too big for the pools, or an engine error: those requests fail */
        for (int i = 0; i < n_spans; i++) srv_sched_finish(s, s->span_req[i], SRV_END_ERROR, 0, err.msg);
        if (!s->dp) return 1;
        /* a refusal of this rank's (the others call again) or a failure after the compute,
         * this rank's alone (the others go on): the step goes on here without rows */
        if (n_spans > 0 && srv_dp_refusal(s->dp)) continue;
        n_spans = 0;
        break;
    }
    st->rows = rows;
    st->decode = decode;
    st->spans = n_spans;
    const int n_rows = take_snapshot_rows(s, n_spans);
    st->head_rows = n_rows;
    srv_step_lap(st, SRV_PH_SNAPSHOT);
    for (int i = 0, srow = 0; i < n_spans; i++) {
        srv_req *r = s->span_req[i];
        const dsv4_span *sp = &s->spans[i];
        if (s->span_verify[i]) { srow += sp->n_streams; continue; }  /* n_done moves by the commit */
        r->n_done += sp->n_tokens;
        if (r->spec && dsv4_spec_fed(r->spec, sp->tokens, sp->n_tokens,
                                     s->streams + (size_t)srow * s->HC * s->D, &err)) {
            srv_sched_finish(s, r, SRV_END_ERROR, 0, err.msg);
            s->span_req[i] = NULL;  /* ended: r may be gone */
        }
        srow += sp->n_streams;
        /* its prompt's scoring failed (its head row, if any, is computed for nothing) */
        if (s->span_lp[i] < 0 && s->span_req[i]) {
            srv_sched_finish(s, r, SRV_END_ERROR, 0, s->lp_err.msg);
            s->span_req[i] = NULL;
        }
    }
    srv_step_lap(st, SRV_PH_MTP);
    if ((n_rows || s->dp) && head(s, n_rows, &err)) {
        for (int i = 0; i < n_spans; i++)
            if (s->spans[i].n_hidden && s->span_snap[i] != SNAP_PROMPT && s->span_req[i])
                srv_sched_finish(s, s->span_req[i], SRV_END_ERROR, 0, err.msg);
        if (!s->dp) return 1;
        n_spans = 0;  /* the group's MTP call still runs */
    }
    srv_step_lap(st, SRV_PH_HEAD);
    draw_rows(s, n_spans);
    /* span_req[] stays valid while take_token ends requests: it is a copy of the plan (NULL
     * where a request already ended in this step) */
    for (int i = 0, k = 0, srow = 0; i < n_spans; i++) {
        srv_req *r = s->span_req[i];
        const dsv4_span *sp = &s->spans[i];
        const float *row = s->logits + (size_t)k * s->V;
        const float *streams = s->streams + (size_t)srow * s->HC * s->D;
        srow += sp->n_streams;
        if (s->span_snap[i] == SNAP_PROMPT) continue;
        k += sp->n_hidden;
        if (!sp->n_hidden || !r) continue;
        if (r->prompt_only) {
            /* max_tokens 0: the prompt ran (and was scored), nothing is sampled */
            srv_sched_finish(s, r, SRV_END_FINISHED, DSV4_FINISH_LENGTH, NULL);
            continue;
        }
        dsv4_gen_token t;
        int alive;
        if (s->span_verify[i]) {
            alive = take_verified(s, r, sp, row, streams);
            if (alive && s->span_snap[i] == SNAP_CONV) conv_snapshot(s, r, i);
        } else {
            /* before the token: it may end the request and free the sequence */
            if (s->span_snap[i] == SNAP_CONV) conv_snapshot(s, r, i);
            if (r->forkable && r->n_sampled == 0 && r->n_done == r->n_prompt) {
                if (late_fork(s, r, row, s->span_draw[i]) || fork_choices(s, r, row)) continue;
            }
            alive = take_token(s, r, row, s->span_draw[i], &t);
        }
        /* the new pending token: its MTP row gives the next draft */
        if (alive && r->spec && r->n_ctx - r->n_done == 1) dsv4_spec_set_next(r->spec, r->ctx[r->n_done]);
    }
    srv_step_lap(st, SRV_PH_SAMPLE);
    if (s->mtp) run_mtp(s);
    srv_step_lap(st, SRV_PH_MTP);
    late_forks(s);
    srv_step_lap(st, SRV_PH_SAMPLE);
    keep_prompts(s, n_spans);
    srv_step_lap(st, SRV_PH_SNAPSHOT);
    return planned;
}

void srv_sched_publish_load(srv_sched *s) {
    srv_metrics_load(s->met, s->n_wait, s->n_run, dsv4_engine_cache_stats(s->e), dsv4_engine_indexer_stats(s->e));
    /* the waiting list is in priority order: each priority's requests are together */
    int prio[SRV_PRIO_SHOWN], k = 0;
    int64_t n[SRV_PRIO_SHOWN], rest = 0;
    for (int i = 0; i < s->n_wait; i++) {
        if (i == 0 || s->wait[i]->priority != s->wait[i - 1]->priority) {
            if (k == SRV_PRIO_SHOWN) { rest = s->n_wait - i; break; }
            prio[k] = s->wait[i]->priority;
            n[k++] = 0;
        }
        n[k - 1]++;
    }
    srv_metrics_queue_prio(s->met, prio, n, k, rest);
    srv_metrics_prefix(s->met, dsv4_prefix_get_stats(s->e), srv_pcache_get_stats(s->pc));
}

/* ---- the thread ------------------------------------------------------------------------- */

void srv_sched_enqueue(srv_sched *s, srv_req *r) { wait_insert(s, r); }

/* The gauges follow the sweep when it ended something: the cancelled counter moved with
 * each request, and /metrics should not show them queued or running until the next step
 * (on the scheduler's thread, no lock of the step's held: as in group_gone). */
void srv_sched_sweep(srv_sched *s, int expired) {
    int swept = 0;
    for (int i = s->n_run - 1; i >= 0; i--)
        if (expired || cancelled(s->run[i])) {
            srv_sched_finish(s, s->run[i], SRV_END_CANCELLED, 0, expired ? "server shutting down" : NULL);
            swept++;
        }
    for (int i = s->n_wait - 1; i >= 0; i--)
        if (expired || cancelled(s->wait[i])) {
            srv_sched_finish(s, s->wait[i], SRV_END_CANCELLED, 0, expired ? "server shutting down" : NULL);
            swept++;
        }
    if (swept) srv_sched_publish_load(s);
}

int srv_sched_step(srv_sched *s) {
    srv_step_begin(&s->st, s->prev_end);
    const int ran = step(s);
    if (ran) {
        /* recorded before the gauges: once /metrics shows nothing running, every step
         * that ran is counted and traced */
        srv_metrics_step(s->met, &s->st);
        srv_step_write(s->o.trace, s->n_steps++, s->t0, &s->st);
        s->prev_end = s->st.t_lap;
        /* the rows a forward computes a second, from the steps with prompt rows (a decode row
         * costs about as much): what a priority preemption's recompute would take */
        const double fwd = s->st.ph[SRV_PH_FORWARD];
        if (s->st.rows > s->st.decode && fwd > 0)
            s->prefill_rate = s->prefill_rate > 0 ? 0.75 * s->prefill_rate + 0.25 * s->st.rows / fwd
                                                  : s->st.rows / fwd;
    }
    srv_sched_publish_load(s);
    return ran;
}
