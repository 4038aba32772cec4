/* test_split.c — the server's streaming split of an answer into reasoning, content and the
 * DSML tool block (serve/split.c), and its UTF-8 repair of token bytes (serve/util.c).
 * Every answer is fed whole and one byte at a time: the released pieces must add up to the
 * same reasoning and content either way, so no part of a marker ever leaks out early. */
#include "serve/split.h"
#include "serve/util.h"
#include "test.h"

#define TOOLS "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"

/* Feeds text[0..len) in steps of `step` bytes (0: all at once); collects the parts. */
static void run(const char *text, int thinking, size_t step, srv_buf *reasoning, srv_buf *content,
                int *final_part) {
    srv_split s;
    srv_split_init(&s, thinking);
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

static void expect(const char *text, int thinking, const char *want_r, const char *want_c, int want_part) {
    for (size_t step = 0; step <= 3; step++) {
        srv_buf r = {0}, c = {0};
        srv_buf_puts(&r, "");
        srv_buf_puts(&c, "");
        int part;
        run(text, thinking, step, &r, &c, &part);
        CHECK_MSG(!strcmp(r.s, want_r), "step %zu: reasoning '%s', want '%s'", step, r.s, want_r);
        CHECK_MSG(!strcmp(c.s, want_c), "step %zu: content '%s', want '%s'", step, c.s, want_c);
        CHECK_MSG(part == want_part, "step %zu: part %d, want %d", step, part, want_part);
        srv_buf_free(&r);
        srv_buf_free(&c);
    }
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
