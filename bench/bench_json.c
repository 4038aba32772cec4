/* bench_json.c — the cost of structured output a token, at the real vocabulary.
 *
 *   bench_json --model DIR [--reps N] [--case SUBSTR]
 *       (DIR: a model with the real tokenizer and vocab, e.g. build/tests/serve/vocab_full;
 *       --case: only the cases whose name holds SUBSTR)
 *
 * For each case (a schema and a document valid under it, as a model would write it) the
 * document is tokenized and replayed token by token:
 *   mask:     json_mask alone (the trie walk; the in-string bitset and its small trie; in a
 *             constrained string the whole trie with the string's frame);
 *   gen_next: dsv4_gen_next on a logits row whose best id is the document's next token,
 *             greedy, with the constraint and without it (same rows, alternated per token),
 *             so their difference is what the constraint adds to a step: the mask, the
 *             row's -inf pass over V, the stop tokens and the state's advance.
 * Each per-token figure is the median over --reps replays of the median over the tokens
 * (and p90 / max over tokens of the best replay). Prints one JSON line per case, and the
 * vocabulary index's build time. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h"
#include "dsv4_text.h"

typedef struct bcase { const char *name, *schema, *doc; } bcase;

#define RECORD "{\"id\": \"AB-123\", \"name\": \"John Smith\", \"email\": \"john.smith@example.com\", " \
    "\"born\": \"1982-03-14\", \"updated\": \"2024-05-01T10:30:00Z\", \"uuid\": " \
    "\"123e4567-e89b-12d3-a456-426614174000\", \"bio\": \"Enjoys long walks, short programs and the " \
    "quiet of early mornings; writes C for fun and reads history at night.\"}"

#define NUMBERS "{\"age\": 42, \"score\": 87.25, \"rating\": 4, \"price\": 1299.99, \"qty\": 120000}"

static const bcase CASES[] = {
    {"json_object", "{\"type\":\"object\"}",
     "{\n  \"title\": \"Quarterly report\",\n  \"year\": 2024,\n  \"ok\": true,\n  \"score\": -12.5e-3,\n"
     "  \"authors\": [\"Ada Lovelace\", \"Alan Turing\", \"Grace Hopper\"],\n  \"summary\": \"Revenue grew "
     "by 12% while costs fell; the new model's accuracy improved by a wide margin. \\\"Strong\\\" results.\",\n"
     "  \"regions\": [{\"name\": \"EMEA\", \"sales\": [1, 2, 3]}, {\"name\": \"APAC\", \"sales\": []}],\n"
     "  \"notes\": null,\n  \"中文\": \"人工智能是计算机科学的一个分支。\"\n}"},
    {"person_schema",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
     "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"user\","
     "\"guest\"]},\"maxItems\":3},\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":"
     "\"string\"},\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}},\"required\":[\"street\","
     "\"city\",\"zip\"]},\"active\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"email\",\"tags\","
     "\"address\",\"active\"],\"additionalProperties\":false}",
     "{\"name\": \"John Smith\", \"age\": 42, \"email\": \"john.smith@example.com\", \"tags\": [\"admin\", "
     "\"user\"], \"address\": {\"street\": \"221B Baker Street\", \"city\": \"London\", \"zip\": \"NW1 6XE\"}, "
     "\"active\": true}"},
    {"anyof_ref_tree",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\"},\"value\":"
     "{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\"},{\"type\":\"null\"}]},\"children\":{\"type\":"
     "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"label\",\"value\"]}},\"$ref\":"
     "\"#/$defs/node\"}",
     "{\"label\": \"root\", \"value\": 1.5, \"children\": [{\"label\": \"left\", \"value\": \"a leaf\"}, "
     "{\"label\": \"right\", \"value\": null, \"children\": [{\"label\": \"deep\", \"value\": -3}]}]}"},
    {"enum_heavy",
     "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\","
     "\"green\",\"blue\",\"yellow\",\"purple\",\"orange\"]},\"size\":{\"enum\":[\"S\",\"M\",\"L\",\"XL\"]},"
     "\"count\":{\"type\":\"integer\"}},\"required\":[\"color\",\"size\",\"count\"]},\"maxItems\":8}",
     "[{\"color\": \"red\", \"size\": \"M\", \"count\": 3}, {\"color\": \"blue\", \"size\": \"XL\", \"count\": 12}, "
     "{\"color\": \"purple\", \"size\": \"S\", \"count\": 1}]"},
    /* the same record with free strings and with constrained ones (pattern, format, lengths:
     * the mask walks the whole trie with the string's frame, not the in-string bitset) */
    {"record_free_strings", "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"name\":"
     "{\"type\":\"string\"},\"email\":{\"type\":\"string\"},\"born\":{\"type\":\"string\"},\"updated\":"
     "{\"type\":\"string\"},\"uuid\":{\"type\":\"string\"},\"bio\":{\"type\":\"string\"}},\"required\":[\"id\","
     "\"name\",\"email\",\"born\",\"updated\",\"uuid\",\"bio\"]}", RECORD},
    {"record_constrained", "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":"
     "\"^[A-Z]{2}-\\\\d{3}$\"},\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64},\"email\":"
     "{\"type\":\"string\",\"format\":\"email\"},\"born\":{\"type\":\"string\",\"format\":\"date\"},"
     "\"updated\":{\"type\":\"string\",\"format\":\"date-time\"},\"uuid\":{\"type\":\"string\",\"format\":"
     "\"uuid\"},\"bio\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z ,;.']+$\",\"maxLength\":300}},"
     "\"required\":[\"id\",\"name\",\"email\",\"born\",\"updated\",\"uuid\",\"bio\"]}", RECORD},
    /* the same numbers free and bounded (minimum, maximum, exclusive, multipleOf: a digit DFA) */
    {"numbers_free", "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\"},\"score\":{\"type\":"
     "\"number\"},\"rating\":{\"type\":\"integer\"},\"price\":{\"type\":\"number\"},\"qty\":{\"type\":\"integer\"}},"
     "\"required\":[\"age\",\"score\",\"rating\",\"price\",\"qty\"]}", NUMBERS},
    {"numbers_bounded", "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":"
     "150},\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100},\"rating\":{\"type\":\"integer\",\"minimum\""
     ":1,\"maximum\":5},\"price\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"multipleOf\":0.01},\"qty\":{\"type\":"
     "\"integer\",\"minimum\":1,\"maximum\":1000000}},\"required\":[\"age\",\"score\",\"rating\",\"price\",\"qty\"]}",
     NUMBERS},
};

