/* prio_victim.h — which running request gives its slot to a waiting one of a higher priority
 * (--scheduling-policy priority). A pure function of the lists' figures, so that its rules are
 * tested one by one (tests/server/test_prio_victim.c) without the timing of a live server. It
 * reads each running request's priority, n_sampled, prio_victim_at and n_done. */
#ifndef DSV4_SERVE_PRIO_VICTIM_H
#define DSV4_SERVE_PRIO_VICTIM_H

#include "serve/request.h"

/* The index in run[] (n_run requests, in the running list's order: priority ascending, then
 * arrival) of the request to preempt for a waiting request of priority h_priority that needs
 * short_of more slots and has waited waited_s seconds, or -1 for none. prefill_rate: measured
 * prefill positions a second (> 0). Rules: only a strictly lower priority; never one preempted
 * for a priority that has sampled nothing since (no thrash); only when such requests can free
 * all short_of slots (freed slots would stay empty otherwise); the newest of the lowest
 * priority (the list's end) goes first; and only once h has waited longer than that victim's
 * recompute. */
int srv_prio_victim(const srv_req *const *run, int n_run, int h_priority, int short_of,
                    double waited_s, double prefill_rate);

#endif
