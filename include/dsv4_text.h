/* dsv4_text.h — public text layer of dsv4: tokenizer, DeepSeek-V4 chat encoding, tool-call
 * parsing, sampling, stop conditions and generation, on top of dsv4.h.
 *
 * Generation comes in two forms. dsv4_gen is the per-sequence step state a batched
 * scheduler drives: the caller runs the forward and the LM head for many sequences at once
 * and hands each sequence its logits row; dsv4_gen samples, applies the stop conditions and
 * releases text. dsv4_generation_run is the simple blocking loop over one sequence, built
 * on it.
 *
 * Threading: a tokenizer may be shared by threads (encode/decode are thread-safe); a
 * sampler, stop state, token stream, chat or dsv4_gen belongs to one thread at a time.
 * Strings returned through "const char **" are owned by the object and valid until its next
 * call; strings returned through "char **" are malloc'ed and the caller frees them.
 */
#ifndef DSV4_TEXT_H
#define DSV4_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON; /* cJSON's node type (cjson/cJSON.h), for the JSON entry points */

/* ==== tokenizer ======================================================================= */

/* Byte-level BPE tokenizer read from a Hugging Face tokenizer.json.
 *
 * Pipeline of an encode (the HF `tokenizers` order):
 *   1. added tokens (special or not) are cut out of the raw text, leftmost-longest;
 *   2. every other stretch goes through the normalizer (only identity ones are supported),
 *   3. the pre-tokenizer (Split regexes run with PCRE2 in UTF+UCP mode, then ByteLevel),
 *   4. the BPE model: byte symbols merged by rank, lowest rank first, leftmost on ties.
 * No BOS/EOS is ever added: the chat encoding writes them itself.
 *
 * Decoding maps every id to the bytes its token stands for (the ByteLevel decoder) and
 * turns the concatenation into UTF-8, each invalid stretch replaced by U+FFFD the way
 * Rust's String::from_utf8_lossy does it. The streaming decoder gives the same text piece
 * by piece and never emits a partial character.
 *
 * A loaded dsv4_tokenizer is read-only apart from an internal, mutex-guarded word cache:
 * several threads may encode and decode with one tokenizer at the same time.
 */

typedef struct dsv4_tokenizer dsv4_tokenizer;

/* A growable list of token ids. Start from {0}; dsv4_tokenize appends to it. */
typedef struct dsv4_tok_ids {
    int32_t *ids;  /* [cap], the first n used */
    size_t n, cap;
} dsv4_tok_ids;

DSV4_API void dsv4_tok_ids_free(dsv4_tok_ids *ids);

/* Reads a tokenizer.json. Errors: DSV4_ERR_IO (unreadable), DSV4_ERR_FORMAT (not JSON,
 * missing or mistyped fields, bad regex, merge of unknown tokens), DSV4_ERR_UNSUPPORTED
 * (a normalizer, pre-tokenizer, model or decoder type this build does not implement). */
DSV4_API int dsv4_tokenizer_load(const char *path, dsv4_tokenizer **out, dsv4_err *err);
/* Same, from the JSON text in memory (len bytes, need not be NUL-terminated). */
DSV4_API int dsv4_tokenizer_load_json(const char *json, size_t len, dsv4_tokenizer **out, dsv4_err *err);
DSV4_API void dsv4_tokenizer_free(dsv4_tokenizer *tok);

/* Flags of dsv4_tokenize_ex. */
enum {
    /* Do not recognise added/special token strings: "<｜User｜>" in the text is encoded as
     * ordinary characters (for untrusted content that must not forge control tokens). */
    DSV4_TOK_NO_ADDED = 1 << 0,
};

/* Encodes len bytes of UTF-8 text and appends the ids to out. Literal added-token strings
 * become those tokens. Errors: DSV4_ERR_ARG for text that is not valid UTF-8 (the message
 * names the byte offset), DSV4_ERR_NOMEM. On error out->n is left as it was. */
DSV4_API int dsv4_tokenize(const dsv4_tokenizer *tok, const char *text, size_t len, dsv4_tok_ids *out,
                           dsv4_err *err);
DSV4_API int dsv4_tokenize_ex(const dsv4_tokenizer *tok, const char *text, size_t len, int flags,
                              dsv4_tok_ids *out, dsv4_err *err);

/* Like dsv4_tokenize, but no added token may match across the byte ranges plain
 * ([2 * n_plain] sorted pairs [start, end)): text in them is encoded as ordinary
 * characters. Everything else, and the pre-tokenizer split, is as for the whole text, so
 * text without special-token strings gets exactly the ids of dsv4_tokenize. */
DSV4_API int dsv4_tokenize_marked(const dsv4_tokenizer *tok, const char *text, size_t len,
                                  const size_t *plain, int n_plain, dsv4_tok_ids *out, dsv4_err *err);

/* Flags of dsv4_detokenize. */
enum {
    DSV4_DETOK_SKIP_SPECIAL = 1 << 0,  /* drop tokens marked "special" in added_tokens */
};

/* Decodes n ids to UTF-8. *text is malloc'ed and NUL-terminated (the caller frees it);
 * *text_len excludes the NUL. Errors: DSV4_ERR_ARG for an id that has no token (negative,
 * past the vocabulary, or a hole in it), naming the id and its index. */
DSV4_API int dsv4_detokenize(const dsv4_tokenizer *tok, const int32_t *ids, size_t n, int flags,
                             char **text, size_t *text_len, dsv4_err *err);

/* ---- streaming decode ---------------------------------------------------------------- */

typedef struct dsv4_tok_stream dsv4_tok_stream;

DSV4_API int dsv4_tok_stream_new(const dsv4_tokenizer *tok, int flags, dsv4_tok_stream **out,
                                 dsv4_err *err);
DSV4_API void dsv4_tok_stream_free(dsv4_tok_stream *s);
/* Feeds one id. *text and *len receive the newly completed UTF-8 (possibly empty), valid
 * until the next call on s. Bytes of a character still incomplete are held back. An id
 * without a token returns DSV4_ERR_ARG and leaves the stream as it was. */
