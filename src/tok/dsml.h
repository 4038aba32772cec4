/* dsml.h — DSML, DeepSeek-V4's markup for tool calls, both ways: writing the tool calls of
 * an assistant message into the prompt, and splitting generated text into reasoning,
 * content and tool calls.
 *
 * A tool-call block (after the content, separated by "\n\n"):
 *   <｜DSML｜tool_calls>
 *   <｜DSML｜invoke name="get_weather">
 *   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
 *   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
 *   </｜DSML｜invoke>
 *   </｜DSML｜tool_calls>
 * string="true": the value is raw text; "false": the value is JSON text. Arguments become a
 * JSON object in parameter order, written like Python's json.dumps (see pyjson.h).
 */
#ifndef DSV4_TOK_DSML_H
#define DSV4_TOK_DSML_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dsv4.h"
#include "tok/textbuf.h"

#define DSV4_DSML "｜DSML｜"

typedef struct dsv4_tool_call {
    char *name;
    char *arguments;  /* JSON object text, e.g. {"city": "Paris", "days": 3} */
} dsv4_tool_call;

/* An assistant message split out of generated text. Strings are malloc'ed. */
typedef struct dsv4_parsed {
    char *reasoning;        /* text before "</think>" in thinking mode; NULL in chat mode */
    char *content;          /* never NULL ("" when there is none) */
    dsv4_tool_call *calls;  /* [n_calls] */
    int n_calls;
    int ended;              /* the text ended with EOS */
    int truncated;          /* no EOS and the text stops inside reasoning or a tool-call
                               block: a valid beginning (finish_reason "length") */
} dsv4_parsed;

/* Parses text generated after the assistant prefix: in thinking mode it starts with the
 * reasoning (the prompt ended with "<think>"), in chat mode with the content. An optional
 * EOS ends it. Always fills *out (free it with dsv4_parsed_free), never reads past len.
 *  - Well formed, or a valid beginning cut short (truncated = 1, only complete tool calls
 *    kept): returns 0.
 *  - Malformed (missing "</think>" before EOS, broken or unterminated DSML, duplicate
 *    parameter, text after the tool calls or after EOS, stray DSML markup): returns
 *    DSV4_ERR_FORMAT with a message naming the problem and its byte offset; *out then
 *    holds a best-effort message in which no generated text is lost: reasoning as found,
 *    and the content followed by the raw text of the broken block, with no tool calls.
 * A string="false" value that is not valid JSON is passed on as a JSON string.
 * DSV4_ERR_NOMEM on allocation failure (then *out is empty). */
int dsv4_dsml_parse(const char *text, size_t len, int thinking, dsv4_parsed *out,
                    dsv4_err *err);
void dsv4_parsed_free(dsv4_parsed *p);

/* The OpenAI-style assistant message {"role", "content", ["reasoning_content"],
 * ["tool_calls": [{"type": "function", "function": {"name", "arguments"}}]]}, or NULL when
 * out of memory. The caller owns it (cJSON_Delete). */
cJSON *dsv4_parsed_to_json(const dsv4_parsed *p);

/* Appends "\n\n" + the DSML block for an OpenAI tool_calls array (non-empty). Each item
 * needs function.name; function.arguments is JSON text or an object (text that is not a
 * JSON object becomes one parameter "arguments" holding that text). where names the
 * message in errors. DSV4_ERR_FORMAT on a malformed item. */
int dsv4_dsml_encode_calls(dsv4_tbuf *b, const cJSON *tool_calls, const char *where,
                           dsv4_err *err);

#endif
