/* numa.h — NUMA placement (issue 16 item 5): the memory nodes this process may allocate
 * on, and interleaving pages over them. With libnuma at build time (DSV4_HAVE_NUMA); a
 * build without it sees one node and interleaves nothing. */
#ifndef DSV4_UTIL_NUMA_H
#define DSV4_UTIL_NUMA_H

#include <stddef.h>

#include "dsv4.h"

/* 1 when this build has libnuma and the kernel NUMA support (a one-node machine included). */
int dsv4_numa_supported(void);

/* dsv4_numa_nodes (dsv4.h): the memory nodes this process may allocate on (cpuset, numactl
 * --membind), >= 1; 1 when the kernel or the build has no NUMA support. */

/* Pages of [p, p + n) (widened to whole pages) interleaved over those nodes: the range's
 * policy (mbind MPOL_INTERLEAVE) for pages allocated through it later, and the pages
 * already mapped only by this process moved now (MPOL_MF_MOVE). Fails with a message
 * when the kernel refuses; without NUMA support, DSV4_ERR_UNSUPPORTED. */
int dsv4_numa_interleave_range(const void *p, size_t n, dsv4_err *err);

/* The calling thread's own allocations (and the threads it starts from now on, which
 * inherit the policy) interleaved over the nodes: what a page of a mapped file gets when
 * that thread faults it in, since the page cache follows the faulting thread's policy,
 * not the mapping's. *saved receives the previous policy for dsv4_numa_restore_thread;
 * saved must hold DSV4_NUMA_SAVED_BYTES. */
#define DSV4_NUMA_SAVED_BYTES 136
int dsv4_numa_interleave_thread(void *saved, dsv4_err *err);
void dsv4_numa_restore_thread(const void *saved);

#endif
