/* chat.c — DeepSeek-V4 chat encoding and the multi-turn conversation (see chat.h).
 *
 * Encoding runs in three passes over a private copy of the messages (cmsg): gather (check
 * every field, merge tool results into user turns, order results by call), drop (thinking
 * mode: forget reasoning before the last user turn), render (text for each message, then
 * the suffix that opens the next assistant turn). The JSON tree is only borrowed. */
#include "tok/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/pyjson.h"
#include "tok/textbuf.h"
#include "util/err.h"

enum { R_SYSTEM, R_USER, R_DEVELOPER, R_ASSISTANT, R_REMINDER, R_TOOL };

static const char *const role_names[] = {"system", "user", "developer", "assistant",
                                         "latest_reminder", "tool"};

/* Quick-instruction tasks and their tokens; "action" also opens the assistant turn. */
static const char *const task_names[] = {"action", "query", "authority", "domain", "title",
                                         "read_url"};
static const char *const task_tokens[] = {"<｜action｜>", "<｜query｜>", "<｜authority｜>",
                                          "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"};
#define N_TASKS 6
#define TASK_ACTION 0

/* The Tools section appended to a system/developer message (model format: exact bytes).
 * The schemas go between HEAD and TAIL, one JSON object per line. */
static const char TOOLS_HEAD[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<" DSV4_DSML "tool_calls>\" block like the following:\n\n"
    "<" DSV4_DSML "tool_calls>\n"
    "<" DSV4_DSML "invoke name=\"$TOOL_NAME\">\n"
    "<" DSV4_DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</"
    DSV4_DSML "parameter>\n"
    "...\n"
    "</" DSV4_DSML "invoke>\n"
    "<" DSV4_DSML "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" DSV4_DSML "invoke>\n"
    "</" DSV4_DSML "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char TOOLS_TAIL[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

static const char RESPONSE_FORMAT_HEAD[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

/* Written before message 0 in thinking mode with reasoning effort "max". */
static const char EFFORT_MAX[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

/* One block of a user turn: text, or a tool result. */
typedef struct cblock {
    int is_result;
    char *text;           /* owned */
    const char *call_id;  /* tool_call_id of a result ("" if none), borrowed */
} cblock;

typedef struct cmsg {
    int role;             /* R_*; never R_TOOL after gathering */
    int src;              /* index in the input array (for error messages) */
    char *content;        /* owned; NULL = absent */
    cblock *blocks;       /* user turns: [n_blocks] */
    int n_blocks, cap_blocks;
    const cJSON *tools;   /* non-empty array or NULL */
    const cJSON *response_format;
    const cJSON *tool_calls; /* non-empty array or NULL */
    const char *reasoning;
    int task;             /* index in task_names, -1 = none */
    int wo_eos;
    const char *raw;      /* assistant text exactly as generated (without EOS), or NULL; */
    size_t raw_len;       /* generated text may hold any byte, NUL included */
} cmsg;

/* The generated text of an assistant message, kept verbatim for re-encoding. */
typedef struct chat_raw {
    char *text;  /* [len], owned; NULL for messages that were not generated */
    size_t len;
} chat_raw;

typedef struct clist {
    cmsg *m;
    int n, cap;
} clist;

static void cmsg_free(cmsg *m) {
    free(m->content);
    for (int i = 0; i < m->n_blocks; i++) free(m->blocks[i].text);
    free(m->blocks);
}

static void clist_free(clist *l) {
    for (int i = 0; i < l->n; i++) cmsg_free(&l->m[i]);
    free(l->m);
    memset(l, 0, sizeof *l);
}

static cmsg *clist_push(clist *l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        cmsg *m = realloc(l->m, (size_t)cap * sizeof *m);
        if (!m) return NULL;
        l->m = m;
        l->cap = cap;
    }
    cmsg *m = &l->m[l->n++];
    memset(m, 0, sizeof *m);
    m->task = -1;
    return m;
}

static int push_block(cmsg *m, int is_result, char *text, const char *call_id) {
    if (m->n_blocks == m->cap_blocks) {
        int cap = m->cap_blocks ? 2 * m->cap_blocks : 4;
        cblock *b = realloc(m->blocks, (size_t)cap * sizeof *b);
        if (!b) return -1;
        m->blocks = b;
        m->cap_blocks = cap;
    }
    m->blocks[m->n_blocks++] = (cblock){is_result, text, call_id};
    return 0;
}

/* ---- gathering ----------------------------------------------------------------------- */

/* The text of a "content" field: a string, null/absent (*out = NULL), or an array of
 * parts (text parts joined by "\n\n", others "[Unsupported <type>]"). allow_json: other
 * JSON values are written as JSON text (tool results); otherwise they are an error. */
static int content_text(const cJSON *v, int allow_json, const char *where, char **out,
                        dsv4_err *err) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    dsv4_tbuf b = {0};
    if (cJSON_IsString(v)) {
        dsv4_tbuf_puts(&b, v->valuestring ? v->valuestring : "");
    } else if (cJSON_IsArray(v)) {
        int first = 1;
        for (const cJSON *p = v->child; p; p = p->next) {
            if (!first) dsv4_tbuf_puts(&b, "\n\n");
            first = 0;
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (cJSON_IsString(p)) {
                dsv4_tbuf_puts(&b, p->valuestring);
            } else if (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0) {
                dsv4_tbuf_puts(&b, cJSON_IsString(text) ? text->valuestring : "");
            } else {
                dsv4_tbuf_puts(&b, "[Unsupported ");
                dsv4_tbuf_puts(&b, cJSON_IsString(type) ? type->valuestring : "None");
                dsv4_tbuf_puts(&b, "]");
            }
        }
    } else if (allow_json) {
        dsv4_pyjson_value(&b, v);
    } else {
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s.content: expected a string, an array of parts or null", where);
    }
    *out = dsv4_tbuf_take(&b, NULL);
    if (!*out) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where);
    return 0;
}

