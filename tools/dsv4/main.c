/* main.c — `dsv4 <command> [options]`: dispatches to the subcommands. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli_opts.h"
#include "commands.h"
#include "dsv4.h"
#include "sigbus.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"info", cmd_info, "describe a model: layers, parameters, bytes, cache geometry"},
    {"gen-model", cmd_gen_model, "write a random-weight checkpoint (config.json + safetensors)"},
    {"run", cmd_run, "run token ids through the model and dump logits/hidden states"},
    {"tokenize", cmd_tokenize, "text on stdin -> token ids"},
    {"detokenize", cmd_detokenize, "token ids on stdin -> text"},
    {"generate", cmd_generate, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive multi-turn chat"},
    {"bench", cmd_bench, "prefill/decode speed against the measured bandwidth and FMA peak"},
    {"serve", cmd_serve, "OpenAI/Anthropic-compatible HTTP server with continuous batching"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: dsv4 <command> [options]\n       dsv4 --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`dsv4 <command> --help` describes a command's options.\n");
}

static void print_version(void) {
#ifdef DSV4_VERSION_MAJOR
    printf("dsv4 %s\n", dsv4_version());
#else
    printf("dsv4 (this build carries no version number)\n");
#endif
}

int main(int argc, char **argv) {
    /* a checkpoint truncated while mapped: say which file, instead of a silent death */
    cli_install_sigbus();
    /* a file size limit (ulimit -f) makes writes fail with EFBIG, reported like a full disk */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        print_version();
        return 0;
    }
    const char *best = NULL;
    int best_d = 3; /* a hint only for a near miss */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
        int d = cli_edit_distance(argv[1], commands[i].name);
        if (d < best_d) best_d = d, best = commands[i].name;
    }
    fprintf(stderr, "dsv4: unknown command '%s'", argv[1]);
    if (best) fprintf(stderr, "; did you mean '%s'?", best);
    fprintf(stderr, "\n`dsv4 --help` lists the commands.\n");
    return 2;
}
