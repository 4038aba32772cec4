/* cmd_tokenize.c — `dsv4 tokenize --tokenizer FILE`: UTF-8 text on stdin -> token ids.
 *
 * Prints the ids space-separated on one line. The text is encoded exactly as read (a
 * trailing newline is part of it); no BOS/EOS is added; added/special token strings in the
 * text become those tokens unless --no-special is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "dsv4_text.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsv4 tokenize --tokenizer FILE [--no-special] < text\n\n"
            "  --tokenizer FILE  tokenizer.json (or a directory holding one)\n"
            "  --no-special      encode special-token strings as plain text\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *path;
    int flags;
    const int args = cli_tokenizer_args("tokenize", argc, argv, "--no-special", DSV4_TOK_NO_ADDED, usage, &path, &flags);
    if (args >= 0) return args;
    dsv4_err err = {0};
    dsv4_tokenizer *tok = cli_load_tokenizer("tokenize", path);
    if (!tok) return 1;
    size_t n;
    char *text = cli_read_stream(stdin, &n);
    if (!text) {
        fprintf(stderr, "dsv4 tokenize: cannot read stdin\n");
        dsv4_tokenizer_free(tok);
        return 1;
    }
    dsv4_tok_ids ids = {0};
    int rc = dsv4_tokenize_ex(tok, text, n, flags, &ids, &err);
    free(text);
    if (rc) {
        fprintf(stderr, "dsv4 tokenize: %s\n", err.msg);
    } else {
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", (int)ids.ids[i]);
        putchar('\n');
        if (fflush(stdout)) {
            fprintf(stderr, "dsv4 tokenize: cannot write stdout\n");
            rc = 1;
        }
    }
    dsv4_tok_ids_free(&ids);
    dsv4_tokenizer_free(tok);
    return rc ? 1 : 0;
}