/* Python truthiness of a JSON value (DeepSeek's encoder tests fields with `if x:`). */
static int truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring && v->valuestring[0];
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return 1;
}

/* Optional string field: NULL when absent or null. */
static int opt_string(const cJSON *msg, const char *key, const char *where, const char **out,
                      dsv4_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v) || !v->valuestring)
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s.%s: expected a string", where, key);
    *out = v->valuestring;
    return 0;
}

/* Optional array field; an empty array counts as absent (as in DeepSeek's encoder). */
static int opt_array(const cJSON *msg, const char *key, const char *where,
                     const cJSON **out, dsv4_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s.%s: expected an array", where, key);
    if (v->child) *out = v;
    return 0;
}

static int parse_task(const cJSON *msg, const char *where, int *task, dsv4_err *err) {
    const char *t;
    *task = -1;
    int rc = opt_string(msg, "task", where, &t, err);
    if (rc) return rc;
    if (!t) return 0;
    for (int i = 0; i < N_TASKS; i++)
        if (strcmp(t, task_names[i]) == 0) { *task = i; return 0; }
    return dsv4_fail(err, DSV4_ERR_FORMAT,
                     "%s.task: unknown task '%s' (valid: action, query, authority, domain, "
                     "title, read_url)", where, t);
}

/* Checks one input message and adds it to l, merging tool results and consecutive user
 * messages into user turns. raw: verbatim generated text for an assistant, or NULL. */
