/* test_tokenizer.c — the BPE tokenizer against DeepSeek's tokenizer.json.
 *
 * Expected ids come from an independent implementation (tests/tok/gen_expected.mjs runs
 * @lenml/tokenizers offline over corpus.json and commits expected_ids.json). Also: round
 * trip decode(encode(x)) == x, streaming decode == whole decode and never splits a
 * character, special-token lookups, and the errors for bad text and bad ids. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "test.h"
#include "tok/tokenizer.h"
#include "util/file.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static cJSON *load_fixture(const char *name) {
    const char *src = getenv("DSV4_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/tok/%s", src ? src : ".", name);
    char *text = dsv4_read_file(path, 0, NULL, NULL);
    if (!text) { fprintf(stderr, "cannot read %s\n", path); return NULL; }
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

/* Independent UTF-8 check (not the library's): well-formed per RFC 3629. */
static int utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t w = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!w || i + w > n) return 0;
        uint32_t cp = w == 1 ? c : c & (0x7F >> w);
        for (size_t k = 1; k < w; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[w] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += w;
    }
    return 1;
}

/* Decodes ids one at a time; checks every piece is whole UTF-8; returns the text. */
static char *stream_decode(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, int flags,
                           size_t *len, int *pieces_ok) {
    dsv4_tok_stream *s;
    dsv4_err err = {0};
    *pieces_ok = 1;
    if (dsv4_tok_stream_new(tok, flags, &s, &err)) return NULL;
    size_t cap = 64, k = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t m;
        if (i < n) {
            if (dsv4_tok_stream_push(s, ids[i], &piece, &m, &err)) { *pieces_ok = 0; break; }
        } else {
            dsv4_tok_stream_flush(s, &piece, &m);
        }
        if (!utf8_ok(piece, m)) *pieces_ok = 0;
        while (k + m + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + k, piece, m);
        k += m;
    }
    out[k] = 0;
    *len = k;
    dsv4_tok_stream_free(s);
    return out;
}

static void test_corpus(const dsv4_tokenizer *tok) {
    cJSON *corpus = load_fixture("corpus.json"), *expected = load_fixture("expected_ids.json");
    CHECK(corpus && expected && cJSON_GetArraySize(corpus) == cJSON_GetArraySize(expected));
    if (!corpus || !expected) goto out;
    int n = cJSON_GetArraySize(corpus), exact = 0, roundtrip = 0, streamed = 0;
    size_t total_ids = 0;
    for (int c = 0; c < n; c++) {
        const char *text = cJSON_GetArrayItem(corpus, c)->valuestring;
        size_t len = strlen(text);
        cJSON *want = cJSON_GetArrayItem(expected, c);
        dsv4_tok_ids ids = {0};
        dsv4_err err = {0};
        int rc = dsv4_tokenize(tok, text, len, &ids, &err);
        CHECK_MSG(rc == 0, "corpus[%d]: %s", c, err.msg);
        int nw = cJSON_GetArraySize(want), same = (int)ids.n == nw;
        size_t first_diff = 0;
        for (int i = 0; i < nw && i < (int)ids.n; i++) {
            if (ids.ids[i] != cJSON_GetArrayItem(want, i)->valueint) { same = 0; first_diff = (size_t)i; break; }
            first_diff = (size_t)i + 1;
        }
        exact += same;
        total_ids += ids.n;
        CHECK_MSG(same, "corpus[%d] '%.40s...': %zu ids, expected %d; first difference at %zu (got %d, want %d)", c,
                  text, ids.n, nw, first_diff, first_diff < ids.n ? ids.ids[first_diff] : -1,
                  first_diff < (size_t)nw ? cJSON_GetArrayItem(want, (int)first_diff)->valueint : -1);

        char *back;
        size_t blen;
        rc = dsv4_detokenize(tok, ids.ids, ids.n, 0, &back, &blen, &err);
        int rt = rc == 0 && blen == len && memcmp(back, text, len) == 0;
        roundtrip += rt;
        CHECK_MSG(rt, "corpus[%d]: decode(encode(x)) != x", c);

        int pieces_ok;
        size_t slen;
        char *streamed_text = stream_decode(tok, ids.ids, ids.n, 0, &slen, &pieces_ok);
        int st = streamed_text && pieces_ok && rc == 0 && slen == blen && memcmp(streamed_text, back, blen) == 0;
        streamed += st;
        CHECK_MSG(st, "corpus[%d]: streaming decode differs from whole decode or split a character", c);
        free(streamed_text);
        if (rc == 0) free(back);
        dsv4_tok_ids_free(&ids);
    }
    printf("corpus: %d/%d texts exact (%zu ids), %d round trips, %d streams\n", exact, n, total_ids, roundtrip, streamed);
out:
    cJSON_Delete(corpus);
    cJSON_Delete(expected);
}

