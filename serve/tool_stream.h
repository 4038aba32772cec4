/* tool_stream.h — a DSML tool-call block turned into OpenAI `tool_calls` deltas while it is
 * generated: a call's delta (index, id, name) goes out as soon as its invoke tag is
 * complete, then its `arguments` JSON text in fragments as the parameters arrive (a string
 * value character by character, another value once its closing tag is there).
 *
 * The arguments are written exactly as dsv4_dsml_parse writes them ({"key": value, ...},
 * strings escaped like Python's json.dumps(ensure_ascii=False), a string="false" value kept
 * verbatim when it is valid JSON), so the fragments add up to the non-streamed answer's
 * arguments. Only text that can no longer change is sent: a tail that may be the start of
 * a closing tag waits. */
#ifndef DSV4_SERVE_TOOL_STREAM_H
#define DSV4_SERVE_TOOL_STREAM_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dsv4_text.h"
#include "serve/split.h"
#include "serve/util.h"

typedef struct srv_tool_stream {
    int n_calls;        /* calls announced (their name delta is out) */
    srv_buf *sent;      /* (n_calls) each call's arguments sent so far */
    int cap;
} srv_tool_stream;

void srv_tool_stream_free(srv_tool_stream *ts);

/* The deltas for what block[0..n) (the text after "<｜DSML｜tool_calls>") shows beyond
 * what was sent: a new array of tool_calls delta entries, or NULL when nothing is new.
 * done: the text is complete (nothing is held back). Call ids are "call_<id>_<index>". */
cJSON *srv_tool_stream_next(srv_tool_stream *ts, const char *block, size_t n, int done,
                            const char *id);

/* srv_tool_stream_next on the answer text[0..upto) so far, once sp (the answer's split) has
 * reached the tool-call block and its opening tag is in the text; NULL before that or when
 * nothing is new. One entry for OpenAI's tool_calls deltas and Anthropic's tool_use events. */
cJSON *srv_tool_stream_text(srv_tool_stream *ts, const srv_split *sp, const char *text, size_t upto,
                            int done, const char *id);

/* After the whole answer was parsed into p (p->n_calls > 0): the deltas that complete the
 * sent calls to p's (calls the scan did not reach, and the rest of any arguments), or
 * NULL when nothing is missing. */
cJSON *srv_tool_stream_finish(srv_tool_stream *ts, const dsv4_parsed *p, const char *id);

#endif
