/* gen_flags.c — options and setup shared by `dsv4 generate` and `dsv4 chat`. */
#include "gen_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"

static int parse_mtp(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "on")) *(int *)dst = 1;
    else if (!strcmp(v, "off")) *(int *)dst = -1;
    else { snprintf(msg, n, "needs on or off, not '%s'", v); return -1; }
    return 0;
}

void gen_flags_init(gen_flags *f, int max_tokens, int warmup) {
    memset(f, 0, sizeof *f);
    f->max_tokens = max_tokens;
    f->warmup = warmup;
    f->max_context = 4096;
    f->gen.sample.temperature = 0.6f;
    f->gen.sample.top_p = 1.0f;
    f->gen.sample.repetition_penalty = 1.0f;
    dsv4_sample_params *sp = &f->gen.sample;
    const cli_opt t[] = {
        CLI_STR_OPT("model", 'm', &f->model_dir, "DIR", "model directory (config.json, safetensors, tokenizer.json)"),
        CLI_STR_OPT("tokenizer", 0, &f->tokenizer, "FILE", "tokenizer.json", .def = "DIR/tokenizer.json"),
        CLI_INT_OPT("max-tokens", 'n', &f->max_tokens, -1, 1e9, "N", "most tokens to generate per reply; 0 generates nothing, -1 runs until a stop or a full context"),
        CLI_FLOAT_OPT("temperature", 0, &sp->temperature, 0, 100, "T", "sampling temperature; 0 always takes the likeliest token"),
        CLI_INT_OPT("top-k", 0, &sp->top_k, 0, 1e9, "K", "sample from the K likeliest tokens only; 0 = all"),
        CLI_FLOAT_OPT("top-p", 0, &sp->top_p, 0, 1, "P", "nucleus sampling: the likeliest tokens holding P of the probability; 1 = all"),
        CLI_FLOAT_OPT("min-p", 0, &sp->min_p, 0, 1, "P", "drop tokens less likely than P times the likeliest; 0 = off"),
        CLI_FLOAT_OPT("repeat-penalty", 0, &sp->repetition_penalty, 0, 100, "R", "divide the scores of tokens already seen by R; 1 = off"),
        CLI_FLOAT_OPT("frequency-penalty", 0, &sp->frequency_penalty, -100, 100, "F", "subtract F per earlier occurrence of a token"),
        CLI_FLOAT_OPT("presence-penalty", 0, &sp->presence_penalty, -100, 100, "P", "subtract P from every token seen before"),
        CLI_U64_OPT("seed", 's', &sp->seed, "S", "sampling seed: the same seed gives the same text"),
        CLI_LIST_OPT("stop", 0, f->stops, &f->gen.n_stop, GEN_MAX_STOPS, "TEXT", "stop when the reply produces TEXT"),
        CLI_INT_OPT("logprobs", 0, &sp->n_logprobs, 0, DSV4_MAX_LOGPROBS, "N", "print each token with its N likeliest alternatives to stderr"),
        CLI_FLAG_OPT("think", 0, &f->think, 1, "let the model reason before it answers (thinking mode)"),
        CLI_FLAG_OPT("nothink", 0, &f->think, 0, "answer directly (chat mode)"),
        CLI_INT_OPT("threads", 't', &f->threads, 0, 1024, "N", "worker threads", .def = "the cores this process may use"),
        CLI_FLAG_OPT("pin-threads", 0, &f->pin_threads, 1, "pin worker thread i to the i-th CPU of the affinity mask (CPU 0 stays with the calling thread)"),
        CLI_I64_OPT("max-context", 'c', &f->max_context, 16, 1LL << 30, "N", "longest conversation in tokens (cache size)"),
        CLI_INT_OPT("chunk", 0, &f->gen.chunk, 0, 1 << 20, "N", "prompt tokens per model call; 0 = up to 2048"),
        CLI_FLAG_OPT("warmup", 0, &f->warmup, 1, "read all weights into memory before the first token, with progress"),
        CLI_FLAG_OPT("no-warmup", 0, &f->warmup, 0, "let the weights page in as the model first uses them"),
        CLI_FLAG_OPT("mlock", 0, &f->mlock, 1, "pin the weights in memory (needs `ulimit -l` as large as the weights)"),
        CLI_FLAG_OPT("w8a8", 0, &f->w8a8, 1, "faster, approximate: INT8 weights and activations for the large projections and the experts"),
        CLI_FLAG_OPT("w8a8-all", 0, &f->w8a8, 2, "the same for every projection"),
        CLI_FN_OPT("mtp", 0, &f->mtp, parse_mtp, "on|off", "on when the checkpoint has an MTP block", "MTP speculative decoding: the same tokens, fewer model steps"),
        CLI_FN_OPT("numa", 0, &f->numa, cli_parse_numa, "auto|none|interleave", "auto", "NUMA placement of the weights: interleave spreads their pages over the memory nodes; auto = interleave when there are several, none = the OS default"),
        CLI_FN_OPT("kv-dtype", 0, &f->kv_dtype, cli_parse_kv_dtype, "f32|bf16|fp8[+fp4]", "bf16", "KV cache storage: f32 (the reference), bf16 (half the bytes) or fp8 (FP8-split rows, BF16 indexer keys); +fp4: FP4 indexer keys (with --fidelity F3 only)"),
        CLI_FP4_LAYOUT_OPT(&f->fp4_layout),
        CLI_FN_OPT("fidelity", 0, &f->fidelity, cli_parse_fidelity, "SET", "none", "simulate the official model's FP8/BF16 roundings: official, none, or a comma list of F1..F5"),
        CLI_OPT_END,
    };
    _Static_assert(sizeof t / sizeof t[0] <= GEN_MAX_OPTS, "gen_flags: grow GEN_MAX_OPTS");
    memcpy(f->opts, t, sizeof t);
}