/* Byte-level spelling of one byte (GPT-2 alphabet), written independently of the library. */
static void byte_spelling(int b, char out[4]) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174, k = 0;
    uint32_t cp = (uint32_t)b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++) cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    }
    if (cp < 0x80) out[k++] = (char)cp;
    else { out[k++] = (char)(0xC0 | cp >> 6); out[k++] = (char)(0x80 | (cp & 0x3F)); }
    out[k] = 0;
}

static void test_streaming_partial(const dsv4_tokenizer *tok) {
    // "你" is E4 BD A0: fed as three single-byte tokens, nothing may come out before the
    // third, then the whole character.
    int32_t b[3];
    const unsigned char ni[3] = {0xE4, 0xBD, 0xA0};
    for (int i = 0; i < 3; i++) {
        char sp[4];
        byte_spelling(ni[i], sp);
        b[i] = dsv4_tok_token_to_id(tok, sp);
        CHECK(b[i] >= 0);
    }
    dsv4_tok_stream *s;
    dsv4_err err = {0};
    CHECK(dsv4_tok_stream_new(tok, 0, &s, &err) == 0);
    const char *p;
    size_t m;
    CHECK(dsv4_tok_stream_push(s, b[0], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, b[1], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, b[2], &p, &m, &err) == 0 && m == 3 && memcmp(p, "你", 3) == 0);
    dsv4_tok_stream_flush(s, &p, &m);
    CHECK(m == 0);

    // A character cut off by an ASCII token: one U+FFFD, then the ASCII.
    int32_t a = dsv4_tok_token_to_id(tok, "a");
    CHECK(dsv4_tok_stream_push(s, b[0], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, b[1], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, a, &p, &m, &err) == 0 && m == 4 && memcmp(p, "\xEF\xBF\xBD" "a", 4) == 0);
    // A bad id is refused and changes nothing.
    CHECK(dsv4_tok_stream_push(s, b[0], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, 999999, &p, &m, &err) == DSV4_ERR_ARG && m == 0);
    CHECK(dsv4_tok_stream_push(s, b[1], &p, &m, &err) == 0 && m == 0);
    CHECK(dsv4_tok_stream_push(s, b[2], &p, &m, &err) == 0 && m == 3 && memcmp(p, "你", 3) == 0);
    // Left incomplete at the end: flush gives U+FFFD.
    CHECK(dsv4_tok_stream_push(s, b[0], &p, &m, &err) == 0 && m == 0);
    dsv4_tok_stream_flush(s, &p, &m);
    CHECK(m == 3 && memcmp(p, "\xEF\xBF\xBD", 3) == 0);
    dsv4_tok_stream_free(s);

    // Whole decode of broken byte sequences: 0xFF alone, E4 BD then 'a', a lone
    // continuation byte, E4 at the end. Each maximal bad stretch is one U+FFFD.
    char sp[4];
    byte_spelling(0xFF, sp);
    int32_t ff = dsv4_tok_token_to_id(tok, sp);
    byte_spelling(0xBD, sp);
    int32_t cont = dsv4_tok_token_to_id(tok, sp);
    int32_t seq[] = {ff, b[0], b[1], a, cont, a, b[0]};
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(tok, seq, 7, 0, &text, &len, &err) == 0);
    const char want[] = "\xEF\xBF\xBD\xEF\xBF\xBD" "a" "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD";
    CHECK(len == sizeof want - 1 && memcmp(text, want, len) == 0);
    int ok;
    size_t slen;
    char *st = stream_decode(tok, seq, 7, 0, &slen, &ok);
    CHECK(ok && slen == len && memcmp(st, text, len) == 0);
    free(st);
    free(text);
}

