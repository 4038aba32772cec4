/* server.h — `dsv4 serve`: an OpenAI- and Anthropic-compatible HTTP server with continuous
 * batching over one engine. The CLI (tools/dsv4/cmd_serve.c) parses options into
 * dsv4_server_opts and calls these; nothing else of serve/ is visible to it. */
#ifndef DSV4_SERVE_SERVER_H
#define DSV4_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

/* Test-only: scripted answers. A request whose prompt text contains match[i] produces
 * exactly text[i] (then EOS) instead of sampling, so tests exercise tool calls and
 * reasoning on random weights. */
typedef struct dsv4_server_script {
    int n;
    const char *const *match;  /* (n) */
    const char *const *text;   /* (n) */
} dsv4_server_script;

typedef struct dsv4_server_opts {
    const char *model_dir;
    const char *tokenizer;     /* NULL = model_dir/tokenizer.json */
    const char *model_name;    /* reported id; NULL = the directory's last component */
    const char *host;          /* NULL = 127.0.0.1 */
    int port;                  /* 0 = any free port (see dsv4_server_port) */
    const char *api_key;       /* NULL = no authentication */
    int max_seqs;              /* concurrent sequences; 0 = 16 */
    int64_t max_context;       /* 0 = 4096 */
    int step_tokens;           /* rows per step; 0 = 256 */
    int threads;               /* 0 = all cores */
    int pin_threads;           /* dsv4_engine_opts.pin_threads */
    uint64_t cache_bytes;      /* pool budget; 0 = enough for max_seqs x max_context */
    int max_queue;             /* requests waiting beyond max_seqs; 0 = 256 */
    size_t max_body;           /* request body limit in bytes; 0 = 8 MiB */
    int max_connections;       /* 0 = 512 */
    int mtp;                   /* MTP speculative decoding: 1 on, -1 off, 0 = on when the
                                * checkpoint has an MTP block */
    const char *kv_dir;        /* prefix snapshots on disk across restarts; NULL = memory only */
    uint64_t kv_dir_bytes;     /* its byte budget (LRU); 0 = unlimited */
    const dsv4_server_script *script;  /* test-only, NULL normally */
} dsv4_server_opts;

typedef struct srv dsv4_server;

/* Loads model and tokenizer, creates the engine and starts serving (HTTP threads and
 * the scheduler run in the background). Errors: the model's, DSV4_ERR_IO when the
 * address cannot be bound. */
int dsv4_server_start(const dsv4_server_opts *o, dsv4_server **out, dsv4_err *err);
/* The port it listens on. */
int dsv4_server_port(const dsv4_server *s);
/* Stops accepting, lets running requests finish for up to grace_s seconds, cancels the
 * rest, closes every connection and frees everything. */
void dsv4_server_stop(dsv4_server *s, double grace_s);

#endif