DSV4_API int dsv4_tok_stream_push(dsv4_tok_stream *s, int32_t id, const char **text, size_t *len,
                                  dsv4_err *err);
/* Ends the stream: held-back bytes that never completed a character come out as U+FFFD.
 * The stream is then empty and can be reused. */
DSV4_API void dsv4_tok_stream_flush(dsv4_tok_stream *s, const char **text, size_t *len);

/* ---- lookups ------------------------------------------------------------------------- */

/* One more than the largest id (vocabulary and added tokens). */
DSV4_API int dsv4_tok_vocab_size(const dsv4_tokenizer *tok);
/* Id of a token given in its tokenizer.json spelling ("<｜end▁of▁sentence｜>", "Ġthe"),
 * added tokens first; -1 if there is none. */
DSV4_API int32_t dsv4_tok_token_to_id(const dsv4_tokenizer *tok, const char *token);
/* The tokenizer.json spelling of an id, or NULL for an id without a token. */
DSV4_API const char *dsv4_tok_id_to_token(const dsv4_tokenizer *tok, int32_t id);
/* The bytes an id decodes to (not NUL-terminated; may be a partial UTF-8 character), or
 * NULL for an id without a token. */
DSV4_API const char *dsv4_tok_id_bytes(const dsv4_tokenizer *tok, int32_t id, size_t *len);
/* 1 if the id is an added token / an added token marked special, else 0. */
DSV4_API int dsv4_tok_is_added(const dsv4_tokenizer *tok, int32_t id);
DSV4_API int dsv4_tok_is_special(const dsv4_tokenizer *tok, int32_t id);

/* ==== tool calls (DSML) ================================================================ */

/* DSML, DeepSeek-V4's markup for tool calls, both ways: writing the tool calls of
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
DSV4_API int dsv4_dsml_parse(const char *text, size_t len, int thinking, dsv4_parsed *out,
                             dsv4_err *err);
/* The same with options (flags: DSV4_DSML_* or 0, which is dsv4_dsml_parse).
 * DSV4_DSML_TEXT_ONLY: DSML is not read (a request that offered no tools): everything
 * after the reasoning up to EOS is the content, whatever it holds, and there are no tool
 * calls; the reasoning and EOS rules stay. */
enum { DSV4_DSML_TEXT_ONLY = 1 };
DSV4_API int dsv4_dsml_parse_opts(const char *text, size_t len, int thinking, int flags, dsv4_parsed *out,
                                  dsv4_err *err);
DSV4_API void dsv4_parsed_free(dsv4_parsed *p);
/* 1 when v[0..n), a string="false" parameter value, is kept verbatim in the arguments (it
 * is valid JSON, non-empty, without a NUL), 0 when it is passed on as a JSON string, -1
 * when out of memory. The parser and a streaming client decide the same way through it. */
DSV4_API int dsv4_dsml_value_is_json(const char *v, size_t n);

/* The OpenAI-style assistant message {"role", "content", ["reasoning_content"],
 * ["tool_calls": [{"type": "function", "function": {"name", "arguments"}}]]}, or NULL when
 * out of memory. The caller owns it (cJSON_Delete). */
DSV4_API struct cJSON *dsv4_parsed_to_json(const dsv4_parsed *p);

/* ==== chat encoding ==================================================================== */

/* DeepSeek-V4 chat encoding: OpenAI-style messages -> prompt text, and a
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
 * Message content is the client's text: the *_ids entry points tokenize it with special-
 * token strings kept as plain text (a user writing "<｜User｜>" cannot open a turn), while
 * the template's own tokens stay live. The text entry points (dsv4_chat_encode, _next)
 * return the text as DeepSeek's reference encoder does; tokenizing that text whole makes
 * such strings control tokens again, so use them for display and tests, and the *_ids
 * forms to feed a model.
 *
 * Limitations (documented, not errors): numbers in tool schemas are re-printed from
 * doubles (see pyjson.h); a user or tool "content" given as an array of parts keeps its
 * text parts joined by "\n\n", other parts become "[Unsupported <type>]"; tool-call
 * arguments of earlier assistant messages are written live (they are DSML).
 */

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
DSV4_API int dsv4_chat_encode(const struct cJSON *messages, const struct cJSON *tools, const dsv4_chat_opts *opts,
                              char **out, size_t *len, dsv4_err *err);

/* Encodes and tokenizes in one go, message content (system, user, tool results, reminders,
 * assistant content and reasoning, tool schemas) as plain text; appends to out. */
DSV4_API int dsv4_chat_encode_ids(const struct cJSON *messages, const struct cJSON *tools,
                                  const dsv4_chat_opts *opts, const dsv4_tokenizer *tok,
                                  dsv4_tok_ids *out, dsv4_err *err);

/* The same from JSON text: either an array of messages, or an object with "messages" and
 * optionally "tools", "thinking_mode" ("thinking"|"chat"), "thinking" (bool, or
 * {"type": "enabled"|"disabled"} as in DeepSeek's API),
 * "drop_thinking" (bool), "reasoning_effort" ("max"|"high"|null). Keys present override
 * *defaults (which may be NULL = all zero). */