static int gather_one(clist *l, const cJSON *msg, int idx, const chat_raw *raw, dsv4_err *err) {
    char where[48];
    snprintf(where, sizeof where, "messages[%d]", idx);
    if (!cJSON_IsObject(msg))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: expected an object", where);
    const char *role_s;
    int rc = opt_string(msg, "role", where, &role_s, err);
    if (rc) return rc;
    if (!role_s) return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: missing \"role\"", where);
    int role = -1;
    for (int i = 0; i < 6; i++)
        if (strcmp(role_s, role_names[i]) == 0) role = i;
    if (role < 0)
        return dsv4_fail(err, DSV4_ERR_FORMAT,
                         "%s.role: unknown role '%s' (valid: system, user, developer, "
                         "assistant, latest_reminder, tool)", where, role_s);
    int task;
    if ((rc = parse_task(msg, where, &task, err))) return rc;
    const cJSON *wo = cJSON_GetObjectItemCaseSensitive(msg, "wo_eos");
    cmsg *prev = l->n ? &l->m[l->n - 1] : NULL;

    if (role == R_TOOL || role == R_USER) {
        char *text;
        if ((rc = content_text(cJSON_GetObjectItemCaseSensitive(msg, "content"), role == R_TOOL,
                               where, &text, err)))
            return rc;
        if (!text && !(text = calloc(1, 1)))
            return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where);
        const char *call_id = "";
        if (role == R_TOOL) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
            if (cJSON_IsString(id) && id->valuestring) call_id = id->valuestring;
        }
        /* A tool result always joins a preceding user turn; a user message joins one that
         * has no task. The joining message's own task is not kept (DeepSeek's merge). */
        int join = prev && prev->role == R_USER && (role == R_TOOL || prev->task < 0);
        cmsg *m = join ? prev : clist_push(l);
        if (!m) { free(text); return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where); }
        if (!join) {
            m->role = R_USER;
            m->src = idx;
            if (role == R_USER) {
                m->task = task;
                m->wo_eos = cJSON_IsTrue(wo);
            }
        }
        if (push_block(m, role == R_TOOL, text, call_id)) {
            free(text);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where);
        }
        return 0;
    }

    cmsg *m = clist_push(l);
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "%s: out of memory", where);
    m->role = role;
    m->src = idx;
    m->task = task;
    m->wo_eos = cJSON_IsTrue(wo);
    m->raw = raw ? raw->text : NULL;
    m->raw_len = raw ? raw->len : 0;
    if ((rc = content_text(cJSON_GetObjectItemCaseSensitive(msg, "content"), 0, where,
                           &m->content, err)))
        return rc;
    if (role == R_SYSTEM || role == R_DEVELOPER) {
        if ((rc = opt_array(msg, "tools", where, &m->tools, err))) return rc;
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(msg, "response_format");
        if (truthy(rf)) m->response_format = rf;
        if (role == R_DEVELOPER && (!m->content || !m->content[0]))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "%s: a developer message needs content", where);
    }
    if (role == R_ASSISTANT) {
        if ((rc = opt_array(msg, "tool_calls", where, &m->tool_calls, err))) return rc;
        if ((rc = opt_string(msg, "reasoning_content", where, &m->reasoning, err))) return rc;
    }
    return 0;
}

/* Orders the tool results of each user turn like the calls of the last assistant turn
 * that made calls (matched by id; unknown ids rank first). The relative order of equal
 * ranks and the positions of text blocks are kept. */
static int sort_results(clist *l, dsv4_err *err) {
    const cJSON *calls = NULL;
    for (int i = 0; i < l->n; i++) {
        cmsg *m = &l->m[i];
        if (m->role == R_ASSISTANT && m->tool_calls) calls = m->tool_calls;
        if (m->role != R_USER || !calls) continue;
        int n_res = 0;
        for (int b = 0; b < m->n_blocks; b++) n_res += m->blocks[b].is_result;
        if (n_res < 2) continue;
        int *rank = malloc((size_t)n_res * sizeof *rank);
        cblock *res = malloc((size_t)n_res * sizeof *res);
        if (!rank || !res) {
            free(rank);
            free(res);
            return dsv4_fail(err, DSV4_ERR_NOMEM, "sorting tool results: out of memory");
        }
        int k = 0;
        for (int b = 0; b < m->n_blocks; b++) {
            if (!m->blocks[b].is_result) continue;
            res[k] = m->blocks[b];
            rank[k] = 0;
            int c = 0;
            for (const cJSON *tc = calls->child; tc; tc = tc->next, c++) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
                if (!cJSON_IsString(id) || !id->valuestring[0])
                    id = cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(tc, "function"), "id");
                if (cJSON_IsString(id) && id->valuestring[0] &&
                    strcmp(id->valuestring, res[k].call_id) == 0)
                    rank[k] = c;  /* the last call with that id wins, like a dict */
            }
            k++;
        }
        /* Stable insertion sort: result lists are short. */
        for (int a = 1; a < n_res; a++) {
            cblock rb = res[a];
            int ra = rank[a], j = a - 1;
            while (j >= 0 && rank[j] > ra) { res[j + 1] = res[j]; rank[j + 1] = rank[j]; j--; }
            res[j + 1] = rb;
            rank[j + 1] = ra;
        }
        k = 0;
        for (int b = 0; b < m->n_blocks; b++)
            if (m->blocks[b].is_result) m->blocks[b] = res[k++];
        free(rank);
        free(res);
    }
    return 0;
}