/* anyOf / oneOf unions of n object branches (the document is the last one's), built at run
 * time: "union_disc_N" is Pydantic's discriminated union (a const "kind" first: the
 * branches are told apart after a few bytes); "union_late_N" keeps all N readings alive
 * through a long string ("note") and tells them apart only by "k" after it (the most
 * readings at once, the longest); "union_cstr_N" is union_late with "note" a constrained
 * string (maxLength 200 in every branch: Pydantic's Field(max_length=...)), and
 * "union_cstrd_N" gives each branch its own maxLength (200 + i: no two strings alike), and
 * "union_cstrp_N" its own pattern "^.{0,200 + i}$" (a DFA state a character: no mask is met
 * twice, the most walks a token); "union_cstrpl_N" and "union_cstrdl_N" are cstrp and cstrd
 * with a 215-character note (the strings near and past their ends: the masks of short rooms);
 * "union_lit_N" is union_late with branch 0's note the note's text as an enum (a literal
 * alive beside N - 1 strings through the whole note); "union_cstrx_N" (rv-smx4's case) gives
 * each branch the pattern "^(.{0,3}|.{3}C.*)$" with its own character C (the last branch's
 * the note's fourth): every string takes the first three characters, then each only its
 * own, so at the string's first token the shared walk meets N strings at every trie node of
 * depth four, all but one dead there. */
#define UNION_TEXT "Enjoys long walks, short programs and the quiet of early mornings; writes C for fun."
#define UNION_LONG UNION_TEXT " Keeps a garden of herbs, mends old radios, bakes bread on Sundays, and answers every " \
    "letter by hand within the week."
