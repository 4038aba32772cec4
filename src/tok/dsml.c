/* dsml.c — DSML tool calls: encoding into the prompt, parsing out of generated text
 * (see dsml.h). */
#include "tok/dsml.h"

#include <stdlib.h>
#include <string.h>

#include "tok/chat.h"
#include "tok/pyjson.h"
#include "util/err.h"

#define TC_OPEN "<" DSV4_DSML "tool_calls>"
#define TC_CLOSE "</" DSV4_DSML "tool_calls>"
#define INV_OPEN "<" DSV4_DSML "invoke"
#define INV_CLOSE "</" DSV4_DSML "invoke>"
#define PAR_OPEN "<" DSV4_DSML "parameter"
#define PAR_CLOSE "</" DSV4_DSML "parameter>"

/* ---- encoding ------------------------------------------------------------------------ */

/* One parameter line; value is raw text (is_str) or JSON text. */
static void put_param(dsv4_tbuf *b, const char *key, int is_str, const char *v, size_t vn) {
    dsv4_tbuf_puts(b, PAR_OPEN " name=\"");
    dsv4_tbuf_puts(b, key);
    dsv4_tbuf_puts(b, is_str ? "\" string=\"true\">" : "\" string=\"false\">");
    dsv4_tbuf_put(b, v, vn);
    dsv4_tbuf_puts(b, PAR_CLOSE);
}

static void put_args(dsv4_tbuf *b, const cJSON *args) {
    int first = 1;
    for (const cJSON *a = args->child; a; a = a->next) {
        if (!first) dsv4_tbuf_putc(b, '\n');
        first = 0;
        const char *key = a->string ? a->string : "";
        if (cJSON_IsString(a)) {
            const char *v = a->valuestring ? a->valuestring : "";
            put_param(b, key, 1, v, strlen(v));
        } else {
            dsv4_tbuf js = {0};
            dsv4_pyjson_value(&js, a);
            if (js.oom) b->oom = 1;
            else put_param(b, key, 0, js.s, js.n);
            dsv4_tbuf_free(&js);
        }
    }
}

int dsv4_dsml_encode_calls(dsv4_tbuf *b, const cJSON *tool_calls, const char *where,
                           dsv4_err *err) {
    if (!cJSON_IsArray(tool_calls))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: tool_calls must be an array", where);
    dsv4_tbuf_puts(b, "\n\n" TC_OPEN "\n");
    int i = 0;
    for (const cJSON *tc = tool_calls->child; tc; tc = tc->next, i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring)
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "%s: tool_calls[%d] has no function.name string", where, i);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *parsed = NULL, *wrapped = NULL;
        const cJSON *obj = NULL;
        if (cJSON_IsObject(args)) {
            obj = args;
        } else if (args == NULL || cJSON_IsNull(args)) {
            obj = NULL;  /* no arguments: an empty parameter list */
        } else if (cJSON_IsString(args)) {
            parsed = cJSON_Parse(args->valuestring ? args->valuestring : "");
            if (cJSON_IsObject(parsed)) {
                obj = parsed;
            } else {
                /* Not a JSON object: DeepSeek's encoder passes the text on as one string
                 * parameter named "arguments". */
                wrapped = cJSON_CreateObject();
                if (!wrapped || !cJSON_AddStringToObject(wrapped, "arguments",
                                                         args->valuestring ? args->valuestring : "")) {
                    cJSON_Delete(parsed);
                    cJSON_Delete(wrapped);
                    return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where);
                }
                obj = wrapped;
            }
        } else {
            return dsv4_fail(err, DSV4_ERR_FORMAT,
                             "%s: tool_calls[%d].function.arguments must be a string or object",
                             where, i);
        }
        if (i) dsv4_tbuf_putc(b, '\n');
        dsv4_tbuf_puts(b, INV_OPEN " name=\"");
        dsv4_tbuf_puts(b, name->valuestring);
        dsv4_tbuf_puts(b, "\">\n");
        if (obj) put_args(b, obj);
        dsv4_tbuf_puts(b, "\n" INV_CLOSE);
        cJSON_Delete(parsed);
        cJSON_Delete(wrapped);
    }
    dsv4_tbuf_puts(b, "\n" TC_CLOSE);
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------- */

/* A cursor over the body (text without EOS and what follows it). */
typedef struct scan {
    const char *s;
    size_t n, pos;
    int ended;       /* the body was followed by EOS: running out of text is an error */
    int truncated;   /* ran out of text at a point where more could have followed */
    const char *why; /* first problem found (static string) */
    size_t why_at;
} scan;

