/* bench_tools.c — the cost of strict tool calls a token (tool_match.c's mask) at the real
 * vocabulary.
 *
 *   bench_tools --tokenizer PATH [--reps N] [--case SUBSTR] [--ref] [--check]
 *
 * --ref times tm_mask_walk (the reference: the whole trie stepped with the whole state)
 * instead of tm_mask; --check compares the two at every token (exit 1 on a difference).
 *
 * Each case is a request's tools and a tool_calls block as the encoder writes it; the block
 * is tokenized and replayed token by token through tm_mask, and each token's time is put in
 * the class of the state it was masked in: markup (the tags, names, branches), plain string
 * (a value inside an unconstrained string, raw or JSON), constrained string (maxLength /
 * pattern: one reading in it), JSON (the rest of a value: several readings, keys, numbers),
 * tag (bytes of the closing tag pending). The cases:
 *   book_room   a strict tool with an enum, a bounded integer, a nested object, a pattern
 *               string and a 90-character free note;
 *   str200      one strict parameter {"type": "string", "maxLength": 200}, a 150-character
 *               note (rv-smx4's case);
 *   union30     one strict parameter, a oneOf of 30 objects whose "note" (maxLength 200)
 *               comes first and "k" (a const) after it: 30 readings through the note;
 *   several     six strict parameters: lengths, a format, an enum array, an integer, an object;
 *   free_strict a free tool (no strict: any names, any values) called beside a strict one;
 *   str_or_enum a JSON value (string="false") whose readings are a literal and a string at once;
 *   doc / doc_call  response_format beside tools (tool_choice auto, tm_set_doc): book_room's
 *               tools and an order's schema, answered by the document (leading whitespace read
 *               as both, then the document) or by a call (the opener read as both first);
 *   allowed_free  allowed_tools over a tool that is not strict (the block constrained for its
 *               names alone): free text, then a call with free names and values (AUTO).
 * Classes besides: doc (the document alone), both (the opener and the document at once),
 * free (AUTO's free text: what dsv4_gen checks there, the ids with a '>' fed one by one).
 * Per case and class: tokens, median and max over them of the best of --reps replays (ms),
 * each replay with a fresh walk (its caches empty, as at a request's start).
 * One JSON line a case. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h"
#include "dsv4_text.h"

#define DS "｜DSML｜"
#define P(k, s, v) "<" DS "parameter name=\"" k "\" string=\"" s "\">" v "</" DS "parameter>\n"
#define HEAD(name) "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"" name "\">\n"
#define TAIL "</" DS "invoke>\n</" DS "tool_calls>"
#define FN(name, strict, params) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\"" strict \
    ",\"parameters\":" params "}}"
#define STRICT ",\"strict\":true"
#define OBJ(props, req) "{\"type\":\"object\",\"properties\":{" props "},\"required\":[" req "]," \
    "\"additionalProperties\":false}"
#define NOTE "Late arrival, around 11 pm; please keep the room and a quiet floor if you can. The guest " \
    "travels with a small dog and asks for extra towels."
#define UNION_TEXT "Enjoys long walks, short programs and the quiet of early mornings; writes C for fun."

/* doc: the text replayed; mode TM_REQUIRED (0: the default) or TM_AUTO; schema: the JSON
 * document beside AUTO tools, or NULL */
typedef struct tcase { const char *name, *tools, *doc; int mode; const char *schema; } tcase;

#define BOOK_TOOLS "[" FN("book_room", STRICT, OBJ("\"room\":{\"enum\":[\"single\",\"double\",\"suite\"]},\"nights\":{\"type\":" \
    "\"integer\",\"minimum\":1,\"maximum\":30},\"guest\":" OBJ("\"name\":{\"type\":\"string\"},\"vip\":{\"type\":" \
    "\"boolean\"}", "\"name\",\"vip\"") ",\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"}," \
    "\"note\":{\"type\":\"string\"}", "\"room\",\"nights\",\"guest\",\"code\",\"note\"")) "]"
