/* threads.c — worker pool for parallel-for jobs (see threads.h).
 *
 * The atomic `ticket` announces the open job (job number, number of tasks); each thread
 * has a 64-bit atomic slot with its range of the job's tasks (job number, first unclaimed
 * task, end). The caller splits the n tasks into T contiguous ranges, thread i taking
 * [i n / T, (i + 1) n / T), so each thread walks one stretch of the job in order: a GEMV
 * job's weights then stream through each core front to back and the kernels' software
 * prefetch runs on from one task into the next (gemv_prefetch.h) instead of starting cold
 * at every task, as it did when the threads took tasks in turn from one counter (each
 * thread's stream jumped a task ahead every task: BENCHMARKS.md, session 10). A thread
 * whose range is empty takes the back half of another's remaining range into its own slot
 * (work stealing), so a late or descheduled thread delays the job by at most a task.
 *
 * Claims are compare-and-swaps that succeed only while the slot still names the job, so a
 * worker that slept through a job or two can never take a task of a job it did not see.
 * The job's fn/arg are read only after a successful claim: the caller cannot start the
 * next job (and rewrite them, and the slots) until every claimed task has finished, which
 * it learns from `done` (release/acquire; each thread adds its count once it finds no task
 * left). The caller waits for tasks, never for a worker that took none.
 */
#include "kernels/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"
#include "util/hot.h"

/* How long an idle worker (or the waiting caller) polls before sleeping (yielding). Jobs
 * in a decode step come every few microseconds; a futex wake costs tens of them. */
#define SPIN_NS 100000

/* ticket layout: job number (20 bits) | n_tasks (22 bits) | 0 (22 bits) */
#define NEXT_BITS 22
#define TASK_BITS 22
#define MAX_TASKS ((1 << TASK_BITS) - 1)
#define TK_NEXT(t) ((int)((t) & ((1u << NEXT_BITS) - 1)))
#define TK_N(t) ((int)(((t) >> NEXT_BITS) & ((1u << TASK_BITS) - 1)))
#define TK_JOB(t) ((uint32_t)((t) >> (NEXT_BITS + TASK_BITS)))
#define TK_MAKE(job, n) (((uint64_t)((job) & 0xfffffu) << (NEXT_BITS + TASK_BITS)) | ((uint64_t)(n) << NEXT_BITS))

/* Which pool's job the current thread is running, and as which tid: set for good on a
 * worker, for the duration of a job on the caller. A call from inside a task (nested)
 * then runs its tasks inline on that thread with that tid instead of corrupting the
 * job in flight, and dsv4_pool_tid tells a kernel whose scratch is its own. Per thread,
 * so two pools (two engines) never see each other's. */
static _Thread_local const struct dsv4_pool *tl_pool;
static _Thread_local int tl_tid;

/* Prefetch hints (dsv4_pool_hint): a thread's hint names the weights its share of a coming
 * job starts with and that job's number (the target). A thread waiting for job J (a worker
 * between jobs, the caller for its job's last tasks) prefetches its hint for J + 1, then
 * its hint for J + 2: the poster may name the job after next (say the product after the
 * heads, before the heads run). HINT_SLOTS slots a thread, by target mod HINT_SLOTS, hold
 * the hints of a few coming jobs side by side. Written by the caller only; the fields are
 * atomics because the thread reads them while the caller may rewrite them (a torn hint
 * only prefetches the wrong lines: a prefetch never faults). */
#define HINT_SLOTS 4
#define HINT_AHEAD 2
struct hint_slot {
    _Atomic uintptr_t ptr;
    _Atomic int64_t len;
    _Atomic uint32_t target; /* job number (20 bits) */
    _Atomic uint32_t seq;    /* bumped last, with release: a new hint */
};
struct pool_hint {
    _Alignas(64) struct hint_slot slot[HINT_SLOTS];
};

