/* gen_flags.c — flags and setup shared by `dsv4 generate` and `dsv4 chat`. */
#include "gen_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"

const char *gen_flags_help(void) {
    return "  --model DIR            model directory (config.json, safetensors, tokenizer.json)\n"
           "  --tokenizer FILE       tokenizer.json (default: DIR/tokenizer.json)\n"
           "  -n, --max-tokens N     most tokens to generate (default 256)\n"
           "  --temperature T        0 = greedy (default 0.6)\n"
           "  --top-k K  --top-p P  --min-p P\n"
           "  --repeat-penalty R  --frequency-penalty F  --presence-penalty P\n"
           "  --seed S               sampling seed (default 0)\n"
           "  --stop STR             stop string (repeatable)\n"
           "  --logprobs N           print the N best log-probabilities of each token to stderr\n"
           "  --think | --nothink    thinking or chat mode of the chat template\n"
           "  --threads T  --max-context N  --chunk C\n"
           "  --w8a8 | --w8a8-all    P2 W8A8 fast path (INT8 weights and activations; -all also\n"
           "                         wq_a, wkv, wo_a)\n"
           "  --fidelity SET         P3 fidelity mode (official rounding simulation): official,\n"
           "                         none, or a comma list of F1..F5\n"
           "  --mtp on|off           MTP speculative decoding (default: on when the checkpoint\n"
           "                         has an MTP block); the tokens are the same either way\n";
}

static int num(const char *cmd, const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = v ? strtod(v, &end) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "dsv4 %s: %s needs a number in [%g, %g], got '%s'\n", cmd, flag, lo, hi,
                v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int gen_flags_take(gen_flags *f, int argc, char **argv, int *i, const char *cmd) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    double x;
    dsv4_sample_params *sp = &f->gen.sample;
#define NUMFLAG(name, lo, hi, dst)                                   \
    if (!strcmp(a, name)) {                                          \
        if (num(cmd, a, v, lo, hi, &x)) return -1;                   \
        dst;                                                         \
        (*i)++;                                                      \
        return 1;                                                    \
    }
    if (!strcmp(a, "--think")) { f->think = 1; return 1; }
    if (!strcmp(a, "--nothink")) { f->think = 0; return 1; }
    if (!strcmp(a, "--w8a8")) { f->w8a8 = 1; return 1; }
    if (!strcmp(a, "--w8a8-all")) { f->w8a8 = 2; return 1; }
    if (!strcmp(a, "--fidelity")) {
        dsv4_err err = {0};
        if (!v) { fprintf(stderr, "dsv4 %s: --fidelity needs a value\n", cmd); return -1; }
        if (dsv4_fidelity_parse(v, &f->fidelity, &err)) {
            fprintf(stderr, "dsv4 %s: --%s\n", cmd, err.msg);
            return -1;
        }
        (*i)++;
        return 1;
    }
    if (!strcmp(a, "--mtp")) {
        if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
            fprintf(stderr, "dsv4 %s: --mtp needs on or off, got '%s'\n", cmd, v ? v : "");
            return -1;
        }
        f->mtp = !strcmp(v, "on") ? 1 : -1;
        (*i)++;
        return 1;
    }
    if (!strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--stop")) {
        if (!v) { fprintf(stderr, "dsv4 %s: %s needs a value\n", cmd, a); return -1; }
        if (!strcmp(a, "--model")) f->model_dir = v;
        else if (!strcmp(a, "--tokenizer")) f->tokenizer = v;
        else {
            if (f->gen.n_stop == GEN_MAX_STOPS || !*v) {
                fprintf(stderr, "dsv4 %s: at most %d non-empty --stop strings\n", cmd, GEN_MAX_STOPS);
                return -1;
            }
            f->stops[f->gen.n_stop++] = v;
            f->gen.stop_strings = f->stops;
        }
        (*i)++;
        return 1;
    }
    NUMFLAG("-n", 0, 1e9, f->gen.max_tokens = (int)x)
    NUMFLAG("--max-tokens", 0, 1e9, f->gen.max_tokens = (int)x)
    NUMFLAG("--temperature", 0, 100, sp->temperature = (float)x)
    NUMFLAG("--top-k", 0, 1e9, sp->top_k = (int)x)
    NUMFLAG("--top-p", 0, 1, sp->top_p = (float)x)
    NUMFLAG("--min-p", 0, 1, sp->min_p = (float)x)
    NUMFLAG("--repeat-penalty", 0, 100, sp->repetition_penalty = (float)x)
    NUMFLAG("--frequency-penalty", -100, 100, sp->frequency_penalty = (float)x)
    NUMFLAG("--presence-penalty", -100, 100, sp->presence_penalty = (float)x)
    NUMFLAG("--seed", 0, 1.8e19, sp->seed = (uint64_t)x)
    NUMFLAG("--logprobs", 0, DSV4_MAX_LOGPROBS, sp->n_logprobs = (int)x)
    NUMFLAG("--threads", 1, 1024, f->threads = (int)x)
    NUMFLAG("--max-context", 16, 1e9, f->max_context = (long long)x)
    NUMFLAG("--chunk", 1, 1e6, f->gen.chunk = (int)x)
#undef NUMFLAG
    return 0;
}

int gen_open(const gen_flags *f, const char *cmd, dsv4_model **model, dsv4_tokenizer **tok,
             dsv4_engine **eng, int *seq) {
    dsv4_err err = {0};
    char path[4200];
    *model = NULL; *tok = NULL; *eng = NULL;
    if (dsv4_model_open(f->model_dir, model, &err)) goto fail;
    if (*dsv4_model_warnings(*model)) fprintf(stderr, "dsv4 %s: warning: %s\n", cmd, dsv4_model_warnings(*model));
    if (f->tokenizer) snprintf(path, sizeof path, "%s", f->tokenizer);
    else snprintf(path, sizeof path, "%s/tokenizer.json", f->model_dir);
    if (dsv4_tokenizer_load(path, tok, &err)) goto fail;
    dsv4_engine_opts eo = {0};
    eo.max_context = f->max_context > 0 ? f->max_context : 4096;
    eo.max_seqs = 1;
    eo.threads = f->threads;
    eo.w8a8 = f->w8a8;
    eo.fidelity = f->fidelity;
    const int has_mtp = dsv4_model_get_info(*model).n_mtp > 0;
    if (f->mtp > 0 && !has_mtp) {
        snprintf(err.msg, sizeof err.msg, "--mtp on: the model has no MTP block");
        goto fail;
    }
    eo.mtp = f->mtp == 0 ? has_mtp : f->mtp > 0;
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

int gen_print(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}
