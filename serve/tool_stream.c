/* tool_stream.c — streamed tool_calls deltas from a DSML block as it grows (tool_stream.h).
 * Each call re-reads the block from its start (it is short next to a step's compute) and
 * sends what grew. */
#include "serve/tool_stream.h"

#include "serve/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TC_CLOSE "</" DSV4_DSML "tool_calls>"
#define INV_OPEN "<" DSV4_DSML "invoke"
#define INV_CLOSE "</" DSV4_DSML "invoke>"
#define PAR_OPEN "<" DSV4_DSML "parameter"
#define PAR_CLOSE "</" DSV4_DSML "parameter>"

/* A call as far as the text shows it. */
typedef struct part {
    const char *name;  /* into the block */
    size_t name_n;
    srv_buf args;      /* the arguments text that can no longer change */
} part;

typedef struct scan {
    const char *s;
    size_t n, pos;
} scan;

static void skip_ws(scan *c) {
    while (c->pos < c->n) {
        const char ch = c->s[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') break;
        c->pos++;
    }
}

/* Consumes lit when it is next, whole. */
static int take(scan *c, const char *lit) {
    size_t m = strlen(lit);
    if (c->n - c->pos < m || memcmp(c->s + c->pos, lit, m)) return 0;
    c->pos += m;
    return 1;
}

/* The inside of a JSON string for n bytes of s, as Python's json.dumps(ensure_ascii=False)
 * writes it (and src/tok/pyjson.c): '"', '\\' and control characters escaped. */
static void put_escaped(srv_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': srv_buf_puts(b, "\\\""); break;
        case '\\': srv_buf_puts(b, "\\\\"); break;
        case '\n': srv_buf_puts(b, "\\n"); break;
        case '\r': srv_buf_puts(b, "\\r"); break;
        case '\t': srv_buf_puts(b, "\\t"); break;
        case '\b': srv_buf_puts(b, "\\b"); break;
        case '\f': srv_buf_puts(b, "\\f"); break;
        default:
            if (ch < 0x20) srv_buf_printf(b, "\\u%04x", ch);
            else srv_buf_put(b, (const char *)&ch, 1);
        }
    }
}

/* A complete value: a string, or JSON text kept verbatim, as dsv4_dsml_parse decides. */
static void put_value(srv_buf *b, const char *v, size_t n, int is_str) {
    if (!is_str) {
        const int json = dsv4_dsml_value_is_json(v, n);
        if (json < 0) { b->oom = 1; return; }
        if (json) {
            srv_buf_put(b, v, n);
            return;
        }
    }
    srv_buf_puts(b, "\"");
    put_escaped(b, v, n);
    srv_buf_puts(b, "\"");
}

/* The parameters of one call, up to where the text stops or stops making sense. Returns 1
 * when the call is closed. */
static int scan_params(scan *c, int done, part *p) {
    int n_params = 0;
    for (;;) {
        skip_ws(c);
        if (take(c, INV_CLOSE)) {
            srv_buf_puts(&p->args, n_params ? "}" : "{}");
            return 1;
        }
        if (!take(c, PAR_OPEN)) return 0;
        skip_ws(c);
        if (!take(c, "name=\"")) return 0;
        const size_t k0 = c->pos, k1 = srv_find(c->s, c->n, k0, "\"");
        if (k1 == c->n) return 0;
        c->pos = k1 + 1;
        skip_ws(c);
        int is_str;
        if (take(c, "string=\"true\">")) is_str = 1;
        else if (take(c, "string=\"false\">")) is_str = 0;
        else return 0;
        srv_buf_puts(&p->args, n_params ? ", \"" : "{\"");
        put_escaped(&p->args, c->s + k0, k1 - k0);
        srv_buf_puts(&p->args, "\": ");
        const size_t v0 = c->pos, v1 = srv_find(c->s, c->n, v0, PAR_CLOSE);
        if (v1 == c->n) {
            /* the value so far: a string's characters, except what may begin the close */
            if (is_str) {
                size_t avail = c->n - v0;
                if (!done) avail -= srv_partial_tail(c->s + v0, avail, PAR_CLOSE);
                srv_buf_puts(&p->args, "\"");
                put_escaped(&p->args, c->s + v0, avail);
            }
            return 0;
        }
        put_value(&p->args, c->s + v0, v1 - v0, is_str);
        c->pos = v1 + strlen(PAR_CLOSE);
        n_params++;
    }
}

