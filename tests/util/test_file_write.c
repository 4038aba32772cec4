/* test_file_write.c — util/file_write: an output file is complete or absent, never a
 * partial file under its name; a failure names the file and the reason. A full disk is
 * simulated with RLIMIT_FSIZE (writes past it fail with EFBIG, SIGXFSZ ignored). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "util/file.h"
#include "util/file_write.h"

static char dir[] = "/tmp/dsv4_file_write_XXXXXX";

/* The file's bytes equal want[n]. */
static int holds(const char *path, const char *want, size_t n) {
    dsv4_err err = {0};
    size_t len = 0;
    char *got = dsv4_read_file(path, 0, &len, &err);
    int same = got && len == n && memcmp(got, want, n) == 0;
    free(got);
    return same;
}

/* Entries in dir (besides . and ..). */
static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char path[256], big[8192];
    memset(big, 'x', sizeof big);
    snprintf(path, sizeof path, "%s/out.json", dir);
    dsv4_err err = {0};

    /* written whole, with the mode a plain create gives (not mkstemp's 0600) */
    CHECK(dsv4_write_file_atomic(path, "first\n", 6, &err) == 0 && holds(path, "first\n", 6));
    mode_t mask = umask(022);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~022u));
    umask(mask);
    CHECK(dsv4_write_file_atomic(path, "second", 6, &err) == 0 && holds(path, "second", 6));
    CHECK(dsv4_write_file_atomic(path, "", 0, &err) == 0 && holds(path, "", 0));
    CHECK(dsv4_write_file_atomic(path, "third", 5, &err) == 0 && entries() == 1);

    /* a full disk: the old file stays whole, the temporary file is gone, the reason said */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, small = {1024, 1024};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK(dsv4_write_file_atomic(path, big, sizeof big, &err) == DSV4_ERR_IO);
    CHECK_ERR(err, DSV4_ERR_IO, "cannot write: File too large");
    CHECK(strstr(err.msg, dir) != NULL);
    CHECK(holds(path, "third", 5) && entries() == 1);
    /* the plain form reports it the same way */
    char plain[256];
    snprintf(plain, sizeof plain, "%s/plain.bin", dir);
    CHECK(dsv4_write_file(plain, big, sizeof big, &err) == DSV4_ERR_IO);
    CHECK_ERR(err, DSV4_ERR_IO, "plain.bin: cannot write: File too large");
    setrlimit(RLIMIT_FSIZE, &old);
    unlink(plain);

    /* no directory to write into: named, with the reason */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.json", dir);
    CHECK(dsv4_write_file_atomic(missing, "x", 1, &err) == DSV4_ERR_IO);
    CHECK_ERR(err, DSV4_ERR_IO, "x.json: cannot create a temporary file next to it: No such file or directory");
    /* a directory in the way of the rename: the temporary file is removed */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0777) == 0);
    char inner[320];
    snprintf(inner, sizeof inner, "%s/keep", sub);
    CHECK(dsv4_write_file(inner, "k", 1, &err) == 0);
    CHECK(dsv4_write_file_atomic(sub, "x", 1, &err) == DSV4_ERR_IO);
    CHECK_ERR(err, DSV4_ERR_IO, "cannot rename the finished file into place");
    CHECK(entries() == 2 && holds(inner, "k", 1));

    unlink(inner);
    rmdir(sub);
    unlink(path);
    rmdir(dir);
    return test_report();
}
