/* server.c — starting and stopping the server: HTTP listener, then tokenizer, engine and
 * scheduler for the caller's model; the follower ranks' side (dsv4_server.h). */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve/http.h"
#include "serve/srv.h"

/* The last path component of dir, without trailing slashes. */
static char *dir_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    return strndup(dir + b, n - b);
}

static int tokenize_script(srv *s, dsv4_err *err) {
    const dsv4_server_script *sc = s->o.script;
    if (!sc || sc->n <= 0) return DSV4_OK;
    s->script_ids = calloc((size_t)sc->n, sizeof *s->script_ids);
    s->script_len = calloc((size_t)sc->n, sizeof *s->script_len);
    if (!s->script_ids || !s->script_len) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    for (int i = 0; i < sc->n; i++) {
        dsv4_tok_ids ids = {0};
        int rc = dsv4_tokenize(s->tok, sc->text[i], strlen(sc->text[i]), &ids, err);
        if (rc) return rc;
        /* an empty text is a script too (EOS, or its error, right after the prefix), as the
         * data-parallel wire reads it: with no ids the request sampled freely, and an error's
         * step drew a token unshown whose held-back bytes (a partial UTF-8 sequence) the
         * failure then flushed as text */
        if (!ids.ids && !(ids.ids = malloc(sizeof(int32_t))))
            return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
        s->script_ids[i] = ids.ids;
        s->script_len[i] = (int)ids.n;
    }
    return DSV4_OK;
}

/* The engine options of a server: the same on every rank of a group (the ranks' engine
 * create compares them). */
static int engine_opts(const dsv4_server_opts *o, const dsv4_model *m, dsv4_engine_opts *eo,
                       dsv4_err *err) {
    const dsv4_model_info mi = dsv4_model_get_info(m);
    memset(eo, 0, sizeof *eo);
    eo->max_context = o->max_context;
    eo->max_seqs = o->max_seqs;
    eo->c_max = (int)(o->step_tokens < o->max_context ? o->step_tokens : o->max_context);
    /* a step is at most step_tokens rows in all (every decode row counts against it, and
     * step_tokens >= max_seqs), in spans of at most c_max rows each */
    eo->max_rows = o->step_tokens;
    eo->threads = o->threads;
    eo->pin_threads = o->pin_threads;
    eo->kv_dtype = o->kv_dtype;
    eo->fidelity = o->fidelity; /* with kv_dtype, in the ranks' options digest (engine/agree.c) */
    eo->fp4_layout = o->fp4_layout;
    eo->scratch_resident = 1; /* no request pays the arena's page faults */
    eo->cache_bytes = o->cache_bytes;
    eo->dist = o->dist;
    eo->parallel = o->parallel;
    /* data-parallel attention: the LM head sharded over the vocabulary (each rank reads
     * 1/K of it a step, every rank's rows in one pass), which the scheduler's calls fit:
     * every rank calls dsv4_lm_head_dist each step, with no rows too */
    if (o->parallel & DSV4_PAR_DP) eo->parallel |= DSV4_PAR_DP_HEAD;
    eo->prefix_entries = o->prefix_entries > 0 ? o->prefix_entries : 0;
    if (o->mtp > 0 && !mi.n_mtp) return srv_fail(err, DSV4_ERR_ARG, "serve: --mtp on: the model has no MTP block");
    eo->mtp = o->mtp == 0 ? mi.n_mtp > 0 : o->mtp > 0;
    if (eo->mtp) {
        /* verify spans are two rows per sequence; an MTP call holds a step's committed rows
         * plus each sequence's row that waited for its next token */
        const int main_rows = o->step_tokens > 2 * o->max_seqs ? o->step_tokens : 2 * o->max_seqs;
        eo->max_rows = main_rows + o->max_seqs;
    }
    return DSV4_OK;
}

