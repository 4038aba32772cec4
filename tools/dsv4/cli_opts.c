/* cli_opts.c — the option parser of every subcommand (see cli_opts.h). */
#include "cli_opts.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTS 96
#define HELP_COL 28
#define WIDTH 80

/* ---- strict numbers ----------------------------------------------------------------- */

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    /* strtoll alone would take " 12", "+12", "0x10" (as 0) and clamp overflow */
    if (!s || !(s[0] == '-' ? s[1] >= '0' && s[1] <= '9' : s[0] >= '0' && s[0] <= '9')) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !(s[0] >= '0' && s[0] <= '9')) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int cli_parse_f64(const char *s, double lo, double hi, double *out) {
    /* strtod also reads "nan", "inf" and hex floats; a number here is decimal digits */
    if (!s || !*s || strpbrk(s, "xXnNiI ")) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 1 << 20;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

/* ---- the table ---------------------------------------------------------------------- */

/* All rows of a command in order (flattened groups); returns the count. */
static int collect(const cli_cmd *c, const cli_opt **rows) {
    int n = 0;
    for (int g = 0; g < CLI_MAX_GROUPS && c->groups[g]; g++)
        for (const cli_opt *o = c->groups[g]; o->kind != CLI_END && n < MAX_OPTS; o++) rows[n++] = o;
    return n;
}

/* The default as help shows it, "" when none. */
static const char *default_text(const cli_opt *o, char *buf, size_t n) {
    buf[0] = 0;
    if (o->def) return o->def;
    switch (o->kind) {
    case CLI_FLAG: return *(const int *)o->dst == o->ival && o->ival ? "on" : "";
    case CLI_STR:
    case CLI_FILE: {
        const char *s = *(const char *const *)o->dst;
        if (s) snprintf(buf, n, "%s", s);
        return buf;
    }
    case CLI_INT: snprintf(buf, n, "%d", *(const int *)o->dst); return buf;
    case CLI_I64: snprintf(buf, n, "%" PRId64, *(const int64_t *)o->dst); return buf;
    case CLI_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)o->dst); return buf;
    case CLI_FLOAT: snprintf(buf, n, "%g", (double)*(const float *)o->dst); return buf;
    default: return buf;
    }
}

/* Writes text from column *col on, wrapping at word boundaries within WIDTH columns and
 * indenting continuation lines to HELP_COL; '\n' in text forces a break. */
static void wrap(FILE *f, const char *text, int *col) {
    for (const char *s = text; *s;) {
        if (*s == '\n') {
            fprintf(f, "\n%-*s", HELP_COL, "");
            *col = HELP_COL;
            s++;
            continue;
        }
        if (*s == ' ') { s++; continue; }
        int w = (int)strcspn(s, " \n");
        const int lead = *col > HELP_COL ? 1 : 0; /* a space before the word */
        if (*col + lead + w > WIDTH && *col > HELP_COL) {
            fprintf(f, "\n%-*s", HELP_COL, "");
            *col = HELP_COL;
        } else if (lead) {
            fputc(' ', f);
            (*col)++;
        }
        fprintf(f, "%.*s", w, s);
        *col += w;
        s += w;
    }
}

static void print_row(const cli_opt *o, FILE *f) {
    char head[96], def[128], tail[256];
    int k = o->short_name ? snprintf(head, sizeof head, "  -%c, --%s", o->short_name, o->name)
                          : snprintf(head, sizeof head, "      --%s", o->name);
    if (o->meta) snprintf(head + k, sizeof head - (size_t)k, " %s", o->meta);
    fprintf(f, "%-*s", HELP_COL, head);
    if (strlen(head) >= HELP_COL) fprintf(f, "\n%-*s", HELP_COL, "");
    int col = HELP_COL;
    wrap(f, o->help, &col);
    const char *d = default_text(o, def, sizeof def);
    snprintf(tail, sizeof tail, "%s%s%s%s%s", o->kind == CLI_FILE ? " (- = standard input)" : "",
             o->kind == CLI_LIST ? " (repeatable)" : "", *d ? " (default: " : "", d, *d ? ")" : "");
    wrap(f, tail, &col);
    fputc('\n', f);
}

