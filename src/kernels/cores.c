/* cores.c — the cores this process may use (see cores.h and dsv4_available_cores). */
#include "kernels/cores.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv4.h"
#include "util/file.h"

int dsv4_affinity_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Cores granted by one quota file, 0 for none: v2 "max 100000" / "150000 100000", v1 a
 * quota file (-1 = none) read together with its period file. */
static int quota_file(const char *dir, int v2) {
    char path[4200], *text;
    long long quota = -1, period = 0;
    if (snprintf(path, sizeof path, "%s/%s", dir, v2 ? "cpu.max" : "cpu.cfs_quota_us") >= (int)sizeof path)
        return 0;
    if (!(text = dsv4_read_file(path, 256, NULL, NULL))) return 0;
    int ok = v2 ? sscanf(text, "%lld %lld", &quota, &period) == 2 : sscanf(text, "%lld", &quota) == 1;
    free(text);
    if (!ok || quota <= 0) return 0; /* "max" does not parse: no quota */
    if (!v2) {
        if (snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) >= (int)sizeof path) return 0;
        if (!(text = dsv4_read_file(path, 256, NULL, NULL))) return 0;
        ok = sscanf(text, "%lld", &period) == 1;
        free(text);
        if (!ok) return 0;
    }
    if (period <= 0) return 0;
    long long cores = (quota + period - 1) / period;
    return cores > 4096 ? 4096 : (int)cores;
}

/* The tightest quota from dir (a path under the mount) up to the mount itself. */
static int walk_up(const char *root, const char *rel, int v2) {
    char dir[4200];
    int best = 0;
    snprintf(dir, sizeof dir, "%s%s", root, rel);
    for (;;) {
        int q = quota_file(dir, v2);
        if (q > 0 && (best == 0 || q < best)) best = q;
        size_t rl = strlen(root);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= rl || !slash || slash < dir + rl) break;
        *slash = 0;
    }
    return best;
}

int dsv4_cgroup_quota_cores(const char *cgroup_root, const char *self_cgroup) {
    int best = 0;
    for (const char *line = self_cgroup; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = 0;
            /* "0::/path" is cgroup v2; "4:cpu,cpuacct:/path" a v1 hierarchy with the cpu controller */
            char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c2) {
                *c2 = 0;
                const char *ctrls = c1 + 1, *rel = c2 + 1;
                char root[4200];
                int q = 0;
                if (!*ctrls) {
                    q = walk_up(cgroup_root, strcmp(rel, "/") ? rel : "", 1);
                    if (!q) { /* a hybrid mount keeps v2 under unified/ */
                        snprintf(root, sizeof root, "%s/unified", cgroup_root);
                        q = walk_up(root, strcmp(rel, "/") ? rel : "", 1);
                    }
                } else {
                    char list[256];
                    snprintf(list, sizeof list, ",%s,", ctrls);
                    if (strstr(list, ",cpu,")) {
                        /* mounted as cpu/ or as the joint cpu,cpuacct/ */
                        snprintf(root, sizeof root, "%s/cpu", cgroup_root);
                        q = walk_up(root, strcmp(rel, "/") ? rel : "", 0);
                        if (!q) {
                            snprintf(root, sizeof root, "%s/cpu,cpuacct", cgroup_root);
                            q = walk_up(root, strcmp(rel, "/") ? rel : "", 0);
                        }
                    }
                }
                if (q > 0 && (best == 0 || q < best)) best = q;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return best;
}

int dsv4_available_cores(void) {
    int n = dsv4_affinity_cores();
    char *self = dsv4_read_file("/proc/self/cgroup", 1 << 16, NULL, NULL);
    int q = dsv4_cgroup_quota_cores("/sys/fs/cgroup", self);
    free(self);
    return q > 0 && q < n ? q : n;
}