/* Fills in the defaults and checks what cannot work. */
static int fill_opts(dsv4_server_opts *so, dsv4_err *err) {
    if (!so->host) so->host = "127.0.0.1";
    if (so->max_seqs <= 0) so->max_seqs = 16;
    if (so->max_context <= 0) so->max_context = 4096;
    /* with CP inside a DP group a long prompt's chunk is shared by the K ranks: K x 256
     * rows keep each rank's share of it at one process's 256 (and reach the 2 K granules a
     * CP prefill needs on Flash, G = 128); a cold 4K prompt on 2 ranks: 5.75 s at 256
     * without CP, 3.87 s at 512 with it (BENCHMARKS.md, session 41 cps) */
    const int k = (so->parallel & DSV4_PAR_CP) && so->dist ? dsv4_dist_size(so->dist) : 1;
    if (so->step_tokens <= 0) so->step_tokens = 256 * k;
    if (so->max_queue <= 0) so->max_queue = 256;
    if (!so->max_body) so->max_body = 8u << 20;
    if (so->max_connections <= 0) so->max_connections = 512;
    if (so->hangup_ms <= 0) so->hangup_ms = 100;
    if (!so->responses_bytes) so->responses_bytes = 64u << 20;
    if (so->step_tokens < so->max_seqs)
        return srv_fail(err, DSV4_ERR_ARG, "serve: step tokens (%d) must be at least max seqs (%d): "
                        "every running sequence decodes each step", so->step_tokens, so->max_seqs);
    if (so->prefix_entries < 0 && so->kv_dir)
        return srv_fail(err, DSV4_ERR_ARG, "serve: --kv-dir needs the prefix cache (--prefix-entries 0 "
                        "turns it off)");
    return dsv4_server_check_parallel(so->parallel, err);
}

int dsv4_server_check_parallel(int parallel, dsv4_err *err) {
    if ((parallel & DSV4_PAR_CP) && !(parallel & DSV4_PAR_DP))
        return srv_fail(err, DSV4_ERR_ARG, "serve: context parallelism is served only inside a "
                        "data-parallel group (--parallel ep --attention dp --cp on): a step of the "
                        "rank-0-home server mixes decode rows and prefill chunks in one call, while "
                        "a plain CP call needs one long prompt span alone");
    if (parallel & ~(DSV4_PAR_EP | DSV4_PAR_DP | DSV4_PAR_CP))
        return srv_fail(err, DSV4_ERR_ARG, "serve: unknown parallel mode %d", parallel);
    if ((parallel & DSV4_PAR_DP) && !(parallel & DSV4_PAR_EP))
        return srv_fail(err, DSV4_ERR_ARG, "serve: data-parallel attention needs --parallel ep");
    return DSV4_OK;
}

/* Data-parallel attention on a group of more than one rank (dp.h): o->dist then. */
static dsv4_dist *dp_group(const dsv4_server_opts *o) {
    return (o->parallel & DSV4_PAR_DP) && dsv4_dist_size(o->dist) > 1 ? o->dist : NULL;
}

/* The scheduler's options; under data-parallel attention each rank keeps its own KV
 * directory: rank 0 the directory given, rank r its subdirectory rank-R (one owner of each
 * directory's files and budget). path: room for it. */
static srv_sched_opts sched_opts(const dsv4_server_opts *o, const dsv4_engine_opts *eo, FILE *trace,
                                 srv_relay *relay, char *path, size_t path_n) {
    const char *kv = o->kv_dir;
    const int rank = dsv4_dist_rank(o->dist);
    if (kv && dp_group(o) && rank > 0) {
        snprintf(path, path_n, "%s/rank-%d", kv, rank);
        kv = path;
        mkdir(o->kv_dir, 0777);  /* its parent; an error shows at the subdirectory's create */
    }
    return (srv_sched_opts){.step_tokens = o->step_tokens, .c_max = eo->c_max, .max_seqs = o->max_seqs,
                            .max_context = o->max_context, .max_queue = o->max_queue,
                            .no_prefix_cache = o->prefix_entries < 0, .priority_sched = o->priority_sched, .kv_dir = kv,
                            .kv_dir_bytes = o->kv_dir_bytes, .relay = relay, .trace = trace,
                            .dp_group = dp_group(o), .test_key_fault = o->test_key_fault};
}

