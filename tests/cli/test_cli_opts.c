/* test_cli_opts.c — the option parser every subcommand uses: value forms, strict numbers,
 * errors (exit status 2), did-you-mean, and a help page that lists every option with the
 * default its destination holds. */
#include <stdint.h>
#include <unistd.h>

#include "cli_opts.h"
#include "test.h"

typedef struct vals {
    const char *model, *file;
    int n, flag, mode;
    int64_t big;
    uint64_t seed;
    float temp;
    const char *stops[2];
    int n_stops;
} vals;

static int parse_mode(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "a")) *(int *)dst = 1;
    else if (!strcmp(v, "b")) *(int *)dst = 2;
    else { snprintf(msg, n, "must be a or b"); return -1; }
    return 0;
}

/* Parses a command line (words separated by single spaces) into v with the test table;
 * stderr goes to /dev/null. Returns cli_parse's status. */
static int parse(vals *v, const char *line) {
    memset(v, 0, sizeof *v);
    v->n = 7;
    v->big = 1;
    v->temp = 0.5f;
    const cli_opt t[] = {
        CLI_STR_OPT("model", 'm', &v->model, "DIR", "model directory"),
        CLI_FILE_OPT("file", 'f', &v->file, "FILE", "input"),
        CLI_INT_OPT("max-tokens", 'n', &v->n, -1, 100, "N", "tokens"),
        CLI_FLAG_OPT("flag", 0, &v->flag, 1, "a switch"),
        CLI_I64_OPT("big", 0, &v->big, 1, 1LL << 40, "N", "a large count"),
        CLI_U64_OPT("seed", 's', &v->seed, "S", "seed"),
        CLI_FLOAT_OPT("temperature", 0, &v->temp, 0, 2, "T", "temperature"),
        CLI_LIST_OPT("stop", 0, v->stops, &v->n_stops, 2, "TEXT", "stop string"),
        CLI_FN_OPT("mode", 0, &v->mode, parse_mode, "M", "none", "a or b"),
        CLI_OPT_END,
    };
    const cli_cmd c = {"test", "[options]", NULL, {t}};
    static char buf[512]; /* v's strings point into it after the call */
    char *argv[32];
    snprintf(buf, sizeof buf, "test %s", line);
    int argc = 0;
    for (char *s = strtok(buf, " "); s && argc < 31; s = strtok(NULL, " ")) argv[argc++] = s;
    argv[argc] = NULL;
    fflush(stderr);
    int saved = dup(2);
    FILE *null = freopen("/dev/null", "w", stderr);
    int rc = cli_parse(&c, argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    (void)null;
    return rc;
}

/* The help page of the test table, captured. */
static void help_text(char *out, size_t n) {
    vals v = {0};
    v.n = 7;
    v.temp = 0.5f;
    v.big = 1;
    const cli_opt t[] = {
        CLI_INT_OPT("max-tokens", 'n', &v.n, -1, 100, "N", "tokens"),
        CLI_FLOAT_OPT("temperature", 0, &v.temp, 0, 2, "T", "temperature"),
        CLI_I64_OPT("big", 0, &v.big, 1, 1LL << 40, "N", "a large count", .def = "one"),
        CLI_FILE_OPT("file", 'f', &v.file, "FILE", "input"),
        CLI_OPT_END,
    };
    const cli_cmd c = {"test", "[options]", NULL, {t}};
    FILE *f = tmpfile();
    cli_help(&c, f);
    rewind(f);
    size_t k = fread(out, 1, n - 1, f);
    out[k] = 0;
    fclose(f);
}

int main(void) {
    vals v;
    /* both value forms, short options, prefixes */
    CHECK(parse(&v, "--model dir") == -1 && v.model && !strcmp(v.model, "dir"));
    CHECK(parse(&v, "--model=dir2") == -1 && v.model && !strcmp(v.model, "dir2"));
    CHECK(parse(&v, "-m d3 -n 5") == -1 && !strcmp(v.model, "d3") && v.n == 5);
    CHECK(parse(&v, "-n5") == -1 && v.n == 5);
    CHECK(parse(&v, "--temp 1.5") == -1 && v.temp == 1.5f);
    CHECK(parse(&v, "--file -") == -1 && !strcmp(v.file, "-"));
    CHECK(parse(&v, "-n -1") == -1 && v.n == -1);
    CHECK(parse(&v, "") == -1 && v.n == 7 && v.temp == 0.5f && !v.flag);
    CHECK(parse(&v, "--flag --seed 18446744073709551615") == -1 && v.flag && v.seed == UINT64_MAX);
    CHECK(parse(&v, "--big 1099511627776") == -1 && v.big == 1LL << 40);
    CHECK(parse(&v, "--stop a --stop b") == -1 && v.n_stops == 2 && !strcmp(v.stops[1], "b"));
    CHECK(parse(&v, "--mode b") == -1 && v.mode == 2);

    /* strict numbers: each of these is refused with status 2 */
    const char *bad[] = {"-n nan", "-n 2.7", "-n 0x10", "-n 101", "-n -2", "-n ' 5'", "-n +5", "-n 5x",
                         "--temperature nan", "--temperature inf", "--temperature 3", "--temperature 0x1p0",
                         "--temperature 1e", "--seed -1", "--seed 18446744073709551616", "--big 0",
                         "--big 1e3", "--mode c", "--stop a --stop b --stop c", "--model", "--flag=1",
                         "--bogus", "--modle x", "-q", "--m x", "positional", "--model="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(parse(&v, bad[i]) == 2, "'%s' accepted", bad[i]);
    /* -h prints help and ends with status 0 (stdout to /dev/null for the check) */
    fflush(stdout);
    int saved = dup(1);
    FILE *null = freopen("/dev/null", "w", stdout);
    int h = parse(&v, "-h");
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    (void)null;
    CHECK(h == 0);

    /* strict number helpers directly */
    int64_t i64;
    double x;
    CHECK(cli_parse_i64("-12", -100, 100, &i64) == 0 && i64 == -12);
    CHECK(cli_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &i64) == -1);
    CHECK(cli_parse_i64("", 0, 1, &i64) == -1);
    CHECK(cli_parse_f64(".5", 0, 1, &x) == 0 && x == 0.5);
    CHECK(cli_parse_f64("1e-3", 0, 1, &x) == 0 && x == 1e-3);
    CHECK(cli_parse_f64("1e999", 0, 1e308, &x) == -1);
    CHECK(cli_parse_f64("NaN", -1, 1, &x) == -1);

    /* did-you-mean distance */
    CHECK(cli_edit_distance("modle", "model") == 2);
    CHECK(cli_edit_distance("max-token", "max-tokens") == 1);
    CHECK(cli_edit_distance("", "abc") == 3);

    /* help: every option with the default its destination held */
    char text[4096];
    help_text(text, sizeof text);
    CHECK(strstr(text, "-n, --max-tokens N") && strstr(text, "(default: 7)"));
    CHECK(strstr(text, "--temperature T") && strstr(text, "(default: 0.5)"));
    CHECK(strstr(text, "(default: one)") && !strstr(text, "(default: 1)"));
    CHECK(strstr(text, "-f, --file FILE") && strstr(text, "(- = standard input)"));
    for (char *line = text; *line;) {
        char *e = strchr(line, '\n');
        CHECK_MSG((e ? e - line : (long)strlen(line)) <= 80, "help line over 80 columns: %.100s", line);
        if (!e) break;
        line = e + 1;
    }
    return test_report();
}
