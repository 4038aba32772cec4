/* dsv4_server.h — `dsv4 serve`: an OpenAI- and Anthropic-compatible HTTP server with
 * continuous batching over one engine (serve/, the dsv4_serve library the CLI links; it is
 * not part of libdsv4 and not installed). The CLI opens the model and calls these.
 *
 * Start-up is two steps so that /health answers while the weights are read:
 *   dsv4_server_start   binds the address; /health says 503 {"status":"loading"} and the
 *                       API routes answer 503 until
 *   dsv4_server_load    the model the caller opened (and warmed up) is served: tokenizer,
 *                       engine, scheduler; /health says 200 {"status":"ok"}.
 *
 * Under MPI (opts.parallel = DSV4_PAR_EP, opts.dist with more than one rank) rank 0 runs
 * the server and the scheduler; every other rank calls dsv4_server_follow, which creates
 * the same engine and replays rank 0's engine calls, step by step, until rank 0's server
 * stops. With DSV4_PAR_EP | DSV4_PAR_DP (data-parallel attention, serve/dp.h) every rank
 * runs a scheduler of its own over the requests rank 0 places on it (their attention,
 * head, sampling and prefix cache) and rank 0 streams what each reports. Every rank passes
 * the same options.
 */
#ifndef DSV4_SERVER_H
#define DSV4_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Test-only: scripted answers. A request whose prompt text contains match[i] produces
 * exactly text[i] (then EOS) instead of sampling, so tests exercise tool calls and
 * reasoning on random weights. error[i] (error NULL, or an entry NULL: none): after
 * text[i] the request fails with that message as an engine error would end it (a
 * failure mid-answer on demand; one process only). */
typedef struct dsv4_server_script {
    int n;
    const char *const *match;  /* (n) */
    const char *const *text;   /* (n) */
    const char *const *error;  /* (n) or NULL */
} dsv4_server_script;

typedef struct dsv4_server_opts {
    const char *model_dir;     /* where tokenizer.json and the reported name come from */
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
    int kv_dtype;              /* dsv4_engine_opts.kv_dtype (| DSV4_KV_IDX_FP4 only with F3) */
    unsigned fidelity;         /* dsv4_engine_opts.fidelity: the official model's roundings
                                * (DSV4_FID_*, spec/model.md §6); 0 = none */
    int fp4_layout;            /* dsv4_engine_opts.fp4_layout */
    uint64_t cache_bytes;      /* pool budget; 0 = enough for max_seqs x max_context */
    int max_queue;             /* requests waiting beyond max_seqs; 0 = 256 */
    int priority_sched;        /* 1: requests' `priority` (lower first, vLLM's convention)
                                * orders admission and picks whom a preemption takes; 0 =
                                * first come, first served (a priority other than 0 is a 400) */
    int no_generation_config;  /* 1: ignore the model's generation_config.json; 0: its
                                * sampling fields (dsv4_gen_config) are the defaults of the
                                * requests that omit them, and its max_new_tokens caps every
                                * request's max_tokens (vLLM's --generation-config auto); a
                                * malformed file then fails dsv4_server_load */
    size_t max_body;           /* request body limit in bytes; 0 = 8 MiB */
    int max_connections;       /* 0 = 512 */
    int mtp;                   /* MTP speculative decoding: 1 on, -1 off, 0 = on when the
                                * checkpoint has an MTP block */
    int prefix_entries;        /* snapshots the prefix cache keeps in memory (LRU); 0 = 64,
                                * < 0 = no prefix cache (every request starts cold) */
    const char *kv_dir;        /* prefix snapshots on disk across restarts; NULL = memory only
                                * (also under parallel: rank 0 keeps the cache and the files;
                                * with DSV4_PAR_DP rank r > 0 keeps its own in kv_dir/rank-r) */
    uint64_t kv_dir_bytes;     /* its byte budget (LRU); 0 = unlimited */
    dsv4_dist *dist;           /* process group, NULL = one process */
    int parallel;              /* 0, or DSV4_PAR_EP with dist, | DSV4_PAR_DP for data-parallel
                                * attention, | DSV4_PAR_CP (with DP only) for each rank's long
                                * prefill chunks as CP prefills over the group (dsv4.h) */
    const char *trace_steps;   /* one JSON line per engine step (rows, seconds per phase) to
                                * this file; NULL = none */
    int hangup_ms;             /* how often the server looks whether the clients of the
                                * connections waiting for their requests' news hung up (a
                                * token wakes its connection at once); 0 = 100 */
    uint64_t responses_bytes;  /* byte budget of the stored /v1/responses (their items, for
                                * previous_response_id and GET; least recently used dropped
                                * first); 0 = 64 MiB */
    const dsv4_server_script *script;  /* test-only, NULL normally */
    int test_key_fault;        /* test-only: under DSV4_PAR_DP rank 0 fails to apply the first
                                * change of each other rank's prefix keys (as when out of
                                * memory), to be healed by a RESEND; 0 normally */
} dsv4_server_opts;

typedef struct dsv4_server dsv4_server;

/* DSV4_ERR_ARG with the reason when the server cannot run with `parallel` (DSV4_PAR_*):
 * context parallelism only with DSV4_PAR_EP | DSV4_PAR_DP (there the engine runs a rank's
 * long span as a CP prefill inside the step's call; a plain CP call needs one long prompt
 * span alone, which a step of mixed decode rows and prefill chunks does not have). */
int dsv4_server_check_parallel(int parallel, dsv4_err *err);

/* Binds the address and starts the HTTP threads; nothing is served until
 * dsv4_server_load. Errors: DSV4_ERR_ARG (bad options), DSV4_ERR_IO (cannot bind). */
int dsv4_server_start(const dsv4_server_opts *o, dsv4_server **out, dsv4_err *err);
/* Serves model m (the caller's: it must outlive the server): loads the tokenizer, creates
 * the engine (collective with dsv4_server_follow on the other ranks of a group) and starts
 * the scheduler. On failure the server keeps answering 503 until stopped. */
int dsv4_server_load(dsv4_server *s, const dsv4_model *m, dsv4_err *err);
/* The port it listens on. */
int dsv4_server_port(const dsv4_server *s);
/* Stops accepting, lets running requests finish for up to grace_s seconds, cancels the
 * rest, tells the follower ranks to stop, closes every connection and frees everything
 * (not the model). Returns 0, or the error of the stop message to the followers (then end
 * the job with dsv4_dist_abort: they may still wait); err may be NULL. */
int dsv4_server_stop(dsv4_server *s, double grace_s, dsv4_err *err);

/* On a rank other than 0 of o->dist: creates the engine rank 0's dsv4_server_load creates
 * and replays every engine call rank 0's scheduler makes, waiting between steps without
 * a deadline, until rank 0 stops. Returns 0 then, or the error that ended it (the group
 * is then unusable: end the job with dsv4_dist_abort). */
int dsv4_server_follow(const dsv4_server_opts *o, const dsv4_model *m, dsv4_err *err);

#ifdef __cplusplus
}
#endif
#endif
