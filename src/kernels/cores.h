/* cores.h — how many cores this process may use: the default worker-thread count.
 *
 * Online CPUs overstate it wherever the process is confined: `taskset`, a container's
 * cpuset (both show in the affinity mask) or a cgroup CPU quota (`docker --cpus=2`, a
 * Kubernetes limit: cpu.max under cgroup v2, cpu.cfs_quota_us under v1). Threads beyond
 * that share cores and spin against each other in every parallel section. */
#ifndef DSV4_KERNELS_CORES_H
#define DSV4_KERNELS_CORES_H

/* CPUs in the calling thread's affinity mask (sched_getaffinity); online CPUs if unknown. */
int dsv4_affinity_cores(void);

/* The tightest CPU quota along the process's cgroup path, in cores rounded up; 0 when
 * there is none. cgroup_root is the cgroup mount ("/sys/fs/cgroup"), self_cgroup the
 * text of /proc/self/cgroup (parameters so a test can give a fake tree). */
int dsv4_cgroup_quota_cores(const char *cgroup_root, const char *self_cgroup);

#endif
