/* cmd_gen_model.c — `dsv4 gen-model`: a seeded random checkpoint for tests and demos.
 *
 *   dsv4 gen-model (--config FILE | --preset demo) --out DIR [--seed N] [--dtype bf16|fp8]
 *                  [--tokenizer FILE]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_opts.h"
#include "commands.h"
#include "dsv4_internal.h"

/* Copies a tokenizer.json (read whole: they are megabytes) so that it appears in DIR only
 * once complete. */
static int copy_file(const char *from, const char *to) {
    dsv4_err err = {0};
    size_t n;
    char *data = dsv4_read_regular_file(from, (size_t)1 << 30, &n, &err);
    if (!data || dsv4_write_file_atomic(to, data, n, &err)) {
        fprintf(stderr, "dsv4 gen-model: %s\n", err.msg);
        free(data);
        return 1;
    }
    free(data);
    return 0;
}

static int parse_preset(const char *v, void *dst, char *msg, size_t n) {
    if (strcmp(v, "demo")) { snprintf(msg, n, "unknown preset '%s' (known: demo)", v); return -1; }
    *(const char **)dst = v;
    return 0;
}

static int parse_dtype(const char *v, void *dst, char *msg, size_t n) {
    if (!strcmp(v, "bf16")) *(int *)dst = DSV4_GEN_BF16;
    else if (!strcmp(v, "fp8")) *(int *)dst = DSV4_GEN_FP8;
    else { snprintf(msg, n, "must be bf16 or fp8, not '%s'", v); return -1; }
    return 0;
}

int cmd_gen_model(int argc, char **argv) {
    const char *config = NULL, *preset = NULL, *out = NULL, *tokenizer = NULL;
    dsv4_gen_opts o = {0};
    int dtype = DSV4_GEN_BF16;
    uint64_t seed = 0;
    const cli_opt opts[] = {
        CLI_STR_OPT("config", 0, &config, "FILE", "model configuration (a Hugging Face config.json)"),
        CLI_FN_OPT("preset", 0, &preset, parse_preset, "demo", "", "built-in demo config: vocab 129280, hidden 256, layers "
                   "SWA/CSA/HCA/CSA + MTP, window 128 (about 150 MB in bf16)"),
        CLI_STR_OPT("out", 'o', &out, "DIR", "output directory (created if missing)"),
        CLI_U64_OPT("seed", 's', &seed, "N", "random seed; the same seed writes the same bytes"),
        CLI_FN_OPT("dtype", 0, &dtype, parse_dtype, "bf16|fp8", "bf16", "bf16: BF16 weights; fp8: the release layout, FP8 e4m3 "
                   "with 128x128 scales for attention/shared/MTP projections, "
                   "packed FP4 with per-32 scales for routed experts"),
        CLI_STR_OPT("tokenizer", 0, &tokenizer, "FILE", "copy this tokenizer.json into DIR"),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {"gen-model", "(--config FILE | --preset demo) --out DIR [options]",
                         "Writes DIR/config.json and DIR/model.safetensors with seeded random weights\n"
                         "under the official DeepSeek-V4 tensor names.", {opts}};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc >= 0) return prc;
    if (!out) {
        fprintf(stderr, "dsv4 gen-model: --out DIR is required\n");
        cli_short_usage(&cmd, stderr);
        return 2;
    }
    if (!config == !preset) {
        fprintf(stderr, "dsv4 gen-model: give exactly one of --config FILE and --preset demo\n");
        return 2;
    }
    o.dtype = dtype;
    o.seed = seed;

    dsv4_config cfg;
    dsv4_err err = {0};
    if (preset) {
        dsv4_gen_demo_config(&cfg);
    } else if (dsv4_config_load(config, &cfg, &err)) {
        fprintf(stderr, "dsv4 gen-model: %s\n", err.msg);
        return 1;
    }
    uint64_t bytes = 0;
    if (dsv4_gen_file_size(&cfg, &o, &bytes, &err)) {
        fprintf(stderr, "dsv4 gen-model: %s\n", err.msg);
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (dsv4_gen_model(&cfg, &o, out, &err)) {
        fprintf(stderr, "dsv4 gen-model: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (tokenizer) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", out);
        if (copy_file(tokenizer, path)) return 1;
    }
    printf("wrote %s/model.safetensors: %.1f MB, %s, seed %llu, %.2f s\n", out, (double)bytes / 1e6,
           dtype == DSV4_GEN_FP8 ? "fp8" : "bf16", (unsigned long long)seed, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
