/* fuzz_replay.c — a main for a libFuzzer target in the ordinary build (no clang): runs
 * LLVMFuzzerTestOneInput on every file of the directories (or files) given, in name order.
 * The target aborts on what it finds; this fails when no input was read at all (a missing
 * corpus must not pass). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *more = realloc(buf, cap *= 2);
            if (!more) free(buf);
            buf = more;
        }
    }
    fclose(f);
    if (!buf) return 0;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) || !S_ISDIR(sb.st_mode)) {
            ran += run_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        char **names = NULL;
        size_t n = 0, cap = 0;
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            if (n == cap) {
                char **more = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
                if (!more) break;
                names = more;
            }
            const size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(len))) break;
            snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
        }
        if (d) closedir(d);
        if (n) qsort(names, n, sizeof *names, by_name);
        for (size_t k = 0; k < n; k++) {
            ran += run_file(names[k]);
            free(names[k]);
        }
        free(names);
    }
    printf("fuzz_replay: %d inputs\n", ran);
    return ran > 0 ? 0 : 1;
}
