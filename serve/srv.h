/* srv.h — the server object shared by the HTTP layer and the API handlers (internal to
 * serve/). */
#ifndef DSV4_SERVE_SRV_H
#define DSV4_SERVE_SRV_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>

#include "dsv4_server.h"
#include "dsv4_text.h"
#include "serve/job.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "serve/step_msg.h"

typedef struct srv_rstore srv_rstore;  /* responses_store.c */

struct dsv4_server {
    dsv4_server_opts o;          /* defaults filled in */
    char *model_name;
    const dsv4_model *m;         /* the caller's */
    dsv4_tokenizer *tok;
    dsv4_engine *e;
    srv_relay *relay;            /* the engine calls, also to the follower ranks */
    srv_sched *sched;
    FILE *trace;                 /* o.trace_steps opened, or NULL */
    srv_metrics met;
    struct MHD_Daemon *d;
    struct srv_http *http;       /* http.c's state: suspended connections, the watcher */
    int port;
    atomic_int ready;            /* model loaded, scheduler running */
    long long started;           /* unix seconds */
    int V;
    int32_t bos, eos;
    dsv4_gen_config gc;          /* the model's sampling defaults (has = 0: none, or ignored) */
    pthread_mutex_t mu;          /* guards the two below */
    uint64_t seed_state;         /* seeds for requests that give none */
    uint64_t n_jobs;             /* ids of answers */
    uint64_t id_salt;            /* random at start: the responses' ids (api.c) */
    srv_rstore *rstore;          /* /v1/responses' stored responses */
    int32_t **script_ids;        /* (o.script->n) tokenized scripted answers */
    int *script_len;
};

/* What an API handler hands back to the HTTP layer: an error (status >= 400, body set),
 * or a submitted job answered by stream (SSE) or final (one JSON body). */
typedef struct srv_reply {
    int status;
    srv_buf body;
    srv_job *job;
    srv_stream_fn stream;
    srv_final_fn final;
} srv_reply;

/* Handlers of the routes (openai.c, anthropic.c). */
void srv_openai_chat(srv *s, const char *body, size_t len, srv_reply *out);
void srv_openai_completion(srv *s, const char *body, size_t len, srv_reply *out);
void srv_anthropic_messages(srv *s, const char *body, size_t len, srv_reply *out);
void srv_anthropic_count_tokens(srv *s, const char *body, size_t len, srv_reply *out);
/* A list route's query parameters (NULL: not given). */
typedef struct srv_list_query {
    const char *after, *before, *limit, *order;
} srv_list_query;
/* OpenAI's Responses API (responses.c): POST /v1/responses, and GET / DELETE
 * /v1/responses/{id}, GET /v1/responses/{id}/input_items and POST
 * /v1/responses/{id}/cancel (path: what follows /v1/responses/; q: the list's query)
 * answered from the store in place (the HTTP status; out: the body). */
void srv_responses_create(srv *s, const char *body, size_t len, srv_reply *out);
/* POST /v1/responses/input_tokens: the input tokens of a create with the same fields. */
void srv_responses_input_tokens(srv *s, const char *body, size_t len, srv_reply *out);
/* The bytes of the stored conversation a Responses body's previous_response_id names (what
 * its handler renders besides the body), 0 when it names none that is stored. Parses the body
 * only when it holds the key's name; for the intake's lane choice. */
size_t srv_responses_prev_bytes(srv *s, const char *body, size_t len);
int srv_responses_lookup(srv *s, const char *method, const char *path, const srv_list_query *q,
                         srv_buf *out);
/* GET /v1/responses/{id}?stream=true&starting_after=N (N NULL: from the start): a background
 * stream's events after N, replayed from its log, then followed live, as out's job and
 * stream function (0); else out holds the error (its status returned). */
int srv_responses_follow(srv *s, const char *id, const char *starting_after, srv_reply *out);
/* The stored responses (input and output items, for previous_response_id, and the response
 * object, for GET): an LRU under a byte cap, its own mutex (a leaf lock: taken under a
 * request's mu by the stream and final functions, and by the intake thread). */
srv_rstore *srv_rstore_create(size_t cap);
/* After the scheduler stopped (every request ended): returns once the store's worker wrote
 * every background response's end (the streams following them then end). srv_rstore_free
 * ends the worker (joined). */
