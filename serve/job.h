/* job.h — one API request in flight: the generation request plus what its API needs to
 * answer it (stream or not, logprobs, thinking, tools) and its streaming progress.
 * openai.c and anthropic.c create jobs from request bodies and write their answers;
 * http.c only moves bytes. */
#ifndef DSV4_SERVE_JOB_H
#define DSV4_SERVE_JOB_H

#include <stdint.h>

#include "serve/request.h"
#include "serve/split.h"
#include "serve/tool_stream.h"
#include "serve/util.h"

typedef struct dsv4_server srv;
typedef struct srv_job srv_job;

enum { SRV_API_CHAT = 0, SRV_API_COMPLETION, SRV_API_MESSAGES, SRV_API_RESPONSES };

struct srv_resp;  /* responses_int.h: a /v1/responses job's own state */

struct srv_job {
    int api;                 /* SRV_API_* */
    srv_req *r;
    int stream;
    int include_usage;       /* stream_options.include_usage */
    int logprobs;            /* chat: logprobs true; completions: logprobs N given */
    int thinking;            /* the answer starts with reasoning */
    int tools;               /* tools were offered */
    char id[48];
    long long created;       /* unix seconds */
    /* streaming progress */
    int ev_sent;             /* events written so far */
    int began;               /* the opening chunk/event is out */
    int block;               /* anthropic: index of the open content block, -1 none */
    int block_part;          /* anthropic: SRV_PART_* of the open block */
    int tool_block;          /* anthropic: the tool call whose tool_use block is open, -1 */
    int n_blocks;
    srv_split split;
    srv_tool_stream calls;   /* the tool call deltas sent (chat: tool_calls; messages:
                              * tool_use blocks and input_json_delta) */
    struct srv_resp *resp;   /* /v1/responses: the response's fields, items, store flag */
    /* OpenAI's n > 1: choice `index`; choice 0's job holds the others' (n_more = n - 1,
     * each with its own request, whose lead is r, and its own streaming progress) */
    int index;
    int done;                /* stream: this choice's last chunk is out */
    int best_n;              /* completions' best_of: the n choices answered; 0: all */
    char *echo;              /* completions' echo (each prompt's choice 0's job): the
                              * prompt's text that every choice's text starts with; NULL:
                              * no echo. Owned */
    size_t echo_len;
    int echo_bos;            /* the prompt's first token is the BOS the server put before a
                              * text prompt: not in the echoed text (no bytes of it) */
    int token_ids;           /* completions' return_tokens_as_token_ids (vLLM's): logprobs
                              * name tokens "token_id:ID" (choice 0's job) */
    int prompt_lp;           /* vLLM's prompt_logprobs asked: 1 + its count (the best that
                              * many beside each prompt token); 0 not asked */
    srv_job *more;
    int n_more;
    int n_prompts;           /* completions' prompt list: choice 0's job holds 1 + n_more =
                              * n_prompts x (choices a prompt), prompt p's in order from
                              * p (1 + n_more) / n_prompts; 1 otherwise */
};

/* Writes the SSE text for everything new in j->r (call with j->r->mu held); *finished
 * = 1 once the last event ([DONE] / message_stop) is written. */
typedef void (*srv_stream_fn)(srv *s, srv_job *j, srv_buf *out, int *finished);
/* The complete JSON answer of a finished request (call with j->r->mu held); *status is
 * the HTTP status. */
typedef void (*srv_final_fn)(srv *s, srv_job *j, srv_buf *out, int *status);

void srv_job_free(srv_job *j);
/* Whether every choice of j has ended (call with j->r->mu held; takes the others' mu). */
int srv_job_ended(const srv_job *j);
void srv_resp_free(struct srv_resp *x);

#endif
