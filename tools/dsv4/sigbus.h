/* sigbus.h — a clear message instead of a silent death when a memory-mapped checkpoint
 * changes underneath the process.
 *
 * Weights are mmap'd (never copied); if a shard is truncated or rewritten in place while
 * dsv4 runs, touching a page past the new end raises SIGBUS, which would kill the process
 * with no message. The handler finds the mapping that holds the faulting address in
 * /proc/self/maps (open/read/write only: async-signal-safe), prints
 *   dsv4: SIGBUS reading <file> at offset N: the file changed (truncated or rewritten)
 *   while it was mapped; do not modify a checkpoint while dsv4 uses it
 * and exits with status 1. */
#ifndef DSV4_TOOLS_SIGBUS_H
#define DSV4_TOOLS_SIGBUS_H

/* Installs the handler (sigaction on SIGBUS, on its own signal stack). 0 or -1. */
int cli_install_sigbus(void);

#endif
