/* test_ep_warmup.c — under expert parallelism a rank warms up and pins only the routed
 * experts it owns (the range the EP exchange gives it, dist/ep.h) and every dense weight:
 *  - dsv4_model_warmup's byte total on rank r of EP = the dense tensors + the tensors of
 *    experts [e0, e1) by their official names (layers.L.ffn.experts.E.*, mtp.J....);
 *  - summed over the ranks, every expert is counted exactly once;
 *  - dsv4_model_mlock pins that much (VmLck of /proc/self/status, within page rounding),
 *    and nothing of the other ranks' experts; skipped with a message where this process
 *    may not lock memory (no CAP_IPC_LOCK and a small `ulimit -l`).
 *
 *   mpirun -np EP test_ep_warmup MODEL_DIR
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "dist/ep.h"
#include "dsv4.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "test.h"

static void last_total(void *user, uint64_t done, uint64_t total) {
    (void)done;
    *(uint64_t *)user = total;
}

/* Locked memory of this process in bytes (VmLck), or -1. */
static int64_t locked_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int main(int argc, char **argv) {
    dsv4_err err = {0};
    dsv4_dist *d = NULL;
    if (dsv4_dist_init(&argc, &argv, &d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const int rank = dsv4_dist_rank(d), size = dsv4_dist_size(d);
    dsv4_model *m = NULL;
    if (argc < 2 || dsv4_model_open(argv[1], &m, &err)) {
        fprintf(stderr, "usage: test_ep_warmup MODEL_DIR (%s)\n", err.msg);
        dsv4_dist_abort(d, 1);
        return 1;
    }
    dsv4_ep *ep = NULL;
    CHECK_MSG(dsv4_ep_create(&m->cfg, d, 8, &ep, &err) == 0, "%s", err.msg);
    int e0 = 0, e1 = 0;
    if (ep) dsv4_ep_local_range(ep, &e0, &e1);

    /* what this rank must touch, from the tensor names */
    uint64_t dense = 0, own = 0, experts = 0, page = (uint64_t)sysconf(_SC_PAGESIZE);
    int n_own = 0;
    for (int i = 0; i < dsv4_st_count(m->files); i++) {
        const dsv4_st_tensor *t = dsv4_st_at(m->files, i);
        const char *x = strstr(t->name, ".ffn.experts.");
        int e;
        if (!x) { dense += t->nbytes; continue; }
        CHECK(sscanf(x, ".ffn.experts.%d.", &e) == 1);
        experts += t->nbytes;
        if (e >= e0 && e < e1) { own += t->nbytes; n_own++; }
    }
    CHECK(own > 0 && own < experts);

    uint64_t total = 0;
    CHECK_MSG(dsv4_model_warmup(m, 2, rank, size, last_total, &total, &err) == 0, "%s", err.msg);
    CHECK_MSG(total == dense + own, "rank %d: warm-up read %llu bytes, dense %llu + own experts %llu", rank,
              (unsigned long long)total, (unsigned long long)dense, (unsigned long long)own);
    uint64_t sum_own = 0;
    CHECK(MPI_Allreduce(&own, &sum_own, 1, MPI_UINT64_T, MPI_SUM, d->comm) == MPI_SUCCESS);
    CHECK_MSG(sum_own == experts, "experts counted %llu of %llu bytes", (unsigned long long)sum_own,
              (unsigned long long)experts);

    const int64_t before = locked_bytes();
    int rc = dsv4_model_mlock(m, rank, size, &err);
    if (rc && (strstr(err.msg, "Operation not permitted") || strstr(err.msg, "Cannot allocate memory"))) {
        printf("rank %d: mlock not allowed here (%s): pinning not checked\n", rank, err.msg);
    } else {
        CHECK_MSG(rc == 0, "%s", err.msg);
        /* every tensor's pages: its bytes, plus at most a page at each end it shares */
        const int64_t pinned = locked_bytes() - before;
        const uint64_t slack = 2 * page * (uint64_t)(dsv4_st_count(m->files));
        CHECK_MSG(pinned >= (int64_t)(dense + own) && (uint64_t)pinned <= dense + own + slack,
                  "rank %d: %lld bytes locked, want %llu (+ page rounding)", rank, (long long)pinned,
                  (unsigned long long)(dense + own));
        CHECK_MSG((uint64_t)pinned < dense + experts, "rank %d pinned other ranks' experts", rank);
    }
    printf("rank %d/%d: experts [%d, %d): %d tensors, %llu + %llu dense bytes\n", rank, size, e0, e1, n_own,
           (unsigned long long)own, (unsigned long long)dense);
    dsv4_ep_free(ep);
    dsv4_model_close(m);
    int failed = test_report();
    dsv4_dist_finalize(d);
    return failed;
}