#define BOOK_CALL HEAD("book_room") P("room", "true", "double") P("nights", "false", "3") \
    P("guest", "false", "{\"name\": \"Ada Lovelace\", \"vip\": true}") P("code", "true", "ABC-1234") \
    P("note", "true", "Late arrival, around 11 pm; please keep the room and a quiet floor if you can.") TAIL
#define ORDER "{\"type\":\"object\",\"properties\":{\"size\":{\"enum\":[\"small\",\"large\"]},\"qty\":" \
    "{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},\"note\":{\"type\":\"string\",\"maxLength\":120}," \
    "\"gift\":{\"type\":\"boolean\"}},\"required\":[\"size\",\"qty\",\"note\",\"gift\"],\"additionalProperties\":false}"

static const tcase CASES[] = {
    {"book_room", BOOK_TOOLS, BOOK_CALL, 0, NULL},
    {"str200", "[" FN("take_note", STRICT, OBJ("\"note\":{\"type\":\"string\",\"maxLength\":200}", "\"note\"")) "]",
     HEAD("take_note") P("note", "true", NOTE) TAIL, 0, NULL},
    {"union30", NULL, HEAD("record") P("item", "false", "{\"note\": \"" UNION_TEXT "\", \"k\": 29, \"v\": 2.5}") TAIL, 0, NULL},
    {"several",
     "[" FN("file_ticket", STRICT, OBJ("\"title\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":80},\"tags\":"
     "{\"type\":\"array\",\"items\":{\"enum\":[\"bug\",\"ui\",\"crash\",\"perf\"]},\"maxItems\":3},\"priority\":"
     "{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},\"due\":{\"type\":\"string\",\"format\":\"date\"},"
     "\"owner\":" OBJ("\"name\":{\"type\":\"string\",\"maxLength\":40},\"team\":{\"type\":\"string\"}",
     "\"name\",\"team\"") ",\"body\":{\"type\":\"string\",\"maxLength\":500}",
     "\"title\",\"tags\",\"priority\",\"due\",\"owner\",\"body\"")) "]",
     HEAD("file_ticket") P("title", "true", "Crash when saving a file with a long name") P("tags", "false",
     "[\"bug\", \"crash\"]") P("priority", "false", "2") P("due", "true", "2027-01-15")
     P("owner", "false", "{\"name\": \"Grace Hopper\", \"team\": \"storage\"}")
     P("body", "true", "Saving a file whose name is over 200 characters long crashes the editor; the log shows "
     "a buffer overrun in the path joiner. Steps: open any file, save as a long name.") TAIL, 0, NULL},
    {"free_strict",
     "[" FN("search", "", "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}}}") ","
     FN("take_note", STRICT, OBJ("\"note\":{\"type\":\"string\",\"maxLength\":200}", "\"note\"")) "]",
     "\n\n<" DS "tool_calls>\n<" DS "invoke name=\"search\">\n" P("query", "true", "quiet hotels near the old town "
     "with late check-in") P("limit", "false", "10") P("filters", "false", "{\"stars\": [4, 5], \"pets\": true}")
     "</" DS "invoke>\n<" DS "invoke name=\"take_note\">\n" P("note", "true", NOTE) TAIL, 0, NULL},
    {"str_or_enum",
     "[" FN("label", STRICT, OBJ("\"text\":{\"anyOf\":[{\"enum\":[\"alpha beta gamma delta\"]},{\"type\":"
     "\"string\",\"maxLength\":120},{\"type\":\"integer\"}]}", "\"text\"")) "]",
     HEAD("label") P("text", "false", "\"alpha beta gamma delta epsilon and the rest of the alphabet\"") TAIL, 0, NULL},
    {"doc", BOOK_TOOLS, "\n\n{\"size\": \"large\", \"qty\": 12, \"note\": \"" UNION_TEXT "\", \"gift\": true}",
     TM_AUTO, ORDER},
    {"doc_call", BOOK_TOOLS, BOOK_CALL, TM_AUTO, ORDER},
    {"allowed_free", "[" FN("search", "", "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}}}") "]",
     "Let me look that up for you before booking anything." HEAD("search") P("query", "true", "quiet hotels near the "
     "old town with late check-in") P("limit", "false", "10") P("filters", "false", "{\"stars\": [4, 5], \"pets\": true}")
     TAIL, TM_AUTO, NULL},
};