static const char *find(const char *s, size_t n, size_t from, const char *pat) {
    size_t m = strlen(pat);
    if (m == 0 || from > n || n - from < m) return NULL;
    for (const char *p = s + from; p + m <= s + n; p++) {
        p = memchr(p, pat[0], (size_t)(s + n - p) - m + 1);
        if (!p) return NULL;
        if (memcmp(p, pat, m) == 0) return p;
    }
    return NULL;
}

/* Marks the scan as failed: truncated when the text simply ran out (and no EOS came),
 * malformed otherwise. Returns 0 so callers can `return stop(...)`. */
static int stop(scan *c, int ran_out, const char *why) {
    if (ran_out && !c->ended) c->truncated = 1;
    else if (!c->why) { c->why = why; c->why_at = c->pos; }
    return 0;
}

static void skip_ws(scan *c) {
    while (c->pos < c->n) {
        char ch = c->s[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') break;
        c->pos++;
    }
}

/* Consumes lit if it is next: 1. If the text ends inside lit: 0 with ran_out = 1. */
static int take(scan *c, const char *lit, int *ran_out) {
    size_t m = strlen(lit), left = c->n - c->pos;
    size_t k = left < m ? left : m;
    *ran_out = 0;
    if (memcmp(c->s + c->pos, lit, k) != 0) return 0;
    if (k < m) { *ran_out = 1; return 0; }
    c->pos += m;
    return 1;
}

/* Reads up to the next occurrence of end (consumed); [*v, *vn) = what came before. */
static int until(scan *c, const char *end, const char **v, size_t *vn) {
    const char *p = find(c->s, c->n, c->pos, end);
    if (!p) return 0;
    *v = c->s + c->pos;
    *vn = (size_t)(p - *v);
    c->pos = (size_t)(p - c->s) + strlen(end);
    return 1;
}

/* Parameter list of one call, being assembled as JSON text. */
typedef struct argset {
    dsv4_tbuf json;        /* "{" + "k": v, ... */
    char **keys;           /* [n] for the duplicate check */
    int n, cap;
} argset;

static void argset_free(argset *a) {
    dsv4_tbuf_free(&a->json);
    for (int i = 0; i < a->n; i++) free(a->keys[i]);
    free(a->keys);
    memset(a, 0, sizeof *a);
}

/* Adds key/value; 0 on a duplicate key, -1 when out of memory. */
static int argset_add(argset *a, const char *k, size_t kn, const char *v, size_t vn,
                      int is_str) {
    for (int i = 0; i < a->n; i++)
        if (strlen(a->keys[i]) == kn && memcmp(a->keys[i], k, kn) == 0) return 0;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        char **keys = realloc(a->keys, (size_t)cap * sizeof *keys);
        if (!keys) return -1;
        a->keys = keys;
        a->cap = cap;
    }
    char *key = malloc(kn + 1);
    if (!key) return -1;
    memcpy(key, k, kn);
    key[kn] = 0;
    a->keys[a->n++] = key;

    dsv4_tbuf_puts(&a->json, a->n == 1 ? "{" : ", ");
    dsv4_pyjson_string(&a->json, k, kn);
    dsv4_tbuf_puts(&a->json, ": ");
    int raw_json = 0;
    if (!is_str) {
        raw_json = dsv4_dsml_value_is_json(v, vn);
        if (raw_json < 0) return -1;
    }
    if (raw_json) dsv4_tbuf_put(&a->json, v, vn);
    else dsv4_pyjson_string(&a->json, v, vn);
    return a->json.oom ? -1 : 1;
}

/* One <｜DSML｜invoke ...>...</｜DSML｜invoke>, INV_OPEN already consumed. Returns 1 with
 * the call filled, 0 on a problem (recorded in c), -1 when out of memory. */
