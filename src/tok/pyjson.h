/* pyjson.h — JSON text written exactly the way Python's json.dumps(v, ensure_ascii=False)
 * writes it, because DeepSeek's chat format embeds such text (tool schemas, non-string tool
 * arguments) and the model was trained on those exact bytes.
 *
 * The layout is ", " between items and ": " after keys; keys keep their order; non-ASCII
 * stays raw UTF-8; only '"', '\\' and control characters are escaped (\n \r \t \b \f by
 * name, the others as \u00xx). Numbers: cJSON keeps only a double, so an integral value
 * prints as an integer (Python's int) and any other value in Python's shortest round-trip
 * float form (0.1, 1e-05, 1.5e+20). A literal such as 2.0 in the input therefore prints as
 * 2 where Python would print 2.0, and integers beyond 2^53 lose precision. */
#ifndef DSV4_TOK_PYJSON_H
#define DSV4_TOK_PYJSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "tok/textbuf.h"

void dsv4_pyjson_value(dsv4_tbuf *b, const cJSON *v);
/* A JSON string literal with quotes for n bytes of s. */
void dsv4_pyjson_string(dsv4_tbuf *b, const char *s, size_t n);
void dsv4_pyjson_number(dsv4_tbuf *b, double x);

#endif