static void test_special(const dsv4_tokenizer *tok) {
    CHECK(dsv4_tok_vocab_size(tok) == 128815);
    int32_t bos = dsv4_tok_token_to_id(tok, "<｜begin▁of▁sentence｜>");
    int32_t eos = dsv4_tok_token_to_id(tok, "<｜end▁of▁sentence｜>");
    int32_t user = dsv4_tok_token_to_id(tok, "<｜User｜>");
    CHECK(bos == 0 && eos == 1 && user == 128803);
    CHECK(dsv4_tok_token_to_id(tok, "Ġthe") >= 0 && dsv4_tok_token_to_id(tok, "no such token!") == -1);
    CHECK(strcmp(dsv4_tok_id_to_token(tok, eos), "<｜end▁of▁sentence｜>") == 0);
    CHECK(dsv4_tok_id_to_token(tok, -1) == NULL && dsv4_tok_id_to_token(tok, 128815) == NULL);
    CHECK(dsv4_tok_is_special(tok, eos) && dsv4_tok_is_added(tok, user) && !dsv4_tok_is_special(tok, user));
    CHECK(!dsv4_tok_is_added(tok, dsv4_tok_token_to_id(tok, "Ġthe")));
    size_t n;
    const char *b = dsv4_tok_id_bytes(tok, dsv4_tok_token_to_id(tok, "Ġthe"), &n);
    CHECK(b && n == 4 && memcmp(b, " the", 4) == 0);

    // Literal special strings become their tokens; with DSV4_TOK_NO_ADDED they do not.
    const char *text = "<｜User｜>hi<｜end▁of▁sentence｜>";
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    CHECK(dsv4_tokenize(tok, text, strlen(text), &ids, &err) == 0);
    CHECK(ids.n == 3 && ids.ids[0] == user && ids.ids[2] == eos);
    ids.n = 0;
    CHECK(dsv4_tokenize_ex(tok, text, strlen(text), DSV4_TOK_NO_ADDED, &ids, &err) == 0);
    int any = 0;
    for (size_t i = 0; i < ids.n; i++) any |= ids.ids[i] == user || ids.ids[i] == eos;
    CHECK(ids.n > 3 && !any);
    // ... and still decode to the same text.
    char *back;
    size_t blen;
    CHECK(dsv4_detokenize(tok, ids.ids, ids.n, 0, &back, &blen, &err) == 0 && blen == strlen(text) &&
          memcmp(back, text, blen) == 0);
    free(back);
    // Appending: a second call adds to the list.
    size_t before = ids.n;
    CHECK(dsv4_tokenize(tok, "x", 1, &ids, &err) == 0 && ids.n == before + 1);

    // Skipping special tokens drops BOS/EOS but not the (non-special) role markers.
    int32_t seq[] = {bos, user, dsv4_tok_token_to_id(tok, "hi"), eos};
    CHECK(dsv4_detokenize(tok, seq, 4, DSV4_DETOK_SKIP_SPECIAL, &back, &blen, &err) == 0);
    CHECK(blen == strlen("<｜User｜>hi") && memcmp(back, "<｜User｜>hi", blen) == 0);
    free(back);
    dsv4_tok_ids_free(&ids);
}

