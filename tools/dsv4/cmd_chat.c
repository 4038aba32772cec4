/* cmd_chat.c — `dsv4 chat`: an interactive multi-turn conversation. Each line on standard
 * input is a user turn; the answer streams to standard output. The sequence keeps its cache
 * between turns, so only the new turn is prefilled (when the chat template drops earlier
 * reasoning the whole conversation is re-encoded and the sequence starts over).
 * Lines "/reset" start a new conversation, "/exit" (or end of input) quits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "gen_flags.h"
#include "dsv4_text.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dsv4 chat --model DIR [--system TEXT] [options]\n%s", gen_flags_help());
}

int cmd_chat(int argc, char **argv) {
    gen_flags f = {0};
    f.think = -1;
    f.gen.max_tokens = 512;
    f.gen.sample.temperature = 0.6f;
    const char *system = NULL;
    for (int i = 1; i < argc; i++) {
        int t = gen_flags_take(&f, argc, argv, &i, "chat");
        if (t < 0) return 2;
        if (t) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--system") && i + 1 < argc) { system = argv[++i]; continue; }
        fprintf(stderr, "dsv4 chat: unknown option or missing value '%s'\n", argv[i]);
        usage(stderr);
        return 2;
    }
    if (!f.model_dir) { fprintf(stderr, "dsv4 chat: need --model\n"); usage(stderr); return 2; }

    dsv4_model *model;
    dsv4_tokenizer *tok;
    dsv4_engine *eng;
    int seq;
    if (gen_open(&f, "chat", &model, &tok, &eng, &seq)) return 1;
    dsv4_err err = {0};
    int status = 1;
    dsv4_chat *conv = NULL;
    char *line = NULL;
    if (gen_spec_open(&f, "chat", eng, seq)) goto out;
    dsv4_chat_opts co = {.thinking = f.think == 1};
    int tty = isatty(0);
    size_t line_cap = 0;
    if (dsv4_chat_create(&co, &conv, &err) || (system && dsv4_chat_add(conv, "system", system, &err))) {
        fprintf(stderr, "dsv4 chat: %s\n", err.msg);
        goto out;
    }
    for (;;) {
        if (tty) { fprintf(stderr, "> "); fflush(stderr); }
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (!strcmp(line, "/exit")) break;
        int restart = !strcmp(line, "/reset");
        if (restart) {
            dsv4_chat_free(conv);
            conv = NULL;
            if (dsv4_chat_create(&co, &conv, &err) ||
                (system && dsv4_chat_add(conv, "system", system, &err))) {
                fprintf(stderr, "dsv4 chat: %s\n", err.msg);
                goto out;
            }
        } else if (dsv4_chat_add(conv, "user", line, &err)) {
            fprintf(stderr, "dsv4 chat: %s\n", err.msg);
            goto out;
        }
        if (restart) {
            if (dsv4_seq_free(eng, seq, &err) || dsv4_seq_create(eng, &seq, &err)) {
                fprintf(stderr, "dsv4 chat: %s\n", err.msg);
                goto out;
            }
            if (gen_spec_open(&f, "chat", eng, seq)) goto out;
            continue;
        }
        /* the user's text is content: special-token strings in it stay plain text */
        dsv4_tok_ids ids = {0};
        int reset = 0;
        if (dsv4_chat_next_ids(conv, tok, &ids, &reset, &err)) {
            fprintf(stderr, "dsv4 chat: %s\n", err.msg);
            goto out;
        }
        if (reset && dsv4_seq_length(eng, seq) > 0 &&
            (dsv4_seq_free(eng, seq, &err) || dsv4_seq_create(eng, &seq, &err))) {
            fprintf(stderr, "dsv4 chat: %s\n", err.msg);
            dsv4_tok_ids_free(&ids);
            goto out;
        }
        if (reset && gen_spec_open(&f, "chat", eng, seq)) { dsv4_tok_ids_free(&ids); goto out; }
        int rc = 0;
        dsv4_generation_result res = {0};
        dsv4_generation_callbacks cb = {.text = gen_print, .progress = gen_progress};
        if (!rc) rc = dsv4_generation_run(eng, tok, seq, ids.ids, (int)ids.n, &f.gen, &cb, &res, &err);
        dsv4_tok_ids_free(&ids);
        if (rc) {
            fprintf(stderr, "\ndsv4 chat: %s\n", err.msg);
            goto out;
        }
        printf("\n");
        fflush(stdout);
        /* record exactly what the sequence now holds after the prompt */
        size_t fed = (size_t)res.gen_tokens - (res.last_fed ? 0 : 1);
        char *answer = NULL;
        size_t answer_len = 0;
        rc = dsv4_detokenize(tok, res.ids, fed, 0, &answer, &answer_len, &err);
        free(res.ids);
        if (!rc) rc = dsv4_chat_add_generated(conv, answer, answer_len, NULL, &err);
        free(answer);
        if (rc && rc != DSV4_ERR_FORMAT) { fprintf(stderr, "dsv4 chat: %s\n", err.msg); goto out; }
        char mtp[160];
        gen_spec_stats(&res, mtp, sizeof mtp);
        fprintf(stderr, "[%lld prompt tokens, %lld generated, %.2f tokens/s%s]\n",
                (long long)res.prompt_tokens, (long long)res.gen_tokens,
                res.decode_seconds > 0 ? res.gen_tokens / res.decode_seconds : 0.0, mtp);
    }
    status = 0;
out:
    free(line);
    dsv4_spec_free(f.gen.spec);
    dsv4_chat_free(conv);
    dsv4_engine_free(eng);
    dsv4_tokenizer_free(tok);
    dsv4_model_close(model);
    return status;
}
