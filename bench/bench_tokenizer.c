/* bench_tokenizer.c — tokenizer throughput on ~1 MB of varied text.
 *
 *   bench_tokenizer [--tokenizer FILE] [--text FILE] [--mb N] [--reps N]
 *
 * Without --text, N MB (default 1) are synthesised from English, code, numbers, CJK,
 * Cyrillic, Arabic and emoji fragments, shuffled by a fixed-seed PRNG with random numbers
 * and identifiers mixed in, so that not every pre-token repeats. Prints one JSON line:
 * load time, encode MB/s and tokens/s (best of --reps runs, by wall clock and by process
 * CPU time), decode MB/s. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv4_internal.h"
#include "dsv4_text.h"

#ifndef DSV4_DEFAULT_SHARED
#define DSV4_DEFAULT_SHARED "../shared"
#endif

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU time of this process: on a shared machine it says more than the wall clock. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static const char *fragments[] = {
    "The quick brown fox jumps over the lazy dog. ",
    "It was the best of times, it was the worst of times, it was the age of wisdom. ",
    "Researchers reported that the new model's accuracy improved by a wide margin.\n\n",
    "for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n}\n",
    "def main(argv):\n\tif len(argv) < 2:\n\t\treturn 1\n\treturn run(argv[1:])\n",
    "{\"id\": 42, \"name\": \"widget\", \"tags\": [\"a\", \"b\"], \"price\": 19.99}\n",
    "人工智能是计算机科学的一个分支，它企图了解智能的实质。",
    "日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. ",
    "مرحبا بالعالم! هذا نص عربي للاختبار. ",
    "Emoji time 😀🎉👍🏽 and flags 🇺🇸🇯🇵! ",
    "  indented    with   runs of spaces\r\n\r\n",
    "SELECT id, name FROM users WHERE created_at >= '2024-01-01';\n",
    "https://example.com/path?q=tokenizer&lang=en#frag ",
};

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static char *synthesise(size_t target, size_t *len) {
    char *buf = malloc(target + 256);
    size_t n = 0;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    size_t nf = sizeof fragments / sizeof fragments[0];
    while (n < target) {
        uint64_t r = rng_next(&s);
        switch (r % 8) {
        case 0:  // a number of 1..12 digits
            n += (size_t)sprintf(buf + n, "%llu ", (unsigned long long)(rng_next(&s) % 1000000000000ull));
            break;
        case 1: {  // a made-up identifier
            int k = 3 + (int)(rng_next(&s) % 10);
            buf[n++] = ' ';
            for (int i = 0; i < k; i++) buf[n++] = (char)('a' + rng_next(&s) % 26);
            break;
        }
        default: {
            const char *f = fragments[rng_next(&s) % nf];
            size_t fl = strlen(f);
            memcpy(buf + n, f, fl);
            n += fl;
        }
        }
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    const char *tok_path = NULL, *text_path = NULL;
    double mb = 1.0;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text_path = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_tokenizer [--tokenizer FILE] [--text FILE] [--mb N] [--reps N]\n");
            return 2;
        }
    }
    char def_path[1024];
    if (!tok_path) {
        const char *sh = getenv("DSV4_SHARED");
        snprintf(def_path, sizeof def_path, "%s/tokenizer/tokenizer.json", sh ? sh : DSV4_DEFAULT_SHARED);
        tok_path = def_path;
    }
    if (reps < 1) reps = 1;

    dsv4_err err = {0};
    dsv4_tokenizer *tok;
    double t0 = now_s();
    if (dsv4_tokenizer_load(tok_path, &tok, &err)) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    double load_s = now_s() - t0;

    size_t len;
    char *text = text_path ? dsv4_read_file(text_path, 0, &len, NULL) : synthesise((size_t)(mb * 1e6), &len);
    if (!text) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", text_path);
        return 1;
    }

    dsv4_tok_ids ids = {0};
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < reps; r++) {
        ids.n = 0;
        t0 = now_s();
        double c0 = cpu_s();
        if (dsv4_tokenize(tok, text, len, &ids, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        double dc = cpu_s() - c0, dt = now_s() - t0;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }

    double dec_best = 1e30;
    int same = 0;
    for (int r = 0; r < reps; r++) {
        char *back;
        size_t blen;
        t0 = now_s();
        if (dsv4_detokenize(tok, ids.ids, ids.n, 0, &back, &blen, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < dec_best) dec_best = dt;
        same = blen == len && memcmp(back, text, len) == 0;
        free(back);
    }

    printf("{\"bench\": \"tokenizer\", \"bytes\": %zu, \"tokens\": %zu, \"load_ms\": %.1f, "
           "\"encode_s\": %.4f, \"encode_mb_per_s\": %.2f, \"tokens_per_s\": %.0f, "
           "\"encode_cpu_s\": %.4f, \"encode_cpu_mb_per_s\": %.2f, "
           "\"decode_mb_per_s\": %.1f, \"roundtrip\": %s}\n",
           len, ids.n, load_s * 1e3, best, len / best / 1e6, ids.n / best, best_cpu, len / best_cpu / 1e6,
           len / dec_best / 1e6, same ? "true" : "false");
    dsv4_tok_ids_free(&ids);
    free(text);
    dsv4_tokenizer_free(tok);
    return same ? 0 : 1;
}