void srv_rstore_stop(srv_rstore *st);
void srv_rstore_free(srv_rstore *st);
/* vLLM's /tokenize and /detokenize (tokenize.c). */
void srv_tokenize(srv *s, const char *body, size_t len, srv_reply *out);
void srv_detokenize(srv *s, const char *body, size_t len, srv_reply *out);

/* Error bodies in each API's shape. */
void srv_openai_error(srv_buf *b, int status, const char *msg);
/* OpenAI's error with its type, param and code (NULL: null) named, e.g. a model that is not
 * served: "invalid_request_error", NULL, "model_not_found" (404). */
void srv_openai_error_code(srv_buf *b, const char *type, const char *param, const char *code,
                           const char *msg);
void srv_anthropic_error(srv_buf *b, int status, const char *msg);

/* ---- shared by the handlers (api.c) --------------------------------------------------- */

/* Reads the sampling and stopping fields every API shares (temperature, top_p, top_k,
 * min_p, penalties, seed, stop, logit_bias, max_tokens) into r->gp. Returns 0, or -1 with
 * a message naming the field. stop_key: "stop" or "stop_sequences". */
int srv_parse_sampling(srv *s, const cJSON *body, srv_req *r, const char *stop_key,
                       char *msg, size_t msg_len);
/* The prompt ids of a chat request: messages (+ tools) encoded with the DeepSeek-V4
 * template, message content as plain text. */
int srv_chat_prompt(srv *s, const cJSON *messages, const cJSON *tools,
                    const dsv4_chat_opts *co, dsv4_tok_ids *ids, dsv4_err *err);
/* The chat request's thinking mode (DeepSeek's "thinking", "reasoning_effort", vLLM's
 * chat_template_kwargs.thinking) into co; -1 with a message (msg: 1200 bytes). */
int srv_chat_thinking(const cJSON *body, dsv4_chat_opts *co, char *msg);
/* tool_choice in either API's form (OpenAI "none" | "auto" | "required" | a named function;
 * Anthropic none | auto | any | tool) */
enum { SRV_TC_AUTO = 0, SRV_TC_NONE, SRV_TC_REQUIRED, SRV_TC_NAMED };
/* For SRV_TC_REQUIRED / SRV_TC_NAMED: the answer must call a tool (named: `name`, which
 * must be one of tools, an array in OpenAI's form): the DSML block's opening (and the
 * name) become r's forced prefix, sampling goes on after it. In thinking mode the prefix
 * closes the reasoning first (no reasoning then). Returns 0, or -1 with a message. */
int srv_force_tool_call(srv *s, srv_req *r, const cJSON *tools, int mode, const char *name,
                        int thinking, char *msg, size_t n);
/* Structured output (structured.c). The request's format field (response_format, or
 * output_config.format / output_format for SRV_API_MESSAGES): 0 when absent or free text, 1 when the answer must
 * be JSON (*schema: the schema's compact text, malloc'ed; *shown: the object the prompt
 * shows the model, inside body), -1 with a message (a schema outside the subset names the
 * keyword). The vocabulary index the mask walks is built at load (dsv4_server_load). */
int srv_json_format(const cJSON *body, int api, char **schema, const cJSON **shown, char *msg, size_t n);
/* A copy of messages whose first system/developer message carries shown as its
 * "response_format" (the template's Response Format section), or with such a system
 * message put in front; a message that has its own is left alone. NULL when out of
 * memory. */
cJSON *srv_messages_with_format(const cJSON *messages, const cJSON *shown);
/* A chat request's prompt as /v1/chat/completions renders it (openai.c), shared with
 * /tokenize so that its count is the chat's usage.prompt_tokens. */
typedef struct srv_chat {
    dsv4_chat_opts co;
    dsv4_tok_ids ids;     /* the prompt */
    const cJSON *tools;   /* in the request; NULL when none or tool_choice "none" */
    int tc;               /* SRV_TC_* */
    const char *tc_name;  /* in the request's JSON */
    cJSON *allowed;       /* allowed_tools: a copy of the tools the answer may call (all
                           * listed: every one, still constrained), or NULL: not given */
    int json;             /* structured output */
    char *schema;         /* its schema's text (malloc'ed) */
} srv_chat;
/* Reads messages, tools, tool_choice, thinking and response_format from the request j
 * into c. Returns 0, 400 (msg written, 1200 bytes) or 500; srv_chat_free(c) either way. */