static int parse_invoke(scan *c, dsv4_tool_call *call) {
    int ran_out;
    const char *v;
    size_t vn;
    skip_ws(c);
    if (!take(c, "name=\"", &ran_out)) return stop(c, ran_out || c->pos == c->n,
                                                   "expected name=\"...\" after <｜DSML｜invoke");
    size_t name_at = c->pos;
    if (!until(c, "\">", &v, &vn)) return stop(c, 1, "unterminated invoke name");
    if (memchr(v, '\n', vn) || find(v, vn, 0, DSV4_DSML)) {
        c->pos = name_at;
        return stop(c, 0, "invoke name runs into markup");
    }
    argset args = {0};
    int rc = 0;
    for (;;) {
        skip_ws(c);
        if (c->pos == c->n) { rc = stop(c, 1, "unterminated invoke"); break; }
        if (take(c, INV_CLOSE, &ran_out)) { rc = 1; break; }
        if (ran_out) { rc = stop(c, 1, "unterminated invoke"); break; }
        if (!take(c, PAR_OPEN, &ran_out)) {
            rc = stop(c, ran_out, "expected <｜DSML｜parameter or </｜DSML｜invoke>");
            break;
        }
        const char *k, *flag, *val;
        size_t kn, fn, valn;
        skip_ws(c);
        if (!take(c, "name=\"", &ran_out)) {
            rc = stop(c, ran_out || c->pos == c->n, "expected name=\"...\" in parameter");
            break;
        }
        if (!until(c, "\"", &k, &kn)) { rc = stop(c, 1, "unterminated parameter name"); break; }
        skip_ws(c);
        if (!take(c, "string=\"", &ran_out)) {
            rc = stop(c, ran_out || c->pos == c->n, "expected string=\"true|false\" in parameter");
            break;
        }
        size_t flag_at = c->pos;
        if (!until(c, "\">", &flag, &fn)) { rc = stop(c, 1, "unterminated parameter tag"); break; }
        int is_str = fn == 4 && memcmp(flag, "true", 4) == 0;
        if (!is_str && !(fn == 5 && memcmp(flag, "false", 5) == 0)) {
            c->pos = flag_at;
            rc = stop(c, 0, "string= must be \"true\" or \"false\"");
            break;
        }
        size_t val_at = c->pos;
        if (!until(c, PAR_CLOSE, &val, &valn)) { rc = stop(c, 1, "unterminated parameter value"); break; }
        int added = argset_add(&args, k, kn, val, valn, is_str);
        if (added < 0) { rc = -1; break; }
        if (added == 0) {
            c->pos = val_at;
            rc = stop(c, 0, "duplicate parameter name");
            break;
        }
    }
    if (rc == 1) {
        if (args.n == 0) dsv4_tbuf_putc(&args.json, '{');
        dsv4_tbuf_putc(&args.json, '}');
        call->name = malloc(vn + 1);
        call->arguments = dsv4_tbuf_take(&args.json, NULL);
        if (!call->name || !call->arguments) rc = -1;
        else { memcpy(call->name, v, vn); call->name[vn] = 0; }
    }
    argset_free(&args);
    return rc;
}

/* The block after TC_OPEN. Returns 1 if complete, 0 on a problem, -1 when out of memory. */
static int parse_block(scan *c, dsv4_parsed *out) {
    int ran_out;
    for (;;) {
        skip_ws(c);
        if (c->pos == c->n) return stop(c, 1, "unterminated tool_calls block");
        if (take(c, TC_CLOSE, &ran_out)) return 1;
        if (ran_out) return stop(c, 1, "unterminated tool_calls block");
        if (!take(c, INV_OPEN, &ran_out))
            return stop(c, ran_out, "expected <｜DSML｜invoke or </｜DSML｜tool_calls>");
        dsv4_tool_call call = {0};
        int rc = parse_invoke(c, &call);
        if (rc != 1) {
            free(call.name);
            free(call.arguments);
            return rc;
        }
        dsv4_tool_call *calls = realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof *calls);
        if (!calls) { free(call.name); free(call.arguments); return -1; }
        out->calls = calls;
        out->calls[out->n_calls++] = call;
    }
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { if (n) memcpy(d, s, n); d[n] = 0; }
    return d;
}

static void drop_calls(dsv4_parsed *p) {
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    p->calls = NULL;
    p->n_calls = 0;
}

void dsv4_parsed_free(dsv4_parsed *p) {
    if (!p) return;
    drop_calls(p);
    free(p->reasoning);
    free(p->content);
    memset(p, 0, sizeof *p);
}

int dsv4_dsml_parse(const char *text, size_t len, int thinking, dsv4_parsed *out,
                    dsv4_err *err) {
    return dsv4_dsml_parse_opts(text, len, thinking, 0, out, err);
}

