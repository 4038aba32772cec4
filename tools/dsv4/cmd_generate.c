/* cmd_generate.c — `dsv4 generate`: text in, streamed text out.
 *
 *   dsv4 generate --model DIR (--prompt TEXT | --prompt-file F) [--chat] [--think|--nothink]
 *                 [--system TEXT] [--json | --json-schema FILE | --regex RX | --choice JSON |
 *                  --grammar FILE]
 *                 [-n N] [sampling flags]
 *
 * --json / --json-schema constrain the reply to one JSON object / one value valid under the
 * schema (structured output, dsv4_gen_params.json_schema); with --chat the system message
 * also shows the model the format, as the server does for response_format.
 *
 * With --chat the prompt becomes one user turn of the DeepSeek-V4 chat template; without
 * it the text is continued as it is (after BOS). Ends with load time, token counts, time to
 * first token and speeds on stderr. Ctrl-C stops the generation: the text so far, the
 * stats and a newline are printed, and the exit status is 130 (as for a shell's SIGINT). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli_opts.h"
#include "cli_util.h"
#include "commands.h"
#include "gen_flags.h"
#include "dsv4_text.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct gen_run {
    const dsv4_tokenizer *tok;
    double start, first_token;  /* seconds; first_token 0 until one is sampled */
    gen_printer out;
} gen_run;

/* Token text for the logprobs listing: the decoded bytes, with control characters and
 * newlines escaped so each token stays on its line. */