int srv_openai_chat_prompt(srv *s, const cJSON *j, srv_chat *c, char *msg);
void srv_chat_free(srv_chat *c);
/* A chat request j (messages, tools, tool_choice, thinking, response_format and the
 * sampling fields, as /v1/chat/completions reads them) rendered, its request made and
 * submitted as api's job (thinking, tools and split set; body: for the test script). NULL
 * when it failed (out holds the error). The chat endpoint's and /v1/responses' (which
 * turns its request into a chat request first) one path. n: OpenAI's n (srv_submit_n). */
srv_job *srv_chat_submit(srv *s, const cJSON *j, int api, const char *body, int n_logprobs, int n,
                         srv_reply *out);
/* Its second half: the request j already rendered into c (srv_openai_chat_prompt), made and
 * submitted (c stays the caller's to free; its schema is taken). /v1/responses renders
 * first: truncation and the context check need the prompt's length. */
srv_job *srv_chat_submit_rendered(srv *s, const cJSON *j, srv_chat *c, int api, const char *body,
                                  int n_logprobs, srv_reply *out);
/* Guided decoding as vLLM and SGLang clients send it (top-level fields, where the openai
 * SDK's extra_body puts them): structured_outputs {json | regex | choice | json_object |
 * grammar} (vLLM >= 0.10), the older guided_json / guided_regex / guided_choice /
 * guided_grammar, SGLang's regex, json_schema and ebnf, llama.cpp's grammar (a grammar is
 * GBNF / xgrammar EBNF text: dsv4_gen_params.grammar). Exactly one constraint per request:
 * several, or one beside a JSON response_format (json_format != 0), is a 400 naming them;
 * structured_outputs.structural_tag is refused as not supported. Sets r's regex, choices,
 * grammar or JSON schema; after_think: thinking mode (the constraint starts after the
 * reasoning). doc non-NULL: the request has tools, and a JSON constraint (the guided json
 * fields, json_object) is not set but its schema text given in *doc (the caller's, for
 * srv_answer_constraint: the document or a tool call, as response_format beside tools); a
 * regex, choice list or grammar beside tools is a 400 (the tools' automaton reads its
 * document as JSON). A grammar is compiled for tok and its first mask made here (a grammar
 * that passes a bound of the matcher before any token is a 400 naming it), shared by the
 * choices (srv_req's gram). 0 (none or set), -1 with a message and *param the field at fault. */
int srv_guided(srv_req *r, const dsv4_tokenizer *tok, const cJSON *body, int json_format, char **doc, int thinking, const char **param,
               char *msg, size_t n);
/* On an endpoint without guided decoding (where: its path): -1 with a message naming the
 * first guided field given (in *param), 0 when there is none. */
int srv_guided_refuse(const cJSON *body, const char *where, const char **param, char *msg, size_t n);
/* Gives r the schema text (taken) as its constraint; after_think: thinking mode. */
void srv_req_set_json(srv_req *r, char *schema, int after_think);
/* strict tool calls: r's gp.tools (owning text), mode DSV4_TOOLS_* */
void srv_req_set_tools(srv_req *r, char *tools, int mode, int single, int after_think);
/* Constrains r's tool calls when some tool is strict (tools: the request's OpenAI-style
 * tools after tool_choice; tc SRV_TC_*, name the named tool; single: parallel_tool_calls
 * false; a named choice: one call). 0, or -1 with a message (a strict tool the constraint
 * cannot enforce: 400). */
int srv_strict_tools(srv_req *r, const cJSON *tools, int tc, const char *name, int thinking, int single,
                     char *msg, size_t n);
/* The calls of tools (strict ones' arguments by their schemas, the others' free; no other
 * tool) as r's constraint in mode DSV4_TOOLS_*: allowed_tools' subset, or beside a JSON
 * document (schema: taken, or NULL; DSV4_TOOLS_AUTO only): the answer is then either the
 * document, a value of schema, or a tool_calls block. 0, or -1 with a message (a tool the
 * block cannot carry, a strict one the constraint cannot enforce: 400). */
