/* cmd_tokenize.c — `dsv4 tokenize --tokenizer FILE`: UTF-8 text on stdin -> token ids.
 *
 * Prints the ids space-separated on one line. The text is encoded exactly as read (a
 * trailing newline is part of it); no BOS/EOS is added; added/special token strings in the
 * text become those tokens unless --no-special is given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_opts.h"
#include "cli_util.h"
#include "commands.h"
#include "dsv4_text.h"

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *input = "-";
    int no_special = 0;
    const cli_opt opts[] = {
        CLI_STR_OPT("tokenizer", 0, &path, "FILE", "tokenizer.json, or a directory holding one"),
        CLI_FILE_OPT("input", 'i', &input, "FILE", "the text to encode"),
        CLI_FLAG_OPT("no-special", 0, &no_special, 1, "encode special-token strings as plain text"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"tokenize", "--tokenizer FILE [--no-special] < text", NULL, {opts}};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (!path) {
        fprintf(stderr, "dsv4 tokenize: --tokenizer FILE is required\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    const int flags = no_special ? DSV4_TOK_NO_ADDED : 0;
    dsv4_err err = {0};
    dsv4_tokenizer *tok = cli_load_tokenizer("tokenize", path);
    if (!tok) return 1;
    size_t n;
    char why[512];
    char *text = cli_read_input(input, CLI_TEXT_LIMIT, &n, why, sizeof why);
    if (!text) {
        fprintf(stderr, "dsv4 tokenize: %s\n", why);
        dsv4_tokenizer_free(tok);
        return 1;
    }
    dsv4_tok_ids ids = {0};
    rc = dsv4_tokenize_ex(tok, text, n, flags, &ids, &err);
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
