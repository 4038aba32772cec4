/* cmd_detokenize.c — `dsv4 detokenize --tokenizer FILE`: token ids on stdin -> text.
 *
 * Ids are decimal, separated by spaces, commas or newlines (a surrounding [ ] is allowed,
 * so a JSON list works too). The text is written exactly, with no newline added, so that
 * `tokenize | detokenize` reproduces the input. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "dsv4_text.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsv4 detokenize --tokenizer FILE [--skip-special] < ids\n\n"
            "  --tokenizer FILE  tokenizer.json (or a directory holding one)\n"
            "  --skip-special    leave out tokens marked special (BOS, EOS, ...)\n");
}

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
    const char *path;
    int flags;
    const int args = cli_tokenizer_args("detokenize", argc, argv, "--skip-special", DSV4_DETOK_SKIP_SPECIAL, usage, &path, &flags);
    if (args >= 0) return args;
    dsv4_err err = {0};
    dsv4_tokenizer *tok = cli_load_tokenizer("detokenize", path);
    if (!tok) return 1;
    size_t n;
    char *in = cli_read_stream(stdin, &n);
    dsv4_tok_ids ids = {0};
    int rc = 1;
    if (!in) fprintf(stderr, "dsv4 detokenize: cannot read stdin\n");
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
