/* dist.c — creating and ending the process group (see dsv4.h, dist/dist.h). */
#include "dist/dist.h"

#include <stdlib.h>

#include "util/err.h"

int dsv4_dist_available(void) {
#ifdef DSV4_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int dsv4_dist_init(int *argc, char ***argv, dsv4_dist **out, dsv4_err *err) {
    dsv4_dist *d = calloc(1, sizeof *d);
    if (!d) return dsv4_fail(err, DSV4_ERR_NOMEM, "dist: out of memory");
    d->rank = 0;
    d->size = 1;
    d->timeout_s = DSV4_DIST_TIMEOUT_DEFAULT;
#ifdef DSV4_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* serialized: a server makes every collective from its scheduler thread */
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            free(d);
            return dsv4_fail(err, DSV4_ERR_IO, "MPI_Init_thread failed");
        }
        d->owns_mpi = 1;
    }
    /* errors come back as codes so a failing rank can report and abort the job */
    MPI_Comm_dup(MPI_COMM_WORLD, &d->comm);
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    d->agreed = malloc(((size_t)d->size + 1) * DSV4_DIST_AGREE_ROW);
    if (!d->agreed) {
        MPI_Comm_free(&d->comm);
        if (d->owns_mpi) MPI_Finalize();
        free(d);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "dist: out of memory");
    }
#else
    (void)argc; (void)argv;
#endif
    *out = d;
    return DSV4_OK;
}

void dsv4_dist_finalize(dsv4_dist *d) {
    if (!d) return;
#ifdef DSV4_HAVE_MPI
    MPI_Comm_free(&d->comm);
    if (d->owns_mpi) MPI_Finalize();
    free(d->agreed);
#endif
    free(d);
}

int dsv4_dist_rank(const dsv4_dist *d) { return d ? d->rank : 0; }
int dsv4_dist_size(const dsv4_dist *d) { return d ? d->size : 1; }
int dsv4_dist_last_refusal(const dsv4_dist *d) { return d ? d->last_refusal : DSV4_DIST_PASSED; }

void dsv4_dist_abort(dsv4_dist *d, int status) {
#ifdef DSV4_HAVE_MPI
    if (d && d->size > 1) MPI_Abort(d->comm, status ? status : 1);
#else
    (void)d; (void)status;
#endif
}
