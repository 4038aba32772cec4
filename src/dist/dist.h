/* dist.h — the engine's process group (internal view of dsv4_dist). All collectives of
 * context and expert parallelism go through the communicator kept here; nothing is global. */
#ifndef DSV4_DIST_DIST_H
#define DSV4_DIST_DIST_H

#include "dsv4.h"

#ifdef DSV4_HAVE_MPI
#include <mpi.h>
#endif

struct dsv4_dist {
    int rank, size;
    int owns_mpi;        /* dsv4_dist_init called MPI_Init */
#ifdef DSV4_HAVE_MPI
    MPI_Comm comm;       /* a duplicate of MPI_COMM_WORLD: library traffic stays apart */
#endif
};

#endif