/* A thread's progress through its hints: one cursor a slot. */
struct hint_pos {
    uint32_t seq, target; /* the hint taken */
    uintptr_t at, end;    /* the lines left to prefetch */
};
typedef struct {
    struct hint_pos c[HINT_SLOTS];
} hint_cursor;

struct worker {
    struct dsv4_pool *pool;
    int tid;
};

struct dsv4_pool {
    /* the open job: one line, written by the caller before it publishes the ticket and read
     * by the workers right after, so that a worker takes the ticket, fn, arg and base in one
     * transfer between the cores, and no line the caller polls (done) or locks (mu) moves
     * with it. With ticket, done, stop and the mutex's tail in one line and fn/arg in
     * another, a job of 2 tasks of ~1 us took 3.13 us a round trip, now 2.45; 16 tasks 10.47
     * -> 9.71 (Zen 5 VM, 2 threads, each vCPU its own L3; processes alternated, 4 of 4) */
    _Alignas(64) _Atomic uint64_t ticket; /* the open job, see above */
    dsv4_task_fn fn;
    void *arg;
    int base;                /* task id of the job's first task */
    /* written by the workers (and polled by the caller): a line of its own */
    _Alignas(64) atomic_int done; /* tasks of the open job finished */
    _Alignas(64) atomic_int sleepers; /* workers in (or going into) pthread_cond_wait */
    atomic_int stop;
    int n_threads;
    int n_started;           /* workers actually running */
    pthread_t *threads;      /* (n_threads - 1) */
    struct worker *workers;  /* (n_threads - 1) */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    uint32_t job;            /* caller only: number of the last job */
    hint_cursor hint0;       /* caller only: its progress through its hints (tid 0) */
    struct { _Alignas(64) _Atomic uint64_t v; } *slots; /* (n_threads) each thread's range */
    struct pool_hint *hints; /* (n_threads) each thread's prefetch hint (dsv4_pool_hint) */
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

/* slot layout: job number (20 bits) | first unclaimed task (22) | end of the range (22) */
#define SL_LO(s) TK_N(s)
#define SL_HI(s) TK_NEXT(s)
#define SL_MAKE(job, lo, hi) (TK_MAKE(job, lo) | (uint64_t)(hi))

/* Claims the first task of a thread's own range (walking it forward); -1 when the range is
 * empty or belongs to another job. */
static int claim_own(_Atomic uint64_t *slot, uint32_t job) {
    uint64_t s = atomic_load_explicit(slot, memory_order_acquire);
    for (;;) {
        if (TK_JOB(s) != job || SL_LO(s) >= SL_HI(s)) return -1;
        if (atomic_compare_exchange_weak_explicit(slot, &s, s + ((uint64_t)1 << NEXT_BITS), memory_order_acquire,
                                                  memory_order_acquire))
            return SL_LO(s);
    }
}

/* Takes the back half (at least one task) of another thread's remaining range: [*lo, *hi). */
static int steal_half(_Atomic uint64_t *slot, uint32_t job, int *lo, int *hi) {
    uint64_t s = atomic_load_explicit(slot, memory_order_acquire);
    for (;;) {
        const int a = SL_LO(s), b = SL_HI(s);
        if (TK_JOB(s) != job || a >= b) return 0;
        const int mid = a + (b - a) / 2;
        if (atomic_compare_exchange_weak_explicit(slot, &s, SL_MAKE(job, a, mid), memory_order_acquire,
                                                  memory_order_acquire)) {
            *lo = mid, *hi = b;
            return 1;
        }
    }
}

/* Runs this thread's range of job `job` front to back, then steals the back half of another
 * thread's remaining range into its own slot and goes on, until every range is empty; then
 * counts its finished tasks into `done` at once. One add a thread and job, not one a task:
 * every add moves done's cache line between the cores (the caller polls it), which cost
 * ~0.1-0.2 us a task (Zen 5, 2 threads: an empty job of 8 tasks 1.26 us a round trip). */
DSV4_HOT_AT(run_tasks, 0xc10)
static void run_tasks(dsv4_pool *p, uint32_t job, int tid) {
    _Atomic uint64_t *own = &p->slots[tid].v;
    int ran = 0;
    for (;;) {
        for (int t; (t = claim_own(own, job)) >= 0; ran++) p->fn(p->arg, p->base + t, tid);
        int lo = 0, hi = 0, got = 0;
        for (int d = 1; d < p->n_threads && !got; d++)
            got = steal_half(&p->slots[(tid + d) % p->n_threads].v, job, &lo, &hi);
        if (!got) break;
        atomic_store_explicit(own, SL_MAKE(job, lo, hi), memory_order_release);
    }
    /* release our tasks' writes; the caller acquires them when done reaches the job's count */
    if (ran) atomic_fetch_add_explicit(&p->done, ran, memory_order_release);
}

/* Lines a step of a hint's prefetch issues between two looks at the ticket (or done). */
#define HINT_STEP_LINES 16

/* Thread tid's hint slot for the job `ahead` (1 or 2) jobs after job `open`, or NULL when
 * it holds none for that job; *target its number. */
static struct hint_slot *hint_for(const dsv4_pool *p, int tid, uint32_t open, uint32_t ahead, uint32_t *target) {
    *target = (open + ahead) & 0xfffffu;
    struct hint_slot *h = &p->hints[tid].slot[*target % HINT_SLOTS];
    return atomic_load_explicit(&h->target, memory_order_relaxed) == *target ? h : NULL;
}

/* One step of thread tid's hints while it waits: prefetches the next HINT_STEP_LINES lines
 * of its hint for the job after the open one (or the one after that) into this core's
 * cache, so the next job's first weights arrive while nothing else streams. Returns 0 when
 * there is nothing to prefetch. */
static int hint_step(dsv4_pool *p, int tid, hint_cursor *hc) {
    const uint32_t open = TK_JOB(atomic_load_explicit(&p->ticket, memory_order_relaxed));
    for (uint32_t d = 1; d <= HINT_AHEAD; d++) {
        uint32_t target;
        struct hint_slot *h = hint_for(p, tid, open, d, &target);
        if (!h) continue;
        const uint32_t seq = atomic_load_explicit(&h->seq, memory_order_acquire);
        struct hint_pos *c = &hc->c[target % HINT_SLOTS];
        if (c->seq != seq || c->target != target) {
            c->seq = seq;
            c->target = target;
            c->at = atomic_load_explicit(&h->ptr, memory_order_relaxed);
            const int64_t len = atomic_load_explicit(&h->len, memory_order_relaxed);
            c->end = c->at + (uintptr_t)(len > 0 ? len : 0);
        }
        if (c->at >= c->end) continue;
        for (int i = 0; i < HINT_STEP_LINES && c->at < c->end; i++, c->at += 64)
            __builtin_prefetch((const void *)c->at, 0, 2);
        return 1;
    }
    return 0;
}

/* Polls until the ticket names a job other than `seen` (or stop); returns its number. */
static uint32_t wait_job(dsv4_pool *p, uint32_t seen, int tid, hint_cursor *hc) {
    uint32_t j;
    int64_t t0 = 0;
    for (int i = 0;; i++) {
        if ((j = TK_JOB(atomic_load_explicit(&p->ticket, memory_order_acquire))) != seen) return j;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return seen;
        if (!hint_step(p, tid, hc)) cpu_relax();
        if ((i & 255) == 255) {
            const int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
        }
    }
    /* counted as a sleeper before the last look at the ticket (both sequentially consistent,
     * as publish's store and its look at sleepers): either that look sees the new ticket, or
     * publish sees the sleeper and broadcasts under the mutex, which this thread holds until
     * pthread_cond_wait releases it */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while ((j = TK_JOB(atomic_load(&p->ticket))) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return j;
}

DSV4_HOT_AT(worker_main, 0xd70)
static void *worker_main(void *v) {
    struct worker *w = v;
    dsv4_pool *p = w->pool;
    uint32_t seen = 0;
    hint_cursor hc;
    memset(&hc, 0, sizeof hc);
    tl_pool = p;
    tl_tid = w->tid;
    for (;;) {
        seen = wait_job(p, seen, w->tid, &hc);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        run_tasks(p, seen, w->tid);
    }
    return NULL;
}

/* The caller's wait for the n tasks of its job (it prefetches its hint meanwhile). */
static void wait_done(dsv4_pool *p, int n) {
    int64_t t0 = 0;
    for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n; i++) {
        if (t0 && now_ns() - t0 > SPIN_NS) {
            sched_yield(); /* a worker holding a task may have been descheduled */
            continue;
        }
        if (!hint_step(p, 0, &p->hint0)) cpu_relax();
        if ((i & 255) == 255 && !t0) t0 = now_ns();
    }
}

/* Publishes a ticket (or the stop flag) and wakes sleeping workers. The mutex and the
 * broadcast only when a worker sleeps (wait_job): with the workers spinning, as between a
 * decode step's jobs, a ticket is one store, where the lock and the broadcast took the
 * mutex's line at every job (in step, jobs alternated with and without: the serial gaps
 * between a batch-16 step's 59 jobs -20 us a step, 51 of 63 steps below; the worker's start
 * at a batch-1 step's jobs -1.9 us a step, 76 of 95). */
static void publish(dsv4_pool *p, uint64_t ticket, int stop) {
    if (stop) atomic_store(&p->stop, 1);
    else atomic_store(&p->ticket, ticket);
    if (!stop && atomic_load(&p->sleepers) == 0) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

int dsv4_pool_create(int n_threads, dsv4_pool **out, dsv4_err *err) {
    if (n_threads < 1) return dsv4_fail(err, DSV4_ERR_ARG, "thread pool: n_threads %d < 1", n_threads);
    const size_t size = (sizeof(dsv4_pool) + 63) / 64 * 64; /* aligned_alloc: a multiple of the alignment */
    dsv4_pool *p = aligned_alloc(64, size); /* its lines apart (the ticket's, done's) */
    if (!p) return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: out of memory");
    memset(p, 0, size);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->ticket, TK_MAKE(0, 0));
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->sleepers, 0);
    p->slots = aligned_alloc(64, sizeof *p->slots * (size_t)n_threads);
    if (!p->slots) {
        dsv4_pool_free(p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n_threads; i++) atomic_init(&p->slots[i].v, SL_MAKE(0, 0, 0));
    p->hints = aligned_alloc(64, sizeof *p->hints * (size_t)n_threads);
    if (!p->hints) {
        dsv4_pool_free(p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 0; i < n_threads; i++)
        for (int k = 0; k < HINT_SLOTS; k++) {
            atomic_init(&p->hints[i].slot[k].ptr, 0);
            atomic_init(&p->hints[i].slot[k].len, 0);
            atomic_init(&p->hints[i].slot[k].target, 0xffffffffu); /* no job's number */
            atomic_init(&p->hints[i].slot[k].seq, 0);
        }
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
        publish(p, 0, 1);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p->slots);
    free(p->hints);
    free(p);
}

int dsv4_pool_threads(const dsv4_pool *p) { return p->n_threads; }

int dsv4_pool_pin(dsv4_pool *p, dsv4_err *err) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0)
        return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "thread pool: cannot read the affinity mask to pin workers");
    int cpus[CPU_SETSIZE], n_cpus = 0; /* the mask's CPUs, ascending */
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mask)) cpus[n_cpus++] = c;
    if (n_cpus == 0) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "thread pool: empty affinity mask");
    /* worker tid i on the mask's CPU i (mod its size); CPU 0 of the mask is left to the
     * caller (tid 0), whose own affinity the library does not touch */
    for (int i = 0; i < p->n_started; i++) {
        const int tid = p->workers[i].tid, cpu = cpus[tid % n_cpus];
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        const int rc = pthread_setaffinity_np(p->threads[i], sizeof one, &one);
        if (rc != 0)
            return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "thread pool: cannot pin worker %d to CPU %d (error %d)", tid, cpu, rc);
    }
    return DSV4_OK;
}

