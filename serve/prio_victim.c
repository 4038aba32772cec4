/* prio_victim.c — the priority scheduler's choice of a victim (prio_victim.h). */
#include "serve/prio_victim.h"

int srv_prio_victim(const srv_req *const *run, int n_run, int h_priority, int short_of,
                    double waited_s, double prefill_rate) {
    if (short_of <= 0 || n_run <= 0 || prefill_rate <= 0) return -1;
    int victim = -1, n_victims = 0;
    /* from the list's end (the lowest priority, the newest) while the priority is lower */
    for (int k = n_run - 1; k >= 0 && run[k]->priority > h_priority; k--) {
        const srv_req *v = run[k];
        if (v->prio_victim_at >= 0 && v->n_sampled <= v->prio_victim_at) continue;
        if (victim < 0) victim = k;
        n_victims++;
    }
    if (victim < 0 || n_victims < short_of) return -1;
    if (waited_s <= (double)run[victim]->n_done / prefill_rate) return -1;
    return victim;
}
