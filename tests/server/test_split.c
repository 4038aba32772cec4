/* test_split.c — the server's streaming split of an answer into reasoning, content and the
 * DSML tool block (serve/split.c), the tool_calls deltas of a block as it grows
 * (serve/tool_stream.c), and its UTF-8 repair of token bytes (serve/util.c).
 * Every answer is fed whole and one byte at a time: the released pieces must add up to the
 * same reasoning and content either way, so no part of a marker ever leaks out early; the
 * deltas must add up to the calls dsv4_dsml_parse reads from the whole block. */
#include <cjson/cJSON.h>

#include "serve/split.h"
#include "serve/tool_stream.h"
#include "serve/util.h"
#include "test.h"

#define TOOLS "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"

/* Feeds text[0..len) in steps of `step` bytes (0: all at once); collects the parts. */
static void run(const char *text, int thinking, size_t step, srv_buf *reasoning, srv_buf *content,
                int *final_part, int tools) {
    srv_split s;
    srv_split_init(&s, thinking, tools);
    size_t len = strlen(text);
    for (size_t upto = step ? 0 : len;; upto += step ? step : 1) {
        if (upto > len) upto = len;
        int part;
        size_t off, n;
        while (srv_split_next(&s, text, upto, upto == len, &part, &off, &n))
            srv_buf_put(part == SRV_PART_REASONING ? reasoning : content, text + off, n);
        if (upto == len) break;
    }
    *final_part = s.part;
}

static void expect_tools(const char *text, int thinking, const char *want_r, const char *want_c,
                         int want_part, int tools) {
    for (size_t step = 0; step <= 3; step++) {
        srv_buf r = {0}, c = {0};
        srv_buf_puts(&r, "");
        srv_buf_puts(&c, "");
        int part;
        run(text, thinking, step, &r, &c, &part, tools);
        CHECK_MSG(!strcmp(r.s, want_r), "step %zu: reasoning '%s', want '%s'", step, r.s, want_r);
        CHECK_MSG(!strcmp(c.s, want_c), "step %zu: content '%s', want '%s'", step, c.s, want_c);
        CHECK_MSG(part == want_part, "step %zu: part %d, want %d", step, part, want_part);
        srv_buf_free(&r);
        srv_buf_free(&c);
    }
}

static void expect(const char *text, int thinking, const char *want_r, const char *want_c, int want_part) {
    expect_tools(text, thinking, want_r, want_c, want_part, 1);
}

/* The calls the deltas of a block fed `step` bytes at a time add up to (OpenAI client
 * accumulation: a name and id once, arguments concatenated by index). */
typedef struct acc {
    int n, named_before_args;
    srv_buf name[8], args[8];
} acc;

static void accumulate(acc *a, cJSON *arr) {
    for (cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
        int i = (int)cJSON_GetObjectItem(e, "index")->valuedouble;
        CHECK_MSG(i >= 0 && i < 8 && i <= a->n, "delta index %d after %d calls", i, a->n);
        if (i < 0 || i >= 8 || i > a->n) continue;
        cJSON *f = cJSON_GetObjectItem(e, "function");
        cJSON *nm = cJSON_GetObjectItem(f, "name"), *ar = cJSON_GetObjectItem(f, "arguments");
        if (i == a->n) {
            /* a new call: its first delta has the id and the name */
            CHECK_MSG(cJSON_IsString(nm) && cJSON_IsString(cJSON_GetObjectItem(e, "id")), "call %d: no name/id first", i);
            a->n++;
            if (cJSON_IsString(nm)) srv_buf_puts(&a->name[i], nm->valuestring);
        } else {
            CHECK_MSG(!nm, "call %d: a second name delta", i);
        }
        if (cJSON_IsString(ar)) srv_buf_puts(&a->args[i], ar->valuestring);
    }
    cJSON_Delete(arr);
}

