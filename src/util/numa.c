/* numa.c — NUMA nodes and interleaving through libnuma (see numa.h). */
#include "util/numa.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"

#ifdef DSV4_HAVE_NUMA
#include <numa.h>
#include <numaif.h>

/* The previous policy of a thread: mode, then the node mask's words. */
typedef struct {
    int mode;
    unsigned long mask[16]; /* 1024 nodes */
} saved_policy;
_Static_assert(sizeof(saved_policy) <= DSV4_NUMA_SAVED_BYTES, "DSV4_NUMA_SAVED_BYTES too small");

int dsv4_numa_supported(void) { return numa_available() >= 0; }

int dsv4_numa_nodes(void) {
    if (numa_available() < 0) return 1;
    struct bitmask *m = numa_get_mems_allowed();
    const int n = m ? (int)numa_bitmask_weight(m) : 1;
    if (m) numa_bitmask_free(m);
    return n > 1 ? n : 1;
}

int dsv4_numa_interleave_range(const void *p, size_t n, dsv4_err *err) {
    if (numa_available() < 0) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "NUMA: the kernel has no NUMA support");
    if (!n) return DSV4_OK;
    const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1), b = ((uintptr_t)p + n + page - 1) & ~(uintptr_t)(page - 1);
    struct bitmask *m = numa_get_mems_allowed();
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "NUMA: cannot read the allowed memory nodes");
    const long rc = mbind((void *)a, b - a, MPOL_INTERLEAVE, m->maskp, m->size + 1, MPOL_MF_MOVE);
    const int e = errno;
    numa_bitmask_free(m);
    /* EIO: some pages could not be moved (mapped by another process too): they stay
     * where they are, the policy is set */
    if (rc != 0 && e != EIO)
        return dsv4_fail(err, DSV4_ERR_IO, "NUMA: cannot interleave %zu bytes of weights: %s", n, strerror(e));
    return DSV4_OK;
}

int dsv4_numa_interleave_thread(void *saved, dsv4_err *err) {
    saved_policy *s = saved;
    memset(s, 0, sizeof *s);
    if (numa_available() < 0) return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "NUMA: the kernel has no NUMA support");
    if (get_mempolicy(&s->mode, s->mask, 8 * sizeof s->mask, NULL, 0) != 0)
        return dsv4_fail(err, DSV4_ERR_IO, "NUMA: cannot read the thread's memory policy: %s", strerror(errno));
    struct bitmask *m = numa_get_mems_allowed();
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "NUMA: cannot read the allowed memory nodes");
    const long rc = set_mempolicy(MPOL_INTERLEAVE, m->maskp, m->size + 1);
    const int e = errno;
    numa_bitmask_free(m);
    if (rc != 0) return dsv4_fail(err, DSV4_ERR_IO, "NUMA: cannot interleave the workers' memory: %s", strerror(e));
    return DSV4_OK;
}

void dsv4_numa_restore_thread(const void *saved) {
    const saved_policy *s = saved;
    set_mempolicy(s->mode, s->mode == MPOL_DEFAULT ? NULL : s->mask, 8 * sizeof s->mask);
}

#else

int dsv4_numa_supported(void) { return 0; }

int dsv4_numa_nodes(void) { return 1; }

int dsv4_numa_interleave_range(const void *p, size_t n, dsv4_err *err) {
    (void)p;
    (void)n;
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "NUMA: this build has no libnuma");
}

int dsv4_numa_interleave_thread(void *saved, dsv4_err *err) {
    memset(saved, 0, DSV4_NUMA_SAVED_BYTES);
    return dsv4_fail(err, DSV4_ERR_UNSUPPORTED, "NUMA: this build has no libnuma");
}

void dsv4_numa_restore_thread(const void *saved) { (void)saved; }

#endif
