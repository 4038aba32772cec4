/* test_threads.c — the parallel-for: every task runs exactly once per job, tids stay in
 * range, a job is complete when dsv4_kctx_parallel returns, many short jobs back to back
 * (the decode pattern), jobs after the workers have gone to sleep, more tasks than one
 * job can count, jobs started from inside tasks, pinned workers, and sleeping workers
 * woken for a job. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kctx.h"
#include "kernels/threads.h"
#include "test.h"

typedef struct {
    int n_threads;
    atomic_int *hits;    /* (n_tasks) */
    atomic_int bad_tid;
    int64_t *value;      /* (n_tasks) written by the task, read after the job */
    int round;
} job;

static void task(void *arg, int t, int tid) {
    job *j = arg;
    if (tid < 0 || tid >= j->n_threads) atomic_fetch_add(&j->bad_tid, 1);
    atomic_fetch_add(&j->hits[t], 1);
    j->value[t] = (int64_t)t * 1000003 + j->round;
}

static void run_jobs(int n_threads, int max_tasks, int rounds, int sleep_between) {
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(n_threads, 16, &k, &err) == DSV4_OK);
    CHECK(dsv4_kctx_threads(k) == n_threads);
    job j = {.n_threads = n_threads};
    j.hits = calloc((size_t)max_tasks, sizeof *j.hits);
    j.value = calloc((size_t)max_tasks, sizeof *j.value);
    atomic_init(&j.bad_tid, 0);
    int wrong = 0;
    for (int r = 0; r < rounds; r++) {
        const int n = (r * 7919) % (max_tasks + 1); /* includes 0 and 1 */
        for (int t = 0; t < n; t++) atomic_store(&j.hits[t], 0);
        j.round = r;
        dsv4_kctx_parallel(k, n, task, &j);
        for (int t = 0; t < n; t++) wrong += atomic_load(&j.hits[t]) != 1 || j.value[t] != (int64_t)t * 1000003 + r;
        if (sleep_between) usleep(2000); /* longer than the spin: workers sleep on the condvar */
    }
    CHECK_MSG(wrong == 0, "%d threads: %d task results wrong", n_threads, wrong);
    CHECK(atomic_load(&j.bad_tid) == 0);
    /* per-thread scratch: distinct, aligned, usable */
    for (int t = 0; t < n_threads; t++) {
        float *s = dsv4_kctx_scratch(k, t);
        CHECK(((uintptr_t)s & 63) == 0);
        for (int i = 0; i < 16; i++) s[i] = (float)t;
        if (t > 0) CHECK(dsv4_kctx_scratch(k, t - 1)[0] == (float)(t - 1));
    }
    free(j.hits);
    free(j.value);
    dsv4_kctx_free(k);
}

/* More tasks than one job ticket counts (2^22 - 1): split into consecutive jobs. */
static void mark(void *arg, int t, int tid) {
    (void)tid;
    ((unsigned char *)arg)[t]++;
}

static void run_huge(void) {
    const int n = (1 << 22) + 5;
    unsigned char *seen = calloc((size_t)n, 1);
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(2, 16, &k, &err) == DSV4_OK);
    dsv4_kctx_parallel(k, n, mark, seen);
    int wrong = 0;
    for (int t = 0; t < n; t++) wrong += seen[t] != 1;
    CHECK_MSG(wrong == 0, "%d of %d tasks not run exactly once", wrong, n);
    dsv4_kctx_free(k);
    free(seen);
}

/* Nested jobs: a task that starts a job on the same context (as a per-expert task calling
 * dsv4_linear would) runs it inline with its own tid; a job on another context from
 * inside a task runs normally; results and tids stay right either way. */
typedef struct {
    dsv4_kctx *k, *other;
    int n_threads;
    atomic_int inner_runs, bad;
    float *y;                /* (n_outer, 40) one dsv4_linear result per outer task */
    const dsv4_mat *w;
    const float *x;
} nest_job;