int dsv4_pool_tid(const dsv4_pool *p) { return tl_pool == p ? tl_tid : 0; }

void dsv4_pool_hint(dsv4_pool *p, int tid, const void *ptr, int64_t len, int skip) {
    if (tid < 0 || tid >= p->n_threads || tl_pool == p || skip < 0 || skip > HINT_SLOTS - 2) return; /* nested: none */
    const uint32_t target = (p->job + 1 + (uint32_t)skip) & 0xfffffu;
    struct hint_slot *h = &p->hints[tid].slot[target % HINT_SLOTS];
    if (atomic_load_explicit(&h->target, memory_order_relaxed) == target &&
        atomic_load_explicit(&h->ptr, memory_order_relaxed) == (uintptr_t)ptr &&
        atomic_load_explicit(&h->len, memory_order_relaxed) == len)
        return; /* posted already: the thread goes on where it is */
    atomic_store_explicit(&h->ptr, (uintptr_t)ptr, memory_order_relaxed);
    atomic_store_explicit(&h->len, len, memory_order_relaxed);
    atomic_store_explicit(&h->target, target, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->seq, 1, memory_order_release);
}

DSV4_HOT_AT(dsv4_pool_run, 0x360)
void dsv4_pool_run(dsv4_pool *p, int n_tasks, dsv4_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (tl_pool == p || p->n_started == 0 || n_tasks == 1) {
        /* nested inside one of this pool's tasks, or nothing to share: this thread */
        const int tid = dsv4_pool_tid(p);
        for (int t = 0; t < n_tasks; t++) fn(arg, t, tid);
        return;
    }
    /* the caller is tid 0 of p until the job is done (it may itself be a task of another
     * pool's job: put that back afterwards) */
    const struct dsv4_pool *prev_pool = tl_pool;
    const int prev_tid = tl_tid;
    tl_pool = p;
    tl_tid = 0;
    /* more tasks than a ticket counts (no kernel comes close): consecutive jobs */
    for (int base = 0; base < n_tasks; base += MAX_TASKS) {
        const int n = n_tasks - base < MAX_TASKS ? n_tasks - base : MAX_TASKS;
        p->fn = fn;
        p->arg = arg;
        p->base = base;
        atomic_store_explicit(&p->done, 0, memory_order_relaxed);
        p->job = (p->job + 1) & 0xfffffu;
        for (int i = 0; i < p->n_threads; i++) /* thread i: tasks [i n / T, (i + 1) n / T) */
            atomic_store_explicit(&p->slots[i].v,
                                  SL_MAKE(p->job, (int64_t)n * i / p->n_threads, (int64_t)n * (i + 1) / p->n_threads),
                                  memory_order_relaxed);
        publish(p, TK_MAKE(p->job, n), 0);
        run_tasks(p, p->job, 0);
        wait_done(p, n);
    }
    tl_pool = prev_pool;
    tl_tid = prev_tid;
}

int dsv4_pool_hint_get(const dsv4_pool *p, int tid, int ahead, const void **ptr, int64_t *len) {
    if (tid < 0 || tid >= p->n_threads || ahead < 1 || ahead > HINT_AHEAD) return 0;
    uint32_t target;
    const struct hint_slot *h =
        hint_for(p, tid, TK_JOB(atomic_load_explicit(&p->ticket, memory_order_relaxed)), (uint32_t)ahead, &target);
    if (!h) return 0;
    *ptr = (const void *)atomic_load_explicit(&h->ptr, memory_order_relaxed);
    *len = atomic_load_explicit(&h->len, memory_order_relaxed);
    return 1;
}
