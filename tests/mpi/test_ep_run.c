/* test_ep_run.c — `dsv4 run --parallel ...` under mpirun against the single-process run.
 *
 *   test_ep_run MODEL GOLDEN_RUN|- NP MODE [dsv4 run flags...] [:: parallel-only flags...]
 *       Runs `dsv4 run` once in one process and once as `mpirun -np NP dsv4 run --parallel
 *       MODE`, and requires every file of the two dump trees (manifest.json and every .bin)
 *       to be byte-for-byte equal. With a golden run (../shared/golden/CASE/RUN) its tokens
 *       and prefill length are used and every golden f32 array must also agree within
 *       max|diff|/max|ref| <= 1e-4 with identical top-1 on logits rows.
 *
 *   test_ep_run --expect-fail TEXT NP [dsv4 run arguments...]
 *       The mpirun job must exit non-zero (not by the timeout: no rank may hang) and its
 *       output must contain TEXT.
 *
 * Environment: DSV4_BIN (the dsv4 program), DSV4_MPIRUN (mpirun and its flags, without
 * -np), DSV4_SHARED. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dump.h"
#include "test.h"
#include "util/file.h"

enum { HANG_SECONDS = 90 };

/* Every regular file under a (recursively) equals its counterpart under b; counts files. */
static int same_tree(const char *a, const char *b, int *files) {
    DIR *d = opendir(a);
    if (!d) { fprintf(stderr, "cannot open %s\n", a); return 0; }
    int ok = 1;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        char pa[4096], pb[4096];
        snprintf(pa, sizeof pa, "%s/%s", a, ent->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, ent->d_name);
        struct stat st;
        if (stat(pa, &st)) { ok = 0; continue; }
        if (S_ISDIR(st.st_mode)) { ok &= same_tree(pa, pb, files); continue; }
        size_t la = 0, lb = 0;
        char *ca = dsv4_read_file(pa, 0, &la, NULL), *cb = dsv4_read_file(pb, 0, &lb, NULL);
        const int same = ca && cb && la == lb && memcmp(ca, cb, la) == 0;
        CHECK_MSG(same, "%s and %s differ%s", pa, pb, cb ? "" : " (missing)");
        ok &= same;
        (*files)++;
        free(ca);
        free(cb);
    }
    closedir(d);
    return ok;
}

/* Number of entries in a directory tree (to see that the parallel run wrote nothing more). */
static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
        n += stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? count_files(p) : 1;
    }
    closedir(d);
    return n;
}

