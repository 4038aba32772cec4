/* threads.c — worker pool for parallel-for jobs (see threads.h).
 *
 * Hand-off: the caller writes the job, then bumps `gen` (release) under the mutex and
 * broadcasts; a worker that sees a new `gen` (acquire) also sees the job. Tasks are taken
 * with an atomic counter. Each worker bumps `finished` (release) after its last task, and
 * the caller waits (acquire) until every worker has checked in, so the next job's reset
 * of the counters can never race with a straggler from this one.
 */
#include "kernels/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "util/err.h"

/* How long an idle worker (or the waiting caller) polls before sleeping (yielding). Jobs
 * in a decode step come every few microseconds; a futex wake costs tens of them. */
#define SPIN_NS 100000

struct worker {
    struct dsv4_pool *pool;
    int tid;
};

struct dsv4_pool {
    int n_threads;
    int n_started;           /* workers actually running */
    pthread_t *threads;      /* (n_threads - 1) */
    struct worker *workers;  /* (n_threads - 1) */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint gen;         /* bumped once per job and once at shutdown */
    atomic_int next;         /* next task index to hand out */
    atomic_int finished;     /* workers done with the current job */
    /* the current job; written by the caller before the gen bump */
    int stop;
    int n_tasks;
    dsv4_task_fn fn;
    void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause");
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_tasks(dsv4_pool *p, int tid) {
    const int n = p->n_tasks;
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n) break;
        p->fn(p->arg, t, tid);
    }
}

/* Polls until gen differs from seen; returns the new value. */
static unsigned wait_gen(dsv4_pool *p, unsigned seen) {
    unsigned g;
    int64_t t0 = 0;
    for (int i = 0;; i++) {
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen) return g;
        cpu_relax();
        if ((i & 255) == 255) {
            int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
        }
    }
    pthread_mutex_lock(&p->mu);
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->wake, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *v) {
    struct worker *w = v;
    dsv4_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (p->stop) break;
        run_tasks(p, w->tid);
        atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
    }
    return NULL;
}

static void bump_gen(dsv4_pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

int dsv4_pool_create(int n_threads, dsv4_pool **out, dsv4_err *err) {
    if (n_threads < 1) return dsv4_fail(err, DSV4_ERR_ARG, "thread pool: n_threads %d < 1", n_threads);
    dsv4_pool *p = calloc(1, sizeof *p);
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->finished, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            dsv4_pool_free(p);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->workers[i] = (struct worker){p, i + 1};
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
        if (rc != 0) {
            dsv4_pool_free(p);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: cannot start worker %d of %d (error %d)",
                             i + 1, n_threads - 1, rc);
        }
        p->n_started++;
    }
    *out = p;
    return DSV4_OK;
}

void dsv4_pool_free(dsv4_pool *p) {
    if (!p) return;
    if (p->n_started > 0) {
        p->stop = 1;
        bump_gen(p);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int dsv4_pool_threads(const dsv4_pool *p) { return p->n_threads; }

void dsv4_pool_run(dsv4_pool *p, int n_tasks, dsv4_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (p->n_started == 0 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    bump_gen(p);
    run_tasks(p, 0);
    int64_t t0 = 0;
    for (int i = 0; atomic_load_explicit(&p->finished, memory_order_acquire) < p->n_started; i++) {
        if (t0 && now_ns() - t0 > SPIN_NS) {
            sched_yield(); /* a worker may have been descheduled (more threads than cores) */
            continue;
        }
        cpu_relax();
        if ((i & 255) == 255 && !t0) t0 = now_ns();
    }
}