/* union30's tools: one parameter, a oneOf of n objects {"note" maxLength 200, "k" const i,
 * "v" number} (the note first: every branch alive through it) */
static void union_tools(char *out, size_t cap, int n) {
    size_t o = (size_t)snprintf(out, cap, "[{\"type\":\"function\",\"function\":{\"name\":\"record\"" STRICT
                                ",\"parameters\":{\"type\":\"object\",\"properties\":{\"item\":{\"oneOf\":[");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s" OBJ("\"note\":{\"type\":\"string\",\"maxLength\":200},\"k\":"
                              "{\"const\":%d},\"v\":{\"type\":\"number\"}", "\"note\",\"k\",\"v\""), i ? "," : "", i);
    snprintf(out + o, cap - o, "]}},\"required\":[\"item\"],\"additionalProperties\":false}}}]");
}

enum { C_MARKUP, C_PLAIN, C_CSTR, C_JSON, C_TAG, C_DOC, C_BOTH, C_FREE, N_CLASS };
static const char *const NAMES[N_CLASS] = {"markup", "plain_string", "constrained_string", "json", "tag", "doc", "both",
                                           "free"};

static int klass(const tm_state *st) {
    int u;
    json_frame fr;
    if (st->phase == TP_FREE) return C_FREE;
    if (st->phase == TP_DOC) return C_DOC;
    if (st->phase == TP_ALT && st->doc) return C_BOTH;
    if (st->phase != TP_VALUE) return C_MARKUP;
    if (st->k) return C_TAG;
    if (json_state_in_string(&st->js, &u)) return C_PLAIN;
    if (json_state_in_cstr(&st->js, &fr)) return C_CSTR;
    return C_JSON;
}

/* AUTO's free text as dsv4_gen checks it (tools_apply): the ids with a '>' (which may
 * complete the opener) fed one by one from st (scratch: a[2]); every other id goes on */
static void free_check(const tm_tools *t, const json_vocab *jv, const dsv4_tokenizer *tok, const tm_state *st,
                       tm_state *a, uint64_t *bits) {
    memset(bits, 0xff, (size_t)jv->words * sizeof *bits);
    for (int k = 0; k < jv->n_gt; k++) {
        const int32_t id = jv->gt[k];
        size_t len = 0;
        const char *b = dsv4_tok_id_bytes(tok, id, &len);
        memcpy(&a[0], st, offsetof(tm_state, js));
        int c = 0;
        if (b && !tm_state_feed(t, a, &c, (const uint8_t *)b, len)) bits[id >> 6] &= ~(1ull << (id & 63));
    }
}

