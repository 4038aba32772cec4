/* dsml.h — DSML tool calls. Parsing is public (include/dsv4_text.h); writing the tool calls
 * of an assistant message into a prompt is the chat encoder's business, declared here. */
#ifndef DSV4_TOK_DSML_H
#define DSV4_TOK_DSML_H

#include <cjson/cJSON.h>

#include "dsv4_text.h"
#include "tok/textbuf.h"

/* Appends "\n\n" + the DSML block for an OpenAI tool_calls array (non-empty). Each item
 * needs function.name; function.arguments is JSON text or an object (text that is not a
 * JSON object becomes one parameter "arguments" holding that text). where names the
 * message in errors. DSV4_ERR_FORMAT on a malformed item. */
int dsv4_dsml_encode_calls(dsv4_tbuf *b, const cJSON *tool_calls, const char *where,
                           dsv4_err *err);

#endif