static bcase union_case(int n, int mode, char *name, char *schema, size_t cap, char *doc) {
    static const char *const mode_name[] = {"disc", "late", "cstr", "cstrd", "cstrp", "cstrpl", "cstrdl", "lit",
                                            "cstrx"};
    static const char X[] = "oabcdefghijklmnpqrstuvwxyzABCD"; /* distinct; 'o': UNION_TEXT's fourth */
    const int late = mode > 0, longer = mode == 5 || mode == 6;
    char note[64] = "";
    size_t o = (size_t)snprintf(schema, cap, "{\"oneOf\":[");
    for (int i = 0; i < n; i++) {
        if (mode == 4 || mode == 5) snprintf(note, sizeof note, ",\"pattern\":\"^.{0,%d}$\"", 200 + i);
        else if (mode == 8) snprintf(note, sizeof note, ",\"pattern\":\"^(.{0,3}|.{3}%c.*)$\"", X[(n - 1 - i) % 30]);
        else if (mode >= 2 && mode <= 6) snprintf(note, sizeof note, ",\"maxLength\":%d", 200 + (mode != 2 ? i : 0));
        if (mode == 7 && i == 0)
            o += (size_t)snprintf(schema + o, cap - o,
            "{\"type\":\"object\",\"properties\":{\"note\":{\"enum\":[\"" UNION_TEXT "\"]},\"k\":{\"const\":%d},"
            "\"v\":{\"type\":\"number\"}},\"required\":[\"note\",\"k\",\"v\"],\"additionalProperties\":false}", i);
        else if (late)
            o += (size_t)snprintf(schema + o, cap - o,
            "%s{\"type\":\"object\",\"properties\":{\"note\":{\"type\":\"string\"%s},\"k\":{\"const\":%d},"
            "\"v\":{\"type\":\"number\"}},\"required\":[\"note\",\"k\",\"v\"],\"additionalProperties\":false}",
            i ? "," : "", note, i);
        else
            o += (size_t)snprintf(schema + o, cap - o,
            "%s{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"variant_%d\"},\"note\":{\"type\":"
            "\"string\"},\"v\":{\"type\":\"number\"}},\"required\":[\"kind\",\"note\",\"v\"],"
            "\"additionalProperties\":false}", i ? "," : "", i);
    }
    snprintf(schema + o, cap - o, "]}");
    if (longer) snprintf(doc, 512, "{\"note\": \"" UNION_LONG "\", \"k\": %d, \"v\": 2.5}", n - 1);
    else if (late) snprintf(doc, 512, "{\"note\": \"" UNION_TEXT "\", \"k\": %d, \"v\": 2.5}", n - 1);
    else snprintf(doc, 512, "{\"kind\": \"variant_%d\", \"note\": \"" UNION_TEXT "\", \"v\": 2.5}", n - 1);
    snprintf(name, 32, "union_%s_%d", mode_name[mode], n);
    return (bcase){name, schema, doc};
}

