/* test_stop.c — stop strings cut the streamed text exactly, however the text is split into
 * pieces (checked against strstr on the whole text for thousands of seeded splits), never
 * show part of a stop string, release false starts; stop tokens and max tokens. */
#include <stdint.h>

#include "sample/stop.h"
#include "test.h"

static dsv4_err err;

static dsv4_stop *make(const char *const *strs, int n, const int32_t *toks, int nt, int max) {
    dsv4_stop *s = NULL;
    int rc = dsv4_stop_create(strs, n, toks, nt, max, &s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return s;
}

/* Streams text in the given pieces; returns everything emitted (malloc'ed), the finish
 * state, and checks the invariants along the way. */
static char *stream(dsv4_stop *s, const char *text, const size_t *cuts, int n_cuts, int *stopped,
                    int *stop_piece) {
    size_t n = strlen(text), at = 0, got = 0;
    char *all = malloc(n + 1);
    *stopped = 0;
    *stop_piece = -1;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        const char *e;
        size_t el;
        int r = dsv4_stop_feed(s, text + at, end - at, &e, &el);
        CHECK(r == DSV4_FINISH_NONE || r == DSV4_FINISH_STOP_STRING);
        memcpy(all + got, e, el);
        got += el;
        at = end;
        if (r == DSV4_FINISH_STOP_STRING && !*stopped) { *stopped = 1; *stop_piece = i; }
    }
    if (!*stopped) {
        const char *e;
        size_t el;
        dsv4_stop_flush(s, &e, &el);
        memcpy(all + got, e, el);
        got += el;
    }
    all[got] = 0;
    return all;
}

/* What must come out: the text up to the earliest stop string. */
static size_t expected_cut(const char *text, const char *const *strs, int n, int *which) {
    size_t cut = strlen(text);
    *which = -1;
    for (int i = 0; i < n; i++) {
        const char *p = strstr(text, strs[i]);
        if (p && (size_t)(p - text) < cut) { cut = (size_t)(p - text); *which = i; }
    }
    return cut;
}