int gen_flags_finish(gen_flags *f, const cli_cmd *c) {
    if (!f->model_dir) {
        fprintf(stderr, "dsv4 %s: --model DIR is required\n", c->name);
        cli_short_usage(c, stderr);
        return 2;
    }
    f->gen.stop_strings = f->stops;
    f->gen.max_tokens = f->max_tokens > 0 ? f->max_tokens : 0;
    return 0;
}

int gen_open(const gen_flags *f, const char *cmd, dsv4_model **model, dsv4_tokenizer **tok,
             dsv4_engine **eng, int *seq) {
    dsv4_err err = {0};
    char path[4200];
    *model = NULL; *tok = NULL; *eng = NULL;
    cli_warn_threads(cmd, f->threads);
    if (dsv4_model_open(f->model_dir, model, &err)) goto fail;
    if (*dsv4_model_warnings(*model)) fprintf(stderr, "dsv4 %s: warning: %s\n", cmd, dsv4_model_warnings(*model));
    if (cli_prepare_weights(cmd, *model, f->warmup, f->mlock, f->threads, 0, 1)) {
        dsv4_model_close(*model);
        *model = NULL;
        return -1;
    }
    if (f->tokenizer) snprintf(path, sizeof path, "%s", f->tokenizer);
    else snprintf(path, sizeof path, "%s/tokenizer.json", f->model_dir);
    if (dsv4_tokenizer_load(path, tok, &err)) goto fail;
    dsv4_engine_opts eo = {0};
    eo.max_context = f->max_context;
    eo.max_seqs = 1;
    eo.threads = f->threads;
    eo.pin_threads = f->pin_threads;
    eo.kv_dtype = f->kv_dtype;
    eo.numa = f->numa;
    eo.fp4_layout = f->fp4_layout;
    eo.w8a8 = f->w8a8;
    eo.fidelity = f->fidelity;
    const int has_mtp = dsv4_model_get_info(*model).n_mtp > 0;
    if (f->mtp > 0 && !has_mtp) {
        snprintf(err.msg, sizeof err.msg, "--mtp on: the model has no MTP block");
        goto fail;
    }
    eo.mtp = f->mtp == 0 ? has_mtp : f->mtp > 0;
    cli_warn_fit(cmd, *model, &eo);
    cli_progress prep;
    cli_progress_start(&prep, "preparing the INT8 weights");
    if (eo.w8a8) eo.progress = cli_progress_show, eo.progress_user = &prep;
    if (dsv4_engine_create(*model, &eo, eng, &err)) goto fail;
    if (dsv4_seq_create(*eng, seq, &err)) goto fail;
    return 0;
fail:
    fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
    dsv4_engine_free(*eng);
    dsv4_tokenizer_free(*tok);
    dsv4_model_close(*model);
    *model = NULL; *tok = NULL; *eng = NULL;
    return -1;
}

