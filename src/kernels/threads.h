/* threads.h — a fixed pool of worker threads running parallel-for loops.
 *
 * One pool per kernel context. A job is n_tasks independent calls fn(arg, task, tid); the
 * caller's thread takes part as tid 0 and workers are tids 1 .. n_threads-1. Each thread
 * starts on its own contiguous range of the tasks, in ascending order, then takes over
 * parts of the others' ranges that are not started yet (work stealing), so which thread
 * runs a task varies from run to run: a task must compute the same thing whichever tid
 * runs it (tid only selects per-thread scratch). That is what makes results independent
 * of the thread count.
 *
 * A job started from inside a task (nested: say a per-expert task calling a threaded
 * kernel) runs its tasks inline on that thread, with that thread's tid. One caller at a
 * time: two threads must not start jobs on the same pool concurrently. Idle workers spin
 * briefly (a decode step issues many short jobs back to back), then sleep on a condition
 * variable.
 */
#ifndef DSV4_KERNELS_THREADS_H
#define DSV4_KERNELS_THREADS_H

#include "dsv4.h"

typedef void (*dsv4_task_fn)(void *arg, int task, int tid);

typedef struct dsv4_pool dsv4_pool;

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started. */
int dsv4_pool_create(int n_threads, dsv4_pool **out, dsv4_err *err);
void dsv4_pool_free(dsv4_pool *p);
int dsv4_pool_threads(const dsv4_pool *p);

/* Pins worker tid i (1 .. n_threads-1) to the i-th CPU, counted from 0 and modulo its size,
 * of the calling thread's affinity mask (taskset, cpuset): each worker keeps its core and
 * its caches. CPU 0 of the mask is left for the thread that runs jobs (tid 0); the calling
 * thread's own affinity is not changed. Results do not depend on it (which thread runs a
 * task is not fixed either way). */
int dsv4_pool_pin(dsv4_pool *p, dsv4_err *err);

/* Runs fn(arg, t, tid) for every t in [0, n_tasks) and returns when all have finished. */
void dsv4_pool_run(dsv4_pool *p, int n_tasks, dsv4_task_fn fn, void *arg);

/* A prefetch hint for thread tid: the first len bytes at ptr are the weights its share of a
 * coming job starts with, the job `skip` (0..2) pool jobs after the next one started. While
 * it waits for the job before that target or the one before (a worker between jobs, the
 * caller for its job's last tasks) the thread prefetches them into its cache, a few lines
 * between looks at the pool, so the memory bus works during the serial pieces of a step
 * (batch-1 decode). A hint whose target has started is dropped. Only the caller posts hints,
 * outside a job's tasks (a nested call posts none); a hint never changes a result. */
void dsv4_pool_hint(dsv4_pool *p, int tid, const void *ptr, int64_t len, int skip);
/* The hint thread tid holds for the job `ahead` (1: the next, 2: the one after) pool jobs
 * after the last one started: 1 and its range, or 0 when none (the lookup the threads use;
 * for tests, from the caller between jobs). */
int dsv4_pool_hint_get(const dsv4_pool *p, int tid, int ahead, const void **ptr, int64_t *len);

/* The calling thread's tid in p: its worker number inside one of p's tasks, else 0. */
int dsv4_pool_tid(const dsv4_pool *p);

#endif
