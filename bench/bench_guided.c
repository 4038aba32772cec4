/* bench_guided.c — the cost of guided decoding (a regex, a choice list, a grammar) a token, at
 * the real vocabulary.
 *
 *   bench_guided --model DIR [--reps N] [--case SUBSTR]
 *       (DIR: a model with the real tokenizer and vocab, e.g. build/tests/serve/vocab_full)
 *
 * For each case (a regex or a choice list, and a text it accepts) the text is tokenized and
 * replayed token by token:
 *   cold:     rx_mask / gr_mask with its cache emptied first (the walk of the vocabulary trie);
 *   cached:   the mask again on the same state (a copy of the cached mask);
 *   flow:     the masks of one replay from an empty cache (a generation's masks: a walk where a
 *             state is new, a copy where it was met before); flow_walks counts the walks;
 *   check:    (grammars) dsv4_grammar_compile with the tokenizer (the server's intake: the
 *             compile and the first mask), and a generation's create + first dsv4_gen_next
 *             given the text (compiled there, its first mask walked) or the compiled grammar
 *             (the first mask a copy): what the intake's check moves off the first step;
 *   gen_next: dsv4_gen_next on a logits row whose best id is the text's next token, greedy,
 *             with the constraint and without (same rows, alternated per token): what the
 *             constraint adds to a step in a generation (its cache warm as it goes: the
 *             first visit of each state walks).
 * Each per-token figure is the median over --reps replays of the median over the tokens
 * (p90 of the best replay too). Prints one JSON line per case.
 *
 *   bench_guided --model DIR --choices N [--reps R] [--case SUBSTR]
 *
 * instead: N generations of the case's constraint (an OpenAI request's n choices; seeds 1..N,
 * temperature 1) drawn in turn on one random row until each ends (at most 64 tokens), each
 * with its own masks (as before session 47) and sharing the first's (dsv4_gen_params.share),
 * alternated R times: the walks of the vocabulary trie (cold masks) the N took together and
 * the seconds of their dsv4_gen_create + dsv4_gen_next calls (median of R). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "dsv4_internal.h"
#include "dsv4_text.h"

typedef struct gcase { const char *name, *regex, *text; int choices; const char *grammar; } gcase;

/* arithmetic (recursive), a JSON-like value (recursive, strings with escapes), and a regular
 * one (the date list above as a grammar) */
static const char ARITH[] = "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\n"
                            "term ::= factor ((\"*\" | \"/\") factor)*\n"
                            "factor ::= num | \"(\" expr \")\" | \"-\" factor\nnum ::= [0-9]+ (\".\" [0-9]+)?\n";
static const char JSONISH[] = "root ::= value\nvalue ::= obj | arr | str | num | \"true\" | \"false\" | \"null\"\n"
                              "obj ::= \"{\" ws (str ws \":\" ws value ws (\",\" ws str ws \":\" ws value ws)*)? \"}\"\n"
                              "arr ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
                              "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"\n"
                              "num ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\nws ::= [ \\t\\n]{0,8}\n";
static const char DATES[] = "root ::= date (\", \" date)*\ndate ::= [0-9]{4} \"-\" [0-9]{2} \"-\" [0-9]{2}\n";
/* a counted repetition (session 48: its count is clamped in the mask cache's key) */
static const char STRING[] = "root ::= \"\\\"\" [^\"]{0,1000} \"\\\"\"\n";

