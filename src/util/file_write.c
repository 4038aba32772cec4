/* file_write.c — checked and atomic output files (see file_write.h). */
#include "util/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/err.h"

static int io_fail(dsv4_err *err, const char *path, const char *step) {
    return dsv4_fail(err, DSV4_ERR_IO, "%s: cannot %s: %s", path, step, strerror(errno));
}

/* Writes, fsyncs and closes the open descriptor fd (closed on every path). */
static int write_fd(int fd, const char *path, const void *data, size_t n, dsv4_err *err) {
    const char *p = data;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            int rc = io_fail(err, path, "write");
            close(fd);
            return rc;
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int rc = io_fail(err, path, "fsync");
        close(fd);
        return rc;
    }
    if (close(fd) != 0) return io_fail(err, path, "close");
    return 0;
}

int dsv4_write_file(const char *path, const void *data, size_t n, dsv4_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return io_fail(err, path, "create");
    return write_fd(fd, path, data, n, err);
}

int dsv4_sync_parent_dir(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int dsv4_write_file_atomic(const char *path, const void *data, size_t n, dsv4_err *err) {
    /* A fresh name next to path, created exclusively with the mode a plain create gives
     * (mkstemp's 0600 would make a saved conversation or config unreadable to others, and
     * changing the umask is process-wide state). */
    char tmp[4200];
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned long salt = (unsigned long)ts.tv_nsec ^ ((unsigned long)(uintptr_t)&ts >> 4) ^ (unsigned long)attempt;
        if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%lx", path, (long)getpid(), salt) >= (int)sizeof tmp)
            return dsv4_fail(err, DSV4_ERR_IO, "%s: %s", path, strerror(ENAMETOOLONG));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) return io_fail(err, path, "create a temporary file next to it");
    int rc = write_fd(fd, tmp, data, n, err);
    if (!rc && rename(tmp, path) != 0) rc = io_fail(err, path, "rename the finished file into place");
    if (rc) {
        unlink(tmp);
        return rc;
    }
    if (dsv4_sync_parent_dir(path) != 0) return io_fail(err, path, "fsync its directory");
    return 0;
}
