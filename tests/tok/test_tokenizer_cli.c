/* test_tokenizer_cli.c — `dsv4 tokenize` / `dsv4 detokenize` as a user runs them.
 *
 * Texts and expected ids come from the corpus fixture (see gen_expected.mjs). Checks the
 * output format (ids on one line, space-separated), the round trip through both commands,
 * the accepted id separators, and the exit status and message for bad input. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "util/file.h"

static char dir[256], tok_path[1024];
static const char *bin;

static void spit(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Runs `dsv4 <cmd> <args>` with stdin from `input`; returns the exit status, with stdout
 * and stderr in out/errs (malloc'ed). */
static int run(const char *cmd, const char *args, const char *input, size_t in_len, char **out, size_t *out_len,
               char **errs) {
    char in_p[512], out_p[512], err_p[512], line[4096];
    snprintf(in_p, sizeof in_p, "%s/in", dir);
    snprintf(out_p, sizeof out_p, "%s/out", dir);
    snprintf(err_p, sizeof err_p, "%s/err", dir);
    spit(in_p, input, in_len);
    snprintf(line, sizeof line, "'%s' %s %s < '%s' > '%s' 2> '%s'", bin, cmd, args, in_p, out_p, err_p);
    int st = system(line);
    *out = dsv4_read_file(out_p, 0, out_len, NULL);
    *errs = dsv4_read_file(err_p, 0, NULL, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *fixture(const char *name) {
    const char *src = getenv("DSV4_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/tok/%s", src ? src : ".", name);
    char *text = dsv4_read_file(path, 0, NULL, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* Expected stdout of tokenize: the ids space-separated, then a newline. */
static char *ids_line(const cJSON *ids, const char *sep) {
    size_t cap = 16 + 12 * (size_t)cJSON_GetArraySize(ids), k = 0;
    char *s = malloc(cap);
    const cJSON *e;
    s[0] = 0;
    cJSON_ArrayForEach(e, ids) k += (size_t)snprintf(s + k, cap - k, "%s%d", k ? sep : "", e->valueint);
    snprintf(s + k, cap - k, "\n");
    return s;
}

static void test_roundtrips(void) {
    cJSON *corpus = fixture("corpus.json"), *expected = fixture("expected_ids.json");
    CHECK(corpus && expected);
    if (!corpus || !expected) return;
    int n = cJSON_GetArraySize(corpus), checked = 0;
    char args[1200];
    snprintf(args, sizeof args, "--tokenizer '%s'", tok_path);
    // Every process loads the 128k vocabulary, so two entries only: the first, and the
    // last, which is all the others joined (CRLF, special tokens, emoji, CJK, ...).
    for (int c = 0; c < n; c++) {
        const char *text = cJSON_GetArrayItem(corpus, c)->valuestring;
        if (!(c == 0 || c == n - 1)) continue;
        char *out, *errs;
        size_t out_len, in_len = strlen(text);
        int st = run("tokenize", args, text, in_len, &out, &out_len, &errs);
        char *want = ids_line(cJSON_GetArrayItem(expected, c), " ");
        CHECK_MSG(st == 0 && out && strcmp(out, want) == 0, "tokenize corpus[%d]: status %d, stderr '%s'", c, st,
                  errs ? errs : "");
        free(want);
        // Back again, with commas and newlines as separators this time.
        want = ids_line(cJSON_GetArrayItem(expected, c), ",\n");
        char *back, *errs2;
        size_t back_len;
        st = run("detokenize", args, want, strlen(want), &back, &back_len, &errs2);
        CHECK_MSG(st == 0 && back && back_len == in_len && memcmp(back, text, in_len) == 0,
                  "detokenize corpus[%d]: status %d, stderr '%s'", c, st, errs2 ? errs2 : "");
        free(want), free(out), free(errs), free(back), free(errs2);
        checked++;
    }
    printf("cli round trips: %d texts\n", checked);
    CHECK(checked == 2);
    cJSON_Delete(corpus);
    cJSON_Delete(expected);
}

static void expect_status(const char *cmd, const char *args, const char *input, int status, const char *msg) {
    char *out, *errs;
    size_t n;
    int st = run(cmd, args, input, strlen(input), &out, &n, &errs);
    CHECK_MSG(st == status && errs && strstr(errs, msg), "%s %s < '%s': status %d (want %d), stderr '%s' (want '%s')",
              cmd, args, input, st, status, errs ? errs : "", msg);
    free(out), free(errs);
}

static void test_errors(void) {
    char args[1200], dir_args[1200];
    snprintf(args, sizeof args, "--tokenizer '%s'", tok_path);
    expect_status("detokenize", args, "19923 abc 14", 1, "'abc' (item 1) is not a token id");
    expect_status("detokenize", args, "19923 999999", 1, "id 999999");
    expect_status("tokenize", args, "bad \xff byte", 1, "not valid UTF-8 at byte 4");
    expect_status("tokenize", "", "hi", 2, "--tokenizer");
    expect_status("detokenize", "", "1", 2, "--tokenizer");
    expect_status("tokenize", "--tokenizer", "hi", 2, "--tokenizer");
    expect_status("tokenize", "--frobnicate", "hi", 2, "--frobnicate");
    expect_status("tokenize", "--tokenizer /nonexistent/tokenizer.json", "hi", 1, "/nonexistent/tokenizer.json");

    // A directory holding tokenizer.json works; empty input gives an empty line.
    char *out, *errs;
    size_t n;
    strcpy(dir_args, "--tokenizer ");
    strncat(dir_args, tok_path, sizeof dir_args - 20);
    char *slash = strrchr(dir_args, '/');
    if (slash) *slash = 0;
    int st = run("tokenize", dir_args, "", 0, &out, &n, &errs);
    CHECK_MSG(st == 0 && out && strcmp(out, "\n") == 0, "empty input: status %d, '%s'", st, errs ? errs : "");
    free(out), free(errs);
    // Literal special tokens are tokens unless --no-special.
    st = run("tokenize", args, "<｜end▁of▁sentence｜>", strlen("<｜end▁of▁sentence｜>"), &out, &n, &errs);
    CHECK(st == 0 && out && strcmp(out, "1\n") == 0);
    free(out), free(errs);
    snprintf(dir_args, sizeof dir_args, "--tokenizer '%s' --no-special", tok_path);
    st = run("tokenize", dir_args, "<｜end▁of▁sentence｜>", strlen("<｜end▁of▁sentence｜>"), &out, &n, &errs);
    CHECK(st == 0 && out && strcmp(out, "1\n") != 0 && strchr(out, ' '));
    free(out), free(errs);
    st = run("detokenize", args, "[0, 19923, 1]", 13, &out, &n, &errs);
    CHECK(st == 0 && out && strcmp(out, "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>") == 0);
    free(out), free(errs);
    snprintf(dir_args, sizeof dir_args, "--tokenizer '%s' --skip-special", tok_path);
    st = run("detokenize", dir_args, "0 19923 1", 9, &out, &n, &errs);
    CHECK(st == 0 && out && strcmp(out, "Hello") == 0);
    free(out), free(errs);
}

int main(void) {
    bin = getenv("DSV4_BIN");
    if (!bin) { fprintf(stderr, "DSV4_BIN is not set\n"); return 1; }
    test_shared("tokenizer/tokenizer.json", tok_path, sizeof tok_path);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dsv4-tokcli-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_roundtrips();
    test_errors();
    char p[600];
    const char *names[] = {"in", "out", "err"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return test_report();
}
