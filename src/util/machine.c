/* machine.c — this machine's memory (see machine.h and dsv4_machine_ram_bytes). */
#include "util/machine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"
#include "util/file.h"

uint64_t dsv4_meminfo_field(const char *text, const char *key) {
    const char *p = text && key ? strstr(text, key) : NULL;
    /* the key at the start of a line, not inside another one ("Active(file):" holds "file):") */
    while (p && p != text && p[-1] != '\n') p = strstr(p + 1, key);
    unsigned long long kb = 0;
    if (!p || sscanf(p + strlen(key), "%llu", &kb) != 1) return 0;
    return (uint64_t)kb * 1024;
}

uint64_t dsv4_meminfo_total(const char *text) { return dsv4_meminfo_field(text, "MemTotal:"); }

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

/* A "Key: N kB" field of a /proc file, in bytes; 0 if absent or unreadable. */
static uint64_t proc_field(const char *path, const char *key) {
    char *text = dsv4_read_file(path, 1 << 16, NULL, NULL);
    const uint64_t v = dsv4_meminfo_field(text, key);
    free(text);
    return v;
}

/* A container's memory limit and usage, as the container sees its own cgroup: v2, then v1. */
static const char *const cg_limit[2] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
static const char *const cg_usage[2] = {"/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes"};

uint64_t dsv4_machine_ram_bytes(void) {
    uint64_t ram = proc_field("/proc/meminfo", "MemTotal:");
    for (int i = 0; i < 2; i++) {
        const uint64_t lim = limit_file(cg_limit[i]);
        if (lim && (!ram || lim < ram)) ram = lim;
    }
    return ram;
}

uint64_t dsv4_machine_available_bytes(void) {
    uint64_t avail = proc_field("/proc/meminfo", "MemAvailable:");
    /* a container's room: its limit less what it uses (the first cgroup version that has one) */
    for (int i = 0; i < 2; i++) {
        const uint64_t lim = limit_file(cg_limit[i]);
        if (!lim) continue;
        const uint64_t used = limit_file(cg_usage[i]); /* a plain number: the parse serves */
        const uint64_t room = lim > used ? lim - used : 0;
        if (!avail || room < avail) avail = room;
        break;
    }
    return avail;
}

uint64_t dsv4_process_locked_bytes(void) { return proc_field("/proc/self/status", "VmLck:"); }