static const gcase CASES[] = {
    {"email", "[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}", "john.smith-jr@mail.example.com", 0, NULL},
    {"date_list", "\\d{4}-\\d{2}-\\d{2}(?:, \\d{4}-\\d{2}-\\d{2})*", "2024-01-15, 2024-02-29, 2023-12-31, 2025-07-04", 0, NULL},
    {"phone", "\\(?\\d{3}\\)?[-. ]?\\d{3}[-. ]?\\d{4}", "(555) 123-4567", 0, NULL},
    {"sentence", "[A-Z][^\\n]{0,200}\\.", "Enjoys long walks, short programs and the quiet of early mornings; writes C for fun.", 0, NULL},
    {"choice_1000", NULL, "Product 0693: cotton t-shirt (1.1 l)", 1000, NULL},
    {"gbnf_arith", NULL, "(12.5+3)*-(4-7/2)+1000*(2+(3*(4-1)))", 0, ARITH},
    {"gbnf_json", NULL, "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"tags\": [\"math\", \"poetry\"], \"x\": {\"ok\": true}}", 0, JSONISH},
    {"gbnf_dates", NULL, "2024-01-15, 2024-02-29, 2023-12-31, 2025-07-04", 0, DATES},
    {"gbnf_string_1000", NULL, "\"The mask of a counted repetition: one walk at the first tokens, then the cache, since the "
     "count left is clamped to what a token can read. Enjoys long walks, short programs and the quiet of early "
     "mornings; writes C for fun, and reads the spec twice before the first line of code.\"", 0, STRING},
};

/* one case's constraint: a regex or choice list (rx), or a grammar (gr) */
typedef struct guide { rx_guide *g; rx_walk w; rx_state st; gr_grammar *gg; gr_run *gr; } guide;

static void guide_reset(guide *x) {
    if (x->gr) gr_run_reset(x->gr);
    else rx_state_init(x->g, &x->st);
}

/* the mask of the state (cold: its cache emptied first); the trie nodes stepped */
static long guide_mask(guide *x, const json_vocab *jv, uint64_t *bits, int cold) {
    if (x->gr) {
        if (cold) gr_run_clear_cache(x->gr);
        return gr_mask(x->gr, jv, bits);
    }
    if (cold) rx_walk_forget(&x->w);
    return rx_mask(x->g, jv, &x->w, &x->st, bits);
}

static void guide_feed(guide *x, const char *b, size_t n) {
    if (x->gr) {
        gr_run_feed(x->gr, (const uint8_t *)b, n);
        gr_run_compact(x->gr);
    } else {
        rx_state_feed(x->g, &x->st, (const uint8_t *)b, n);
    }
}

static int cmp_d(const void *a, const void *b) { return cmp_double(a, b); }

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n ? x[n / 2] : 0;
}

/* dsv4_gen_next token by token with gens[0] (free) and gens[1] (guided) alternated, on rows
 * whose best id is the text's next token: the seconds of each call in t[0][i], t[1][i]; -1
 * when a generation errs or does not draw the text's token */
/* seconds of dsv4_gen_create + the first dsv4_gen_next (row's best id: first) */
static double first_step(const dsv4_model *m, const dsv4_tokenizer *tok, const dsv4_gen_params *p, float *row, int32_t first,
                         dsv4_err *err) {
    const float keep = row[first];
    row[first] = 20;
    dsv4_gen *g = NULL;
    dsv4_gen_token y;
    const double a = now_s();
    const int e = dsv4_gen_create(m, tok, p, &g, err) || dsv4_gen_next(g, row, &y, err);
    const double t = now_s() - a;
    dsv4_gen_free(g);
    row[first] = keep;
    return e ? -1 : t;
}

static int gen_pair(dsv4_gen *const gens[2], const int32_t *ids, int n, float *row, double *const t[2], dsv4_err *err) {
    for (int i = 0; i < n; i++) {
        const float keep = row[ids[i]];
        row[ids[i]] = 20;
        for (int k = 0; k < 2; k++) {
            dsv4_gen_token y;
            const double a = now_s();
            const int e = dsv4_gen_next(gens[k], row, &y, err);
            t[k][i] = now_s() - a;
            if (e || y.token != ids[i]) {
                row[ids[i]] = keep;
                return -1;
            }
        }
        row[ids[i]] = keep;
    }
    return 0;
}

/* --choices: n generations of p, sharing the first's masks or not, drawn in turn on row
 * until each ends (at most 64 tokens); their trie walks in *walks, the seconds returned (-1:
 * an error) */
