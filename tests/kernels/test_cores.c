/* test_cores.c — the default thread count: affinity mask and cgroup CPU quota, on fake
 * cgroup trees (v2, v1, none, a parent tighter than the leaf). */
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv4.h"
#include "kernels/cores.h"
#include "test.h"

static void put(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
}

static void mk(const char *path) { mkdir(path, 0755); }

int main(void) {
    char root[] = "/tmp/dsv4_cores_XXXXXX", d[512];
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }

    /* no cgroup files: no quota */
    CHECK(dsv4_cgroup_quota_cores(root, "0::/\n") == 0);
    CHECK(dsv4_cgroup_quota_cores(root, NULL) == 0);
    CHECK(dsv4_cgroup_quota_cores(root, "garbage") == 0);

    /* v2 at the root: "max" is no quota, 150000/100000 is 1.5 cores -> 2 */
    put(root, "cpu.max", "max 100000\n");
    CHECK(dsv4_cgroup_quota_cores(root, "0::/\n") == 0);
    put(root, "cpu.max", "150000 100000\n");
    CHECK(dsv4_cgroup_quota_cores(root, "0::/\n") == 2);

    /* v2 nested: the leaf says 4 cores, a parent 3 (tighter wins), the root 2 */
    snprintf(d, sizeof d, "%s/a", root); mk(d);
    put(d, "cpu.max", "300000 100000\n");
    snprintf(d, sizeof d, "%s/a/b", root); mk(d);
    put(d, "cpu.max", "400000 100000\n");
    put(root, "cpu.max", "max 100000\n");
    CHECK(dsv4_cgroup_quota_cores(root, "0::/a/b\n") == 3);

    /* v1: the cpu controller's hierarchy, quota -1 = none */
    snprintf(d, sizeof d, "%s/cpu", root); mk(d);
    snprintf(d, sizeof d, "%s/cpu/job", root); mk(d);
    put(d, "cpu.cfs_quota_us", "-1\n");
    put(d, "cpu.cfs_period_us", "100000\n");
    const char *v1 = "4:memory:/x\n1:cpu,cpuacct:/job\n";
    CHECK(dsv4_cgroup_quota_cores(root, v1) == 0);
    put(d, "cpu.cfs_quota_us", "50000\n");
    CHECK(dsv4_cgroup_quota_cores(root, v1) == 1);
    put(d, "cpu.cfs_quota_us", "250000\n");
    CHECK(dsv4_cgroup_quota_cores(root, v1) == 3);

    /* the affinity mask: what this process may run on, never more than online CPUs */
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK(dsv4_affinity_cores() == CPU_COUNT(&set));
    const int avail = dsv4_available_cores();
    CHECK(avail >= 1 && avail <= dsv4_affinity_cores());
    /* narrowed to one CPU, the default follows */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) { CPU_SET(c, &one); break; }
    if (sched_setaffinity(0, sizeof one, &one) == 0) {
        CHECK(dsv4_affinity_cores() == 1);
        CHECK(dsv4_available_cores() == 1);
        sched_setaffinity(0, sizeof set, &set);
    }

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", root);
    return test_report();
}