static int load_tokenizer(const dsv4_server_opts *o, dsv4_tokenizer **tok, dsv4_err *err) {
    char path[4200];
    if (o->tokenizer) snprintf(path, sizeof path, "%s", o->tokenizer);
    else snprintf(path, sizeof path, "%s/tokenizer.json", o->model_dir);
    int rc = dsv4_tokenizer_load(path, tok, err);
    /* structured output's vocabulary index (~0.1 s, ~5 MB at 129K ids): at load, on every
     * rank that samples, not in the first constrained request, whose build would stall
     * every stream's step or send */
    return rc ? rc : dsv4_json_vocab_prepare(*tok, err);
}

int dsv4_server_start(const dsv4_server_opts *o, dsv4_server **out, dsv4_err *err) {
    *out = NULL;
    if (!o->model_dir) return srv_fail(err, DSV4_ERR_ARG, "serve: no model directory");
    srv *s = calloc(1, sizeof *s);
    if (!s) return srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    s->o = *o;
    srv_metrics_init(&s->met);
    pthread_mutex_init(&s->mu, NULL);
    s->seed_state = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    if (getrandom(&s->id_salt, sizeof s->id_salt, 0) != (ssize_t)sizeof s->id_salt)
        s->id_salt = s->seed_state ^ 0x5bd1e9955bd1e995ull;
    s->started = srv_unix_time();
    s->model_name = s->o.model_name ? strdup(s->o.model_name) : dir_name(s->o.model_dir);
    int rc = fill_opts(&s->o, err);
    if (!rc) s->rstore = srv_rstore_create(s->o.responses_bytes);
    if (!rc && (!s->model_name || !s->rstore)) rc = srv_fail(err, DSV4_ERR_NOMEM, "serve: out of memory");
    if (rc) goto fail;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai = NULL;
    if (getaddrinfo(s->o.host, port, &hints, &ai) || !ai) {
        rc = srv_fail(err, DSV4_ERR_ARG, "serve: cannot resolve host '%s'", s->o.host);
        goto fail;
    }
    rc = srv_http_start(s, ai->ai_addr, err);  /* /health answers "loading" from now on */
    freeaddrinfo(ai);
    if (rc) goto fail;
    *out = s;
    return DSV4_OK;
fail:
    dsv4_server_stop(s, 0, NULL);
    return rc;
}

int dsv4_server_load(dsv4_server *s, const dsv4_model *m, dsv4_err *err) {
    const dsv4_server_opts *o = &s->o;
    if (s->m) return srv_fail(err, DSV4_ERR_STATE, "serve: a model is loaded already");
    char path[4200];
    int rc;
    s->m = m;
    /* before the engine (collective): a malformed file fails the start here */
    if (!o->no_generation_config && (rc = dsv4_model_gen_config(m, &s->gc, err))) return rc;
    dsv4_engine_opts eo;
    if ((rc = engine_opts(o, m, &eo, err))) return rc;
    /* the engine first: its create is collective with the followers' */
    if ((rc = dsv4_engine_create(m, &eo, &s->e, err))) return rc;
    /* rank-0-home: the engine calls go to the followers; data-parallel attention: every
     * rank makes its own (dp.h) */
    if ((rc = srv_relay_create(s->e, o->parallel && !dp_group(o) ? o->dist : NULL, &s->relay, err))) return rc;
    if ((rc = load_tokenizer(o, &s->tok, err))) return rc;
    dsv4_model_info mi = dsv4_model_get_info(m);
    s->V = mi.vocab_size;
    s->bos = mi.bos_token_id;
    s->eos = mi.eos_token_id;
    if ((rc = tokenize_script(s, err))) return rc;
    if (o->trace_steps && !(s->trace = fopen(o->trace_steps, "w")))
        return srv_fail(err, DSV4_ERR_IO, "serve: --trace-steps %s: %s", o->trace_steps, strerror(errno));
    const srv_sched_opts so = sched_opts(o, &eo, s->trace, s->relay, path, sizeof path);
    if ((rc = srv_sched_start(s->e, s->m, s->tok, &so, &s->met, &s->sched, err))) return rc;
    atomic_store(&s->ready, 1);
    return DSV4_OK;
}