static void expect_calls(const char *block, size_t step) {
    const size_t len = strlen(block);
    srv_tool_stream ts = {0};
    acc a = {0};
    int deltas = 0;
    for (size_t upto = step ? 0 : len;; upto += step ? step : 1) {
        if (upto > len) upto = len;
        cJSON *arr = srv_tool_stream_next(&ts, block, upto, upto == len, "t");
        deltas += arr != NULL;
        accumulate(&a, arr);
        if (upto == len) break;
    }
    /* the reference: the whole answer through the library's parser */
    srv_buf whole = {0};
    srv_buf_puts(&whole, "\n\n<｜DSML｜tool_calls>");
    srv_buf_puts(&whole, block);
    dsv4_parsed p;
    dsv4_err err = {0};
    CHECK(dsv4_dsml_parse(whole.s, whole.n, 0, &p, &err) == 0);
    accumulate(&a, srv_tool_stream_finish(&ts, &p, "t"));  /* nothing may be missing */
    CHECK_MSG(a.n == p.n_calls, "step %zu: %d calls streamed, %d parsed", step, a.n, p.n_calls);
    for (int i = 0; i < a.n && i < p.n_calls; i++) {
        CHECK_MSG(!strcmp(a.name[i].s, p.calls[i].name), "call %d name '%s'", i, a.name[i].s);
        CHECK_MSG(a.args[i].s && !strcmp(a.args[i].s, p.calls[i].arguments), "step %zu call %d: streamed "
                  "arguments '%s', parsed '%s'", step, i, a.args[i].s ? a.args[i].s : "", p.calls[i].arguments);
    }
    /* byte by byte, a string value goes out in pieces, not in one delta per call */
    if (step == 1) CHECK_MSG(deltas > 2 * p.n_calls + 2, "only %d deltas", deltas);
    dsv4_parsed_free(&p);
    srv_buf_free(&whole);
    for (int i = 0; i < 8; i++) { srv_buf_free(&a.name[i]); srv_buf_free(&a.args[i]); }
    srv_tool_stream_free(&ts);
}

int main(void) {
    /* plain chat answers */
    expect("Hello there", 0, "", "Hello there", SRV_PART_CONTENT);
    expect("ends with newlines\n\n", 0, "", "ends with newlines\n\n", SRV_PART_CONTENT);
    expect("a < b and </think> stays", 0, "", "a < b and </think> stays", SRV_PART_CONTENT);
    /* reasoning, then content; a near-marker inside reasoning is text */
    expect("I think</think>Hi", 1, "I think", "Hi", SRV_PART_CONTENT);
    expect("x </thi y</think>", 1, "x </thi y", "", SRV_PART_CONTENT);
    expect("never closed </thin", 1, "never closed </thin", "", SRV_PART_REASONING);
    /* tool block: content stops before the blank line that opens it */
    expect("Let me check.\n\n" TOOLS, 0, "", "Let me check.", SRV_PART_TOOLS);
    expect("r</think>c\n\n" TOOLS, 1, "r", "c", SRV_PART_TOOLS);
    expect(TOOLS, 0, "", "", SRV_PART_TOOLS);
    expect("no blank line" TOOLS, 0, "", "no blank line", SRV_PART_TOOLS);
    /* a cut-short marker at the end is released as text once the answer is complete */
    expect("almost\n\n<｜DSML｜tool", 0, "", "almost\n\n<｜DSML｜tool", SRV_PART_CONTENT);
    /* no tools offered (tool_choice none): a DSML block is content like any text */
    expect_tools("Let me check.\n\n" TOOLS, 0, "", "Let me check.\n\n" TOOLS, SRV_PART_CONTENT, 0);
    expect_tools("r</think>c\n\n" TOOLS, 1, "r", "c\n\n" TOOLS, SRV_PART_CONTENT, 0);

    /* tool_calls deltas: string values (escapes, a near-close inside, non-ASCII), JSON
     * values (kept verbatim, or a string when not JSON), no parameters, two calls */
#define PS(k, v) "<｜DSML｜parameter name=\"" k "\" string=\"true\">" v "</｜DSML｜parameter>"
#define PJ(k, v) "<｜DSML｜parameter name=\"" k "\" string=\"false\">" v "</｜DSML｜parameter>"
    const char *blocks[] = {
        "\n<｜DSML｜invoke name=\"get_weather\">\n" PS("city", "Paris") "\n" PJ("days", "3")
        "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        "\n<｜DSML｜invoke name=\"f\">\n" PS("q", "a \"quote\", a \\ and\na tab\t</｜DSML｜param é 中")
        "\n" PJ("o", "{\"x\":[1, 2]}") "\n" PJ("bad", "not json") "\n</｜DSML｜invoke>\n"
        "<｜DSML｜invoke name=\"g\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
    };
    for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
        for (size_t step = 0; step <= 3; step++) expect_calls(blocks[b], step);

    /* UTF-8 repair: valid text passes, every invalid byte becomes U+FFFD */
    struct { const char *in, *out; } u[] = {
        {"plain é 中", "plain é 中"},
        {"a\xe4\xb8", "a\xef\xbf\xbd\xef\xbf\xbd"},           /* cut character */
        {"\xff", "\xef\xbf\xbd"},                              /* never valid */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},             /* overlong '/' */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!"},            /* 4-byte character */
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        srv_buf b = {0};
        srv_buf_put_utf8(&b, u[i].in, strlen(u[i].in));
        CHECK_MSG(b.s && !strcmp(b.s, u[i].out), "utf8 case %zu: got '%s'", i, b.s ? b.s : "(null)");
        srv_buf_free(&b);
    }
    return test_report();
}
