/* chat.h — DeepSeek-V4 chat encoding: OpenAI-style messages -> prompt text, and a
 * conversation object for multi-turn chat that hands out only the text not yet fed.
 *
 * The format is DeepSeek's (encoding/README.md of the V4 release); the result is text, to
 * be tokenized with special tokens recognised. One conversation encodes as
 *
 *   BOS {system}[\n\n## Tools ...]                       system: raw text, no role token
 *   <｜latest_reminder｜>{reminder}
 *   <｜User｜>{user}<｜Assistant｜><think>                 thinking mode (</think> in chat mode)
 *   {reasoning}</think>{content}[\n\n<｜DSML｜tool_calls>...]<｜end▁of▁sentence｜>
 *   <｜User｜><tool_result>{result}</tool_result><｜Assistant｜>...
 *
 * Rules, in the order they apply:
 *  - tool messages are merged into a user turn: a tool result joins the user turn just
 *    before it, or opens a new one; a user message right after a user turn (without a task)
 *    joins it too; blocks of one turn are separated by "\n\n"; several results of one turn
 *    are ordered like the tool_calls (by id) of the last assistant that made calls;
 *  - "tools" (OpenAI format) on a system or developer message add the Tools section (and
 *    "response_format" a Response Format section) to that message;
 *  - thinking mode, unless reasoning is kept: the reasoning of every assistant turn before
 *    the last user/developer turn is dropped (that turn gets "</think>" instead of "<think>"),
 *    and developer messages before it are removed. When any message has tools, nothing is
 *    dropped (tool-calling turns need their reasoning);
 *  - a user/developer turn followed by an assistant turn, a latest_reminder or the end gets
 *    "<｜Assistant｜>" plus "<think>" (thinking, current turn) or "</think>";
 *  - "task" on a message (action, query, authority, domain, title, read_url) replaces that
 *    suffix with the task token; "action" gets "<｜Assistant｜><think>|</think><｜action｜>",
 *    and the assistant turn after a task has no reasoning part;
 *  - "wo_eos": true on an assistant message leaves its EOS out (continue a prefix);
 *  - reasoning effort "max" (thinking mode) puts a fixed instruction before message 0.
 *
 * Limitations (documented, not errors): numbers in tool schemas are re-printed from
 * doubles (see pyjson.h); a user or tool "content" given as an array of parts keeps its
 * text parts joined by "\n\n", other parts become "[Unsupported <type>]". Content is not
 * escaped: a user message containing "<｜User｜>" tokenizes as that control token, as in
 * DeepSeek's reference encoder.
 */
#ifndef DSV4_TOK_CHAT_H
#define DSV4_TOK_CHAT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dsv4.h"
#include "tok/dsml.h"

#define DSV4_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define DSV4_CHAT_EOS "<｜end▁of▁sentence｜>"
#define DSV4_CHAT_USER "<｜User｜>"
#define DSV4_CHAT_ASSISTANT "<｜Assistant｜>"
#define DSV4_CHAT_REMINDER "<｜latest_reminder｜>"
#define DSV4_CHAT_THINK_OPEN "<think>"
#define DSV4_CHAT_THINK_CLOSE "</think>"

/* All zero = chat mode, earlier reasoning dropped, default effort, BOS written. */
typedef struct dsv4_chat_opts {
    int thinking;        /* 1: thinking mode ("<think>" opens the answer); 0: chat mode */
    int keep_reasoning;  /* 1: never drop earlier reasoning (DeepSeek's drop_thinking=False) */
    int effort_max;      /* 1: reasoning effort "max" (thinking mode only) */
    int no_bos;          /* 1: leave BOS out (the text continues an earlier context) */
} dsv4_chat_opts;

