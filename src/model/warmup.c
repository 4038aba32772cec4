/* warmup.c — weights paged in ahead of use, and pinned (dsv4_model_warmup / _mlock).
 *
 * The weights stay mmap'd in their files, so the first tokens after open page in the
 * whole checkpoint (160 GB for Flash) one fault at a time, on the model's critical path.
 * Warm-up reads one byte of every page from several threads at once instead, which keeps
 * the disk queue full; mlock then keeps the pages resident. With expert parallelism a rank
 * touches only the routed experts it owns (expert e lives on rank e / (E / ranks),
 * spec/serving.md §d) and every dense weight. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "model/model.h"
#include "model/safetensors.h"
#include "util/err.h"
#include "util/numa.h"

#define CHUNK (64ull << 20) /* bytes a thread takes at a time */

typedef struct range { const uint8_t *p; uint64_t n; } range;

/* The tensors this rank reads: all, or all but other ranks' routed experts. */
static int ranges_of(const dsv4_model *m, int rank, int n_ranks, range **out, int *n_out,
                     uint64_t *total, dsv4_err *err) {
    const int n = dsv4_st_count(m->files), E = m->cfg.n_routed_experts;
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks || (n_ranks > 1 && E % n_ranks))
        return dsv4_fail(err, DSV4_ERR_ARG, "warm-up: rank %d of %d does not split %d experts", rank, n_ranks, E);
    range *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    if (!r) return dsv4_fail(err, DSV4_ERR_NOMEM, "warm-up: out of memory");
    int k = 0;
    *total = 0;
    for (int i = 0; i < n; i++) {
        const dsv4_st_tensor *t = dsv4_st_at(m->files, i);
        const char *e = strstr(t->name, ".ffn.experts.");
        if (e && n_ranks > 1 && atoi(e + 13) / (E / n_ranks) != rank) continue;
        if (!t->nbytes) continue;
        r[k++] = (range){t->data, t->nbytes};
        *total += t->nbytes;
    }
    *out = r;
    *n_out = k;
    return DSV4_OK;
}

typedef struct warm_job {
    const range *r;
    int n;
    _Atomic uint64_t next;  /* the next chunk, as a byte offset into the concatenation */
    _Atomic uint64_t done;  /* bytes touched */
    uint64_t total;
    long page;
    _Atomic unsigned sink;  /* keeps the reads */
} warm_job;

static void *warm_thread(void *arg) {
    warm_job *j = arg;
    unsigned acc = 0;
    for (;;) {
        uint64_t at = atomic_fetch_add(&j->next, CHUNK);
        if (at >= j->total) break;
        uint64_t end = at + CHUNK < j->total ? at + CHUNK : j->total;
        /* walk the ranges overlapping [at, end) */
        uint64_t base = 0;
        for (int i = 0; i < j->n && base < end; base += j->r[i++].n) {
            uint64_t lo = at > base ? at - base : 0, hi = end - base < j->r[i].n ? end - base : j->r[i].n;
            if (base + j->r[i].n <= at || lo >= hi) continue;
            const volatile uint8_t *p = j->r[i].p;
            for (uint64_t o = lo; o < hi; o += (uint64_t)j->page) acc += p[o];
            acc += p[hi - 1];
        }
        atomic_fetch_add(&j->done, end - at);
    }
    atomic_fetch_add(&j->sink, acc);
    return NULL;
}

int dsv4_model_warmup(const dsv4_model *m, int threads, int rank, int n_ranks,
                      dsv4_progress_fn progress, void *user, dsv4_err *err) {
    range *r;
    int n;
    uint64_t total;
    int rc = ranges_of(m, rank, n_ranks, &r, &n, &total, err);
    if (rc) return rc;
    if (threads <= 0) threads = dsv4_available_cores();
    if (threads > 64) threads = 64;
    warm_job j = {.r = r, .n = n, .total = total, .page = sysconf(_SC_PAGESIZE)};
    if (j.page <= 0) j.page = 4096;
    for (int i = 0; i < n; i++) madvise((void *)((uintptr_t)r[i].p & ~(uintptr_t)(j.page - 1)), r[i].n, MADV_WILLNEED);
    pthread_t tid[64];
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, warm_thread, &j)) break;
    if (!started) warm_thread(&j); /* no thread could start: do it here */
    while (progress && started && atomic_load(&j.done) < total) {
        progress(user, atomic_load(&j.done), total);
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    }
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    if (progress) progress(user, total, total);
    free(r);
    return DSV4_OK;
}

int dsv4_model_mlock(const dsv4_model *m, int rank, int n_ranks, dsv4_err *err) {
    range *r;
    int n;
    uint64_t total;
    int rc = ranges_of(m, rank, n_ranks, &r, &n, &total, err);
    if (rc) return rc;
    for (int i = 0; i < n && !rc; i++)
        if (mlock(r[i].p, r[i].n))
            rc = dsv4_fail(err, DSV4_ERR_IO, "cannot pin %.1f GB of weights in memory: %s%s",
                           (double)total / 1e9, strerror(errno),
                           errno == ENOMEM || errno == EPERM
                               ? " (the locked-memory limit: raise `ulimit -l`, or run with CAP_IPC_LOCK)"
                               : "");
    if (rc)
        for (int i = 0; i < n; i++) munlock(r[i].p, r[i].n);
    free(r);
    return rc;
}

int dsv4_model_numa_interleave(const dsv4_model *m, dsv4_err *err) {
    range *r;
    int n;
    uint64_t total;
    int rc = ranges_of(m, 0, 1, &r, &n, &total, err);
    if (rc) return rc;
    for (int i = 0; !rc && i < n; i++) rc = dsv4_numa_interleave_range(r[i].p, r[i].n, err);
    free(r);
    return rc;
}
