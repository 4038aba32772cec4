/* cli_util.c — helpers shared by the subcommands (see cli_util.h). */
#include "cli_util.h"

#include "dsv4.h"
#include "dsv4_text.h"
#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **out, char *errbuf, size_t errlen) {
    size_t cap = 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) { snprintf(errbuf, errlen, "out of memory"); return -1; }
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            snprintf(errbuf, errlen, "bad token id near '%.20s'", p);
            free(ids);
            return -1;
        }
        if (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            snprintf(errbuf, errlen, "bad token id near '%.20s'", p);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *grown = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!grown) { free(ids); snprintf(errbuf, errlen, "out of memory"); return -1; }
            ids = grown;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return (int)n;
}

int cli_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    return 0;
}

int cli_write_f32(const char *dir, const char *name, const float *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    /* the engine runs on little-endian hosts only, so floats are written as they are */
    size_t w = n ? fwrite(data, sizeof(float), n, f) : 0;
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

char *cli_read_file(const char *path, size_t *len) {
    return dsv4_read_file(path, 0, len, NULL);
}

char *cli_read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *grown = realloc(buf, (cap *= 2) + 1);
        if (!grown) { free(buf); buf = NULL; break; }
        buf = grown;
    }
    int bad = ferror(f);
    if (!buf || bad) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

struct dsv4_tokenizer *cli_load_tokenizer(const char *cmd, const char *path) {
    char file[4200];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        path = file;
    }
    dsv4_err err = {0};
    dsv4_tokenizer *tok;
    if (dsv4_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
        return NULL;
    }
    return tok;
}

int cli_tokenizer_args(const char *cmd, int argc, char **argv, const char *flag, int flag_bit,
                       void (*usage)(FILE *), const char **path, int *flags) {
    *path = NULL;
    *flags = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) *path = argv[++i];
        else if (!strncmp(argv[i], "--tokenizer=", 12)) *path = argv[i] + 12;
        else if (!strcmp(argv[i], flag)) *flags |= flag_bit;
        else {
            fprintf(stderr, "dsv4 %s: unknown or incomplete option '%s'\n", cmd, argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!*path) {
        fprintf(stderr, "dsv4 %s: --tokenizer FILE is required\n", cmd);
        usage(stderr);
        return 2;
    }
    return -1;
}