/* Encodes messages (a JSON array of message objects) into the prompt text. tools (may be
 * NULL): an OpenAI "tools" array given beside the messages; it goes to messages[0] when
 * that is a system or developer message without tools of its own, else into a new empty
 * system message in front. *out is malloc'ed and NUL-terminated, *len excludes the NUL.
 * Errors: DSV4_ERR_FORMAT naming the message and field (unknown role, bad task, a
 * tool call without a function name, empty developer content, ...), DSV4_ERR_NOMEM. */
int dsv4_chat_encode(const cJSON *messages, const cJSON *tools, const dsv4_chat_opts *opts,
                     char **out, size_t *len, dsv4_err *err);

/* The same from JSON text: either an array of messages, or an object with "messages" and
 * optionally "tools", "thinking_mode" ("thinking"|"chat"), "thinking" (bool, or
 * {"type": "enabled"|"disabled"} as in DeepSeek's API),
 * "drop_thinking" (bool), "reasoning_effort" ("max"|"high"|null). Keys present override
 * *defaults (which may be NULL = all zero). */
int dsv4_chat_encode_json(const char *json, size_t json_len, const dsv4_chat_opts *defaults,
                          char **out, size_t *len, dsv4_err *err);

/* ---- conversation -------------------------------------------------------------------- */

/* A conversation as the engine sees it: the messages, and the exact text already fed to
 * the sequence (prompts plus generated text). dsv4_chat_next returns only the new part
 * whenever encode(all messages) extends what was fed; that holds turn after turn in chat
 * mode, in thinking mode with keep_reasoning, and whenever tools are present. It does not
 * hold in thinking mode with reasoning dropped: the new user turn removes the previous
 * answer's reasoning, so the whole text changes (reset = 1: start a fresh sequence). Every
 * suffix starts at a control token (EOS or a role token), so tokenizing it on its own gives
 * the same tokens as tokenizing the whole text. */
typedef struct dsv4_chat dsv4_chat;

int dsv4_chat_create(const dsv4_chat_opts *opts, dsv4_chat **out, dsv4_err *err);
void dsv4_chat_free(dsv4_chat *c);

/* Appends a message: role system | developer | user | latest_reminder | tool | assistant,
 * content text (copied). */
int dsv4_chat_add(dsv4_chat *c, const char *role, const char *content, dsv4_err *err);
/* Appends a message given as an OpenAI-style JSON object (copied; checked when encoded). */
int dsv4_chat_add_json(dsv4_chat *c, const cJSON *msg, dsv4_err *err);
/* Sets the tools array (copied; NULL removes it), as for dsv4_chat_encode. */
int dsv4_chat_set_tools(dsv4_chat *c, const cJSON *tools, dsv4_err *err);

/* Encodes the conversation and returns the text to feed next: the part after what was fed
 * (reset = 0) or, when that is not a prefix any more, the whole text (reset = 1). From then
 * on that text counts as fed. *text is malloc'ed, NUL-terminated. */
int dsv4_chat_next(dsv4_chat *c, char **text, size_t *len, int *reset, dsv4_err *err);

/* Records the model's answer: text is exactly what the sequence holds after the prompt
 * (with or without a final EOS). It is parsed (thinking or not, as the last prompt asked)
 * into an assistant message, kept verbatim for re-encoding so that the next suffix still
 * applies, and counted as fed. parsed (may be NULL) receives the structured message, to be
 * freed with dsv4_parsed_free. A malformed answer is recorded all the same and returns
 * DSV4_ERR_FORMAT with the parser's message. */
int dsv4_chat_add_generated(dsv4_chat *c, const char *text, size_t len, dsv4_parsed *parsed,
                            dsv4_err *err);

/* 1 if the last text handed out by dsv4_chat_next opened a reasoning block (the answer
 * starts with reasoning and must be parsed in thinking mode). */
int dsv4_chat_gen_thinking(const dsv4_chat *c);
/* Number of messages, and the whole encoding of the conversation (malloc'ed). */
int dsv4_chat_n_messages(const dsv4_chat *c);
int dsv4_chat_render(const dsv4_chat *c, char **text, size_t *len, dsv4_err *err);

#endif