static double choices_run(const dsv4_model *m, const dsv4_tokenizer *tok, dsv4_gen_params p, int n, int share,
                          const float *row, long *walks, dsv4_err *err) {
    dsv4_gen *g[16] = {NULL};
    int done[16] = {0}, left = n, rc = 0;
    const double t0 = now_s();
    for (int i = 0; i < n && !rc; i++) {
        p.sample.seed = (uint64_t)i + 1, p.sample.temperature = 1.0f, p.max_tokens = 64;
        p.share = share && i ? g[0] : NULL;
        rc = dsv4_gen_create(m, tok, &p, &g[i], err);
    }
    while (!rc && left)
        for (int i = 0; i < n && !rc; i++) {
            dsv4_gen_token y;
            if (done[i]) continue;
            rc = dsv4_gen_next(g[i], row, &y, err);
            if (!rc && y.finish) done[i] = 1, left--;
        }
    const double t = now_s() - t0;
    *walks = 0;
    for (int i = 0; i < n; i++) {
        if (g[i]) *walks += dsv4_gen_guide_walks(g[i]);
        dsv4_gen_free(g[i]);
    }
    return rc ? -1 : t;
}

/* the model in dir and its tokenizer (dir/tokenizer.json) */
static int load(const char *dir, dsv4_model **m, dsv4_tokenizer **tok, dsv4_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const int rc = dsv4_model_open(dir, m, err);
    return rc ? rc : dsv4_tokenizer_load(path, tok, err);
}

