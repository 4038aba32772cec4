/* file.c — whole-file reads (see file.h). Reads in growing chunks rather than trusting
 * a size from fseek, so pipes and /proc files work and the limit is enforced on what is
 * actually read. */
#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"

/* Reads the open stream f to its end (see dsv4_read_file); closes f. */
static char *read_stream(FILE *f, const char *path, size_t limit, size_t *len, dsv4_err *err) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int rc = buf ? DSV4_OK : DSV4_ERR_NOMEM;
    while (!rc) {
        if (n == cap) {
            if (limit && cap >= limit) {
                rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: larger than %zu bytes", path, limit);
                break;
            }
            char *grown = realloc(buf, cap * 2 + 1);
            if (!grown) { rc = DSV4_ERR_NOMEM; break; }
            buf = grown;
            cap *= 2;
        }
        errno = 0;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = dsv4_fail(err, DSV4_ERR_IO, "%s: cannot read: %s", path,
                               errno ? strerror(errno) : "read error");
            break;
        }
    }
    fclose(f);
    if (rc == DSV4_ERR_NOMEM) dsv4_fail(err, rc, "%s: out of memory", path);
    if (!rc && limit && n > limit)
        rc = dsv4_fail(err, DSV4_ERR_FORMAT, "%s: larger than %zu bytes", path, limit);
    if (rc) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *dsv4_read_file(const char *path, size_t limit, size_t *len, dsv4_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dsv4_fail(err, DSV4_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    return read_stream(f, path, limit, len, err);
}

const char *dsv4_file_kind(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" : "not a regular file";
}

int dsv4_open_regular(const char *path, struct stat *st, dsv4_err *err) {
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -dsv4_fail(err, DSV4_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    if (fstat(fd, st) != 0)
        rc = dsv4_fail(err, DSV4_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode))
        rc = dsv4_fail(err, DSV4_ERR_IO, "%s: is %s, not a regular file", path, dsv4_file_kind(st->st_mode));
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = dsv4_fail(err, DSV4_ERR_IO, "%s: cannot clear O_NONBLOCK: %s", path, strerror(errno));
    if (rc) {
        close(fd);
        return -rc;
    }
    return fd;
}

char *dsv4_read_regular_file(const char *path, size_t limit, size_t *len, dsv4_err *err) {
    struct stat st;
    int fd = dsv4_open_regular(path, &st, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        dsv4_fail(err, DSV4_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    return read_stream(f, path, limit, len, err);
}
