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

#include "commands.h"
#include "dsv4_internal.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsv4 gen-model (--config FILE | --preset demo) --out DIR [options]\n"
            "\n"
            "Writes DIR/config.json and DIR/model.safetensors with seeded random weights under\n"
            "the official DeepSeek-V4 tensor names.\n"
            "\n"
            "  --config FILE     model configuration (Hugging Face config.json)\n"
            "  --preset demo     built-in demo config: vocab 129280, hidden 256, layers\n"
            "                    SWA/CSA/HCA/CSA + MTP, window 128 (about 150 MB in bf16)\n"
            "  --out DIR         output directory (created if missing)\n"
            "  --seed N          random seed (default 0); same seed, same bytes\n"
            "  --dtype bf16|fp8  bf16: BF16 weights (default); fp8: the release layout, FP8\n"
            "                    e4m3 + 128x128 ue8m0 scales for attention/shared/MTP\n"
            "                    projections, packed FP4 + per-32 scales for routed experts\n"
            "  --tokenizer FILE  copy a tokenizer.json into DIR\n");
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) {
        fprintf(stderr, "dsv4 gen-model: cannot open %s: %s\n", from, strerror(errno));
        return 1;
    }
    FILE *out = fopen(to, "wb");
    if (!out) {
        fprintf(stderr, "dsv4 gen-model: cannot create %s: %s\n", to, strerror(errno));
        fclose(in);
        return 1;
    }
    char buf[1 << 16];
    size_t k;
    int ok = 1;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k) { ok = 0; break; }
    if (ferror(in)) ok = 0;
    fclose(in);
    if (fclose(out)) ok = 0;
    if (!ok) fprintf(stderr, "dsv4 gen-model: copying %s to %s failed: %s\n", from, to, strerror(errno));
    return ok ? 0 : 1;
}

int cmd_gen_model(int argc, char **argv) {
    const char *config = NULL, *preset = NULL, *out = NULL, *dtype = "bf16", *tokenizer = NULL;
    const char *seed_s = "0";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        const char **dst = !strcmp(a, "--config") ? &config : !strcmp(a, "--preset") ? &preset
                         : !strcmp(a, "--out") ? &out : !strcmp(a, "--dtype") ? &dtype
                         : !strcmp(a, "--seed") ? &seed_s : !strcmp(a, "--tokenizer") ? &tokenizer
                         : NULL;
        if (!dst) {
            fprintf(stderr, "dsv4 gen-model: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dsv4 gen-model: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!out) {
        fprintf(stderr, "dsv4 gen-model: --out DIR is required\n");
        usage(stderr);
        return 2;
    }
    if (!config == !preset) {
        fprintf(stderr, "dsv4 gen-model: give exactly one of --config FILE and --preset demo\n");
        return 2;
    }
    if (preset && strcmp(preset, "demo")) {
        fprintf(stderr, "dsv4 gen-model: unknown preset '%s' (known: demo)\n", preset);
        return 2;
    }
    dsv4_gen_opts o = {0};
    if (!strcmp(dtype, "bf16")) o.dtype = DSV4_GEN_BF16;
    else if (!strcmp(dtype, "fp8")) o.dtype = DSV4_GEN_FP8;
    else {
        fprintf(stderr, "dsv4 gen-model: --dtype must be bf16 or fp8, not '%s'\n", dtype);
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(seed_s, &end, 0);
    if (!*seed_s || *end || errno || seed_s[0] == '-') {
        fprintf(stderr, "dsv4 gen-model: --seed must be a non-negative integer, not '%s'\n", seed_s);
        return 2;
    }
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
           dtype, seed, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
