/* step_trace.c — per-step phase clocks and their JSON lines (step_trace.h). */
#include "serve/step_trace.h"

#include <string.h>

#include "serve/util.h"

const char *const srv_phase_names[SRV_PH_N] = {"admit", "forward", "head", "sample",
                                               "snapshot", "mtp"};

void srv_step_begin(srv_step_times *t, double prev_end) {
    memset(t, 0, sizeof *t);
    t->t_begin = t->t_lap = srv_now();
    t->wait = prev_end > 0 ? t->t_begin - prev_end : 0;
}

void srv_step_lap(srv_step_times *t, int ph) {
    const double now = srv_now();
    t->ph[ph] += now - t->t_lap;
    t->t_lap = now;
}

double srv_step_total(const srv_step_times *t) { return t->t_lap - t->t_begin; }

void srv_step_write(FILE *f, long long n, double t0, const srv_step_times *t) {
    if (!f) return;
    fprintf(f, "{\"step\":%lld,\"t\":%.6f,\"wait_ms\":%.3f,\"rows\":%d,\"decode\":%d,\"spans\":%d,"
            "\"head_rows\":%d,\"admitted\":%d,\"total_ms\":%.3f", n, t->t_begin - t0, 1e3 * t->wait,
            t->rows, t->decode, t->spans, t->head_rows, t->admitted, 1e3 * srv_step_total(t));
    for (int i = 0; i < SRV_PH_N; i++) fprintf(f, ",\"%s_ms\":%.3f", srv_phase_names[i], 1e3 * t->ph[i]);
    fputs("}\n", f);
    fflush(f);
}