int gen_spec_open(gen_flags *f, const char *cmd, dsv4_engine *eng, int seq) {
    dsv4_err err = {0};
    dsv4_spec_free(f->gen.spec);
    f->gen.spec = NULL;
    if (!dsv4_engine_get_opts(eng).mtp) return 0;
    if (dsv4_spec_create(eng, seq, &f->gen.spec, &err)) {
        fprintf(stderr, "dsv4 %s: %s\n", cmd, err.msg);
        return -1;
    }
    return 0;
}

void gen_spec_stats(const dsv4_generation_result *res, char *buf, size_t n) {
    const dsv4_spec_stats *s = &res->spec;
    if (!s->steps) { if (n) buf[0] = 0; return; }
    snprintf(buf, n, " | MTP: %lld/%lld drafts accepted (%.1f%%), %.3f tokens/step",
             (long long)s->accepted, (long long)s->drafts,
             s->drafts ? 100.0 * (double)s->accepted / (double)s->drafts : 0.0,
             (double)s->tokens / (double)s->steps);
}

void gen_progress(void *user, int64_t done, int64_t total) {
    (void)user;
    if (total < 256 || !isatty(2)) return;
    fprintf(stderr, "\rprefill %lld/%lld tokens (%d%%)%s", (long long)done, (long long)total,
            (int)(100 * done / total), done == total ? "\n" : "");
}

static const char THINK_END[] = "</think>";

static void put(const char *s, size_t n) { fwrite(s, 1, n, stdout); }

void gen_printer_start(gen_printer *p, int thinking, const volatile sig_atomic_t *stop) {
    memset(p, 0, sizeof *p);
    p->thinking = thinking;
    p->tty = isatty(1);
    p->stop = stop;
    if (thinking) fputs(p->tty ? "\033[2m" : "[reasoning]\n", stdout);
    fflush(stdout);
}

int gen_printer_text(void *user, const char *text, size_t len) {
    gen_printer *p = user;
    if (!p->thinking) {
        put(text, len);
    } else {
        for (size_t i = 0; i < len; i++) {
            p->hold[p->n_hold++] = text[i];
            /* emit what can no longer start the tag */
            while (p->n_hold && memcmp(p->hold, THINK_END, p->n_hold)) {
                put(p->hold, 1);
                memmove(p->hold, p->hold + 1, --p->n_hold);
            }
            if (p->n_hold == sizeof THINK_END - 1) {
                p->n_hold = 0;
                p->thinking = 0;
                fputs(p->tty ? "\033[0m\n\n" : "\n[answer]\n", stdout);
                put(text + i + 1, len - i - 1);
                break;
            }
        }
    }
    fflush(stdout);
    return p->stop && *p->stop;
}

void gen_printer_end(gen_printer *p) {
    put(p->hold, p->n_hold);
    p->n_hold = 0;
    if (p->thinking && p->tty) fputs("\033[0m", stdout);
    p->thinking = 0;
    fflush(stdout);
}