static void test_simple(void) {
    const char *stops[] = {"END"};
    dsv4_stop *s = make(stops, 1, NULL, 0, 0);
    const char *e;
    size_t el;
    CHECK(dsv4_stop_feed(s, "abc", 3, &e, &el) == DSV4_FINISH_NONE && el == 3 && memcmp(e, "abc", 3) == 0);
    CHECK(dsv4_stop_feed(s, "xE", 2, &e, &el) == DSV4_FINISH_NONE && el == 1 && e[0] == 'x');  /* "E" held */
    CHECK(dsv4_stop_feed(s, "N", 1, &e, &el) == DSV4_FINISH_NONE && el == 0);               /* "EN" held */
    CHECK(dsv4_stop_feed(s, "D and more", 10, &e, &el) == DSV4_FINISH_STOP_STRING && el == 0);
    CHECK(dsv4_stop_matched(s) == 0);
    CHECK(dsv4_stop_feed(s, "later", 5, &e, &el) == DSV4_FINISH_STOP_STRING && el == 0);
    dsv4_stop_flush(s, &e, &el);
    CHECK(el == 0);
    /* A false start is released as soon as it stops matching. */
    dsv4_stop_reset(s);
    CHECK(dsv4_stop_matched(s) == -1);
    CHECK(dsv4_stop_feed(s, "EN", 2, &e, &el) == DSV4_FINISH_NONE && el == 0);
    CHECK(dsv4_stop_feed(s, "X", 1, &e, &el) == DSV4_FINISH_NONE && el == 3 && memcmp(e, "ENX", 3) == 0);
    /* Held text comes out at the end. */
    CHECK(dsv4_stop_feed(s, "yE", 2, &e, &el) == DSV4_FINISH_NONE && el == 1);
    dsv4_stop_flush(s, &e, &el);
    CHECK(el == 1 && e[0] == 'E');
    /* Stop string and text in one piece, the stop in the middle. */
    dsv4_stop_reset(s);
    CHECK(dsv4_stop_feed(s, "hello END bye", 13, &e, &el) == DSV4_FINISH_STOP_STRING);
    CHECK(el == 6 && memcmp(e, "hello ", 6) == 0);
    dsv4_stop_free(s);

    /* The earliest start wins, not the first completed or the first listed. */
    const char *two[] = {"world", "lo w"};
    s = make(two, 2, NULL, 0, 0);
    int stopped, piece, which;
    size_t cuts[] = {4, 8};
    char *out = stream(s, "hello world", cuts, 2, &stopped, &piece);
    CHECK(stopped && strcmp(out, "hel") == 0 && dsv4_stop_matched(s) == 1);
    CHECK(expected_cut("hello world", two, 2, &which) == 3 && which == 1);
    free(out);
    dsv4_stop_free(s);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Random texts over a small alphabet (so stop strings and near-misses are frequent), cut
 * into random pieces: output = text up to the earliest stop, always. */
static void test_random_splits(void) {
    const char *stops[] = {"abab", "ba\nc", "cc", "<｜end▁of▁sentence｜>", "aaaaaa"};
    const char *alpha[] = {"a", "b", "c", "\n", "<｜end▁of▁sentence｜>", "<｜end", "x"};
    int bad = 0, n_stopped = 0, n_runs = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char text[512];
        size_t n = 0;
        int len = 1 + (int)(rnd() % 40);
        for (int i = 0; i < len; i++) {
            const char *a = alpha[rnd() % 7];
            if (n + strlen(a) >= sizeof text) break;
            memcpy(text + n, a, strlen(a));
            n += strlen(a);
        }
        text[n] = 0;
        int n_stops = 1 + (int)(rnd() % 5);
        size_t cuts[64];
        int n_cuts = 0;
        for (size_t at = 0; n_cuts < 64;) {
            at += 1 + rnd() % 6;
            if (at >= n) break;
            cuts[n_cuts++] = at;
        }
        dsv4_stop *s = make(stops, n_stops, NULL, 0, 0);
        int stopped, piece, which;
        char *out = stream(s, text, cuts, n_cuts, &stopped, &piece);
        size_t want = expected_cut(text, stops, n_stops, &which);
        if (strlen(out) != want || memcmp(out, text, want) != 0) bad++;
        if (stopped != (which >= 0) || dsv4_stop_matched(s) != which) bad++;
        if (stopped) {
            /* It stops in the piece that completes the stop string. */
            size_t end = want + strlen(stops[which]);
            size_t piece_end = piece < n_cuts ? cuts[piece] : n;
            size_t piece_start = piece > 0 ? cuts[piece - 1] : 0;
            if (!(end <= piece_end && end > piece_start)) bad++;
            n_stopped++;
        }
        n_runs++;
        free(out);
        dsv4_stop_free(s);
    }
    CHECK_MSG(bad == 0, "%d of %d runs wrong", bad, n_runs);
    CHECK(n_stopped > 500 && n_stopped < n_runs - 300);  /* both outcomes exercised */
}

/* Byte-by-byte streaming of UTF-8 text: nothing of the stop string leaks out, and what is
 * released before the stop never ends inside a character that arrived whole. */
static void test_utf8(void) {
    const char *stops[] = {"。结束"};
    dsv4_stop *s = make(stops, 1, NULL, 0, 0);
    const char *text = "你好。世界。结束了";
    size_t n = strlen(text), got = 0;
    char out[64];
    int stopped = 0;
    /* Whole characters per piece. */
    for (size_t at = 0; at < n && !stopped;) {
        size_t k = ((unsigned char)text[at] < 0x80) ? 1 : 3;
        const char *e;
        size_t el;
        stopped = dsv4_stop_feed(s, text + at, k, &e, &el) == DSV4_FINISH_STOP_STRING;
        for (size_t i = 0; i < el; i++)
            if (i + 1 == el) CHECK(((unsigned char)e[i] & 0xC0) != 0xC0);  /* no dangling lead byte */
        memcpy(out + got, e, el);
        got += el;
        at += k;
    }
    out[got] = 0;
    CHECK(stopped && strcmp(out, "你好。世界") == 0);
    dsv4_stop_free(s);
}

