/* bench_mpi.h — the start shared by the MPI benchmarks (bench_cp, bench_ep): options as
 * `--name N` pairs, and the MPI start with the model directory as first argument. */
#ifndef DSV4_BENCH_MPI_H
#define DSV4_BENCH_MPI_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4.h"

/* The integer after `name`, or def. */
static inline int arg_int(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

/* MPI start: *d set and 0 returned to go on; otherwise the exit status, after the message
 * (the usage line from rank 0 when argv[1] is not a model directory). */
static inline int bench_mpi_start(int *argc, char ***argv, const char *usage, dsv4_dist **d) {
    dsv4_err err = {0};
    if (dsv4_dist_init(argc, argv, d, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (*argc < 2 || (*argv)[1][0] == '-') {
        if (dsv4_dist_rank(*d) == 0) fprintf(stderr, "usage: %s\n", usage);
        dsv4_dist_finalize(*d);
        return 2;
    }
    return 0;
}

#endif
