/* bench_tools.c — the cost of strict tool calls a token (tool_match.c's mask) at the real
 * vocabulary.
 *
 *   bench_tools --tokenizer PATH [--reps N]
 *
 * A tool_calls block as the encoder writes it (a strict tool: an enum, an integer, a nested
 * object, a plain string, a constrained one) is tokenized and replayed token by token
 * through tm_mask, and each token's time is put in the class of the state it was masked in:
 * markup (the tags, names, branches), plain string (a value inside an unconstrained
 * string, raw or JSON), constrained string (maxLength / pattern: the whole trie walked),
 * JSON (the rest of a value), tag (bytes of the closing tag pending). Per class: tokens,
 * median and max over them of the best of --reps replays (ms). One JSON line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h"
#include "dsv4_text.h"

#define DS "｜DSML｜"
#define TOOLS "[{\"type\":\"function\",\"function\":{\"name\":\"book_room\",\"strict\":true,\"parameters\":" \
    "{\"type\":\"object\",\"properties\":{\"room\":{\"enum\":[\"single\",\"double\",\"suite\"]}," \
    "\"nights\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":30},\"guest\":{\"type\":\"object\",\"properties\":" \
    "{\"name\":{\"type\":\"string\"},\"vip\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"vip\"]," \
    "\"additionalProperties\":false},\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"}," \
    "\"note\":{\"type\":\"string\"}},\"required\":[\"room\",\"nights\",\"guest\",\"code\",\"note\"]," \
    "\"additionalProperties\":false}}}]"
#define P(k, s, v) "<" DS "parameter name=\"" k "\" string=\"" s "\">" v "</" DS "parameter>\n"
#define DOC "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"book_room\">\n" P("room", "true", "double") \
    P("nights", "false", "3") P("guest", "false", "{\"name\": \"Ada Lovelace\", \"vip\": true}") \
    P("code", "true", "ABC-1234") \
    P("note", "true", "Late arrival, around 11 pm; please keep the room and a quiet floor if you can.") \
    "</" DS "invoke>\n</" DS "tool_calls>"

enum { C_MARKUP, C_PLAIN, C_CSTR, C_JSON, C_TAG, N_CLASS };
static const char *const NAMES[N_CLASS] = {"markup", "plain_string", "constrained_string", "json", "tag"};

static int klass(const tm_state *st) {
    int u;
    json_frame fr;
    if (st->phase != TP_VALUE) return C_MARKUP;
    if (st->k) return C_TAG;
    if (json_state_in_string(&st->js, &u)) return C_PLAIN;
    if (json_state_in_cstr(&st->js, &fr)) return C_CSTR;
    return C_JSON;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else path = NULL, i = argc;
    }
    if (!path || reps < 1) { fprintf(stderr, "usage: bench_tools --tokenizer PATH [--reps N]\n"); return 2; }
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    tm_tools *t = NULL;
    dsv4_tok_ids ids = {0};
    if (dsv4_tokenizer_load(path, &tok, &err) || tm_compile(TOOLS, strlen(TOOLS), TM_REQUIRED, 0, &t, &err) ||
        dsv4_tokenize(tok, DOC, strlen(DOC), &ids, &err)) {
        fprintf(stderr, "bench_tools: %s\n", err.msg);
        return 1;
    }
    json_vocab *jv = json_vocab_build(tok);
    tm_walk w;
    tm_state *st = malloc(2 * sizeof *st);
    uint64_t *bits = jv ? malloc((size_t)jv->words * sizeof *bits) : NULL;
    const int n = (int)ids.n;
    double *best = malloc(sizeof *best * (size_t)n);
    int *cls = malloc(sizeof *cls * (size_t)n);
    if (!jv || !st || !bits || !best || !cls || tm_walk_init(&w, jv, tok, JSON_MAX_STACKS)) { fprintf(stderr, "bench_tools: out of memory\n"); return 1; }
    for (int i = 0; i < n; i++) best[i] = 1e9;
    for (int r = 0; r < reps; r++) {
        tm_state_init(t, &st[0]);
        int cur = 0;
        for (int i = 0; i < n; i++) {
            cls[i] = klass(&st[cur]);
            const double t0 = now_s();
            tm_mask(t, jv, &w, &st[cur], bits, tok);
            const double dt = now_s() - t0;
            if (dt < best[i]) best[i] = dt;
            if (!(bits[ids.ids[i] >> 6] >> (ids.ids[i] & 63) & 1)) { fprintf(stderr, "bench_tools: token %d refused\n", i); return 1; }
            size_t len = 0;
            const char *b = dsv4_tok_id_bytes(tok, ids.ids[i], &len);
            if (!tm_state_feed(t, st, &cur, (const uint8_t *)b, len)) return 1;
        }
        if (!tm_state_accepting(t, &st[cur])) { fprintf(stderr, "bench_tools: the block is not complete\n"); return 1; }
    }
    printf("{\"bench\":\"tool_mask\",\"tokens\":%d,\"reps\":%d", n, reps);
    double total = 0;
    for (int c = 0; c < N_CLASS; c++) {
        double *x = malloc(sizeof *x * (size_t)n);
        int m = 0;
        for (int i = 0; i < n; i++) if (cls[i] == c) x[m++] = best[i];
        qsort(x, (size_t)m, sizeof *x, cmp_double);
        for (int i = 0; i < m; i++) total += x[i];
        printf(",\"%s\":{\"tokens\":%d,\"median_ms\":%.4f,\"max_ms\":%.4f}", NAMES[c], m, m ? 1e3 * x[m / 2] : 0,
               m ? 1e3 * x[m - 1] : 0);
        free(x);
    }
    printf(",\"mean_ms\":%.4f}\n", 1e3 * total / n);
    tm_walk_free(&w);
    tm_free(t);
    json_vocab_free(jv);
    dsv4_tok_ids_free(&ids);
    dsv4_tokenizer_free(tok);
    free(st), free(bits), free(best), free(cls);
    return 0;
}