static void put_token(FILE *f, const dsv4_tokenizer *tok, int32_t id) {
    size_t len = 0;
    const char *b = dsv4_tok_id_bytes(tok, id, &len);
    fputc('\'', f);
    for (size_t i = 0; b && i < len; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\'' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('\'', f);
}

static void on_token(void *user, const dsv4_sample_out *o) {
    gen_run *r = user;
    (void)o;
    if (r->first_token == 0) r->first_token = cli_now_s();
}

static void print_logprobs(void *user, const dsv4_sample_out *o) {
    gen_run *r = user;
    on_token(user, o);
    fprintf(stderr, "[%d ", o->token);
    put_token(stderr, r->tok, o->token);
    fprintf(stderr, " %.4f]", o->logprob);
    for (int i = 0; i < o->n_top; i++) {
        fprintf(stderr, " %d ", o->top_ids[i]);
        put_token(stderr, r->tok, o->top_ids[i]);
        fprintf(stderr, " %.4f", o->top_logprobs[i]);
    }
    fprintf(stderr, "\n");
}

static int print_or_stop(void *user, const char *text, size_t len) {
    return gen_printer_text(&((gen_run *)user)->out, text, len);
}

/* -n 0: the prompt runs through the model (its cache filled, its speed measured) and
 * nothing is generated. */
static int prefill_only(dsv4_engine *eng, int seq, const int32_t *ids, int n, int chunk,
                        int hidden_size, dsv4_err *err) {
    if (chunk <= 0) chunk = 2048;
    float *hidden = malloc((size_t)hidden_size * sizeof(float)); // (1, D) the last row only
    if (!hidden) return -1;
    int rc = 0;
    for (int done = 0; done < n && !rc && !interrupted;) {
        int k = n - done < chunk ? n - done : chunk;
        dsv4_span sp = {.seq = seq, .start = done, .n_tokens = k, .tokens = ids + done, .n_hidden = 1};
        rc = dsv4_forward(eng, &sp, 1, hidden, NULL, err);
        done += k;
        gen_progress(NULL, done, n);
    }
    free(hidden);
    return rc;
}

/* --json / --json-schema FILE: *schema = the schema's text (checked here, so that a schema
 * outside the subset is refused before the model loads), NULL for neither. */
static int json_format(int json, const char *file, char **schema) {
    *schema = NULL;
    if (json && file) {
        fprintf(stderr, "dsv4 generate: give at most one of --json and --json-schema\n");
        return -1;
    }
    size_t len = 0;
    char why[512];
    if (file && !(*schema = cli_read_input(file, CLI_TEXT_LIMIT, &len, why, sizeof why))) {
        fprintf(stderr, "dsv4 generate: %s\n", why);
        return -1;
    }
    if (json && !(*schema = strdup("{\"type\":\"object\"}"))) return -1;
    dsv4_json_schema *c = NULL;
    dsv4_err err = {0};
    if (*schema && dsv4_json_schema_compile(*schema, strlen(*schema), &c, &err)) {
        fprintf(stderr, "dsv4 generate: --json-schema %s: %s\n", file, err.msg);
        free(*schema);
        *schema = NULL;
        return -1;
    }
    dsv4_json_schema_free(c);
    return 0;
}

/* --regex RX / --choice JSON (an array of strings) / --grammar FILE (GBNF): guided decoding
 * (dsv4_gen_params.regex, choices, grammar: *grammar the file's text), checked before the
 * model loads; at most one constraint in all. */
static int guide_flags(const char *regex, const char *choice, const char *gfile, int json, cJSON **list,
                       const char ***choices, int *n, char **grammar) {
    *list = NULL, *choices = NULL, *n = 0, *grammar = NULL;
    if ((regex != NULL) + (choice != NULL) + (gfile != NULL) + (json != 0) > 1) {
        fprintf(stderr, "dsv4 generate: give at most one of --json, --json-schema, --regex, --choice and --grammar\n");
        return -1;
    }
    dsv4_err err = {0};
    if (regex && dsv4_regex_check(regex, strlen(regex), &err)) {
        fprintf(stderr, "dsv4 generate: --regex: the regex %s\n", err.msg);
        return -1;
    }
    if (gfile) {
        char why[512];
        size_t len = 0;
        if (!(*grammar = cli_read_input(gfile, CLI_TEXT_LIMIT, &len, why, sizeof why))) {
            fprintf(stderr, "dsv4 generate: %s\n", why);
            return -1;
        }
        if (memchr(*grammar, 0, len) || dsv4_grammar_check(*grammar, len, &err)) {
            fprintf(stderr, "dsv4 generate: --grammar %s: the grammar %s\n", gfile, err.code ? err.msg : "holds a NUL byte");
            free(*grammar);
            *grammar = NULL;
            return -1;
        }
        return 0;
    }
    if (!choice) return 0;
    *list = cJSON_Parse(choice);
    const int cnt = cJSON_IsArray(*list) ? cJSON_GetArraySize(*list) : 0;
    *choices = cnt ? malloc((size_t)cnt * sizeof **choices) : NULL;
    for (const cJSON *x = *list && *choices ? (*list)->child : NULL; x && cJSON_IsString(x); x = x->next)
        (*choices)[(*n)++] = x->valuestring;
    if (!cnt || *n != cnt) {
        fprintf(stderr, "dsv4 generate: --choice must be a non-empty JSON array of strings\n");
        cJSON_Delete(*list);
        free(*choices);
        *list = NULL, *choices = NULL, *n = 0;
        return -1;
    }
    return 0;
}

/* The system message (text may be NULL), carrying the reply's format when there is one:
 * the template's Response Format section, as the server writes response_format. */
static int add_system(dsv4_chat *conv, const char *text, const char *schema, dsv4_err *err) {
    if (!schema) return text ? dsv4_chat_add(conv, "system", text, err) : 0;
    cJSON *m = cJSON_CreateObject(), *rf = cJSON_AddObjectToObject(m, "response_format");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON *sc = cJSON_Parse(schema);
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", text ? text : "");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON_AddStringToObject(js, "name", "output");
    if (sc) cJSON_AddItemToObject(js, "schema", sc);
    int rc = sc && js ? dsv4_chat_add_json(conv, m, err) : (err->code = DSV4_ERR_NOMEM);
    if (rc == DSV4_ERR_NOMEM && !sc) snprintf(err->msg, sizeof err->msg, "out of memory");
    cJSON_Delete(m);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_flags f;
    gen_flags_init(&f, 256, 0);
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    const char *schema_file = NULL, *regex = NULL, *choice = NULL, *grammar_file = NULL;
    int chat = 0, no_bos = 0, json = 0;
    const cli_opt own[] = {
        CLI_STR_OPT("prompt", 'p', &prompt, "TEXT", "the text to continue (or, with --chat, the question)"),
        CLI_FILE_OPT("prompt-file", 'f', &prompt_file, "FILE", "read the prompt from FILE"),
        CLI_FLAG_OPT("chat", 0, &chat, 1, "wrap the prompt in the chat template as one user turn"),
        CLI_STR_OPT("system", 0, &system, "TEXT", "system message (with --chat)"),
        CLI_FLAG_OPT("no-bos", 0, &no_bos, 1, "do not start a plain prompt with the BOS token"),
        CLI_FLAG_OPT("json", 0, &json, 1, "the reply is one JSON object (JSON mode; ask for it in the prompt too)"),
        CLI_FILE_OPT("json-schema", 0, &schema_file, "FILE", "the reply is one JSON value valid under the JSON Schema in FILE (the subset of README, Serving)"),
        CLI_STR_OPT("regex", 0, &regex, "RX", "the reply matches the regular expression RX whole (the pattern subset of README, Serving)"),
        CLI_STR_OPT("choice", 0, &choice, "JSON", "the reply is exactly one of the strings of the JSON array JSON"),
        CLI_FILE_OPT("grammar", 0, &grammar_file, "FILE", "the reply is a sentence of the GBNF grammar in FILE (start rule root; README, Serving)"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"generate", "--model DIR (--prompt TEXT | --prompt-file FILE) [options]",
                         "Streams the continuation of a prompt to standard output; load time, token\n"
                         "counts and speeds go to standard error. Ctrl-C stops early (exit status 130).",
                         {own, f.opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if ((prc = gen_flags_finish(&f, &cmd))) return prc;
    if (!prompt == !prompt_file) {
        fprintf(stderr, "dsv4 generate: give exactly one of --prompt and --prompt-file\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    char *schema = NULL;
    cJSON *choice_list = NULL;
    const char **choices = NULL;
    int n_choices = 0;
    char *grammar = NULL;
    if (guide_flags(regex, choice, grammar_file, json || schema_file, &choice_list, &choices, &n_choices, &grammar)) return 2;
    if (json_format(json, schema_file, &schema)) { cJSON_Delete(choice_list); free(choices); free(grammar); return 2; }
    char *file_text = NULL;
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (prompt_file) {
        char why[512];
        if (!(prompt = file_text = cli_read_input(prompt_file, CLI_TEXT_LIMIT, &prompt_len, why, sizeof why))) {
            fprintf(stderr, "dsv4 generate: %s\n", why);
            free(schema);
            cJSON_Delete(choice_list);
            free(choices);
            free(grammar);
            return 1;
        }
    }

    /* a plain prompt is tokenized byte for byte (a NUL is a token like any other); chat
     * messages are C strings, where a NUL would silently cut the question short */
    const char *nul = chat ? memchr(prompt, 0, prompt_len) : NULL;
    if (nul) {
        fprintf(stderr, "dsv4 generate: the prompt holds a NUL byte (byte %zu); --chat needs text\n",
                (size_t)(nul - prompt) + 1);
        free(file_text);
        free(schema);
        cJSON_Delete(choice_list);
        free(choices);
        free(grammar);
        return 2;
    }

    const double t_start = cli_now_s();
    dsv4_model *model;
    dsv4_tokenizer *tok;
    dsv4_engine *eng;
    int seq, status = 1;
    if (gen_open(&f, "generate", &model, &tok, &eng, &seq)) {
        free(file_text);
        free(schema);
        cJSON_Delete(choice_list);
        free(choices);
        free(grammar);
        return 1;
    }
    const double t_loaded = cli_now_s();
    if (gen_spec_open(&f, "generate", eng, seq)) goto out;
    dsv4_model_info info = dsv4_model_get_info(model);
    dsv4_err err = {0};
    dsv4_tok_ids ids = {0};
    int thinking = 0; /* the reply starts with reasoning */
    if (chat) {
        dsv4_chat_opts co = {.thinking = f.think == 1};
        dsv4_chat *conv = NULL;
        int reset;
        if (dsv4_chat_create(&co, &conv, &err) || add_system(conv, system, schema, &err) ||
            dsv4_chat_add(conv, "user", prompt, &err) ||
            dsv4_chat_next_ids(conv, tok, &ids, &reset, &err)) {
            fprintf(stderr, "dsv4 generate: %s\n", err.msg);
            dsv4_chat_free(conv);
            goto out;
        }
        thinking = dsv4_chat_gen_thinking(conv);
        dsv4_chat_free(conv);
    } else if (!no_bos && info.bos_token_id >= 0) {
        /* dsv4_tokenize appends to a growable list: start it with BOS */
        ids.ids = malloc(16 * sizeof *ids.ids);
        if (!ids.ids) { fprintf(stderr, "dsv4 generate: out of memory\n"); goto out; }
        ids.cap = 16;
        ids.ids[ids.n++] = info.bos_token_id;
    }
    /* a raw prompt keeps special-token strings live (documented); chat content does not */
    if (!chat && dsv4_tokenize(tok, prompt, prompt_len, &ids, &err)) {
        fprintf(stderr, "dsv4 generate: %s\n", err.msg);
        goto out;
    }
    if (ids.n == 0) { fprintf(stderr, "dsv4 generate: the prompt is empty\n"); status = 2; goto out; }
    if ((int64_t)ids.n >= f.max_context) {
        fprintf(stderr, "dsv4 generate: the prompt has %zu tokens; --max-context %lld leaves no room "
                        "for a reply\n", ids.n, (long long)f.max_context);
        status = 2;
        goto out;
    }

    struct sigaction sa = {0}, old_sa;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    f.gen.json_schema = schema;
    f.gen.json_after_think = thinking;
    f.gen.regex = regex;
    f.gen.choices = choices;
    f.gen.n_choices = n_choices;
    f.gen.grammar = grammar;
    gen_run run = {tok, cli_now_s(), 0, {0}};
    gen_printer_start(&run.out, thinking && f.max_tokens != 0, &interrupted);
    dsv4_generation_result res = {0};
    int rc;
    if (f.max_tokens == 0) {
        rc = prefill_only(eng, seq, ids.ids, (int)ids.n, f.gen.chunk, info.hidden_size, &err);
        res.prompt_tokens = dsv4_seq_length(eng, seq);
        res.prefill_seconds = cli_now_s() - run.start;
    } else {
        dsv4_generation_callbacks cb = {.user = &run, .text = print_or_stop, .progress = gen_progress,
                                        .token = f.gen.sample.n_logprobs ? print_logprobs : on_token};
        rc = dsv4_generation_run(eng, tok, seq, ids.ids, (int)ids.n, &f.gen, &cb, &res, &err);
    }
    const double t_end = cli_now_s();
    gen_printer_end(&run.out);
    sigaction(SIGINT, &old_sa, NULL);
    if (rc) {
        fprintf(stderr, "\ndsv4 generate: %s\n", err.msg);
        goto out;
    }
    printf("\n");
    fflush(stdout); /* the counts on stderr come after the text */
    if (interrupted) fprintf(stderr, "interrupted\n");
    else if (f.max_tokens != 0 && res.finish == DSV4_FINISH_NONE && dsv4_seq_length(eng, seq) >= f.max_context)
        fprintf(stderr, "stopped: the context is full (--max-context %lld)\n", (long long)f.max_context);
    fprintf(stderr, "load: %.2f s | prompt: %lld tokens, %.1f tokens/s | ", t_loaded - t_start,
            (long long)res.prompt_tokens,
            res.prefill_seconds > 0 ? res.prompt_tokens / res.prefill_seconds : 0.0);
    if (run.first_token > 0) fprintf(stderr, "first token: %.2f s | ", run.first_token - run.start);
    char mtp[160];
    gen_spec_stats(&res, mtp, sizeof mtp);
    fprintf(stderr, "generated: %lld tokens, %.2f tokens/s | total: %.2f s%s\n", (long long)res.gen_tokens,
            res.decode_seconds > 0 ? res.gen_tokens / res.decode_seconds : 0.0, t_end - t_start, mtp);
    free(res.ids);
    status = interrupted ? 130 : 0;
out:
    free(file_text);
    free(schema);
    cJSON_Delete(choice_list);
    free(choices);
    free(grammar);
    dsv4_tok_ids_free(&ids);
    dsv4_spec_free(f.gen.spec);
    dsv4_engine_free(eng);
    dsv4_tokenizer_free(tok);
    dsv4_model_close(model);
    return status;
}