DSV4_API int dsv4_chat_encode_json(const char *json, size_t json_len, const dsv4_chat_opts *defaults,
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

DSV4_API int dsv4_chat_create(const dsv4_chat_opts *opts, dsv4_chat **out, dsv4_err *err);
DSV4_API void dsv4_chat_free(dsv4_chat *c);

/* Appends a message: role system | developer | user | latest_reminder | tool | assistant,
 * content text (copied). */
DSV4_API int dsv4_chat_add(dsv4_chat *c, const char *role, const char *content, dsv4_err *err);
/* Appends a message given as an OpenAI-style JSON object (copied; checked when encoded). */
DSV4_API int dsv4_chat_add_json(dsv4_chat *c, const struct cJSON *msg, dsv4_err *err);
/* Sets the tools array (copied; NULL removes it), as for dsv4_chat_encode. */
DSV4_API int dsv4_chat_set_tools(dsv4_chat *c, const struct cJSON *tools, dsv4_err *err);

/* Encodes the conversation and returns the text to feed next: the part after what was fed
 * (reset = 0) or, when that is not a prefix any more, the whole text (reset = 1). From then
 * on that text counts as fed. *text is malloc'ed, NUL-terminated. */
DSV4_API int dsv4_chat_next(dsv4_chat *c, char **text, size_t *len, int *reset, dsv4_err *err);

/* dsv4_chat_next, tokenized with content as plain text (see dsv4_chat_encode_ids);
 * appends the new part's ids to out. */
DSV4_API int dsv4_chat_next_ids(dsv4_chat *c, const dsv4_tokenizer *tok, dsv4_tok_ids *out, int *reset,
                                dsv4_err *err);

/* Records the model's answer: text is exactly what the sequence holds after the prompt
 * (with or without a final EOS). It is parsed (thinking or not, as the last prompt asked)
 * into an assistant message, kept verbatim for re-encoding so that the next suffix still
 * applies, and counted as fed. parsed (may be NULL) receives the structured message, to be
 * freed with dsv4_parsed_free. A malformed answer is recorded all the same and returns
 * DSV4_ERR_FORMAT with the parser's message. The text may hold any byte (a NUL too): it is
 * re-encoded byte for byte. DSV4_ERR_STATE when there are no messages yet. */
DSV4_API int dsv4_chat_add_generated(dsv4_chat *c, const char *text, size_t len, dsv4_parsed *parsed,
                                     dsv4_err *err);

/* 1 if the last text handed out by dsv4_chat_next opened a reasoning block (the answer
 * starts with reasoning and must be parsed in thinking mode). */
DSV4_API int dsv4_chat_gen_thinking(const dsv4_chat *c);
/* Number of messages, and the whole encoding of the conversation (malloc'ed). */
DSV4_API int dsv4_chat_n_messages(const dsv4_chat *c);
DSV4_API int dsv4_chat_render(const dsv4_chat *c, char **text, size_t *len, dsv4_err *err);

/* ==== sampling ========================================================================= */

/* Choosing the next token from one row of logits [V].
 *
 * A dsv4_sampler holds its parameters, its own PRNG state (xoshiro256**, seeded through
 * splitmix64: same seed and same inputs give the same tokens) and scratch for one row; no
 * global state, one sampler per sequence (a sampler is not shared between threads).
 *
 * Order of processing, for each row:
 *   1. penalties over the history (token ids, oldest first; only the last penalty_last_n
 *      when that is > 0). For each distinct token t with count c in it:
 *        repetition (CTRL/HF style): x_t = x_t > 0 ? x_t / r : x_t * r
 *        frequency and presence (OpenAI style): x_t -= c * f + p
 *   2. temperature: z = x / T. T <= 0 means greedy: the argmax of x, ties to the lowest id.
 *   3. truncation, on probabilities q = softmax(z), ordering by (q desc, id asc):
 *        min-p: keep q_t >= min_p * max(q); top-k: keep the first k; top-p: of what is
 *        left, keep the shortest prefix whose renormalized mass reaches top_p.
 *   4. one draw from what is kept, renormalized.
 * Log-probabilities (the chosen token's, and the n best) are log-softmax of the processed
 * logits z of step 2 (T taken as 1 for greedy), over the whole vocabulary, before
 * truncation: finite for every token, and comparable between sampled and greedy runs.
 * NaN logits count as -inf; a row without any finite logit is an error.
 */

#define DSV4_MAX_LOGPROBS 20

/* All zero = greedy, no penalties, no logprobs. */
typedef struct dsv4_sample_params {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 0 or 1: off; else (0, 1) */
    float min_p;              /* 0: off; else (0, 1] */
    float repetition_penalty; /* 0 or 1: off; else > 0 (> 1 discourages repeats) */
    float frequency_penalty;  /* 0: off; any finite value (negative encourages) */
    float presence_penalty;   /* 0: off; any finite value */
    int penalty_last_n;       /* history window for penalties; 0 = all of it */
    uint64_t seed;
    int n_logprobs;           /* 0..DSV4_MAX_LOGPROBS best tokens to report */
} dsv4_sample_params;

typedef struct dsv4_sample_out {
    int32_t token;
    float logprob;                               /* of token */
    int n_top;                                   /* = n_logprobs (or V if smaller) */
    int32_t top_ids[DSV4_MAX_LOGPROBS];          /* best first, ties to the lowest id */
    float top_logprobs[DSV4_MAX_LOGPROBS];
    int rank;                                    /* dsv4_sample_score only (else 0): the ids
                                                  * at least as likely as token, itself
                                                  * included (vLLM's rank, >= 1) */
} dsv4_sample_out;

typedef struct dsv4_sampler dsv4_sampler;

/* vocab: V, the row length. Parameters are checked: DSV4_ERR_ARG names the bad one. */
DSV4_API int dsv4_sampler_create(const dsv4_sample_params *p, int vocab, dsv4_sampler **out,
                                 dsv4_err *err);
DSV4_API void dsv4_sampler_free(dsv4_sampler *s);
/* Restarts the random sequence from a seed. */
DSV4_API void dsv4_sampler_seed(dsv4_sampler *s, uint64_t seed);

/* Picks a token from logits [V] (not modified). history: [n_history] earlier token ids
 * for the penalties (may be NULL when n_history is 0). DSV4_ERR_ARG: a history id outside
 * [0, V), or no finite logit. */
DSV4_API int dsv4_sample(dsv4_sampler *s, const float *logits, const int32_t *history, int n_history,
                         dsv4_sample_out *out, dsv4_err *err);

/* The log-probabilities of a raw logits row [V] (not modified) as dsv4_sample reports them
 * for a greedy draw (temperature 1, no penalties; the same bits): out->logprob is token's,
 * out->top_ids / top_logprobs the best n_top (0..DSV4_MAX_LOGPROBS), out->rank token's
 * rank (the ids whose logit is at least token's, NaN as -inf). For scoring a given
 * text (a prompt's tokens). Uses s's scratch only (its parameters and random state are not
 * read nor changed). DSV4_ERR_ARG: token outside [0, V), n_top out of range, or no finite
 * logit. */
DSV4_API int dsv4_sample_score(dsv4_sampler *s, const float *logits, int32_t token, int n_top,
                               dsv4_sample_out *out, dsv4_err *err);

/* argmax of x[0..n), ties to the lowest index; NaN never wins. -1 if n <= 0 or all NaN. */
DSV4_API int32_t dsv4_argmax(const float *x, int n);

/* ==== stop conditions ================================================================== */

/* When generation ends, and how much text to show: stop tokens, max tokens, and
 * stop strings found in the streaming decoded text.
 *
 * Stop strings are matched on the text (bytes), not on tokens, so a stop string may be
 * split across any number of tokens. The text handed out never contains a stop string or
 * any part of it: a tail of the text that could still become a stop string is held back
 * until it either completes one (then it is dropped, and everything after it) or stops
 * matching (then it is released). With several stop strings the one that starts first
 * wins. Held-back text starts at a character boundary whenever the stop strings are valid
 * UTF-8, so released text never splits a character that the decoder delivered whole.
 *
 * Per generated token, in this order:
 *   r = dsv4_stop_token(s, token)     STOP_TOKEN: end, the token's text is not shown
 *   dsv4_stop_feed(s, its text, ...)  STOP_STRING: end, show only the emitted part
 *   if r == LENGTH: dsv4_stop_flush() and end
 * and dsv4_stop_flush() whenever generation ends for another reason (EOS handled as a stop
 * token, cancellation), to release what was held back.
 */

enum {
    DSV4_FINISH_NONE = 0,
    DSV4_FINISH_STOP_TOKEN,   /* a stop token (EOS, ...) was sampled */
    DSV4_FINISH_STOP_STRING,  /* a stop string appeared in the text */
    DSV4_FINISH_LENGTH,       /* max_tokens reached */
};

typedef struct dsv4_stop dsv4_stop;

/* strings: [n_strings] non-empty stop strings (copied); tokens: [n_tokens] stop token ids;
 * max_tokens: most tokens to generate (0 = no limit). DSV4_ERR_ARG for an empty or NULL
 * string, a negative count or limit. */
DSV4_API int dsv4_stop_create(const char *const *strings, int n_strings, const int32_t *tokens,
                              int n_tokens, int max_tokens, dsv4_stop **out, dsv4_err *err);
DSV4_API void dsv4_stop_free(dsv4_stop *s);
/* Forgets the text and the token count (a new generation with the same settings). */
DSV4_API void dsv4_stop_reset(dsv4_stop *s);

/* Counts a sampled token: STOP_TOKEN if it is a stop token (not counted), LENGTH if it
 * is the max_tokens-th token (its text is still shown), else NONE. */
DSV4_API int dsv4_stop_token(dsv4_stop *s, int32_t token);

/* Feeds the text of the next token(s). emit and emit_len receive the text to show now
 * (valid until the next call on s). Returns STOP_STRING once a stop string completed:
 * the emitted text then ends right before it and later feeds emit nothing. Else NONE.
 * Out of memory: returns -DSV4_ERR_NOMEM and emits nothing. */
DSV4_API int dsv4_stop_feed(dsv4_stop *s, const char *text, size_t len, const char **emit,
                            size_t *emit_len);
/* Releases the held-back text at the end of generation (nothing after a stop string). */
DSV4_API void dsv4_stop_flush(dsv4_stop *s, const char **emit, size_t *emit_len);

/* Index of the stop string that ended generation, or -1. Tokens generated so far. */
DSV4_API int dsv4_stop_matched(const dsv4_stop *s);
DSV4_API int dsv4_stop_count(const dsv4_stop *s);

/* ==== structured output (JSON) ========================================================= */

/* A JSON Schema compiled to a byte automaton, for generation constrained to produce one JSON
 * value valid under it (dsv4_gen_params.json_schema). Constrained sampling masks, before
 * each draw, every token whose bytes cannot continue a valid value; end-of-sequence (and the
 * request's stop tokens) only once the value is complete. Added/special tokens never appear
 * inside the value. The value has no whitespace run longer than 32 bytes (so a model cannot
 * loop on whitespace), no leading zero, strings are valid UTF-8 with JSON's escapes; a
 * value may be preceded and followed by a bounded run of whitespace.
 *
 * The schema subset (anything else is refused, DSV4_ERR_UNSUPPORTED naming the keyword and
 * where it is, e.g. `unsupported JSON Schema keyword "not" (at #/properties/id)`):
 *   true (any value); "type": a name or an array of names (object, array, string, number,
 *   integer, boolean, null); "properties" (at most 64) written IN THE ORDER GIVEN, each
 *   once, the "required" ones always, the others optional; "additionalProperties": false,
 *   or absent beside "properties" (the declared keys only, as in OpenAI's strict mode); an
 *   object without "properties" takes any keys (strings) with values under
 *   "additionalProperties" (absent or true: any value); "items" (a schema, true or false),
 *   "prefixItems", "minItems", "maxItems"; "enum" / "const" (values written in their
 *   compact JSON form, at most 64; both: the const, one of the enum's); "anyOf" (followed in
 *   parallel; a schema whose branches could leave more than 30 open at once, counting nested
 *   unions multiplied and object branches apart once an earlier required const differs, is
 *   refused naming the anyOf: no branch is ever dropped); "oneOf" as "anyOf" (a value matching two branches
 *   is accepted: exact for discriminated unions, whose branches exclude each other);
 *   "allOf" merged into one schema (properties and required joined, types intersected, the
 *   tightest bounds; any other keyword in two parts must be equal); "$ref" as a JSON pointer
 *   into the schema ("#", "#/$defs/NAME", "#/properties/a", ...; recursion allowed, nesting
 *   bounded by a depth of 32 frames); strings: "minLength" / "maxLength" (code points after
 *   unescaping), "pattern" (an ECMA-262 subset, unanchored as JSON Schema says: literals and
 *   escapes, \d \w \s and their negations, classes, '.', groups, '|', * + ? {m,n} greedy or
 *   lazy, ^ $; backreferences, lookaround, \b, \p{..} are refused), "format" (date-time,
 *   date, time, uuid, email, hostname, ipv4, duration; any other is refused); inside such a
 *   string a character is not written as a \u surrogate pair (UTF-8 instead); numbers
 *   (type integer or number): "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"
 *   (a number, or draft 4's boolean beside minimum / maximum) and "multipleOf", exact as
 *   decimals (0.1 is 1/10); a bounded number is written without exponent and not as
 *   negative zero (every value in range still can be), an empty range is refused. Annotations (title, description, default, examples,
 *   $schema, $id, $comment, deprecated, readOnly, writeOnly, discriminator) are ignored. JSON mode (any
 *   object) is {"type": "object"}. */
typedef struct dsv4_json_schema dsv4_json_schema;

/* Compiles schema text (len bytes). DSV4_ERR_FORMAT: not JSON; DSV4_ERR_UNSUPPORTED: a
 * keyword or combination outside the subset, or a schema no value satisfies. */
DSV4_API int dsv4_json_schema_compile(const char *schema, size_t len, dsv4_json_schema **out,
                                      dsv4_err *err);
DSV4_API void dsv4_json_schema_free(dsv4_json_schema *s);
/* Builds now, once per tokenizer, the vocabulary index every constrained generation walks
 * (a trie of the ids' bytes; ~0.1 s and ~5 MB for the real 129K vocabulary). Otherwise the
 * first dsv4_gen_create with a json_schema builds it, on the caller's thread: a server
 * calls this where a stall does not hold up other sequences. Thread-safe. */
DSV4_API int dsv4_json_vocab_prepare(const dsv4_tokenizer *tok, dsv4_err *err);
/* 1 when text (len bytes) is one complete value the constraint lets through (valid JSON,
 * valid under the schema, whitespace within the bounds), 0 if not, -1 out of memory. */
DSV4_API int dsv4_json_schema_accepts(const dsv4_json_schema *s, const char *text, size_t len);

/* ==== strict tool calls ================================================================ */

/* A tool_calls block (DSML, as dsv4_dsml_parse reads it) constrained by the request's
 * tools: an array of OpenAI chat tools, {"type": "function", "function": {"name",
 * "parameters", "strict"}}. Invoke names are the tools'; a strict tool's arguments are
 * its declared parameters (an object schema of "properties", "additionalProperties"
 * false, the subset of dsv4_json_schema), each at most once in any order, the required
 * ones all, each value valid under its schema (string="true" raw text when the schema
 * takes strings only, JSON when it takes none, either when both); a tool that is not
 * strict takes any parameters. */
enum { DSV4_TOOLS_REQUIRED = 1, DSV4_TOOLS_AUTO = 2 };
/* Compiles the tools (and drops them): 0 with *strict = 1 when some tool is strict (the
 * constraint applies); DSV4_ERR_UNSUPPORTED naming the tool whose parameters the subset
 * cannot enforce, DSV4_ERR_FORMAT for a malformed list. */
DSV4_API int dsv4_tools_check(const char *tools, size_t len, int *strict, dsv4_err *err);

/* Checks that a regex (len bytes) compiles as dsv4_gen_params.regex does (the same dialect
 * and bounds): DSV4_ERR_UNSUPPORTED with what is wrong ("uses a lookahead (?=", "matches no
 * string", ...), to be read after "the regex ". */
DSV4_API int dsv4_regex_check(const char *regex, size_t len, dsv4_err *err);
/* Checks that a grammar (len bytes) compiles as dsv4_gen_params.grammar does:
 * DSV4_ERR_UNSUPPORTED with what is wrong and where ("at line 2, column 9: undefined rule
 * 'expr'", "has no rule named 'root' ...", "is in Lark's syntax ..."), to be read after
 * "the grammar ". */
DSV4_API int dsv4_grammar_check(const char *grammar, size_t len, dsv4_err *err);
/* A compiled grammar (dsv4_gen_params.compiled_grammar): immutable once made and shared by
 * reference (thread-safe), with one mask cache for every generation that uses it (a
 * request's choices walk each state's mask once between them). */
typedef struct dsv4_grammar dsv4_grammar;
/* Compiles a grammar (len bytes) as dsv4_gen_params.grammar does. With tok (else NULL) it is
 * made for that tokenizer's vocabulary and its first token mask is computed (kept in the
 * cache for the first step), so a grammar whose very first mask passes a bound of the
 * matcher (its work budget, the parse stacks at once, the nesting) is refused here rather
 * than at a generation's first step; each refusal is DSV4_ERR_UNSUPPORTED with what is
 * wrong, to be read after "the grammar " ("at line 2, column 9: undefined rule 'expr'",
 * "cannot be followed from its start: ... more than 512 parse stacks at once ..."). *out has
 * one reference, for dsv4_grammar_free. */
DSV4_API int dsv4_grammar_compile(const char *grammar, size_t len, const dsv4_tokenizer *tok, dsv4_grammar **out,
                                  dsv4_err *err);
/* one more reference to g (returned) */
DSV4_API dsv4_grammar *dsv4_grammar_ref(dsv4_grammar *g);
/* drops one reference (the last frees g; NULL is a no-op) */
DSV4_API void dsv4_grammar_free(dsv4_grammar *g);

/* ==== generation ======================================================================= */

typedef struct dsv4_gen dsv4_gen;

/* What one generation samples and when it stops. */
typedef struct dsv4_gen_params {
    dsv4_sample_params sample;
    int max_tokens;                   /* 0 = no limit (the caller stops at a full context) */
    const char *const *stop_strings;  /* [n_stop] copied at create */
    int n_stop;
    const int32_t *stop_tokens;       /* [n_stop_tokens] besides the model's EOS; copied */
    int n_stop_tokens;
    const int32_t *bias_ids;          /* [n_bias] logit_bias: bias[i] is added to the logit */
    const float *bias;                /* of bias_ids[i] (finite; -inf bans) before sampling */
    int n_bias;
    const char *json_schema;          /* structured output: NULL = none; else a JSON Schema
                                       * (text, copied at create; see dsv4_json_schema) the
                                       * generated text must be a value of; with tools
                                       * (DSV4_TOOLS_AUTO only) the text is either such a
                                       * value or the tool_calls block */
    int json_after_think;             /* 1: the constraint starts after the "</think>" token
                                       * (thinking mode: the reasoning is free); the same
                                       * for tools */
    const char *tools;                /* strict tool calls: NULL = none; else the request's
                                       * tools (JSON text, see dsv4_tools_check; copied at
                                       * create): the tool_calls block is constrained, each
                                       * strict tool's arguments by its parameters schema */
    int tools_mode;                   /* DSV4_TOOLS_REQUIRED: the answer is the block;
                                       * DSV4_TOOLS_AUTO: free text, then the block once the
                                       * text opens it */
    int tools_single;                 /* 1: one call (parallel_tool_calls false) */
    /* Guided decoding (at most one of json_schema, tools, regex, choices, grammar): */
    const char *regex;                /* NULL = none; else the text must match this regular
                                       * expression whole (copied at create). The dialect is
                                       * dsv4_json_schema's "pattern" subset of ECMA-262 (no
                                       * lookaround, backreferences, \b, \p{..}, flags), read
                                       * as ^(?:regex)$ over the text's code points (raw text:
                                       * no JSON escaping); a pattern no text matches is refused.
                                       * The stop tokens go once the text matches; generation
                                       * ends there when nothing can follow. */
    const char *const *choices;       /* [n_choices] NUL-terminated: the text must be exactly
                                       * one of them (any bytes; duplicates and "" allowed;
                                       * copied at create) */
    int n_choices;                    /* 0 = none */
    const char *grammar;              /* NULL = none; else the text must be a sentence of this
                                       * context-free grammar (copied at create): GBNF as
                                       * llama.cpp documents it, which is xgrammar's EBNF as
                                       * vLLM and SGLang take it (rules "name ::= ...", the
                                       * start rule "root"; literals, [classes], '.', groups,
                                       * * + ? {m,n}; no left recursion), read over the text's
                                       * code points. Matched by a pushdown automaton whose
                                       * bounds (parse stacks at once, nesting) an ambiguous
                                       * grammar can pass: a token whose bytes would is left
                                       * out of the mask; a mask whose walk passes its work
                                       * budget, or that the bounds leave empty, fails
                                       * dsv4_gen_next with DSV4_ERR_UNSUPPORTED naming the
                                       * bound. The stop tokens go once the text is a sentence. */
    /* Benchmark clients' sampling fields (vLLM's SamplingParams): */
    int ignore_eos;                   /* 1: the model's EOS is never sampled (banned like a
                                       * -inf bias), so generation runs to max_tokens, a
                                       * stop token id, a stop string or a full context;
                                       * under a constraint that allows nothing else, EOS
                                       * still ends it */
    int min_tokens;                   /* >= 0: before this many tokens, EOS and stop_tokens
                                       * are banned (same exception); a stop string ends the
                                       * text only when it ends in the text of a token after
                                       * the min-th (it may begin before: vLLM's rule) */
    int include_stop_str;             /* 1: the text ends with the stop string that ended it */
    int skip_special;                 /* 1: tokens marked "special" show no text (default 0:
                                       * their text is shown; EOS, a stop token, never is) */
    const dsv4_gen *share;            /* NULL, or a live generation (same tokenizer) whose
                                       * regex or choice list is this one's, byte for byte
                                       * (the n choices of one request): its compiled guide
                                       * and mask cache are shared, so each state's mask is
                                       * walked once for all of them (thread-safe: the two
                                       * may draw on different threads at once; either may
                                       * be freed first). Read at create only; ignored when
                                       * the constraints differ. The same for a grammar's
                                       * text (compiled_grammar shares by itself). */
    dsv4_grammar *compiled_grammar;   /* NULL, or a compiled grammar (dsv4_grammar_compile,
                                       * for this tokenizer or none) used instead of
                                       * .grammar's text (which is then ignored; it may hold
                                       * the same text): the generation holds a reference,
                                       * and every generation using it shares its masks */
} dsv4_gen_params;

/* One step's result. */
typedef struct dsv4_gen_token {
    int32_t token;        /* the sampled id */
    int finish;           /* DSV4_FINISH_* when generation ended with this token, else NONE */
    int feed;             /* 1: the token joined the text, and must run through the model
                           * before the next dsv4_gen_next (0 for a stop token) */
    const char *text;     /* text released now: never a partial character, never part of a */
    size_t text_len;      /* stop string (valid until the next call on the dsv4_gen) */
    dsv4_sample_out sample;  /* the chosen token's logprob and the best n_logprobs */
} dsv4_gen_token;

/* A generation over the model's vocabulary: sampler, stop conditions and streaming
 * detokenizer. Ids the tokenizer has no text for are never sampled (a random or untrained
 * head would otherwise pick them). DSV4_ERR_ARG names a bad parameter. */
DSV4_API int dsv4_gen_create(const dsv4_model *m, const dsv4_tokenizer *tok, const dsv4_gen_params *p,
                             dsv4_gen **out, dsv4_err *err);
DSV4_API void dsv4_gen_free(dsv4_gen *g);

/* Consumes the logits row [V] that follows the text so far (not modified) and returns the
 * next token. Exactly one sampler draw per call, so a token depends only on its logits row
 * and the tokens before it: the same tokens come out whether the rows were computed alone,
 * batched, after a preemption or by a speculative verify. Penalties look at the tokens of
 * this generation. After a finish, DSV4_ERR_STATE. */
DSV4_API int dsv4_gen_next(dsv4_gen *g, const float *logits, dsv4_gen_token *out, dsv4_err *err);

/* Scores a given token on a logits row [V] (not modified): its log-probability and the best
 * n_top (0..DSV4_MAX_LOGPROBS), as a greedy dsv4_gen_next on that row reports them (the ids
 * without text excluded; no bias, penalty, temperature or constraint: the model's own
 * figures), for a prompt's tokens (echo with logprobs). Uses g's scratch only: the
 * generation's state is unchanged. DSV4_ERR_ARG as dsv4_sample_score. */
DSV4_API int dsv4_gen_score(dsv4_gen *g, const float *logits, int32_t token, int n_top, dsv4_sample_out *out,
                            dsv4_err *err);

/* Ends the generation early (cancelled, context full) or after a finish: releases the text
 * held back (a partial character as U+FFFD, a prefix of a stop string that never completed).
 * *text is valid until the next call on g. Later calls release nothing. */
DSV4_API void dsv4_gen_end(dsv4_gen *g, const char **text, size_t *len);

/* The tokens sampled so far (stop token included), [*n]; valid until the next call. */
DSV4_API const int32_t *dsv4_gen_tokens(const dsv4_gen *g, int *n);
/* DSV4_FINISH_* once finished, else NONE. */
DSV4_API int dsv4_gen_finished(const dsv4_gen *g);
/* The walks of the vocabulary trie this generation's regex / choice / grammar masks took (the
 * cache misses it filled; 0 without such a constraint): what dsv4_gen_params.share and a
 * shared compiled grammar save. */
DSV4_API long dsv4_gen_guide_walks(const dsv4_gen *g);
/* After a DSV4_FINISH_STOP_STRING finish: the index in params.stop_strings of the stop
 * string that ended generation (the one that started first); otherwise -1. */
DSV4_API int dsv4_gen_stop_matched(const dsv4_gen *g);

/* ---- MTP speculative decoding (serving.md §e, one draft per step) ---- */

/* dsv4_spec keeps the MTP side of one sequence: the last-block streams and tokens of the
 * positions whose MTP rows have not run yet, the pending token x_n, the draft d_{n+1} and
 * the step's counters. It only builds spans and reads results, so a scheduler can put the
 * spans of many sequences into one dsv4_forward / dsv4_mtp_forward / dsv4_lm_head call.
 * A decoding step of one sequence, with g its dsv4_gen:
 *
 *   dsv4_spec_verify_span(s, &sp)         [x_n, d] speculative (2 rows) when a draft exists
 *                                         and fits in max_context, else [x_n] (1 row);
 *                                         every row asks for hidden and streams
 *   dsv4_forward(... sp ...), logits of its hidden rows (dsv4_lm_head)
 *   y = dsv4_gen_next(g, row 0)
 *   dsv4_spec_verify_done(s, y.token, y.feed, streams, &k)
 *                                         accepts the draft iff y.token == d and y joins the
 *                                         text (point-mass draft: sampling stays exact), and
 *                                         commits k rows
 *   k == 2 and going on: y = dsv4_gen_next(g, row 1)    (row 1's logits follow the draft)
 *   dsv4_spec_set_next(s, y.token)        the new pending token x_n (when it joins the text)
 *   dsv4_spec_mtp_span(s, &ms, &drafts)   MTP rows [m, n), all rows whose x_{t+1} is known
 *   dsv4_mtp_forward_out(... ms, out = drafts ? DSV4_MTP_OUT_LAST : DSV4_MTP_OUT_NONE ...)
 *                                         drafts: d = argmax of the logits of the span's
 *                                         last row, the one hidden row the span yields (the
 *                                         other rows only fill the MTP cache)
 *   dsv4_spec_mtp_done(s, d or -1)
 *
 * Prefill chunks and any other plain span of the sequence ask for the streams of every row
 * and report them with dsv4_spec_fed; dsv4_spec_mtp_span then covers their MTP rows (the
 * last one waits for the token after it, e.g. until the next chunk or the next turn). The
 * sampler draws once per dsv4_gen_next, so the tokens are the ones a run without MTP
 * gives, greedy or seeded.
 *
 * The engine must keep MTP caches (dsv4_engine_opts.mtp). A dsv4_spec follows its sequence
 * from its current length with every call on it reported here; if the sequence moves
 * without it, drafting stops for it (output stays exact: drafts are always verified). */
typedef struct dsv4_spec dsv4_spec;

typedef struct dsv4_spec_stats {
    int64_t steps;     /* decoding steps (dsv4_spec_verify_done calls) */
    int64_t drafts;    /* steps that verified a draft */
    int64_t accepted;  /* drafts accepted */
    int64_t tokens;    /* rows those steps committed: steps + accepted */
} dsv4_spec_stats;

/* For live sequence seq at its current length n, with MTP length m = n (a fresh or fully
 * caught-up sequence). DSV4_ERR_STATE: the engine has no MTP caches, or m != n. */
DSV4_API int dsv4_spec_create(dsv4_engine *e, int seq, dsv4_spec **out, dsv4_err *err);
/* For a sequence restored from a snapshot (dsv4_snapshot_restore, dsv4_prefix_start): length
 * n, MTP length m = n - 1, streams [hc, D] = position n - 1's last-block streams (what the
 * restore returned). Its MTP row n - 1 runs once x_n is known, as after dsv4_spec_fed. */
DSV4_API int dsv4_spec_resume(dsv4_engine *e, int seq, const float *streams, dsv4_spec **out,
                              dsv4_err *err);
/* For seq, a fork of src's sequence (dsv4_seq_fork, no call on either since): a copy of
 * src's MTP side (its pending streams, tokens, next token and draft; zero counters, no
 * hook). DSV4_ERR_STATE when seq is not at src's lengths. */
DSV4_API int dsv4_spec_fork(const dsv4_spec *src, int seq, dsv4_spec **out, dsv4_err *err);
DSV4_API void dsv4_spec_free(dsv4_spec *s);

/* Reports a plain span of n rows that just ran on the sequence (tokens [n], streams
 * [n, hc, D] of every row). */
DSV4_API int dsv4_spec_fed(dsv4_spec *s, const int32_t *tokens, int n, const float *streams,
                           dsv4_err *err);
/* The next token x_n: sampled, not run yet. */
DSV4_API void dsv4_spec_set_next(dsv4_spec *s, int32_t token);
/* The MTP rows ready to run (*ms->n may be 0: nothing to run), at most the engine's c_max
 * (the rest run at the next call); *drafts = 1 when the last row is n - 1, whose logits give
 * the next draft. Only that row's hidden state is ever
 * read: run the span with dsv4_mtp_forward_out and DSV4_MTP_OUT_LAST when drafting, else
 * DSV4_MTP_OUT_NONE. The span points into s (valid until the next call on s). */
DSV4_API void dsv4_spec_mtp_span(dsv4_spec *s, dsv4_mtp_span *ms, int *drafts);
/* After the MTP span ran: draft = the argmax of its last row's logits when *drafts was set,
 * else -1. */
DSV4_API void dsv4_spec_mtp_done(dsv4_spec *s, int32_t draft);
/* The main span of a decoding step (needs the pending token: DSV4_ERR_STATE without one).
 * Rows: sp->n_tokens (2 when verifying a draft); tokens point into s. */
DSV4_API int dsv4_spec_verify_span(dsv4_spec *s, dsv4_span *sp, dsv4_err *err);
/* After that span ran: y is the token sampled from row 0, y_joins its dsv4_gen_token.feed.
 * Commits the accepted rows (dsv4_seq_commit) and sets *k: 2 when the draft was y (row 1's
 * logits then give the next token), else 1. streams: the span's [rows, hc, D]. */
DSV4_API int dsv4_spec_verify_done(dsv4_spec *s, int32_t y, int y_joins, const float *streams, int *k,
                                   dsv4_err *err);
DSV4_API dsv4_spec_stats dsv4_spec_get_stats(const dsv4_spec *s);
/* Test and benchmark hook: called with every draft the MTP block proposes for position
 * pos; the draft verified is what it returns (a token id, or -1 for none). Lets tests force
 * rejections where they want them, and benchmarks set the acceptance rate. */
typedef int32_t (*dsv4_spec_draft_fn)(void *user, int64_t pos, int32_t draft);
DSV4_API void dsv4_spec_set_draft_hook(dsv4_spec *s, dsv4_spec_draft_fn fn, void *user);

/* ---- blocking loop over one sequence ---- */

typedef struct dsv4_generation_opts {
    dsv4_sample_params sample;
    int max_tokens;                  /* 0 = until a stop or the context is full */
    const char *const *stop_strings; /* (n_stop) */
    int n_stop;
    int chunk;                       /* prefill chunk rows; 0 = the engine's c_max */
    const int32_t *bias_ids;         /* [n_bias] logit_bias, as in dsv4_gen_params */
    const float *bias;
    int n_bias;
    const char *json_schema;         /* structured output, as in dsv4_gen_params */
    int json_after_think;
    const char *regex;               /* guided decoding, as in dsv4_gen_params */
    const char *const *choices;
    int n_choices;
    const char *grammar;
    dsv4_spec *spec;                 /* MTP speculative decoding of seq (dsv4_spec_create on
                                      * it, kept across the turns of a conversation); NULL =
                                      * one row per step (on an engine with MTP caches the
                                      * sequence is then set dsv4_seq_mtp_off). The tokens
                                      * are the same either way. */
} dsv4_generation_opts;

typedef struct dsv4_generation_callbacks {
    void *user;
    /* text ready to show (never a partial character, never part of a stop string);
     * return non-zero to cancel */
    int (*text)(void *user, const char *text, size_t len);
    /* after each prefill chunk */
    void (*progress)(void *user, int64_t done, int64_t total);
    /* per generated token, with its log-probabilities when asked for */
    void (*token)(void *user, const dsv4_sample_out *out);
    /* A sequence length inside the prefill (n0 < keep_at < n0 + n_prompt) at which a prefill
     * chunk ends and `keep` is called with the sequence there (MTP rows caught up to
     * m = keep_at - 1 with a spec) and its last position's hidden [D] and streams [hc, D]:
     * what dsv4_snapshot_take needs at an aligned length. 0 = none. */
    int64_t keep_at;
    void (*keep)(void *user, int seq, const float *hidden, const float *streams);
} dsv4_generation_callbacks;

typedef struct dsv4_generation_result {
    int64_t prompt_tokens;    /* prefilled in this call */
    int64_t gen_tokens;       /* sampled */
    double prefill_seconds, decode_seconds;
    int finish;               /* DSV4_FINISH_* (NONE when cancelled or the context filled) */
    int context_full;         /* 1: generation stopped because max_context was reached */
    int32_t *ids;             /* (gen_tokens) sampled ids, malloc'ed; caller frees */
    int last_fed;             /* 1 if the last sampled id was also run through the model */
    dsv4_spec_stats spec;     /* with opts.spec: this call's steps, drafts, accepted drafts */
} dsv4_generation_result;

/* Runs prompt (n_prompt >= 1 new tokens) on seq and generates. The last sampled token is
 * fed to the model too unless it is a stop token, so the sequence holds every shown token.
 * Penalties look at the tokens generated in this call. */
DSV4_API int dsv4_generation_run(dsv4_engine *e, const dsv4_tokenizer *tok, int seq,
                                 const int32_t *prompt, int n_prompt, const dsv4_generation_opts *opts,
                                 const dsv4_generation_callbacks *cb, dsv4_generation_result *res,
                                 dsv4_err *err);

#ifdef __cplusplus
}
#endif
#endif