static int last_user_index(const clist *l) {
    for (int i = l->n - 1; i >= 0; i--)
        if (l->m[i].role == R_USER || l->m[i].role == R_DEVELOPER) return i;
    return -1;
}

/* Thinking mode with reasoning dropped: before the last user turn, assistant messages
 * lose their reasoning and developer messages disappear. */
static void drop_thinking(clist *l) {
    int last = last_user_index(l), w = 0;
    for (int i = 0; i < l->n; i++) {
        cmsg *m = &l->m[i];
        if (i < last && m->role == R_DEVELOPER) { cmsg_free(m); continue; }
        if (i < last && m->role == R_ASSISTANT) { m->reasoning = NULL; m->raw = NULL; }
        l->m[w++] = *m;
    }
    l->n = w;
}

/* ---- rendering ----------------------------------------------------------------------- */

/* Byte ranges of the rendered text that hold message content (pairs [start, end)), so
 * that tokenizing can keep special-token strings inside them as plain text. */
typedef struct chat_marks {
    size_t *r;  /* (2 * cap) */
    int n, cap;
    int oom;
} chat_marks;

/* Appends s as content: recorded in mk (may be NULL) when it is not empty. */
static void put_plain(dsv4_tbuf *b, chat_marks *mk, const char *s) {
    size_t start = b->n;
    dsv4_tbuf_puts(b, s);
    if (!mk || b->n == start || b->oom) return;
    if (mk->n == mk->cap) {
        int cap = mk->cap ? 2 * mk->cap : 16;
        size_t *r = realloc(mk->r, (size_t)cap * 2 * sizeof *r);
        if (!r) { mk->oom = 1; return; }
        mk->r = r, mk->cap = cap;
    }
    mk->r[2 * mk->n] = start, mk->r[2 * mk->n + 1] = b->n;
    mk->n++;
}

static int put_tools(dsv4_tbuf *b, chat_marks *mk, const cJSON *tools, const char *where,
                     dsv4_err *err) {
    dsv4_tbuf_puts(b, "\n\n");
    dsv4_tbuf_puts(b, TOOLS_HEAD);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn))
            return dsv4_fail(err, DSV4_ERR_FORMAT, "%s.tools[%d]: missing \"function\" object",
                             where, i);
        if (i) dsv4_tbuf_putc(b, '\n');
        /* the schema is the client's text: plain, like message content */
        dsv4_tbuf js = {0};
        dsv4_pyjson_value(&js, fn);
        if (js.oom) b->oom = 1;
        else put_plain(b, mk, js.s);
        dsv4_tbuf_free(&js);
    }
    dsv4_tbuf_puts(b, TOOLS_TAIL);
    return 0;
}

static void put_response_format(dsv4_tbuf *b, const cJSON *rf) {
    dsv4_tbuf_puts(b, "\n\n");
    dsv4_tbuf_puts(b, RESPONSE_FORMAT_HEAD);
    dsv4_pyjson_value(b, rf);
}

