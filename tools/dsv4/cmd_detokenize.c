/* cmd_detokenize.c — `dsv4 detokenize --tokenizer FILE`: token ids on stdin -> text.
 *
 * Ids are decimal, separated by spaces, commas or newlines (a surrounding [ ] is allowed,
 * so a JSON list works too). The text is written exactly, with no newline added, so that
 * `tokenize | detokenize` reproduces the input. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_opts.h"
#include "cli_util.h"
#include "commands.h"
#include "dsv4_text.h"

/* Parses the id list; returns 0, or 1 after printing what is wrong. */
static int parse_ids(const char *s, size_t n, dsv4_tok_ids *ids) {
    size_t i = 0, k = 0;
    while (i < n) {
        char c = s[i];
        if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') { i++; continue; }
        size_t j = i;
        while (j < n && !strchr(" ,\n\r\t[]", s[j]) && s[j]) j++;
        if (j == i) j++;  // a NUL byte
        char *end;
        errno = 0;
        long v = strtol(s + i, &end, 10);
        if (end != s + j || errno || v < 0 || v > INT32_MAX || !(s[i] >= '0' && s[i] <= '9')) {
            fprintf(stderr, "dsv4 detokenize: '%.*s' (item %zu) is not a token id\n", (int)(j - i > 40 ? 40 : j - i), s + i, k);
            return 1;
        }
        if (ids->n == ids->cap) {
            size_t cap = ids->cap ? 2 * ids->cap : 256;
            int32_t *p = realloc(ids->ids, cap * sizeof *p);
            if (!p) { fprintf(stderr, "dsv4 detokenize: out of memory\n"); return 1; }
            ids->ids = p, ids->cap = cap;
        }
        ids->ids[ids->n++] = (int32_t)v;
        k++;
        i = j;
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *path = NULL, *input = "-";
    int skip_special = 0;
    const cli_opt opts[] = {
        CLI_STR_OPT("tokenizer", 0, &path, "FILE", "tokenizer.json, or a directory holding one"),
        CLI_FILE_OPT("input", 'i', &input, "FILE", "the token ids to decode"),
        CLI_FLAG_OPT("skip-special", 0, &skip_special, 1, "leave out tokens marked special (BOS, EOS, ...)"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"detokenize", "--tokenizer FILE [--skip-special] < ids", NULL, {opts}};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (!path) {
        fprintf(stderr, "dsv4 detokenize: --tokenizer FILE is required\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    const int flags = skip_special ? DSV4_DETOK_SKIP_SPECIAL : 0;
    dsv4_err err = {0};
    dsv4_tokenizer *tok = cli_load_tokenizer("detokenize", path);
    if (!tok) return 1;
    size_t n;
    char why[512];
    char *in = cli_read_input(input, CLI_IDS_LIMIT, &n, why, sizeof why);
    dsv4_tok_ids ids = {0};
    rc = 1;
    if (!in) fprintf(stderr, "dsv4 detokenize: %s\n", why);
    else if (!parse_ids(in, n, &ids)) {
        char *text;
        size_t len;
        if (dsv4_detokenize(tok, ids.ids, ids.n, flags, &text, &len, &err)) {
            fprintf(stderr, "dsv4 detokenize: %s\n", err.msg);
        } else {
            rc = fwrite(text, 1, len, stdout) != len || fflush(stdout);
            if (rc) fprintf(stderr, "dsv4 detokenize: cannot write stdout\n");
            free(text);
        }
    }
    free(in);
    dsv4_tok_ids_free(&ids);
    dsv4_tokenizer_free(tok);
    return rc;
}