/* The calls the block shows; returns how many (at most cap). */
static int scan_calls(const char *block, size_t n, int done, part *calls, int cap) {
    scan c = {block, n, 0};
    int k = 0;
    while (k < cap) {
        skip_ws(&c);
        if (!take(&c, INV_OPEN)) break;
        skip_ws(&c);
        if (!take(&c, "name=\"")) break;
        const size_t n0 = c.pos, n1 = srv_find(block, n, n0, "\">");
        if (n1 == n || memchr(block + n0, '\n', n1 - n0) || srv_find(block, n1, n0, DSV4_DSML) < n1) break;
        c.pos = n1 + 2;
        calls[k].name = block + n0;
        calls[k].name_n = n1 - n0;
        memset(&calls[k].args, 0, sizeof calls[k].args);
        const int closed = scan_params(&c, done, &calls[k]);
        k++;
        if (!closed) break;
    }
    return k;
}

static int grow(srv_tool_stream *ts, int n) {
    if (n <= ts->cap) return 0;
    int cap = n > 2 * ts->cap ? n : 2 * ts->cap;
    srv_buf *s = realloc(ts->sent, (size_t)cap * sizeof *s);
    if (!s) return -1;
    memset(s + ts->cap, 0, (size_t)(cap - ts->cap) * sizeof *s);
    ts->sent = s;
    ts->cap = cap;
    return 0;
}

/* {"index": i, ["id", "type",] "function": {["name",] "arguments"}} */
static cJSON *entry(int i, const char *id, const char *name, size_t name_n, const char *args,
                    size_t args_n) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "index", i);
    if (name) {
        char cid[96];
        snprintf(cid, sizeof cid, "call_%s_%d", id, i);
        cJSON_AddStringToObject(e, "id", cid);
        cJSON_AddStringToObject(e, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(e, "function");
    if (name) {
        char *nm = strndup(name, name_n);
        cJSON_AddStringToObject(f, "name", nm ? nm : "");
        free(nm);
    }
    char *a = strndup(args, args_n);
    cJSON_AddStringToObject(f, "arguments", a ? a : "");
    free(a);
    return e;
}

/* The delta of call i given its arguments so far (the whole call when it is new). */
static void send_call(srv_tool_stream *ts, cJSON **arr, int i, const char *id, const char *name,
                      size_t name_n, const char *args, size_t args_n) {
    if (grow(ts, i + 1)) return;
    srv_buf *sent = &ts->sent[i];
    if (i >= ts->n_calls) {
        if (i > ts->n_calls) return;  /* calls are announced in order */
        if (!*arr) *arr = cJSON_CreateArray();
        cJSON_AddItemToArray(*arr, entry(i, id, name, name_n, args, args_n));
        srv_buf_put(sent, args, args_n);
        ts->n_calls++;
        return;
    }
    /* only ever a continuation of what was sent */
    if (args_n <= sent->n || memcmp(args, sent->s ? sent->s : "", sent->n)) return;
    if (!*arr) *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(*arr, entry(i, id, NULL, 0, args + sent->n, args_n - sent->n));
    srv_buf_put(sent, args + sent->n, args_n - sent->n);
}

cJSON *srv_tool_stream_next(srv_tool_stream *ts, const char *block, size_t n, int done,
                            const char *id) {
    part calls[64];
    const int k = scan_calls(block, n, done, calls, 64);
    cJSON *arr = NULL;
    for (int i = 0; i < k; i++) {
        send_call(ts, &arr, i, id, calls[i].name, calls[i].name_n, calls[i].args.s ? calls[i].args.s : "",
                  calls[i].args.n);
        srv_buf_free(&calls[i].args);
    }
    return arr;
}

cJSON *srv_tool_stream_finish(srv_tool_stream *ts, const dsv4_parsed *p, const char *id) {
    cJSON *arr = NULL;
    for (int i = 0; i < p->n_calls; i++) {
        const char *a = p->calls[i].arguments ? p->calls[i].arguments : "";
        send_call(ts, &arr, i, id, p->calls[i].name, strlen(p->calls[i].name), a, strlen(a));
    }
    return arr;
}

void srv_tool_stream_free(srv_tool_stream *ts) {
    for (int i = 0; i < ts->cap; i++) srv_buf_free(&ts->sent[i]);
    free(ts->sent);
    memset(ts, 0, sizeof *ts);
}

cJSON *srv_tool_stream_text(srv_tool_stream *ts, const srv_split *sp, const char *text, size_t upto,
                            int done, const char *id) {
    if (sp->part != SRV_PART_TOOLS) return NULL;
    static const char open[] = "<｜DSML｜tool_calls>";
    const char *at = strstr(text + sp->pos, open);
    if (!at) return NULL;
    const char *block = at + strlen(open);
    if ((size_t)(block - text) > upto) return NULL;
    return srv_tool_stream_next(ts, block, upto - (size_t)(block - text), done, id);
}
