/* machine.h — this machine's memory, for the fit check (dsv4_mem_fit_*). */
#ifndef DSV4_UTIL_MACHINE_H
#define DSV4_UTIL_MACHINE_H

#include <stdint.h>

/* MemTotal of meminfo_text ("/proc/meminfo" contents), in bytes; 0 if absent. */
uint64_t dsv4_meminfo_total(const char *meminfo_text);

/* A "Key:   N kB" line of /proc/meminfo or /proc/self/status text (key with its colon, e.g.
 * "MemAvailable:"), in bytes; 0 if absent. */
uint64_t dsv4_meminfo_field(const char *text, const char *key);

/* Memory this process could take now without the system swapping or killing: MemAvailable
 * (free memory plus the page cache and slabs it may reclaim), and no more than a cgroup
 * limit's room (limit - usage); 0 if unknown. A moment's reading: other processes move it. */
uint64_t dsv4_machine_available_bytes(void);

/* Bytes this process has locked in memory (mlock: VmLck of /proc/self/status); 0 if none or
 * unknown. */
uint64_t dsv4_process_locked_bytes(void);

/* A cgroup memory limit in bytes from the text of memory.max (v2: "max" = none) or
 * memory.limit_in_bytes (v1: a huge value = none); 0 = no limit. */
uint64_t dsv4_cgroup_mem_limit(const char *text);

#endif