void cli_help(const cli_cmd *c, FILE *f) {
    const cli_opt *rows[MAX_OPTS];
    int n = collect(c, rows);
    fprintf(f, "usage: dsv4 %s %s\n", c->name, c->synopsis);
    if (c->about) fprintf(f, "\n%s\n", c->about);
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < n; i++)
        if (!rows[i]->hidden) print_row(rows[i], f);
    fprintf(f, "  -h, --help                show this help\n");
}

void cli_short_usage(const cli_cmd *c, FILE *f) {
    fprintf(f, "usage: dsv4 %s %s\n`dsv4 %s --help` lists every option.\n", c->name, c->synopsis,
            c->name);
}

static void list_options(const cli_opt *const *rows, int n) {
    char def[128];
    for (int i = 0; i < n; i++)
        if (!rows[i]->hidden) printf("--%s\t%s\n", rows[i]->name, default_text(rows[i], def, sizeof def));
}

/* ---- parsing ------------------------------------------------------------------------ */

static int bad(const cli_cmd *c, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "dsv4 %s: ", c->name);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    cli_short_usage(c, stderr);
    return 2;
}

/* Stores one value; returns 0 or prints why not and returns 2. */
static int store(const cli_cmd *c, const cli_opt *o, const char *v) {
    char msg[256] = "";
    int64_t i64;
    double x;
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dst = o->ival; return 0;
    case CLI_STR:
    case CLI_FILE:
        if (!*v) return bad(c, "--%s needs a non-empty value%s", o->name, "");
        *(const char **)o->dst = v;
        return 0;
    case CLI_INT:
    case CLI_I64:
        if (cli_parse_i64(v, (int64_t)o->lo, (int64_t)o->hi, &i64)) {
            fprintf(stderr, "dsv4 %s: --%s needs a whole number in [%.0f, %.0f], not '%s'\n",
                    c->name, o->name, o->lo, o->hi, v);
            return 2;
        }
        if (o->kind == CLI_INT) *(int *)o->dst = (int)i64;
        else *(int64_t *)o->dst = i64;
        return 0;
    case CLI_U64:
        if (cli_parse_u64(v, (uint64_t *)o->dst)) {
            fprintf(stderr, "dsv4 %s: --%s needs a whole number >= 0, not '%s'\n", c->name, o->name, v);
            return 2;
        }
        return 0;
    case CLI_FLOAT:
        if (cli_parse_f64(v, o->lo, o->hi, &x)) {
            fprintf(stderr, "dsv4 %s: --%s needs a number in [%g, %g], not '%s'\n", c->name,
                    o->name, o->lo, o->hi, v);
            return 2;
        }
        *(float *)o->dst = (float)x;
        return 0;
    case CLI_LIST:
        if (!*v) return bad(c, "--%s needs a non-empty value%s", o->name, "");
        if (*o->count >= (int)o->hi) {
            fprintf(stderr, "dsv4 %s: at most %d --%s values\n", c->name, (int)o->hi, o->name);
            return 2;
        }
        ((const char **)o->dst)[(*o->count)++] = v;
        return 0;
    case CLI_FN:
        if (o->fn(v, o->dst, msg, sizeof msg)) {
            fprintf(stderr, "dsv4 %s: --%s: %s\n", c->name, o->name, msg);
            return 2;
        }
        return 0;
    default: return 2;
    }
}