/* 1,000 product names, entry 693 the case's text */
static char **product_list(int n) {
    static const char *const what[] = {"stainless steel kettle", "cotton t-shirt", "oak dining table", "usb-c cable",
                                       "ceramic mug", "wool scarf", "desk lamp", "hiking boots"};
    char **l = malloc((size_t)n * sizeof *l);
    for (int i = 0; l && i < n; i++) {
        char b[96];
        snprintf(b, sizeof b, "Product %04d: %s (%d.%d l)", i, what[(i * 5) % 8], 1 + i % 3, (i * 7) % 10);
        l[i] = strdup(b);
    }
    return l;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int reps = 5, choices = 0;
    const char *only = NULL; /* --case: the cases whose name holds it */
    for (int i = 1; i + 1 < argc; i += 2) { /* flag value pairs */
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "--model")) dir = v;
        else if (!strcmp(f, "--case")) only = v;
        else if (!strcmp(f, "--reps")) reps = atoi(v);
        else if (!strcmp(f, "--choices")) choices = atoi(v);
        else reps = 0;
    }
    if (argc % 2 == 0) reps = 0; /* a flag without its value */
    if (!dir || reps < 1 || choices < 0 || choices > 16) {
        fprintf(stderr, "usage: bench_guided --model DIR [--reps N] [--case SUBSTR] [--choices N (at most 16)]\n");
        return 2;
    }
    dsv4_model *m = NULL;
    dsv4_tokenizer *tok = NULL;
    dsv4_err err = {0};
    if (load(dir, &m, &tok, &err)) {
        fprintf(stderr, "bench_guided: %s\n", err.msg);
        return 1;
    }
    const int V = dsv4_model_get_info(m).vocab_size;
    json_vocab *jv = json_vocab_build(tok);
    float *row = malloc((size_t)V * sizeof *row);
    uint64_t *bits = jv ? malloc((size_t)jv->words * sizeof *bits) : NULL;
    char **products = product_list(1000);
    if (!jv || !row || !bits || !products) { fprintf(stderr, "bench_guided: out of memory\n"); return 1; }
    uint64_t rs = 7;
    for (int v = 0; v < V; v++) row[v] = bench_urand(&rs);
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES && choices; c++) {
        const gcase *k = &CASES[c];
        if (only && !strstr(k->name, only)) continue;
        const dsv4_gen_params p = {.regex = k->regex, .choices = (const char *const *)products,
                                   .n_choices = k->regex || k->grammar ? 0 : k->choices, .grammar = k->grammar};
        double *t[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
        long walks[2] = {0, 0};
        for (int r = 0; r < reps && t[0] && t[1]; r++)
            for (int sh = 0; sh < 2; sh++)
                if ((t[sh][r] = choices_run(m, tok, p, choices, sh, row, &walks[sh], &err)) < 0) {
                    fprintf(stderr, "bench_guided: %s: %s\n", k->name, err.msg);
                    return 1;
                }
        printf("{\"bench\":\"guided_choices\",\"case\":\"%s\",\"n\":%d,\"reps\":%d,\"walks_own\":%ld,"
               "\"walks_shared\":%ld,\"ms_own\":%.3f,\"ms_shared\":%.3f}\n",
               k->name, choices, reps, walks[0], walks[1], median(t[0], reps) * 1e3, median(t[1], reps) * 1e3);
        fflush(stdout);
        free(t[0]), free(t[1]);
    }
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES && !choices; c++) {
        const gcase *k = &CASES[c];
        if (only && !strstr(k->name, only)) continue;
        char why[256];
        guide x = {0};
        double t0 = now_s();
        const int rc = k->grammar ? gr_compile(k->grammar, strlen(k->grammar), &x.gg, why, sizeof why)
                       : k->regex ? rx_guide_regex(k->regex, strlen(k->regex), &x.g, why, sizeof why)
                                  : rx_guide_choice((const char *const *)products, k->choices, &x.g, why, sizeof why);
        const double compile_ms = (now_s() - t0) * 1e3;
        dsv4_tok_ids ids = {0};
        t0 = now_s();
        if (!rc && (x.gg ? gr_run_new(x.gg, jv->max_len, jv->words, &x.gr) : rx_walk_init(&x.w, jv, x.g))) {
            fprintf(stderr, "bench_guided: out of memory\n");
            return 1;
        }
        const double walk_ms = (now_s() - t0) * 1e3;
        if (rc || dsv4_tokenize(tok, k->text, strlen(k->text), &ids, &err)) {
            fprintf(stderr, "bench_guided: %s: %s\n", k->name, rc ? why : err.msg);
            return 1;
        }
        const int n = (int)ids.n;
        double *tc = malloc(sizeof *tc * (size_t)n), *tw = malloc(sizeof *tw * (size_t)n), *tf = malloc(sizeof *tf * (size_t)n),
               *tg = malloc(sizeof *tg * (size_t)n), *best = malloc(sizeof *best * (size_t)n);
        double *rc_ = malloc(sizeof *rc_ * (size_t)reps), *rw = malloc(sizeof *rw * (size_t)reps),
               *rf = malloc(sizeof *rf * (size_t)reps), *rg = malloc(sizeof *rg * (size_t)reps),
               *tl = malloc(sizeof *tl * (size_t)n), *rl = malloc(sizeof *rl * (size_t)reps), *rm = malloc(sizeof *rm * (size_t)reps),
               *rk = calloc((size_t)reps, sizeof *rk), *r1 = calloc((size_t)reps, sizeof *r1), *r2 = calloc((size_t)reps, sizeof *r2);
        int flow_walks = 0;
        long nodes = 0;
        int allowed = 0;
        double best_med = INFINITY;
        for (int r = 0; r < reps; r++) {
            guide_reset(&x);
            nodes = 0, allowed = 0;
            for (int i = 0; i < n; i++) {
                double a = now_s();
                nodes += guide_mask(&x, jv, bits, 1); /* cold: the walk */
                double b = now_s();
                guide_mask(&x, jv, bits, 0);
                tc[i] = b - a, tw[i] = now_s() - b;
                for (int q = 0; q < jv->words; q++) allowed += __builtin_popcountll(bits[q]);
                if (!(bits[ids.ids[i] >> 6] >> (ids.ids[i] & 63) & 1)) {
                    fprintf(stderr, "bench_guided: %s: token %d (#%d) refused\n", k->name, ids.ids[i], i);
                    return 1;
                }
                size_t len;
                const char *bytes = dsv4_tok_id_bytes(tok, ids.ids[i], &len);
                guide_feed(&x, bytes, len);
            }
            guide_reset(&x); /* flow: a generation's masks from an empty cache */
            flow_walks = 0, rm[r] = 0;
            if (x.gr) gr_run_clear_cache(x.gr);
            else rx_walk_forget(&x.w);
            for (int i = 0; i < n; i++) {
                const double a = now_s();
                flow_walks += guide_mask(&x, jv, bits, 0) > 0;
                tl[i] = now_s() - a, rm[r] += tl[i] / n;
                size_t len;
                const char *bytes = dsv4_tok_id_bytes(tok, ids.ids[i], &len);
                guide_feed(&x, bytes, len);
            }
            rl[r] = median(tl, n);
            dsv4_gen_params pf = {0}, pg = {.regex = k->regex, .choices = (const char *const *)products,
                                            .n_choices = k->choices, .grammar = k->grammar};
            dsv4_gen *gens[2] = {NULL, NULL};
            double *times[2] = {tf, tg};
            if (dsv4_gen_create(m, tok, &pf, &gens[0], &err) || dsv4_gen_create(m, tok, &pg, &gens[1], &err) ||
                gen_pair(gens, ids.ids, n, row, times, &err)) {
                fprintf(stderr, "bench_guided: %s: gen_next: %s\n", k->name, err.msg);
                return 1;
            }
            dsv4_gen_free(gens[0]);
            dsv4_gen_free(gens[1]);
            if (k->grammar) { /* the intake's check, and the first step after it or without it */
                dsv4_grammar *G = NULL;
                double a = now_s();
                if (dsv4_grammar_compile(k->grammar, strlen(k->grammar), tok, &G, &err)) {
                    fprintf(stderr, "bench_guided: %s: %s\n", k->name, err.msg);
                    return 1;
                }
                rk[r] = now_s() - a;
                dsv4_gen_params pc = {.compiled_grammar = G};
                r1[r] = first_step(m, tok, &pg, row, ids.ids[0], &err), r2[r] = first_step(m, tok, &pc, row, ids.ids[0], &err);
                dsv4_grammar_free(G);
            }
            rc_[r] = median(tc, n), rw[r] = median(tw, n), rf[r] = median(tf, n), rg[r] = median(tg, n);
            if (rc_[r] < best_med) best_med = rc_[r], memcpy(best, tc, sizeof *tc * (size_t)n);
        }
        printf("{\"bench\":\"guided_mask\",\"case\":\"%s\",\"tokens\":%d,\"reps\":%d,\"compile_ms\":%.2f,"
               "\"walk_init_ms\":%.2f,\"mask_classes\":%d,"
               "\"allowed_ids_per_token\":%.0f,\"trie_steps_per_token\":%.0f,\"cold_us_median\":%.1f,\"cold_us_p90\":%.1f,"
               "\"cached_us_median\":%.2f,\"flow_us_median\":%.2f,\"flow_us_mean\":%.1f,\"flow_walks\":%d,"
               "\"gen_next_us_free\":%.1f,\"gen_next_us_guided\":%.1f,\"check_ms\":%.3f,\"first_step_us_text\":%.1f,"
               "\"first_step_us_compiled\":%.1f}\n",
               k->name, n, reps, compile_ms, walk_ms, x.g ? rx_walk_classes(&x.w) : -1, (double)allowed / n, (double)nodes / n, median(rc_, reps) * 1e6,
               best[(int)(0.9 * (n - 1))] * 1e6, median(rw, reps) * 1e6, median(rl, reps) * 1e6, median(rm, reps) * 1e6,
               flow_walks, median(rf, reps) * 1e6, median(rg, reps) * 1e6, median(rk, reps) * 1e3, median(r1, reps) * 1e6,
               median(r2, reps) * 1e6);
        fflush(stdout);
        free(tc), free(tw), free(tf), free(tg), free(best), free(rc_), free(rw), free(rf), free(rg), free(tl), free(rl), free(rm), free(rk), free(r1), free(r2);
        dsv4_tok_ids_free(&ids);
        rx_guide_free(x.g);
        rx_walk_free(&x.w);
        gr_run_free(x.gr);
        gr_free(x.gg);
    }
    for (int i = 0; i < 1000; i++) free(products[i]);
    free(products);
    free(row), free(bits);
    json_vocab_free(jv);
    dsv4_tokenizer_free(tok);
    dsv4_model_close(m);
    return 0;
}