static int render(const clist *l, const dsv4_chat_opts *o, int drop, dsv4_tbuf *b,
                  chat_marks *mk, dsv4_err *err) {
    int last = last_user_index(l), rc;
    for (int i = 0; i < l->n; i++) {
        const cmsg *m = &l->m[i];
        char where[48];
        if (m->src < 0) snprintf(where, sizeof where, "request");
        else snprintf(where, sizeof where, "messages[%d]", m->src);
        if (i == 0 && o->thinking && o->effort_max) dsv4_tbuf_puts(b, EFFORT_MAX);

        switch (m->role) {
        case R_SYSTEM:
        case R_DEVELOPER:
            if (m->role == R_DEVELOPER) dsv4_tbuf_puts(b, DSV4_CHAT_USER);
            put_plain(b, mk, m->content);
            if (m->tools && (rc = put_tools(b, mk, m->tools, where, err))) return rc;
            if (m->response_format) put_response_format(b, m->response_format);
            break;
        case R_USER:
            dsv4_tbuf_puts(b, DSV4_CHAT_USER);
            for (int k = 0; k < m->n_blocks; k++) {
                if (k) dsv4_tbuf_puts(b, "\n\n");
                if (m->blocks[k].is_result) dsv4_tbuf_puts(b, "<tool_result>");
                put_plain(b, mk, m->blocks[k].text);
                if (m->blocks[k].is_result) dsv4_tbuf_puts(b, "</tool_result>");
            }
            break;
        case R_REMINDER:
            dsv4_tbuf_puts(b, DSV4_CHAT_REMINDER);
            put_plain(b, mk, m->content);
            break;
        case R_ASSISTANT: {
            int after_task = i > 0 && l->m[i - 1].task >= 0;
            int reasoning_part = o->thinking && !after_task && (!drop || i > last);
            int dropped = o->thinking && !after_task && !reasoning_part;
            if (m->raw && !dropped) {
                /* Generated text, kept as the sequence holds it: its control tokens are
                 * the model's own, so it stays live (not plain). */
                dsv4_tbuf_put(b, m->raw, m->raw_len);
            } else {
                if (reasoning_part) {
                    put_plain(b, mk, m->reasoning);
                    dsv4_tbuf_puts(b, DSV4_CHAT_THINK_CLOSE);
                }
                put_plain(b, mk, m->content);
                if (m->tool_calls && (rc = dsv4_dsml_encode_calls(b, m->tool_calls, where, err)))
                    return rc;
            }
            if (!m->wo_eos) dsv4_tbuf_puts(b, DSV4_CHAT_EOS);
            break;
        }
        }

        /* What follows the message: nothing before a user-side turn; otherwise a task
         * token, or the opening of the assistant turn after a user/developer turn. */
        if (i + 1 < l->n && l->m[i + 1].role != R_ASSISTANT && l->m[i + 1].role != R_REMINDER)
            continue;
        if (m->task >= 0) {
            if (m->task == TASK_ACTION) {
                dsv4_tbuf_puts(b, DSV4_CHAT_ASSISTANT);
                dsv4_tbuf_puts(b, o->thinking ? DSV4_CHAT_THINK_OPEN : DSV4_CHAT_THINK_CLOSE);
            }
            dsv4_tbuf_puts(b, task_tokens[m->task]);
        } else if (m->role == R_USER || m->role == R_DEVELOPER) {
            dsv4_tbuf_puts(b, DSV4_CHAT_ASSISTANT);
            int think = o->thinking && (!drop || i >= last);
            dsv4_tbuf_puts(b, think ? DSV4_CHAT_THINK_OPEN : DSV4_CHAT_THINK_CLOSE);
        }
    }
    return 0;
}

/* The whole pipeline; raw[i] (may be NULL) is the generated text of input message i. */
static int encode_core(const cJSON *messages, const chat_raw *raw, const cJSON *tools,
                       const dsv4_chat_opts *opts, char **out, size_t *len, chat_marks *mk,
                       dsv4_err *err) {
    static const dsv4_chat_opts zero;
    const dsv4_chat_opts *o = opts ? opts : &zero;
    *out = NULL;
    if (len) *len = 0;
    if (!cJSON_IsArray(messages))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "messages: expected an array");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return dsv4_fail(err, DSV4_ERR_FORMAT, "tools: expected an array");
    if (tools && !tools->child) tools = NULL;

    clist l = {0};
    int rc = 0, idx = 0;
    for (const cJSON *msg = messages->child; msg; msg = msg->next, idx++)
        if ((rc = gather_one(&l, msg, idx, raw ? &raw[idx] : NULL, err))) goto done;

    if (tools) {
        /* Tools given beside the messages belong to the leading system/developer message. */
        cmsg *first = l.n ? &l.m[0] : NULL;
        if (first && (first->role == R_SYSTEM || first->role == R_DEVELOPER)) {
            if (first->tools) {
                rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                               "tools: given both beside the messages and in messages[0]");
                goto done;
            }
            first->tools = tools;
        } else {
            cmsg *m = clist_push(&l);
            if (!m) { rc = dsv4_fail(err, DSV4_ERR_NOMEM, "tools: out of memory"); goto done; }
            memmove(&l.m[1], &l.m[0], (size_t)(l.n - 1) * sizeof *m);
            memset(&l.m[0], 0, sizeof l.m[0]);
            l.m[0].role = R_SYSTEM;
            l.m[0].task = -1;
            l.m[0].src = -1;
            l.m[0].tools = tools;
        }
    }
    if ((rc = sort_results(&l, err))) goto done;

    int any_tools = 0;
    for (int i = 0; i < l.n; i++) any_tools |= l.m[i].tools != NULL;
    int drop = !o->keep_reasoning && !any_tools;
    if (o->thinking && drop) drop_thinking(&l);

    dsv4_tbuf b = {0};
    if (!o->no_bos) dsv4_tbuf_puts(&b, DSV4_CHAT_BOS);
    if ((rc = render(&l, o, drop, &b, mk, err))) { dsv4_tbuf_free(&b); goto done; }
    *out = dsv4_tbuf_take(&b, len);
    if (!*out || (mk && mk->oom)) {
        free(*out);
        *out = NULL;
        rc = dsv4_fail(err, DSV4_ERR_NOMEM, "chat encoding: out of memory");
    }