static void test_tokens(void) {
    const int32_t eos[] = {1, 7};
    dsv4_stop *s = make(NULL, 0, eos, 2, 3);
    CHECK(dsv4_stop_token(s, 5) == DSV4_FINISH_NONE);
    CHECK(dsv4_stop_token(s, 7) == DSV4_FINISH_STOP_TOKEN);
    CHECK(dsv4_stop_count(s) == 1);  /* a stop token is not counted */
    CHECK(dsv4_stop_token(s, 6) == DSV4_FINISH_NONE);
    CHECK(dsv4_stop_token(s, 6) == DSV4_FINISH_LENGTH);  /* the 3rd token is the last */
    CHECK(dsv4_stop_count(s) == 3);
    dsv4_stop_reset(s);
    CHECK(dsv4_stop_count(s) == 0 && dsv4_stop_token(s, 1) == DSV4_FINISH_STOP_TOKEN);
    dsv4_stop_free(s);
    /* No limit. */
    s = make(NULL, 0, NULL, 0, 0);
    int r = 0;
    for (int i = 0; i < 10000; i++) r |= dsv4_stop_token(s, i);
    CHECK(r == DSV4_FINISH_NONE);
    /* Feeding with no stop strings passes everything straight through. */
    const char *e;
    size_t el;
    CHECK(dsv4_stop_feed(s, "abc", 3, &e, &el) == 0 && el == 3);
    CHECK(dsv4_stop_feed(s, NULL, 0, &e, &el) == 0 && el == 0);
    dsv4_stop_free(s);
}