int dsv4_dsml_parse_opts(const char *text, size_t len, int thinking, int flags, dsv4_parsed *out,
                         dsv4_err *err) {
    memset(out, 0, sizeof *out);
    if (!text) len = 0;
    static const char eos[] = DSV4_CHAT_EOS, think_close[] = DSV4_CHAT_THINK_CLOSE;
    const char *e = text ? find(text, len, 0, eos) : NULL;
    scan c = {.s = text ? text : "", .n = e ? (size_t)(e - text) : len};
    c.ended = e != NULL;
    if (e && c.n + strlen(eos) < len) { c.pos = c.n; stop(&c, 0, "text after EOS"); c.pos = 0; }

    size_t body_from = 0;  /* where content starts */
    if (thinking) {
        const char *t = find(c.s, c.n, 0, think_close);
        if (t) {
            out->reasoning = dup_n(c.s, (size_t)(t - c.s));
            body_from = (size_t)(t - c.s) + strlen(think_close);
        } else {
            /* Still reasoning when the text ended. */
            out->reasoning = dup_n(c.s, c.n);
            body_from = c.n;
            c.pos = c.n;
            stop(&c, 1, "reasoning not closed by </think> before EOS");
        }
        if (!out->reasoning) goto nomem;
    }

    /* text only: no block, no markup check; the content runs to EOS */
    const char *blk = flags & DSV4_DSML_TEXT_ONLY ? NULL : find(c.s, c.n, body_from, TC_OPEN);
    size_t content_end = blk ? (size_t)(blk - c.s) : c.n;
    size_t sep = 0;  /* the "\n\n" between content and block belongs to neither */
    if (blk && content_end - body_from >= 2 && memcmp(c.s + content_end - 2, "\n\n", 2) == 0)
        sep = 2;
    if (!blk && !c.ended && !(flags & DSV4_DSML_TEXT_ONLY)) {
        /* Cut short while writing "<｜DSML｜tool_calls>": a block being started, not text.
         * (Shorter beginnings such as "<" stay in the content.) */
        size_t min = strlen("<" DSV4_DSML);
        for (size_t k = strlen(TC_OPEN) - 1; k >= min; k--)
            if (c.n - body_from >= k && memcmp(c.s + c.n - k, TC_OPEN, k) == 0) {
                content_end = c.n - k;
                c.truncated = 1;
                break;
            }
    }
    const char *stray = flags & DSV4_DSML_TEXT_ONLY ? NULL : find(c.s, content_end - sep, body_from, DSV4_DSML);
    if (stray) {
        c.pos = (size_t)(stray - c.s);
        stop(&c, 0, "stray DSML markup in content");
    }
    if (blk) {
        c.pos = content_end + strlen(TC_OPEN);
        int rc = parse_block(&c, out);
        if (rc < 0) goto nomem;
        if (rc == 1) {
            skip_ws(&c);
            size_t left = c.n - c.pos;
            if (left && !c.ended && left < strlen(eos) && memcmp(c.s + c.pos, eos, left) == 0)
                c.truncated = 1;  /* cut inside the EOS text */
            else if (left) stop(&c, 0, "text after the tool_calls block");
        }
    }

    if (c.why) {
        /* Malformed: keep everything after the reasoning as content, no tool calls. */
        drop_calls(out);
        out->content = dup_n(c.s + body_from, c.n - body_from);
        sep = 0;
    } else {
        out->content = dup_n(c.s + body_from, content_end - sep - body_from);
    }
    if (!out->content) goto nomem;
    out->ended = c.ended;
    out->truncated = c.truncated && !c.why;
    if (c.why) {
        size_t at = c.why_at, show = c.n - at < 24 ? c.n - at : 24;
        return dsv4_fail(err, DSV4_ERR_FORMAT, "generated text: %s at byte %zu (\"%.*s\")",
                         c.why, at, (int)show, c.s + at);
    }
    return 0;

nomem:
    dsv4_parsed_free(out);
    return dsv4_fail(err, DSV4_ERR_NOMEM, "generated text: out of memory while parsing");
}

cJSON *dsv4_parsed_to_json(const dsv4_parsed *p) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    int ok = cJSON_AddStringToObject(m, "role", "assistant") != NULL &&
             cJSON_AddStringToObject(m, "content", p->content ? p->content : "") != NULL;
    if (ok && p->reasoning)
        ok = cJSON_AddStringToObject(m, "reasoning_content", p->reasoning) != NULL;
    if (ok && p->n_calls > 0) {
        cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
        ok = arr != NULL;
        for (int i = 0; ok && i < p->n_calls; i++) {
            cJSON *tc = cJSON_CreateObject(), *fn = cJSON_CreateObject();
            ok = tc && fn && cJSON_AddItemToArray(arr, tc);
            if (!ok) { cJSON_Delete(tc); cJSON_Delete(fn); break; }
            ok = cJSON_AddStringToObject(tc, "type", "function") && cJSON_AddItemToObject(tc, "function", fn);
            if (!ok) { cJSON_Delete(fn); break; }
            ok = cJSON_AddStringToObject(fn, "name", p->calls[i].name) &&
                 cJSON_AddStringToObject(fn, "arguments", p->calls[i].arguments);
        }
    }
    if (!ok) { cJSON_Delete(m); return NULL; }
    return m;
}

int dsv4_dsml_value_is_json(const char *v, size_t n) {
    /* A NUL inside would end the parse early ("3\0" reads as 3) and then cut the C string
     * of the arguments short: such a value stays a string (fuzz_chat's find). */
    if (n == 0 || memchr(v, 0, n)) return 0;
    char *tmp = malloc(n + 1);
    if (!tmp) return -1;
    memcpy(tmp, v, n);
    tmp[n] = 0;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(tmp, &end, 1);
    const int ok = j != NULL;
    cJSON_Delete(j);
    free(tmp);
    return ok;
}