static void inner(void *arg, int t, int tid) {
    nest_job *j = arg;
    (void)t;
    if (tid != dsv4_kctx_tid(j->k) && j->other == NULL) atomic_fetch_add(&j->bad, 1);
    atomic_fetch_add(&j->inner_runs, 1);
}

static void outer(void *arg, int t, int tid) {
    nest_job *j = arg;
    if (dsv4_kctx_tid(j->k) != tid) atomic_fetch_add(&j->bad, 1);
    if (j->other) {
        /* one task drives the other context (one caller at a time per context) */
        if (t == 0) dsv4_kctx_parallel(j->other, 5, inner, j);
    } else {
        dsv4_kctx_parallel(j->k, 5, inner, j);
        dsv4_linear(j->k, j->w, j->x, 1, j->y + (int64_t)t * 40);
    }
    if (dsv4_kctx_tid(j->k) != tid) atomic_fetch_add(&j->bad, 1); /* still k's tid after it */
}

static void run_nested(void) {
    dsv4_kctx *k, *k2;
    dsv4_err err;
    CHECK(dsv4_kctx_create(3, 16, &k, &err) == DSV4_OK);
    CHECK(dsv4_kctx_create(2, 16, &k2, &err) == DSV4_OK);
    /* a 40 x 2000 F32 matrix: big enough that dsv4_linear would use the pool */
    float *wv = malloc(sizeof(float) * 40 * 2000), *x = malloc(sizeof(float) * 2000);
    for (int i = 0; i < 40 * 2000; i++) wv[i] = (float)((i * 7919) % 1001) * 1e-3f - 0.5f;
    for (int i = 0; i < 2000; i++) x[i] = (float)((i * 104729) % 997) * 1e-3f - 0.5f;
    dsv4_mat w = {DSV4_WF_F32, 40, 2000, wv, NULL, 0, 0};
    float want[40];
    dsv4_linear(k, &w, x, 1, want);
    for (int round = 0; round < 2; round++) {
        nest_job j = {k, round ? k2 : NULL, 3, 0, 0, calloc(12 * 40, sizeof(float)), &w, x};
        dsv4_kctx_parallel(k, 12, outer, &j);
        CHECK(atomic_load(&j.inner_runs) == (round ? 5 : 12 * 5));
        CHECK(atomic_load(&j.bad) == 0);
        if (!round) {
            int wrong = 0;
            for (int t = 0; t < 12; t++) wrong += memcmp(j.y + t * 40, want, sizeof want) != 0;
            CHECK_MSG(wrong == 0, "%d nested dsv4_linear results differ from the top-level one", wrong);
        }
        free(j.y);
    }
    CHECK(dsv4_kctx_tid(k) == 0);
    dsv4_kctx_free(k2);
    dsv4_kctx_free(k);
    free(wv);
    free(x);
}

/* Pinned pool: each worker that runs a task finds itself confined to exactly the CPU
 * dsv4_pool_pin promises (tid i -> the mask's CPU i mod its size), the caller's own
 * affinity is unchanged, and the tasks' results are those of the unpinned pool. */
typedef struct {
    int cpus[CPU_SETSIZE], n_cpus;
    atomic_int seen[8];    /* per tid: tasks run */
    atomic_int wrong[8];   /* per tid: tasks that found another affinity */
} pin_job;

static void pin_task(void *arg, int t, int tid) {
    (void)t;
    pin_job *j = arg;
    usleep(200); /* every task takes a while, so every worker gets some of them */
    if (tid <= 0 || tid >= 8) return; /* the caller: not pinned by the library */
    cpu_set_t m;
    CPU_ZERO(&m);
    const int ok = pthread_getaffinity_np(pthread_self(), sizeof m, &m) == 0;
    const int want = j->cpus[tid % j->n_cpus];
    atomic_fetch_add(&j->seen[tid], 1);
    if (!ok || CPU_COUNT(&m) != 1 || !CPU_ISSET(want, &m)) atomic_fetch_add(&j->wrong[tid], 1);
}