/* A follower under data-parallel attention: its own scheduler (no thread, no HTTP) runs
 * the requests rank 0 places here, step by step with the group (dp.h). */
static int follow_dp(const dsv4_server_opts *o, const dsv4_engine_opts *eo, const dsv4_model *m,
                     dsv4_engine *e, dsv4_err *err) {
    char path[4200];
    dsv4_tokenizer *tok = NULL;
    srv_sched *sched = NULL;
    srv_relay *relay = NULL;
    srv_metrics met;
    srv_metrics_init(&met);
    int rc = load_tokenizer(o, &tok, err);
    if (!rc) rc = srv_relay_create(e, NULL, &relay, err);
    if (!rc) {
        const srv_sched_opts so = sched_opts(o, eo, NULL, relay, path, sizeof path);
        rc = srv_sched_create(e, m, tok, &so, &met, &sched, err);
    }
    if (!rc) rc = srv_sched_follow(sched, err);
    srv_sched_free(sched);
    srv_relay_free(relay);
    dsv4_tokenizer_free(tok);
    srv_metrics_destroy(&met);
    return rc;
}

int dsv4_server_follow(const dsv4_server_opts *o, const dsv4_model *m, dsv4_err *err) {
    dsv4_server_opts so = *o;
    dsv4_engine_opts eo;
    dsv4_engine *e = NULL;
    /* the same options as rank 0's: when they fail here they failed there too */
    int rc = fill_opts(&so, err);
    if (!rc) rc = engine_opts(&so, m, &eo, err);
    if (!rc) rc = dsv4_engine_create(m, &eo, &e, err);
    if (rc) return rc;
    rc = dp_group(&so) ? follow_dp(&so, &eo, m, e, err) : srv_follow(e, so.dist, err);
    dsv4_engine_free(e);
    return rc;
}

int dsv4_server_port(const dsv4_server *s) { return s->port; }

int dsv4_server_stop(dsv4_server *s, double grace_s, dsv4_err *err) {
    if (!s) return DSV4_OK;
    srv_http_quiesce(s);
    srv_sched_stop(s->sched, grace_s);  /* every request ends: streams finish, waits return */
    srv_rstore_stop(s->rstore);  /* background responses' ends written: the streams following them end */
    /* the scheduler thread is gone: this thread makes the group's last call */
    dsv4_err mine = {0};
    int rc = srv_relay_stop(s->relay, &mine);
    if (!rc) rc = srv_sched_group_stopped(s->sched, &mine);
    srv_http_stop(s);
    srv_rstore_stop(s->rstore);  /* (a run the intake handed over late: its end written before the engine goes) */
    srv_sched_free(s->sched);
    if (s->trace) fclose(s->trace);
    for (int i = 0; s->script_ids && i < s->o.script->n; i++) free(s->script_ids[i]);
    free(s->script_ids);
    free(s->script_len);
    srv_relay_free(s->relay);
    dsv4_engine_free(s->e);
    dsv4_tokenizer_free(s->tok);
    srv_metrics_destroy(&s->met);
    srv_rstore_free(s->rstore);
    pthread_mutex_destroy(&s->mu);
    free(s->model_name);
    free(s);
    if (rc && err) *err = mine;
    return rc;
}