done:
    clist_free(&l);
    return rc;
}

int dsv4_chat_encode(const cJSON *messages, const cJSON *tools, const dsv4_chat_opts *opts,
                     char **out, size_t *len, dsv4_err *err) {
    return encode_core(messages, NULL, tools, opts, out, len, NULL, err);
}

/* Tokenizes text[from, n) with the marks that fall in it as plain ranges (shifted). */
static int tokenize_from(const dsv4_tokenizer *tok, const char *text, size_t from, size_t n,
                         const chat_marks *mk, dsv4_tok_ids *out, dsv4_err *err) {
    size_t *plain = mk->n ? malloc((size_t)mk->n * 2 * sizeof *plain) : NULL;
    if (mk->n && !plain) return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    int np = 0;
    for (int k = 0; k < mk->n; k++) {
        size_t s = mk->r[2 * k], e = mk->r[2 * k + 1];
        if (e <= from) continue;
        plain[2 * np] = (s > from ? s : from) - from;
        plain[2 * np + 1] = e - from;
        np++;
    }
    int rc = dsv4_tokenize_marked(tok, text + from, n - from, plain, np, out, err);
    free(plain);
    return rc;
}

int dsv4_chat_encode_ids(const cJSON *messages, const cJSON *tools, const dsv4_chat_opts *opts,
                         const dsv4_tokenizer *tok, dsv4_tok_ids *out, dsv4_err *err) {
    chat_marks mk = {0};
    char *text;
    size_t n;
    int rc = encode_core(messages, NULL, tools, opts, &text, &n, &mk, err);
    if (!rc) rc = tokenize_from(tok, text, 0, n, &mk, out, err);
    free(text);
    free(mk.r);
    return rc;
}

int dsv4_chat_encode_json(const char *json, size_t json_len, const dsv4_chat_opts *defaults,
                          char **out, size_t *len, dsv4_err *err) {
    *out = NULL;
    if (len) *len = 0;
    cJSON *root = cJSON_ParseWithLength(json, json_len);
    if (!root) return dsv4_fail(err, DSV4_ERR_FORMAT, "chat request: not valid JSON");
    dsv4_chat_opts o = defaults ? *defaults : (dsv4_chat_opts){0};
    const cJSON *messages = root, *tools = NULL;
    int rc = 0;
    if (cJSON_IsObject(root)) {
        messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
        tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        const cJSON *v;
        if ((v = cJSON_GetObjectItemCaseSensitive(root, "thinking_mode"))) {
            if (cJSON_IsString(v) && strcmp(v->valuestring, "thinking") == 0) o.thinking = 1;
            else if (cJSON_IsString(v) && strcmp(v->valuestring, "chat") == 0) o.thinking = 0;
            else rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                                "chat request: thinking_mode must be \"thinking\" or \"chat\"");
        }
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(root, "thinking"))) {
            /* A boolean, or DeepSeek API's {"type": "enabled" | "disabled"}. */
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
            if (cJSON_IsBool(v)) o.thinking = cJSON_IsTrue(v);
            else if (cJSON_IsString(type) && strcmp(type->valuestring, "enabled") == 0) o.thinking = 1;
            else if (cJSON_IsString(type) && strcmp(type->valuestring, "disabled") == 0) o.thinking = 0;
            else rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                                "chat request: thinking must be a boolean or {\"type\": \"enabled\"|\"disabled\"}");
        }
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(root, "drop_thinking"))) {
            if (cJSON_IsBool(v)) o.keep_reasoning = !cJSON_IsTrue(v);
            else rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                                "chat request: drop_thinking must be a boolean");
        }
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort"))) {
            if (cJSON_IsNull(v) || (cJSON_IsString(v) && strcmp(v->valuestring, "high") == 0))
                o.effort_max = 0;
            else if (cJSON_IsString(v) && strcmp(v->valuestring, "max") == 0)
                o.effort_max = 1;
            else rc = dsv4_fail(err, DSV4_ERR_FORMAT,
                                "chat request: reasoning_effort must be \"max\", \"high\" or null");
        }
        if (!rc && !messages)
            rc = dsv4_fail(err, DSV4_ERR_FORMAT, "chat request: missing \"messages\"");
    }
    if (!rc) rc = encode_core(messages, NULL, tools, &o, out, len, NULL, err);
    cJSON_Delete(root);
    return rc;
}

