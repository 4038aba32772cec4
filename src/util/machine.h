/* machine.h — this machine's memory, for the fit check (dsv4_mem_fit_*). */
#ifndef DSV4_UTIL_MACHINE_H
#define DSV4_UTIL_MACHINE_H

#include <stdint.h>

/* MemTotal of meminfo_text ("/proc/meminfo" contents), in bytes; 0 if absent. */
uint64_t dsv4_meminfo_total(const char *meminfo_text);

/* A cgroup memory limit in bytes from the text of memory.max (v2: "max" = none) or
 * memory.limit_in_bytes (v1: a huge value = none); 0 = no limit. */
uint64_t dsv4_cgroup_mem_limit(const char *text);

#endif