static void run_pinned(void) {
    pin_job j = {0};
    cpu_set_t before, after;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &before)) j.cpus[j.n_cpus++] = c;
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(4, 16, &k, &err) == DSV4_OK); /* more threads than this machine's 2 cores wrap */
    CHECK_MSG(dsv4_kctx_pin(k, &err) == DSV4_OK, "pin: %s", err.msg);
    for (int round = 0; round < 20; round++) dsv4_kctx_parallel(k, 64, pin_task, &j);
    int seen = 0;
    for (int tid = 1; tid < 4; tid++) {
        seen += atomic_load(&j.seen[tid]) > 0;
        CHECK_MSG(atomic_load(&j.wrong[tid]) == 0, "worker %d ran %d tasks outside CPU %d", tid,
                  atomic_load(&j.wrong[tid]), j.cpus[tid % j.n_cpus]);
    }
    CHECK_MSG(seen >= 1, "no pinned worker ran a task in 20 jobs of 64 sleeping tasks");
    CHECK(sched_getaffinity(0, sizeof after, &after) == 0);
    CHECK_MSG(CPU_EQUAL(&before, &after), "pinning the workers changed the calling thread's affinity");
    dsv4_kctx_free(k);
}

/* Prefetch hints (dsv4_pool_hint): a hint is held for its target job (the next started, or
 * the one after with skip 1) and dropped once that job starts; a task's own post is ignored;
 * hints at any address (prefetches never fault) leave every job's results as they were. */
typedef struct {
    dsv4_kctx *k;
    atomic_int posted;
} hint_job;

static void hint_inner(void *arg, int t, int tid) {
    hint_job *j = arg;
    (void)tid;
    if (t == 0) { /* a nested post: ignored */
        dsv4_kctx_hint(j->k, 0, (const void *)64, 4096, 0);
        atomic_store(&j->posted, 1);
    }
}

static void run_hints(void) {
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(2, 16, &k, &err) == DSV4_OK);
    static char buf[1 << 16];
    const void *p;
    int64_t n;
    CHECK(!dsv4_kctx_hint_get(k, 0, 1, &p, &n) && !dsv4_kctx_hint_get(k, 1, 2, &p, &n));
    dsv4_kctx_hint(k, 1, buf, sizeof buf, 0);
    dsv4_kctx_hint(k, 0, buf + 64, 128, 1);
    CHECK(dsv4_kctx_hint_get(k, 1, 1, &p, &n) && p == buf && n == (int64_t)sizeof buf);
    CHECK(!dsv4_kctx_hint_get(k, 1, 2, &p, &n) && !dsv4_kctx_hint_get(k, 0, 1, &p, &n));
    CHECK(dsv4_kctx_hint_get(k, 0, 2, &p, &n) && p == buf + 64 && n == 128);
    hint_job j = {.k = k};
    atomic_init(&j.posted, 0);
    dsv4_kctx_parallel(k, 2, hint_inner, &j);
    CHECK(atomic_load(&j.posted) == 1);
    CHECK(!dsv4_kctx_hint_get(k, 1, 1, &p, &n)); /* its target started */
    CHECK(dsv4_kctx_hint_get(k, 0, 1, &p, &n) && p == buf + 64); /* now the next job's */
    CHECK(!dsv4_kctx_hint_get(k, 0, 2, &p, &n));
    dsv4_kctx_parallel(k, 2, hint_inner, &j);
    CHECK(!dsv4_kctx_hint_get(k, 0, 1, &p, &n) && !dsv4_kctx_hint_get(k, 0, 2, &p, &n));
    CHECK(!dsv4_kctx_hint_get(k, 0, 3, &p, &n) && !dsv4_kctx_hint_get(k, 2, 1, &p, &n));
    dsv4_kctx_hint(k, 0, buf, 64, 3); /* beyond the slots: none */
    CHECK(!dsv4_kctx_hint_get(k, 0, 1, &p, &n) && !dsv4_kctx_hint_get(k, 0, 2, &p, &n));
    dsv4_kctx_free(k);
    /* jobs while both threads hold hints at unmapped and odd addresses, the worker waiting
     * through them: every task's result as without */
    CHECK(dsv4_kctx_create(2, 16, &k, &err) == DSV4_OK);
    job jb = {.n_threads = 2};
    enum { N = 64 };
    jb.hits = calloc(N, sizeof *jb.hits);
    jb.value = calloc(N, sizeof *jb.value);
    atomic_init(&jb.bad_tid, 0);
    int wrong = 0;
    for (int r = 0; r < 2000; r++) {
        dsv4_kctx_hint(k, 1, (const void *)(uintptr_t)(r * 4099), (int64_t)1 << 20, r & 1);
        dsv4_kctx_hint(k, 0, (const void *)(uintptr_t)(-(intptr_t)(1 << 20)), (int64_t)1 << 20, 0);
        if (r % 500 == 0) usleep(2000); /* the worker prefetching, then asleep */
        const int nt = 1 + r % N;
        for (int t = 0; t < nt; t++) atomic_store(&jb.hits[t], 0);
        jb.round = r;
        dsv4_kctx_parallel(k, nt, task, &jb);
        for (int t = 0; t < nt; t++) wrong += atomic_load(&jb.hits[t]) != 1 || jb.value[t] != (int64_t)t * 1000003 + r;
    }
    CHECK_MSG(wrong == 0, "jobs beside hints: %d task results wrong", wrong);
    free(jb.hits);
    free(jb.value);
    dsv4_kctx_free(k);
}

