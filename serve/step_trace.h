/* step_trace.h — where a scheduler step's time goes. The scheduler laps a clock between the
 * phases of each step; the times go to /metrics (a dsv4_step_seconds histogram and seconds
 * per phase) and, with `serve --trace-steps FILE`, one JSON line per step to FILE, so a slow
 * step can be found and attributed from data. */
#ifndef DSV4_SERVE_STEP_TRACE_H
#define DSV4_SERVE_STEP_TRACE_H

#include <stdio.h>

/* The phases of a step, in the order they run. */
enum {
    SRV_PH_ADMIT = 0,  /* planning: admissions (prefix lookups, sequence creation), spans */
    SRV_PH_FORWARD,    /* the dsv4_forward of every span */
    SRV_PH_HEAD,       /* the LM head of the rows that need logits */
    SRV_PH_SAMPLE,     /* sampling, stop strings, text, handing tokens to the clients */
    SRV_PH_SNAPSHOT,   /* prefix-cache snapshots (prompt points, a conversation's aligned
                        * lengths) */
    SRV_PH_MTP,        /* MTP bookkeeping, the MTP forward and its drafting head */
    SRV_PH_N
};

extern const char *const srv_phase_names[SRV_PH_N];

typedef struct srv_step_times {
    double t_begin, t_lap;     /* monotonic seconds: the step's start, the latest lap */
    double ph[SRV_PH_N];       /* seconds per phase */
    double wait;               /* seconds between the previous step's end and this start */
    int rows, decode, spans;   /* rows (decode rows among them), spans of the forward */
    int head_rows;             /* rows through the LM head */
    int admitted;              /* requests admitted by this step's plan */
} srv_step_times;

/* Starts a step's clock; prev_end is the previous step's end (0: none). */
void srv_step_begin(srv_step_times *t, double prev_end);
/* Charges the time since the latest lap to phase ph. */
void srv_step_lap(srv_step_times *t, int ph);
/* The step's total seconds so far. */
double srv_step_total(const srv_step_times *t);
/* One JSON line for step number n (t0: the server clock's origin) to f, flushed. */
void srv_step_write(FILE *f, long long n, double t0, const srv_step_times *t);

#endif