/* one case: its line printed; 1 on a failure (printed) */
static int run_case(const dsv4_tokenizer *tok, const json_vocab *jv, const tcase *c, int reps, int ref, int check) {
    dsv4_err err = {0};
    tm_tools *t = NULL;
    dsv4_tok_ids ids = {0};
    if (tm_compile(c->tools, strlen(c->tools), c->mode ? c->mode : TM_REQUIRED, 0, &t, &err) ||
        (c->schema && tm_set_doc(t, c->schema, strlen(c->schema), &err)) ||
        dsv4_tokenize(tok, c->doc, strlen(c->doc), &ids, &err)) {
        fprintf(stderr, "bench_tools: %s: %s\n", c->name, err.msg);
        return 1;
    }
    tm_walk w;
    memset(&w, 0, sizeof w); /* freed at done: whatever failed first */
    tm_state *st = malloc(4 * sizeof *st); /* 2, 3: free_check's scratch */
    uint64_t *bits = malloc((size_t)jv->words * sizeof *bits), *rb = malloc((size_t)jv->words * sizeof *rb);
    const int n = (int)ids.n;
    double *best = malloc(sizeof *best * (size_t)n), *x = malloc(sizeof *x * (size_t)n);
    int *cls = malloc(sizeof *cls * (size_t)n), rc = 1;
    if (!st || !bits || !rb || !best || !x || !cls || tm_walk_init(&w, jv, tok, tm_max_stacks(t))) {
        fprintf(stderr, "bench_tools: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n; i++) best[i] = 1e9;
    for (int r = 0; r < reps; r++) {
        /* each replay with a fresh walk, its caches empty as a request's start */
        tm_walk_free(&w);
        if (tm_walk_init(&w, jv, tok, tm_max_stacks(t))) goto done;
        tm_state_init(t, &st[0]);
        int cur = 0;
        for (int i = 0; i < n; i++) {
            cls[i] = klass(&st[cur]);
            const double t0 = now_s();
            if (cls[i] == C_FREE) free_check(t, jv, tok, &st[cur], st + 2, bits);
            else if (ref) tm_mask_walk(t, jv, &w, &st[cur], bits);
            else tm_mask(t, jv, &w, &st[cur], bits, tok);
            const double dt = now_s() - t0;
            if (dt < best[i]) best[i] = dt;
            if (check && r == 0 && cls[i] != C_FREE) {
                tm_mask_walk(t, jv, &w, &st[cur], rb);
                int diff = 0;
                for (int k = 0; k < jv->words; k++) diff += __builtin_popcountll(bits[k] ^ rb[k]);
                if (diff) {
                    fprintf(stderr, "bench_tools: %s: token %d: the mask differs from the reference in %d ids\n",
                            c->name, i, diff);
                    goto done;
                }
            }
            if (!(bits[ids.ids[i] >> 6] >> (ids.ids[i] & 63) & 1)) {
                fprintf(stderr, "bench_tools: %s: token %d refused\n", c->name, i);
                goto done;
            }
            size_t len = 0;
            const char *b = dsv4_tok_id_bytes(tok, ids.ids[i], &len);
            if (!tm_state_feed(t, st, &cur, (const uint8_t *)b, len)) goto done;
        }
        if (!tm_state_accepting(t, &st[cur])) {
            fprintf(stderr, "bench_tools: %s: the block is not complete\n", c->name);
            goto done;
        }
    }
    memcpy(x, best, sizeof *x * (size_t)n);
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    double total = 0;
    for (int i = 0; i < n; i++) total += x[i];
    printf("{\"case\":\"%s\",\"mask\":\"%s\",\"tokens\":%d,\"reps\":%d,\"median_ms\":%.4f,\"max_ms\":%.4f,\"mean_ms\":%.4f", c->name,
           ref ? "reference" : "tm_mask", n, reps, 1e3 * x[n / 2], 1e3 * x[n - 1], 1e3 * total / n);
    for (int k = 0; k < N_CLASS; k++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (cls[i] == k) x[m++] = best[i];
        if (!m) continue;
        qsort(x, (size_t)m, sizeof *x, cmp_double);
        printf(",\"%s\":{\"tokens\":%d,\"median_ms\":%.4f,\"max_ms\":%.4f}", NAMES[k], m, 1e3 * x[m / 2],
               1e3 * x[m - 1]);
    }
    printf("}\n");
    fflush(stdout);
    rc = 0;
done:
    tm_walk_free(&w);
    tm_free(t);
    dsv4_tok_ids_free(&ids);
    free(st), free(bits), free(rb), free(best), free(x), free(cls);
    return rc;
}

int main(int argc, char **argv) {
    const char *path = NULL, *only = NULL;
    int reps = 5, ref = 0, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--ref")) ref = 1;
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
        else path = NULL, i = argc;
    }
    if (!path || reps < 1) {
        fprintf(stderr, "usage: bench_tools --tokenizer PATH [--reps N] [--case SUBSTR] [--ref] [--check]\n");
        return 2;
    }
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    if (dsv4_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "bench_tools: %s\n", err.msg);
        return 1;
    }
    json_vocab *jv = json_vocab_build(tok);
    static char utools[65536];
    union_tools(utools, sizeof utools, 30);
    int rc = !jv;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES && !rc; i++) {
        tcase c = CASES[i];
        if (!c.tools) c.tools = utools;
        if (!only || strstr(c.name, only)) rc = run_case(tok, jv, &c, reps, ref, check);
    }
    json_vocab_free(jv);
    dsv4_tokenizer_free(tok);
    return rc;
}
