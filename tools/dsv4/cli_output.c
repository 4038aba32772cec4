/* cli_output.c — checked, atomic output files and dump directories (see cli_output.h). */
#include "cli_output.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "dsv4_internal.h"

static int fail(char *why, size_t n, const char *path, const char *what) {
    snprintf(why, n, "%s: %s%s", path, what, strerror(errno));
    return -1;
}

int cli_write_whole(const char *path, const void *data, size_t n, char *why, size_t why_n) {
    dsv4_err err = {0};
    if (!dsv4_write_file(path, data, n, &err)) return 0;
    snprintf(why, why_n, "%s", err.msg);
    return -1;
}

int cli_write_atomic(const char *path, const void *data, size_t n, char *why, size_t why_n) {
    dsv4_err err = {0};
    if (!dsv4_write_file_atomic(path, data, n, &err)) return 0;
    snprintf(why, why_n, "%s", err.msg);
    return -1;
}

int cli_dir_begin(const char *dir, char *tmp, size_t tmp_n, char *why, size_t why_n) {
    char parent[4096];
    if (snprintf(parent, sizeof parent, "%s", dir) >= (int)sizeof parent ||
        snprintf(tmp, tmp_n, "%s.tmp-XXXXXX", dir) >= (int)tmp_n) {
        errno = ENAMETOOLONG;
        return fail(why, why_n, dir, "");
    }
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        if (cli_mkdirs(parent)) return fail(why, why_n, parent, "cannot create directory: ");
    }
    if (!mkdtemp(tmp)) return fail(why, why_n, dir, "cannot create a temporary directory next to it: ");
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

void cli_dir_abandon(const char *tmp) { nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* fsync of a directory itself, so the renames in it are durable. */
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int cli_dir_commit(const char *tmp, const char *dir, char *why, size_t why_n) {
    if (sync_dir(tmp) != 0) return fail(why, why_n, tmp, "cannot fsync: ");
    struct stat st;
    if (lstat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return fail(why, why_n, dir, "exists and ");
        }
        /* one atomic step: readers see the old dump or the new one, never a mix */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) != 0)
            return fail(why, why_n, dir, "cannot swap in the new dump: ");
        cli_dir_abandon(tmp); /* now holds the old dump */
    } else if (rename(tmp, dir) != 0) {
        return fail(why, why_n, dir, "cannot rename the finished dump into place: ");
    }
    dsv4_sync_parent_dir(dir);
    return 0;
}
