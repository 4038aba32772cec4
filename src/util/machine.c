/* machine.c — this machine's memory (see machine.h and dsv4_machine_ram_bytes). */
#include "util/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "util/file.h"

uint64_t dsv4_meminfo_total(const char *text) {
    const char *p = text ? strstr(text, "MemTotal:") : NULL;
    unsigned long long kb = 0;
    if (!p || sscanf(p + 9, "%llu", &kb) != 1) return 0;
    return (uint64_t)kb * 1024;
}

uint64_t dsv4_cgroup_mem_limit(const char *text) {
    unsigned long long v = 0;
    if (!text || sscanf(text, "%llu", &v) != 1) return 0; /* "max" */
    /* cgroup v1 writes "no limit" as the largest page-aligned signed value */
    return v >= (1ULL << 60) ? 0 : (uint64_t)v;
}

/* The limit in one file, 0 if none or unreadable. */
static uint64_t limit_file(const char *path) {
    char *text = dsv4_read_file(path, 256, NULL, NULL);
    uint64_t v = dsv4_cgroup_mem_limit(text);
    free(text);
    return v;
}

uint64_t dsv4_machine_ram_bytes(void) {
    char *info = dsv4_read_file("/proc/meminfo", 1 << 16, NULL, NULL);
    uint64_t ram = dsv4_meminfo_total(info);
    free(info);
    /* a container's limit, as the container sees its own cgroup (v2, then v1) */
    const char *files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (int i = 0; i < 2; i++) {
        uint64_t lim = limit_file(files[i]);
        if (lim && (!ram || lim < ram)) ram = lim;
    }
    return ram;
}