static int cmp_d(const void *a, const void *b) { return cmp_double(a, b); }

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n ? x[n / 2] : 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int reps = 5;
    const char *only = NULL; /* --case: the cases whose name holds it */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
        else { fprintf(stderr, "usage: bench_json --model DIR [--reps N] [--case SUBSTR]\n"); return 2; }
    }
    if (!dir || reps < 1) { fprintf(stderr, "usage: bench_json --model DIR [--reps N] [--case SUBSTR]\n"); return 2; }
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    dsv4_model *m = NULL;
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    if (dsv4_model_open(dir, &m, &err) || dsv4_tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "bench_json: %s\n", err.msg);
        return 1;
    }
    const int V = dsv4_model_get_info(m).vocab_size;
    double t0 = now_s();
    json_vocab *jv = json_vocab_build(tok);
    const double build_s = now_s() - t0;
    if (!jv) { fprintf(stderr, "bench_json: out of memory\n"); return 1; }
    printf("{\"bench\":\"json_vocab\",\"V\":%d,\"trie_nodes\":%d,\"string_trie_nodes\":%d,\"max_token_bytes\":%d,"
           "\"build_ms\":%.1f}\n", jv->V, jv->n_all, jv->n_spec, jv->max_len, build_s * 1e3);
    float *row = malloc((size_t)V * sizeof *row);
    uint64_t *bits = malloc((size_t)jv->words * sizeof *bits);
    json_state *st = malloc(2 * sizeof *st);
    json_walk w;
    if (!row || !bits || !st || json_walk_init(&w, jv, JSON_MAX_STACKS)) return 1;
    uint64_t rs = 7;
    for (int v = 0; v < V; v++) row[v] = bench_urand(&rs);
    enum { N_FIXED = sizeof CASES / sizeof *CASES, N_UNION = 27 };
    static const int UNION_N[3] = {8, 16, 30};
    static char u_name[N_UNION][32], u_schema[N_UNION][16384], u_doc[N_UNION][512];
    bcase all[N_FIXED + N_UNION];
    memcpy(all, CASES, sizeof CASES);
    for (int u = 0; u < N_UNION; u++)
        all[N_FIXED + u] = union_case(UNION_N[u % 3], u / 3, u_name[u], u_schema[u], sizeof u_schema[u], u_doc[u]);
    for (size_t c = 0; c < N_FIXED + N_UNION; c++) {
        const bcase *k = &all[c];
        if (only && !strstr(k->name, only)) continue;
        dsv4_json_schema *s = NULL;
        dsv4_tok_ids ids = {0};
        if (dsv4_json_schema_compile(k->schema, strlen(k->schema), &s, &err) ||
            dsv4_tokenize(tok, k->doc, strlen(k->doc), &ids, &err)) {
            fprintf(stderr, "bench_json: %s: %s\n", k->name, err.msg);
            return 1;
        }
        const int n = (int)ids.n;
        double *tm = malloc(sizeof *tm * (size_t)n), *tf = malloc(sizeof *tf * (size_t)n),
               *tj = malloc(sizeof *tj * (size_t)n), *best = malloc(sizeof *best * (size_t)n);
        double *rm = malloc(sizeof *rm * (size_t)reps), *rf = malloc(sizeof *rf * (size_t)reps),
               *rj = malloc(sizeof *rj * (size_t)reps);
        long nodes = 0;
        int in_str = 0, in_cstr = 0;
        double best_med = INFINITY;
        json_walk_reset(&w);
        for (int r = 0; r < reps; r++) {
            /* the mask alone, replaying the document */
            json_state_init(s, &st[0]);
            int cur = 0;
            nodes = 0, in_str = 0, in_cstr = 0;
            for (int i = 0; i < n; i++) {
                int u;
                json_frame top;
                in_str += json_state_in_string(&st[cur], &u);
                in_cstr += json_state_in_cstr(&st[cur], &top);
                double a = now_s();
                nodes += json_mask(s, jv, &w, &st[cur], bits);
                tm[i] = now_s() - a;
                if (!(bits[ids.ids[i] >> 6] >> (ids.ids[i] & 63) & 1)) {
                    fprintf(stderr, "bench_json: %s: token %d (#%d) refused\n", k->name, ids.ids[i], i);
                    return 1;
                }
                size_t len;
                const char *b = dsv4_tok_id_bytes(tok, ids.ids[i], &len);
                for (size_t q = 0; q < len; q++, cur ^= 1) json_state_step(s, &st[cur], (uint8_t)b[q], &st[cur ^ 1]);
            }
            /* dsv4_gen_next with and without the constraint, alternated per token */
            dsv4_gen_params pf = {0}, pj = {.json_schema = k->schema};
            dsv4_gen *gf = NULL, *gj = NULL;
            if (dsv4_gen_create(m, tok, &pf, &gf, &err) || dsv4_gen_create(m, tok, &pj, &gj, &err)) {
                fprintf(stderr, "bench_json: %s\n", err.msg);
                return 1;
            }
            for (int i = 0; i < n; i++) {
                const int32_t t = ids.ids[i];
                const float keep = row[t];
                row[t] = 20;
                dsv4_gen_token y;
                double a = now_s();
                int rc = dsv4_gen_next(gf, row, &y, &err);
                double b2 = now_s();
                rc |= dsv4_gen_next(gj, row, &y, &err);
                double c2 = now_s();
                row[t] = keep;
                if (rc || y.token != t) { fprintf(stderr, "bench_json: %s: gen_next (%s)\n", k->name, err.msg); return 1; }
                tf[i] = b2 - a, tj[i] = c2 - b2;
            }
            dsv4_gen_free(gf);
            dsv4_gen_free(gj);
            rm[r] = median(tm, n), rf[r] = median(tf, n), rj[r] = median(tj, n); /* tm sorted */
            if (rm[r] < best_med) {
                best_med = rm[r];
                memcpy(best, tm, sizeof *tm * (size_t)n);
            }
        }
        static double p90, mx;
        p90 = best[(int)(0.9 * (n - 1))], mx = best[n - 1];
        printf("{\"bench\":\"json_mask\",\"case\":\"%s\",\"tokens\":%d,\"in_string\":%d,\"in_constrained\":%d,\"reps\":%d,"
               "\"mask_us_median\":%.1f,\"mask_us_p90\":%.1f,\"mask_us_max\":%.1f,\"trie_steps_per_token\":%.0f,"
               "\"gen_next_us_free\":%.1f,\"gen_next_us_json\":%.1f}\n",
               k->name, n, in_str, in_cstr, reps, median(rm, reps) * 1e6, p90 * 1e6, mx * 1e6, (double)nodes / n,
               median(rf, reps) * 1e6, median(rj, reps) * 1e6);
        fflush(stdout);
        free(tm), free(tf), free(tj), free(best), free(rm), free(rf), free(rj);
        dsv4_tok_ids_free(&ids);
        dsv4_json_schema_free(s);
    }
    json_walk_free(&w);
    free(row), free(bits), free(st);
    json_vocab_free(jv);
    dsv4_tokenizer_free(tok);
    dsv4_model_close(m);
    return 0;
}