static void test_errors(void) {
    dsv4_stop *s = (dsv4_stop *)1;
    const char *empty[] = {"ok", ""};
    CHECK(dsv4_stop_create(empty, 2, NULL, 0, 0, &s, &err) == DSV4_ERR_ARG && s == NULL);
    CHECK_ERR(err, DSV4_ERR_ARG, "stop string 1 is empty");
    CHECK(dsv4_stop_create(NULL, 0, NULL, 0, -1, &s, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_stop_create(NULL, 2, NULL, 0, 0, &s, &err) == DSV4_ERR_ARG);
}

/* min_tokens (vLLM's rule): a stop string counts only when it ends in the text of a token
 * after the min-th; it may begin in the text before, and the text then stops where it
 * begins. The reference reads the text as vLLM's detokenizer does: after each token past the
 * min-th, each stop string is looked for from len(stop) - 1 bytes before that token's text;
 * the earliest start found ends it (vLLM takes the first listed: our rule since the start). */
static size_t min_reference(const char *text, const size_t *ends, int n_tok, int min, const char *const *strs,
                            int n, int *which) {
    *which = -1;
    for (int k = min; k < n_tok; k++) {  /* token k + 1 */
        const size_t fresh = k ? ends[k - 1] : 0, len = ends[k];
        size_t cut = len;
        for (int i = 0; i < n; i++) {
            const size_t sl = strlen(strs[i]), from = fresh + 1 >= sl ? fresh + 1 - sl : 0;
            for (size_t p = from; p + sl <= len; p++)
                if (!memcmp(text + p, strs[i], sl)) {
                    if (p < cut) cut = p, *which = i;
                    break;
                }
        }
        if (*which >= 0) return cut;
    }
    return ends[n_tok - 1];
}

static void test_min_tokens(void) {
    /* the straddling case: "bcd" begins in token 2's text, min 3, ends in token 4's: matched,
     * the text cut before it; with min 4 it lies wholly in the first four tokens: shown */
    const char *one[] = {"bcd"};
    const char *pieces[] = {"a", "b", "c", "d", "e"};
    for (int min = 3; min <= 4; min++) {
        dsv4_stop *s = make(one, 1, NULL, 0, 0);
        dsv4_stop_options(s, min, 0);
        char out[16] = "";
        int fin = DSV4_FINISH_NONE, k = 0;
        for (; k < 5 && fin == DSV4_FINISH_NONE; k++) {
            const char *e;
            size_t el;
            CHECK(dsv4_stop_token(s, 100 + k) == DSV4_FINISH_NONE);
            fin = dsv4_stop_feed(s, pieces[k], 1, &e, &el);
            strncat(out, e, el);
        }
        const char *e;
        size_t el;
        dsv4_stop_flush(s, &e, &el);
        strncat(out, e, el);
        if (min == 3)
            CHECK_MSG(fin == DSV4_FINISH_STOP_STRING && k == 4 && !strcmp(out, "a"), "min 3: finish %d at %d, '%s'", fin,
                      k, out);
        else
            CHECK_MSG(fin == DSV4_FINISH_NONE && !strcmp(out, "abcde"), "min 4: finish %d, '%s'", fin, out);
        dsv4_stop_free(s);
    }
    /* a reset forgets the held bytes fed before the min-th token: "xyz" held (a prefix of
     * "xyzw", min 3), then after a reset with min 0 "y" in the first token stops at once */
    {
        const char *two[] = {"xyzw", "y"};
        dsv4_stop *s = make(two, 2, NULL, 0, 0);
        dsv4_stop_options(s, 3, 0);
        const char *e;
        size_t el;
        for (int k = 0; k < 3; k++) {
            dsv4_stop_token(s, 5);
            CHECK(dsv4_stop_feed(s, "xyz" + k, 1, &e, &el) == DSV4_FINISH_NONE && el == 0);
        }
        dsv4_stop_reset(s);
        dsv4_stop_options(s, 0, 0);
        dsv4_stop_token(s, 5);
        CHECK(dsv4_stop_feed(s, "y!", 2, &e, &el) == DSV4_FINISH_STOP_STRING && el == 0 && dsv4_stop_matched(s) == 1);
        dsv4_stop_free(s);
    }
    /* random texts, token splits and min against the reference */
    const char *stops[] = {"abab", "ba\nc", "cc", "aaaaaa", "b"};
    const char *alpha[] = {"a", "b", "c", "\n", "x", "ab"};
    int bad = 0, straddled = 0, runs = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char text[256];
        size_t ends[64], n = 0;
        const int n_tok = 1 + (int)(rnd() % 30);
        for (int k = 0; k < n_tok; k++) {
            for (int c = 1 + (int)(rnd() % 3); c > 0; c--) {
                const char *a = alpha[rnd() % 6];
                memcpy(text + n, a, strlen(a));
                n += strlen(a);
            }
            ends[k] = n;
        }
        text[n] = 0;
        const int n_stops = 1 + (int)(rnd() % 5), min = (int)(rnd() % (unsigned)(n_tok + 1));
        int which;
        const size_t want = min_reference(text, ends, n_tok, min, stops, n_stops, &which);
        dsv4_stop *s = make(stops, n_stops, NULL, 0, 0);
        dsv4_stop_options(s, min, 0);
        char out[256];
        size_t got = 0;
        int fin = DSV4_FINISH_NONE;
        for (int k = 0; k < n_tok && fin == DSV4_FINISH_NONE; k++) {
            const char *e;
            size_t el;
            dsv4_stop_token(s, 7);
            fin = dsv4_stop_feed(s, text + (k ? ends[k - 1] : 0), ends[k] - (k ? ends[k - 1] : 0), &e, &el);
            memcpy(out + got, e, el);
            got += el;
        }
        const char *e;
        size_t el;
        dsv4_stop_flush(s, &e, &el);
        memcpy(out + got, e, el);
        got += el;
        const int differ = got != want || memcmp(out, text, want) || (fin == DSV4_FINISH_STOP_STRING) != (which >= 0) ||
               dsv4_stop_matched(s) != which;
        if (differ && bad < 3) {
            fprintf(stderr, "differs: text '%s' min %d n_stops %d want %zu which %d got %zu matched %d ends:", text, min, n_stops, want, which, got, dsv4_stop_matched(s));
            for (int k = 0; k < n_tok; k++) fprintf(stderr, " %zu", ends[k]);
            fprintf(stderr, "\n");
        }
        bad += differ;
        straddled += which >= 0 && min > 0 && want < ends[min - 1];
        runs += which >= 0;
        dsv4_stop_free(s);
    }
    CHECK_MSG(bad == 0, "%d of 3000 texts differ from vLLM's rule", bad);
    printf("min_tokens: %d of 3000 texts stopped, %d of them where the stop string began before the min-th token's "
           "end\n", runs, straddled);
    CHECK_MSG(straddled > 50, "%d of %d stops began before the min-th token's end: the test does not reach them",
              straddled, runs);
}

int main(void) {
    test_simple();
    test_random_splits();
    test_utf8();
    test_tokens();
    test_errors();
    test_min_tokens();
    return test_report();
}
