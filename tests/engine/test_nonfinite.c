/* test_nonfinite.c — non-finite values and partial writes (issue 14 items 3 and 5):
 *  - a NaN in head.weight: `dsv4 run` reports the non-finite logits and writes no dump;
 *    `dsv4 info --check` finds it (exit 1), and passes on the clean model;
 *  - a NaN in a layer's wq_a: dsv4_forward fails with DSV4_ERR_NUMERIC naming the
 *    sequence and position, and the sequence is broken (must be freed);
 *  - dumps are swapped in whole: a re-run replaces an earlier dump including its stale
 *    files; a run that cannot write (file size limit, EFBIG like a full disk) exits 1 with
 *    the reason, leaves the earlier dump byte-identical and no temporary directory.
 * Uses the tiny golden model and the dsv4 program (DSV4_BIN). */
#include <dirent.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv4.h"
#include "model/model_tmp.h"
#include "model/safetensors.h"
#include "test.h"

static char g_bin[1024], g_model[1024];

/* Runs a shell command with stderr into log; returns the exit status. */
static int sh(const char *cmd, const char *log) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>'%s' >/dev/null", cmd, log);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int log_has(const char *log, const char *want) {
    char *t = read_all(log, NULL);
    int ok = t && strstr(t, want);
    if (!ok) fprintf(stderr, "%s lacks '%s': %s\n", log, want, t ? t : "(none)");
    free(t);
    return ok;
}

/* A copy of the tiny model in dir with element `at` of tensor `name` set to NaN. */
static void nan_copy(const char *dir, const char *name, int64_t at) {
    char cmd[4096], path[2048];
    snprintf(cmd, sizeof cmd, "cp '%s/config.json' '%s/model.safetensors' '%s'/", g_model, g_model, dir);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    dsv4_st_set *st = NULL;
    dsv4_err err = {0};
    CHECK_MSG(dsv4_st_open_file(path, &st, &err) == 0, "%s", err.msg);
    if (!st) return;
    const dsv4_st_tensor *t = dsv4_st_find(st, name);
    CHECK(t && (t->dtype == DSV4_ST_BF16 || t->dtype == DSV4_ST_F32));
    if (!t) { dsv4_st_close(st); return; }
    const int es = dsv4_st_dtype_size(t->dtype);
    const long off = (long)(t->data - dsv4_st_file_image(st, 0)) + (long)at * es;
    const uint8_t bf16_nan[2] = {0xc0, 0x7f}, f32_nan[4] = {0, 0, 0xc0, 0x7f};
    dsv4_st_close(st);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, es == 2 ? bf16_nan : f32_nan, (size_t)es, off) == es);
    close(fd);
}

static void test_head_nan(const char *tmp) {
    char dir[1100], dump[1100], log[1100], cmd[4096];
    snprintf(dir, sizeof dir, "%s/headnan", tmp);
    snprintf(dump, sizeof dump, "%s/dump_nan", tmp);
    snprintf(log, sizeof log, "%s/log.txt", tmp);
    CHECK(mkdir(dir, 0700) == 0);
    nan_copy(dir, "head.weight", 5 * 128 + 3); /* vocabulary row 5 */
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 1,2,3 --dump '%s'", g_bin, dir, dump);
    CHECK(sh(cmd, log) == 1);
    CHECK(log_has(log, "prefill_logits of") && log_has(log, "is not finite (nan at row 0, column 5)"));
    CHECK(access(dump, F_OK) != 0);
    snprintf(cmd, sizeof cmd, "'%s' info --model '%s' --check", g_bin, dir);
    CHECK(sh(cmd, log) == 1);
    CHECK(log_has(log, "check failed: 1 of") && log_has(log, "head.weight: 1 non-finite, first nan at [5, 3]"));
    snprintf(cmd, sizeof cmd, "'%s' info --model '%s' --check", g_bin, g_model);
    CHECK(sh(cmd, log) == 0);
    CHECK(log_has(log, "check passed: all"));
    tmp_rm(dir);
}