/* Sleeping workers wake for a job: after a sleep longer than the workers' spin, a job of one
 * task a thread whose caller's task waits (up to half a second) for a worker to start any
 * task. publish takes the mutex and broadcasts only when a worker counts itself asleep; a
 * lost wakeup would leave the caller to run every task itself, which the plain jobs above
 * cannot tell from a worker that came. (Which task a worker takes is the pool's: at 3
 * threads the caller may steal task 1 while worker 1 runs task 0, so "any task".) */
typedef struct {
    atomic_int woke; /* some task begun by a worker */
} wake_job;

static double wake_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wake_task(void *arg, int t, int tid) {
    (void)t;
    wake_job *j = arg;
    if (tid != 0) {
        atomic_store(&j->woke, 1);
        return;
    }
    for (const double t0 = wake_now(); !atomic_load(&j->woke) && wake_now() - t0 < 0.5;) usleep(10);
}

static void run_wake(int n_threads) {
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(n_threads, 16, &k, &err) == DSV4_OK);
    int missed = 0;
    for (int r = 0; r < 10; r++) {
        usleep(2000); /* longer than the spin: every worker asleep on the condvar */
        wake_job j;
        atomic_init(&j.woke, 0);
        dsv4_kctx_parallel(k, n_threads, wake_task, &j);
        missed += !atomic_load(&j.woke);
    }
    CHECK_MSG(missed == 0, "%d threads: in %d of 10 jobs after a sleep no worker ran a task", n_threads, missed);
    dsv4_kctx_free(k);
}

int main(void) {
    run_jobs(1, 50, 200, 0);
    run_jobs(2, 50, 3000, 0);
    run_jobs(3, 300, 2000, 0);
    run_jobs(4, 9, 3000, 0);
    run_jobs(2, 20, 20, 1);
    run_jobs(3, 20, 20, 1);
    run_wake(2);
    run_wake(3);
    run_huge();
    run_nested();
    run_pinned();
    run_hints();
    /* a pool created and freed without ever running a job */
    dsv4_kctx *k;
    dsv4_err err;
    CHECK(dsv4_kctx_create(3, 8, &k, &err) == DSV4_OK);
    dsv4_kctx_free(k);
    /* n_threads <= 0 means the cores this process may use (affinity mask, cgroup quota:
     * under `taskset -c 1` that is 1, not the online count) */
    CHECK(dsv4_kctx_create(0, 8, &k, &err) == DSV4_OK);
    CHECK(dsv4_kctx_threads(k) == dsv4_available_cores());
    dsv4_kctx_free(k);
    return test_report();
}