/* ---- conversation -------------------------------------------------------------------- */

struct dsv4_chat {
    dsv4_chat_opts o;
    cJSON *msgs;      /* array of message objects (owned copies) */
    chat_raw *raw;    /* [cap_raw]: generated text of assistant message i */
    int cap_raw;
    cJSON *tools;     /* owned copy or NULL */
    char *fed;        /* text the sequence holds, [fed_len] */
    size_t fed_len;
    int gen_thinking; /* the last prompt opened a reasoning block */
};

int dsv4_chat_create(const dsv4_chat_opts *opts, dsv4_chat **out, dsv4_err *err) {
    *out = NULL;
    dsv4_chat *c = calloc(1, sizeof *c);
    if (!c || !(c->msgs = cJSON_CreateArray()) || !(c->fed = calloc(1, 1))) {
        if (c) cJSON_Delete(c->msgs);
        free(c);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    }
    if (opts) c->o = *opts;
    *out = c;
    return 0;
}

void dsv4_chat_free(dsv4_chat *c) {
    if (!c) return;
    for (int i = 0; i < c->cap_raw; i++) free(c->raw[i].text);
    free(c->raw);
    cJSON_Delete(c->msgs);
    cJSON_Delete(c->tools);
    free(c->fed);
    free(c);
}

int dsv4_chat_n_messages(const dsv4_chat *c) { return cJSON_GetArraySize(c->msgs); }
int dsv4_chat_gen_thinking(const dsv4_chat *c) { return c->gen_thinking; }

/* Appends msg (ownership taken) with its raw text (ownership taken, may be NULL). */
static int chat_push(dsv4_chat *c, cJSON *msg, char *raw, size_t raw_len, dsv4_err *err) {
    int n = cJSON_GetArraySize(c->msgs);
    if (n >= c->cap_raw) {
        int cap = c->cap_raw ? 2 * c->cap_raw : 16;
        chat_raw *r = realloc(c->raw, (size_t)cap * sizeof *r);
        if (!r) goto nomem;
        memset(r + c->cap_raw, 0, (size_t)(cap - c->cap_raw) * sizeof *r);
        c->raw = r;
        c->cap_raw = cap;
    }
    if (!cJSON_AddItemToArray(c->msgs, msg)) goto nomem;
    c->raw[n] = (chat_raw){raw, raw_len};
    return 0;
nomem:
    cJSON_Delete(msg);
    free(raw);
    return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
}

int dsv4_chat_add(dsv4_chat *c, const char *role, const char *content, dsv4_err *err) {
    if (!role) return dsv4_fail(err, DSV4_ERR_ARG, "chat: role is NULL");
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content ? content : "")) {
        cJSON_Delete(m);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    }
    return chat_push(c, m, NULL, 0, err);
}

int dsv4_chat_add_json(dsv4_chat *c, const cJSON *msg, dsv4_err *err) {
    if (!cJSON_IsObject(msg)) return dsv4_fail(err, DSV4_ERR_ARG, "chat: message must be an object");
    cJSON *m = cJSON_Duplicate(msg, 1);
    if (!m) return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    return chat_push(c, m, NULL, 0, err);
}

int dsv4_chat_set_tools(dsv4_chat *c, const cJSON *tools, dsv4_err *err) {
    cJSON *t = NULL;
    if (tools && !cJSON_IsArray(tools)) return dsv4_fail(err, DSV4_ERR_ARG, "chat: tools must be an array");
    if (tools && !(t = cJSON_Duplicate(tools, 1)))
        return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    cJSON_Delete(c->tools);
    c->tools = t;
    return 0;
}