static void test_engine_nan(const char *tmp) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/wqnan", tmp);
    CHECK(mkdir(dir, 0700) == 0);
    nan_copy(dir, "layers.1.attn.wq_a.weight", 0);
    dsv4_model *m = NULL;
    dsv4_engine *e = NULL;
    dsv4_err err = {0};
    dsv4_engine_opts o = {.max_context = 64, .max_seqs = 1, .threads = 1};
    CHECK_MSG(dsv4_model_open(dir, &m, &err) == 0 && dsv4_engine_create(m, &o, &e, &err) == 0, "%s", err.msg);
    if (e) {
        int seq;
        CHECK(dsv4_seq_create(e, &seq, &err) == 0);
        const dsv4_model_info info = dsv4_model_get_info(m);
        float *hid = calloc((size_t)info.hidden_size, sizeof(float));
        int32_t tok[3] = {1, 2, 3};
        dsv4_span sp = {.seq = seq, .start = 0, .n_tokens = 3, .tokens = tok, .n_hidden = 1};
        int rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
        CHECK_MSG(rc == DSV4_ERR_NUMERIC && strstr(err.msg, "hidden output of sequence 0 at position 2"),
                  "rc %d: %s", rc, err.msg);
        sp.start = 0;
        rc = dsv4_forward(e, &sp, 1, hid, NULL, &err);
        CHECK_MSG(rc == DSV4_ERR_STATE && strstr(err.msg, "free it"), "after: rc %d: %s", rc, err.msg);
        free(hid);
    }
    dsv4_engine_free(e);
    dsv4_model_close(m);
    tmp_rm(dir);
}

static int count_tmp_dirs(const char *parent) {
    DIR *d = opendir(parent);
    int n = 0;
    struct dirent *ent;
    while (d && (ent = readdir(d))) n += strstr(ent->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

static void test_dumps(const char *tmp) {
    char dump[1100], log[1100], cmd[4096], p[1200];
    snprintf(dump, sizeof dump, "%s/dump", tmp);
    snprintf(log, sizeof log, "%s/log.txt", tmp);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 1,2,3 --dump '%s'", g_bin, g_model, dump);
    CHECK(sh(cmd, log) == 0);
    snprintf(p, sizeof p, "%s/stale.bin", dump);
    CHECK(write_all(p, "old", 3) == 0);
    /* a re-run replaces the whole dump: the stale file is gone */
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 1,2,3,4 --dump '%s'", g_bin, g_model, dump);
    CHECK(sh(cmd, log) == 0);
    CHECK(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/manifest.json", dump);
    size_t n_before = 0;
    char *before = read_all(p, &n_before);
    CHECK(before && strstr(before, "\"prefill_len\":\t4"));
    /* no room (4 KiB file limit; the logits need 8 KiB): the earlier dump stays intact */
    snprintf(cmd, sizeof cmd, "ulimit -f 8 && '%s' run --model '%s' --tokens 7,8,9,10 --dump '%s'", g_bin, g_model, dump);
    CHECK(sh(cmd, log) == 1);
    CHECK(log_has(log, "cannot write: File too large") && log_has(log, "an earlier one there is unchanged"));
    size_t n_after = 0;
    char *after = read_all(p, &n_after);
    CHECK(after && n_after == n_before && !memcmp(before, after, n_before));
    CHECK(count_tmp_dirs(tmp) == 0);
    free(before);
    free(after);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dump);
    CHECK(system(cmd) == 0);
}

int main(void) {
    const char *bin = getenv("DSV4_BIN");
    if (!bin) { fprintf(stderr, "DSV4_BIN not set\n"); return 1; }
    snprintf(g_bin, sizeof g_bin, "%s", bin);
    test_shared("golden/tiny_s0/model", g_model, sizeof g_model);
    char tmp[256];
    CHECK(tmp_dir(tmp, sizeof tmp, "nonfinite") != NULL);
    test_head_nan(tmp);
    test_engine_nan(tmp);
    test_dumps(tmp);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return test_report();
}