/* Runs a shell command; returns its exit status (-1 when it did not exit normally). */
static int run(const char *cmd) {
    printf("+ %s\n", cmd);
    fflush(stdout);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *env_or(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static int expect_fail(int argc, char **argv) {
    const char *text = argv[2], *np = argv[3];
    char dir[] = "/tmp/dsv4_ep_fail_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char cmd[16384];
    int n = snprintf(cmd, sizeof cmd, "timeout %d %s -np %s %s", HANG_SECONDS, env_or("DSV4_MPIRUN", "mpirun"),
                     np, env_or("DSV4_BIN", "dsv4"));
    for (int i = 4; i < argc; i++) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s", argv[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " > %s/out.txt 2>&1", dir);
    const int rc = run(cmd);
    char path[4200];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    size_t len = 0;
    char *out = dsv4_read_file(path, 0, &len, NULL);
    printf("exit %d; output:\n%s\n", rc, out ? out : "(none)");
    CHECK_MSG(rc != 0, "the job succeeded");
    CHECK_MSG(rc != 124, "the job hung (killed after %d s)", HANG_SECONDS);
    CHECK_MSG(out && strstr(out, text), "output lacks '%s'", text);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_report();
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "--expect-fail")) return expect_fail(argc, argv);
    if (argc < 5) {
        fprintf(stderr, "usage: test_ep_run MODEL GOLDEN_RUN|- NP MODE [flags...] [:: parallel flags...]\n"
                        "       test_ep_run --expect-fail TEXT NP [arguments...]\n");
        return 2;
    }
    const char *model = argv[1], *golden = argv[2], *np = argv[3], *mode = argv[4];
    dump_dir ref;
    const int have_golden = strcmp(golden, "-") != 0;
    if (have_golden && dump_load(golden, &ref)) return 1;

    char dir[] = "/tmp/dsv4_ep_run_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    size_t cap = 65536 + (have_golden ? (size_t)ref.n_tokens * 12 : 0);
    char *flags = malloc(cap), *cmd = malloc(cap + 8192);
    int n = snprintf(flags, cap, "--model %s --threads 1", model);
    if (have_golden) {
        /* the golden's 1e-4 is the reference math's: the F32 cache */
        n += snprintf(flags + n, cap - (size_t)n, " --kv-dtype f32 --prefill %d --tokens ", ref.prefill_len);
        for (int i = 0; i < ref.n_tokens; i++)
            n += snprintf(flags + n, cap - (size_t)n, "%s%d", i ? "," : "", ref.tokens[i]);
    }
    int i = 5;
    for (; i < argc && strcmp(argv[i], "::"); i++) n += snprintf(flags + n, cap - (size_t)n, " %s", argv[i]);
    char par[4096] = "";
    for (int np_ = 0, j = i + 1; j < argc; j++)
        np_ += snprintf(par + np_, sizeof par - (size_t)np_, " %s", argv[j]);
    const char *bin = env_or("DSV4_BIN", "dsv4");

    snprintf(cmd, cap + 8192, "%s run %s --dump %s/single", bin, flags, dir);
    int rc1 = run(cmd);
    CHECK_MSG(rc1 == 0, "single-process run exited with %d", rc1);
    snprintf(cmd, cap + 8192, "timeout %d %s -np %s %s run %s --parallel %s%s --dump %s/parallel",
             HANG_SECONDS, env_or("DSV4_MPIRUN", "mpirun"), np, bin, flags, mode, par, dir);
    int rc2 = run(cmd);
    CHECK_MSG(rc2 == 0, "mpirun run exited with %d", rc2);

    if (rc1 == 0 && rc2 == 0) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/single", dir);
        snprintf(b, sizeof b, "%s/parallel", dir);
        int files = 0;
        CHECK_MSG(same_tree(a, b, &files), "dumps differ");
        CHECK_MSG(count_files(b) == files, "the parallel dump has %d files, the single one %d", count_files(b), files);
        printf("%d files byte-for-byte equal (np %s, %s)\n", files, np, mode);
        CHECK(files >= 5);
        if (have_golden) {
            dump_dir eng;
            CHECK(dump_load(b, &eng) == 0);
            int compared = 0;
            for (int i = 0; i < ref.n_arrays; i++) {
                const dump_array *r = &ref.arrays[i];
                if (!r->data) continue;
                const dump_array *x = dump_find(&eng, r->name);
                if (!x) continue; /* per-layer arrays unless --dump-layers */
                dump_cmp c;
                CHECK_MSG(dump_compare(x, r, &c) == 0, "%s: shape mismatch", r->name);
                printf("%-28s max-rel %.3e", r->name, c.max_rel);
                if (strstr(r->name, "logits")) printf("  top-1 %lld/%lld", c.top1_same, c.rows);
                printf("\n");
                CHECK_MSG(c.max_rel <= 1e-4, "%s: max-rel %.3e > 1e-4", r->name, c.max_rel);
                if (strstr(r->name, "logits"))
                    CHECK_MSG(c.top1_same == c.rows, "%s: top-1 %lld/%lld", r->name, c.top1_same, c.rows);
                compared++;
            }
            CHECK(compared >= 4);
            dump_free(&eng);
        }
    }
    snprintf(cmd, cap + 8192, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(flags);
    free(cmd);
    if (have_golden) dump_free(&ref);
    return test_report();
}