int dsv4_chat_render(const dsv4_chat *c, char **text, size_t *len, dsv4_err *err) {
    return encode_core(c->msgs, c->raw, c->tools, &c->o, text, len, NULL, err);
}

static int ends_with(const char *s, size_t n, const char *suf) {
    size_t m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* Renders the conversation and finds where the new part starts (see dsv4_chat_next);
 * *full is the whole text, not yet recorded as fed. */
static int chat_render_next(const dsv4_chat *c, char **full, size_t *n, size_t *from,
                            chat_marks *mk, dsv4_err *err) {
    int rc = encode_core(c->msgs, c->raw, c->tools, &c->o, full, n, mk, err);
    if (rc) return rc;
    int extends = *n >= c->fed_len && memcmp(*full, c->fed, c->fed_len) == 0;
    *from = extends ? c->fed_len : 0;
    return 0;
}

/* From now on full (ownership taken) is what the sequence holds. */
static void chat_set_fed(dsv4_chat *c, char *full, size_t n) {
    free(c->fed);
    c->fed = full;
    c->fed_len = n;
    c->gen_thinking = ends_with(full, n, DSV4_CHAT_THINK_OPEN);
}

int dsv4_chat_next(dsv4_chat *c, char **text, size_t *len, int *reset, dsv4_err *err) {
    char *full;
    size_t n, from;
    *text = NULL;
    if (len) *len = 0;
    int rc = chat_render_next(c, &full, &n, &from, NULL, err);
    if (rc) return rc;
    char *suffix = malloc(n - from + 1);
    if (!suffix) { free(full); return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory"); }
    memcpy(suffix, full + from, n - from + 1);
    if (reset) *reset = from == 0 && c->fed_len > 0;
    chat_set_fed(c, full, n);
    *text = suffix;
    if (len) *len = n - from;
    return 0;
}

int dsv4_chat_next_ids(dsv4_chat *c, const dsv4_tokenizer *tok, dsv4_tok_ids *out, int *reset,
                       dsv4_err *err) {
    char *full = NULL;
    size_t n, from;
    chat_marks mk = {0};
    int rc = chat_render_next(c, &full, &n, &from, &mk, err);
    if (!rc) rc = tokenize_from(tok, full, from, n, &mk, out, err);
    free(mk.r);
    if (rc) { free(full); return rc; }
    if (reset) *reset = from == 0 && c->fed_len > 0;
    chat_set_fed(c, full, n);
    return 0;
}

int dsv4_chat_add_generated(dsv4_chat *c, const char *text, size_t len, dsv4_parsed *parsed,
                            dsv4_err *err) {
    /* an answer to nothing: the prompt it continued was never handed out */
    if (cJSON_GetArraySize(c->msgs) == 0)
        return dsv4_fail(err, DSV4_ERR_STATE, "chat: an answer needs a prompt (no messages yet)");
    dsv4_parsed p;
    dsv4_err perr = {0};
    int prc = dsv4_dsml_parse(text, len, c->gen_thinking, &p, &perr);
    if (prc == DSV4_ERR_NOMEM) { if (err) *err = perr; return prc; }

    /* The raw text without a trailing EOS: rendering adds the EOS back. */
    size_t raw_len = len;
    if (ends_with(text, len, DSV4_CHAT_EOS)) raw_len -= strlen(DSV4_CHAT_EOS);
    char *raw = malloc(raw_len + 1);
    char *fed = realloc(c->fed, c->fed_len + len + 1);
    if (fed) c->fed = fed;
    cJSON *msg = dsv4_parsed_to_json(&p);
    if (!raw || !fed || !msg) {
        free(raw);
        cJSON_Delete(msg);
        dsv4_parsed_free(&p);
        return dsv4_fail(err, DSV4_ERR_NOMEM, "chat: out of memory");
    }
    memcpy(raw, text, raw_len);
    raw[raw_len] = 0;
    int rc = chat_push(c, msg, raw, raw_len, err);
    if (rc) { dsv4_parsed_free(&p); return rc; }
    memcpy(c->fed + c->fed_len, text, len);
    c->fed_len += len;
    c->fed[c->fed_len] = 0;
    c->gen_thinking = 0;
    if (parsed) *parsed = p;
    else dsv4_parsed_free(&p);
    if (prc) { if (err) *err = perr; return prc; }
    return 0;
}