int srv_callable_tools(srv_req *r, const cJSON *tools, int mode, char *schema, int thinking, int single, char *msg,
                       size_t n);
/* The answer's constraint once tool_choice's forced opening is set (srv_force_tool_call):
 * a format (schema, taken; NULL: none) beside tools with tool_choice auto: the document or
 * a call of the callable tools; allowed (allowed_tools' subset of tools, NULL: every tool):
 * calls of those alone, strict or not; else the strict tools' (srv_strict_tools), and a
 * format without tools the document. 0, or -1 with a message (400). */
int srv_answer_constraint(srv_req *r, const cJSON *tools, const cJSON *allowed, int tc, const char *name, char *schema,
                          int thinking, int single, char *msg, size_t n);
/* Creates the job for r (taking the HTTP side's reference), applies the test script
 * (matched against the request body) and submits it; on failure out gets the error. */
srv_job *srv_submit(srv *s, srv_req *r, int api, const char *body, srv_reply *out);
/* The most choices of one request (OpenAI's n and best_of; also at most --max-seqs). */
#define SRV_MAX_CHOICES 128
/* srv_submit of n choices (OpenAI's n): choice i is a copy of r seeded with r's seed + i
 * (mod 2^64), the job's more[i - 1]; all are submitted at once (srv_sched_submit_n). */
srv_job *srv_submit_n(srv *s, srv_req *r, int n, int api, const char *body, srv_reply *out);
/* srv_submit_n of a list of prompts (completions' prompt as a list), each rs[p] a request
 * of its own (its two references taken) with n choices: the job's choice k = p n + c is
 * prompt p's choice c (rs[p] for c = 0, with waiter rs[0] for p > 0), all submitted at
 * once (they count n_prompts x n against the queue). */
srv_job *srv_submit_list(srv *s, srv_req *const *rs, int n_prompts, int n, int api, const char *body,
                         srv_reply *out);
/* Sets out to an error in the API's shape. */
void srv_reply_error(srv_reply *out, int api, int status, const char *msg);
/* Optional field of a type: 0 absent (or null), 1 read, -1 wrong type or out of range
 * (message written). */
int srv_opt_num(const cJSON *o, const char *key, double lo, double hi, double *v, char *msg,
                size_t n);
int srv_opt_bool(const cJSON *o, const char *key, int *v, char *msg, size_t n);
/* x as a token id in [0, V): 0 (*id set), or -1 when it is not a whole number there. */
int srv_token_id(const srv *s, const cJSON *x, int32_t *id);
/* Text of token id as JSON-safe UTF-8 (its bytes, repaired). */
void srv_token_text(const srv *s, int32_t id, srv_buf *b);
/* One sampled token's logprobs entry: {token, logprob, bytes, top_logprobs: [{token, logprob,
 * bytes}]} (the chat's, and the Responses API's output_text part), without the bytes when
 * bytes is 0 (the Responses API's streamed events). */
cJSON *srv_logprob_json(const srv *s, const srv_event *e, int bytes);
/* A JSON string of n bytes of valid UTF-8. */
cJSON *srv_json_str_n(const char *s, size_t n);
/* Appends "[event: E\n]data: JSON\n\n" and deletes data. */
void srv_sse(srv_buf *out, const char *event, cJSON *data);
/* Appends the JSON text and deletes j. */
void srv_put_json(srv_buf *out, cJSON *j);
/* A final answer's error when j's request did not finish (an engine error: 500; cancelled
 * by the shutdown's deadline: 503) in OpenAI's shape: 1 (*status set), else 0. */
int srv_final_error(const srv_job *j, srv_buf *out, int *status);
/* OpenAI finish_reason of an ended request: length, tool_calls or stop. */
const char *srv_finish_reason(const srv_req *r, int n_calls);
/* The answer's text split into reasoning, content and tool calls; malformed DSML leaves
 * its raw text in the content (nothing lost). Free with dsv4_parsed_free. */
void srv_parse_answer(const srv_job *j, dsv4_parsed *p);
/* Unix time in seconds. */
long long srv_unix_time(void);

#endif