static void test_bad_input(const dsv4_tokenizer *tok) {
    dsv4_tok_ids ids = {0};
    dsv4_err err = {0};
    const char bad[] = "abc\xC3(def";
    CHECK(dsv4_tokenize(tok, bad, sizeof bad - 1, &ids, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "byte 3");
    CHECK(ids.n == 0);
    const char *more[] = {"\xED\xA0\x80", "\xC0\xAF", "\xF4\x90\x80\x80", "x\xE4\xBD"};
    for (int i = 0; i < 4; i++) CHECK(dsv4_tokenize(tok, more[i], strlen(more[i]), &ids, &err) == DSV4_ERR_ARG);
    CHECK(dsv4_tokenize(tok, "", 0, &ids, &err) == 0 && ids.n == 0);

    int32_t seq[] = {19923, 128815};
    char *text;
    size_t len;
    CHECK(dsv4_detokenize(tok, seq, 2, 0, &text, &len, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "id 128815");
    seq[1] = -5;
    CHECK(dsv4_detokenize(tok, seq, 2, 0, &text, &len, &err) == DSV4_ERR_ARG);
    CHECK_ERR(err, DSV4_ERR_ARG, "index 1");
    CHECK(dsv4_detokenize(tok, seq, 0, 0, &text, &len, &err) == 0 && len == 0 && text[0] == 0);
    free(text);
}

/* Pathological inputs must finish (and match a few facts that need no oracle). */
static void test_long_runs(const dsv4_tokenizer *tok) {
    size_t n = 1 << 18;
    char *text = malloc(n);
    dsv4_err err = {0};
    const char fill[] = {' ', 'a', '7', '\n'};
    for (int f = 0; f < 4; f++) {
        memset(text, fill[f], n);
        dsv4_tok_ids ids = {0};
        double t0 = now_ms();
        int rc = dsv4_tokenize(tok, text, n, &ids, &err);
        double dt = now_ms() - t0;
        CHECK_MSG(rc == 0, "run of %zu x 0x%02x: %s", n, fill[f], err.msg);
        char *back;
        size_t blen;
        CHECK(rc == 0 && dsv4_detokenize(tok, ids.ids, ids.n, 0, &back, &blen, &err) == 0 && blen == n &&
              memcmp(back, text, n) == 0);
        if (rc == 0) free(back);
        printf("run of 256 KiB of 0x%02x: %zu ids in %.0f ms\n", fill[f], ids.n, dt);
        if (fill[f] == '7') CHECK(ids.n == (n + 2) / 3);  // digits go in groups of three
        dsv4_tok_ids_free(&ids);
    }
    free(text);
}

/* Several threads encoding with one tokenizer (they contend for its word cache) get the
 * same ids as one thread alone. */
typedef struct {
    const dsv4_tokenizer *tok;
    const char *text;
    size_t len;
    dsv4_tok_ids ids;
    int rc;
} enc_job;

static void *enc_worker(void *arg) {
    enc_job *j = arg;
    dsv4_err err = {0};
    for (int r = 0; r < 20 && !j->rc; r++) {
        j->ids.n = 0;
        j->rc = dsv4_tokenize(j->tok, j->text, j->len, &j->ids, &err);
    }
    return NULL;
}

static void test_threads(const dsv4_tokenizer *tok) {
    cJSON *corpus = load_fixture("corpus.json");
    if (!corpus) return;
    const char *text = cJSON_GetArrayItem(corpus, cJSON_GetArraySize(corpus) - 1)->valuestring;
    dsv4_tok_ids alone = {0};
    dsv4_err err = {0};
    CHECK(dsv4_tokenize(tok, text, strlen(text), &alone, &err) == 0);
    enum { T = 4 };
    enc_job jobs[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        jobs[i] = (enc_job){.tok = tok, .text = text, .len = strlen(text)};
        CHECK(pthread_create(&th[i], NULL, enc_worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].rc == 0 && jobs[i].ids.n == alone.n &&
              memcmp(jobs[i].ids.ids, alone.ids, alone.n * sizeof *alone.ids) == 0);
        dsv4_tok_ids_free(&jobs[i].ids);
    }
    dsv4_tok_ids_free(&alone);
    cJSON_Delete(corpus);
}

int main(void) {
    char path[1024];
    test_shared("tokenizer/tokenizer.json", path, sizeof path);
    dsv4_tokenizer *tok;
    dsv4_err err = {0};
    double t0 = now_ms();
    int rc = dsv4_tokenizer_load(path, &tok, &err);
    double dt = now_ms() - t0;
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return test_report();
    printf("load %s: %.1f ms\n", path, dt);
    test_corpus(tok);
    test_streaming_partial(tok);
    test_special(tok);
    test_bad_input(tok);
    test_long_runs(tok);
    test_threads(tok);
    dsv4_tokenizer_free(tok);
    return test_report();
}
