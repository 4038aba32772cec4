/* model_tmp.h — temporary model directories for the model tests. */
#ifndef DSV4_TESTS_MODEL_TMP_H
#define DSV4_TESTS_MODEL_TMP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* mkdtemp under $TMPDIR (or /tmp); buf receives the path. */
static inline const char *tmp_dir(char *buf, size_t n, const char *tag) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/dsv4-%s-XXXXXX", t && *t ? t : "/tmp", tag);
    return mkdtemp(buf);
}

/* Removes the files directly inside dir, then dir. */
static inline void tmp_rm(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Whole file into a malloc'd buffer (NUL-terminated); NULL on failure. */
static inline char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

static inline int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

#endif
