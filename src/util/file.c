/* file.c — whole-file reads (see file.h). Reads in growing chunks rather than trusting
 * a size from fseek, so pipes and /proc files work and the limit is enforced on what is
 * actually read. */
#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

char *dsv4_read_file(const char *path, size_t limit, size_t *len, dsv4_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dsv4_fail(err, DSV4_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
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
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) rc = dsv4_fail(err, DSV4_ERR_IO, "%s: read error", path);
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