/* "unknown option --modle; did you mean --model?" */
static int unknown(const cli_cmd *c, const cli_opt *const *rows, int n, const char *arg) {
    char name[64];
    const char *s = arg;
    while (*s == '-') s++;
    snprintf(name, sizeof name, "%.*s", (int)strcspn(s, "="), s);
    const char *best = NULL;
    int best_d = 1 << 20;
    for (int i = 0; i < n; i++) {
        int d = cli_edit_distance(name, rows[i]->name);
        if (d < best_d) best_d = d, best = rows[i]->name;
    }
    /* getopt_long takes an unambiguous prefix (--temp); two or more matches land here */
    int n_prefix = 0;
    const size_t nl = strlen(name);
    for (int i = 0; i < n && arg[0] == '-' && arg[1] == '-'; i++) n_prefix += !strncmp(rows[i]->name, name, nl);
    if (n_prefix > 1) {
        fprintf(stderr, "dsv4 %s: ambiguous option '%s' could be", c->name, arg);
        for (int i = 0, k = 0; i < n; i++)
            if (!strncmp(rows[i]->name, name, nl)) fprintf(stderr, "%s --%s", k++ ? "," : "", rows[i]->name);
        fputc('\n', stderr);
        cli_short_usage(c, stderr);
        return 2;
    }
    int limit = (int)nl / 3 > 2 ? (int)nl / 3 : 2;
    fprintf(stderr, "dsv4 %s: unknown option '%s'", c->name, arg);
    if (best && best_d <= limit && arg[0] == '-' && arg[1] == '-') fprintf(stderr, "; did you mean --%s?", best);
    fputc('\n', stderr);
    cli_short_usage(c, stderr);
    return 2;
}

int cli_parse(const cli_cmd *c, int argc, char **argv) {
    const cli_opt *rows[MAX_OPTS];
    int n = collect(c, rows);
    struct option lo[MAX_OPTS + 3];
    char shorts[2 * MAX_OPTS + 8];
    int ns = 0;
    shorts[ns++] = ':'; /* report a missing value as ':' */
    for (int i = 0; i < n; i++) {
        const int has = rows[i]->kind == CLI_FLAG ? no_argument : required_argument;
        lo[i] = (struct option){rows[i]->name, has, NULL, 256 + i};
        if (rows[i]->short_name) {
            shorts[ns++] = (char)rows[i]->short_name;
            if (has == required_argument) shorts[ns++] = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){"list-options", no_argument, NULL, 1};
    lo[n + 2] = (struct option){0, 0, 0, 0};
    shorts[ns++] = 'h';
    shorts[ns] = 0;

    optind = 0; /* glibc: a full reset, so a process may parse more than once */
    opterr = 0;
    for (;;) {
        int idx = -1;
        int r = getopt_long(argc, argv, shorts, lo, &idx);
        if (r == -1) break;
        const char *arg = argv[optind - 1];
        if (r == 'h') { cli_help(c, stdout); return 0; }
        if (r == 1) { list_options(rows, n); return 0; }
        if (r == '?') {
            if (optopt >= 256 && optopt < 256 + n)
                return bad(c, "option --%s takes no value%s", rows[optopt - 256]->name, "");
            if (optopt) {
                char sh[3] = {'-', (char)optopt, 0};
                return unknown(c, rows, n, sh);
            }
            return unknown(c, rows, n, arg);
        }
        if (r == ':') {
            const cli_opt *o = NULL;
            if (optopt >= 256 && optopt < 256 + n) o = rows[optopt - 256];
            for (int i = 0; i < n && !o; i++)
                if (rows[i]->short_name == optopt) o = rows[i];
            return bad(c, "option --%s needs a value (%s)", o ? o->name : arg, o && o->meta ? o->meta : "");
        }
        const cli_opt *o = NULL;
        if (r >= 256 && r < 256 + n) o = rows[r - 256];
        for (int i = 0; i < n && !o; i++)
            if (rows[i]->short_name == r) o = rows[i];
        if (!o) return unknown(c, rows, n, arg);
        int rc = store(c, o, optarg);
        if (rc) {
            if (o->kind != CLI_STR && o->kind != CLI_FILE && o->kind != CLI_LIST) cli_short_usage(c, stderr);
            return rc;
        }
    }
    if (optind < argc) return bad(c, "unexpected argument '%s'%s", argv[optind], "");
    return -1;
}
