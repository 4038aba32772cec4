/* cmd_generate.c — `dsv4 generate`: text in, streamed text out.
 *
 *   dsv4 generate --model DIR (--prompt TEXT | --prompt-file F) [--chat] [--think|--nothink]
 *                 [--system TEXT] [-n N] [sampling flags]
 *
 * With --chat the prompt becomes one user turn of the DeepSeek-V4 chat template; without
 * it the text is continued as it is (after BOS). Ends with token counts and speeds on
 * stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "gen_flags.h"
#include "dsv4_text.h"

static void usage(FILE *f) {
    fprintf(f, "usage: dsv4 generate --model DIR (--prompt TEXT | --prompt-file F) [--chat]\n"
               "                     [--system TEXT] [--no-bos] [options]\n%s", gen_flags_help());
}

typedef struct tok_printer {
    const dsv4_tokenizer *tok;
} tok_printer;

static void print_logprobs(void *user, const dsv4_sample_out *o) {
    const dsv4_tokenizer *tok = ((tok_printer *)user)->tok;
    const char *t = dsv4_tok_id_to_token(tok, o->token);
    fprintf(stderr, "[%d %s %.4f]", o->token, t ? t : "?", o->logprob);
    for (int i = 0; i < o->n_top; i++) fprintf(stderr, " %d:%.4f", o->top_ids[i], o->top_logprobs[i]);
    fprintf(stderr, "\n");
}

int cmd_generate(int argc, char **argv) {
    gen_flags f = {0};
    f.think = -1;
    f.gen.max_tokens = 256;
    f.gen.sample.temperature = 0.6f;
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    int chat = 0, no_bos = 0;
    for (int i = 1; i < argc; i++) {
        int t = gen_flags_take(&f, argc, argv, &i, "generate");
        if (t < 0) return 2;
        if (t) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--no-bos")) no_bos = 1;
        else if ((!strcmp(a, "--prompt") || !strcmp(a, "--prompt-file") || !strcmp(a, "--system")) && v) {
            if (!strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "--prompt-file")) prompt_file = v;
            else system = v;
            i++;
        } else {
            fprintf(stderr, "dsv4 generate: unknown option or missing value '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!f.model_dir || (!prompt == !prompt_file)) {
        fprintf(stderr, "dsv4 generate: need --model and exactly one of --prompt / --prompt-file\n");
        usage(stderr);
        return 2;
    }
    char *file_text = NULL;
    if (prompt_file && !(prompt = file_text = cli_read_file(prompt_file, NULL))) {
        fprintf(stderr, "dsv4 generate: cannot read %s\n", prompt_file);
        return 1;
    }

    dsv4_model *model;
    dsv4_tokenizer *tok;
    dsv4_engine *eng;
    int seq, status = 1;
    if (gen_open(&f, "generate", &model, &tok, &eng, &seq)) { free(file_text); return 1; }
    if (gen_spec_open(&f, "generate", eng, seq)) {
        free(file_text);
        dsv4_engine_free(eng);
        dsv4_tokenizer_free(tok);
        dsv4_model_close(model);
        return 1;
    }
    dsv4_err err = {0};
    dsv4_tok_ids ids = {0};
    if (chat) {
        dsv4_chat_opts co = {.thinking = f.think == 1};
        dsv4_chat *conv = NULL;
        int reset;
        if (dsv4_chat_create(&co, &conv, &err) ||
            (system && dsv4_chat_add(conv, "system", system, &err)) ||
            dsv4_chat_add(conv, "user", prompt, &err) ||
            dsv4_chat_next_ids(conv, tok, &ids, &reset, &err)) {
            fprintf(stderr, "dsv4 generate: %s\n", err.msg);
            dsv4_chat_free(conv);
            goto out;
        }
        dsv4_chat_free(conv);
    } else {
        dsv4_model_info info = dsv4_model_get_info(model);
        if (!no_bos) {
            /* dsv4_tokenize appends to a growable list: start it with BOS */
            ids.ids = malloc(16 * sizeof *ids.ids);
            if (!ids.ids) { fprintf(stderr, "dsv4 generate: out of memory\n"); goto out; }
            ids.cap = 16;
            ids.ids[ids.n++] = info.bos_token_id;
        }
    }
    /* a raw prompt keeps special-token strings live (documented); chat content does not */
    if (!chat && dsv4_tokenize(tok, prompt, strlen(prompt), &ids, &err)) {
        fprintf(stderr, "dsv4 generate: %s\n", err.msg);
        goto out;
    }
    if (ids.n == 0) { fprintf(stderr, "dsv4 generate: the prompt is empty\n"); status = 2; goto out; }
    tok_printer tp = {tok};
    dsv4_generation_callbacks cb = {.user = &tp, .text = gen_print, .progress = gen_progress,
                             .token = f.gen.sample.n_logprobs ? print_logprobs : NULL};
    dsv4_generation_result res;
    if (dsv4_generation_run(eng, tok, seq, ids.ids, (int)ids.n, &f.gen, &cb, &res, &err)) {
        fprintf(stderr, "\ndsv4 generate: %s\n", err.msg);
        goto out;
    }
    printf("\n");
    fflush(stdout); /* the counts on stderr come after the text */
    char mtp[160];
    gen_spec_stats(&res, mtp, sizeof mtp);
    fprintf(stderr, "prompt: %lld tokens, %.1f tokens/s | generated: %lld tokens, %.2f tokens/s%s\n",
            (long long)res.prompt_tokens,
            res.prefill_seconds > 0 ? res.prompt_tokens / res.prefill_seconds : 0.0,
            (long long)res.gen_tokens,
            res.decode_seconds > 0 ? res.gen_tokens / res.decode_seconds : 0.0, mtp);
    free(res.ids);
    status = 0;
out:
    free(file_text);
    dsv4_tok_ids_free(&ids);
    dsv4_spec_free(f.gen.spec);
    dsv4_engine_free(eng);
    dsv4_tokenizer_free(tok);
    dsv4_model_close(model);
    return status;
}
