/* dsv4.h — public API of the dsv4 inference engine for DeepSeek-V4 (Flash family).
 *
 * A dsv4_model is the read-only checkpoint (config + mmap'd weights), shareable between
 * engines. A dsv4_engine owns the paged caches, scratch buffers and threads for serving
 * sequences of one model. The forward returns hidden states (final RMSNorm output); the LM
 * head is a separate call, so the serving side decides which rows need logits.
 * Tokenizer, chat template, sampling and generation are in dsv4_text.h.
 *
 * Every call that can fail returns 0 on success or a DSV4_ERR_* code, and fills the
 * caller's dsv4_err with a message. The library never exits or aborts, and holds no global
 * mutable state.
 *
 * Threading and ownership
 *   - A model is immutable once open: any number of threads and engines may use it at
 *     once. It must outlive every engine (and tokenizer-side object) made from it;
 *     dsv4_model_close while one is alive is undefined.
 *   - An engine is used by one thread at a time (calls on one engine are not synchronised;
 *     serialise them, e.g. one scheduler thread per engine). Distinct engines may run
 *     concurrently. Each engine owns its own worker threads (opts.threads) and joins them
 *     in dsv4_engine_free; callers never see them. The calling thread runs a share of
 *     every forward's kernel tasks on its own stack, and kernels keep working buffers there
 *     (the FP4 GEMV 32 KB): call from a thread with an ordinary stack (glibc's default is
 *     the 8 MB of `ulimit -s`), not from one created with a few tens of KB.
 *   - Hooks (dsv4_engine_set_trace, _set_choice_trace) run on the thread that called the
 *     forward, during that call, and must not call back into the same engine.
 *   - Strings the library returns belong to the object they came from and stay valid
 *     until it is freed (dsv4_model_warnings: until dsv4_model_close); dsv4_strerror and
 *     dsv4_version return static strings. Buffers passed in are the caller's: the library
 *     reads or fills them during the call and keeps no pointer to them, except the hook
 *     user pointers and opts.dist, which must outlive the engine.
 *   - dsv4_dist_init / _finalize wrap MPI_Init_thread / MPI_Finalize: once per process,
 *     on the main thread. The group's collectives (engine calls on a grouped engine,
 *     dsv4_dist_bcast) may run on another thread, one thread at a time
 *     (MPI_THREAD_SERIALIZED): a server's scheduler thread makes them.
 */
#ifndef DSV4_H
#define DSV4_H

#include <stddef.h>
#include <stdint.h>

/* The version of these headers; dsv4_version() gives the library's (they differ only when
 * a program runs against another build of the shared library). CMake checks that these
 * match project(VERSION). */
#define DSV4_VERSION_MAJOR 0
#define DSV4_VERSION_MINOR 3
#define DSV4_VERSION_PATCH 0
#define DSV4_VERSION_STRING "0.3.0"

/* Marks the public API: the shared library is built with hidden visibility and exports
 * exactly the declarations carrying DSV4_API. */
#ifndef DSV4_API
#if defined(__GNUC__) || defined(__clang__)
#define DSV4_API __attribute__((visibility("default")))
#else
#define DSV4_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library this program runs against. */
DSV4_API const char *dsv4_version(void);

/* ---- errors ------------------------------------------------------------------------- */

enum {
    DSV4_OK = 0,
    DSV4_ERR_IO,          /* file missing, unreadable, mmap failed */
    DSV4_ERR_FORMAT,      /* malformed file: safetensors, JSON, tokenizer */
    DSV4_ERR_CONFIG,      /* config.json invalid or unsupported */
    DSV4_ERR_ARG,         /* bad argument from the caller */
    DSV4_ERR_CACHE_FULL,  /* no free pages or sequence slots */
    DSV4_ERR_NOMEM,       /* allocation failed */
    DSV4_ERR_UNSUPPORTED, /* valid but not supported by this build */
    DSV4_ERR_STATE,       /* call not allowed in the object's current state */
    DSV4_ERR_NUMERIC,     /* the computation produced NaN or Inf (bad weights or inputs) */
};

typedef struct dsv4_err {
    int code;
    char msg[1024];
} dsv4_err;

/* Name of an error code ("cache full", ...). */
DSV4_API const char *dsv4_strerror(int code);

/* ---- model -------------------------------------------------------------------------- */

typedef struct dsv4_model dsv4_model;

typedef struct dsv4_model_info {
    int vocab_size;     /* V */
    int hidden_size;    /* D */
    int hc_mult;        /* hc: hyper-connection streams */
    int n_layers;       /* main blocks */
    int n_mtp;          /* MTP blocks (0 or 1) */
    int bos_token_id, eos_token_id;
    int64_t max_position_embeddings;
    int n_experts_per_tok;  /* K: routed experts per token */
    int index_topk;         /* CSA entries selected per query */
} dsv4_model_info;

/* Opens a model directory: config.json + model.safetensors or model.safetensors.index.json
 * with shards. Weights are mmap'd and stay in their checkpoint format. */
DSV4_API int dsv4_model_open(const char *dir, dsv4_model **out, dsv4_err *err);
DSV4_API void dsv4_model_close(dsv4_model *m);
DSV4_API dsv4_model_info dsv4_model_get_info(const dsv4_model *m);
/* What loading noticed but accepted (unexpected extra tensors, scale bytes outside
 * [3, 246], missing MTP ratios, ...), one per line; "" when there is nothing. */
DSV4_API const char *dsv4_model_warnings(const dsv4_model *m);

/* The sampling defaults the checkpoint's generation_config.json (Hugging Face's file beside
 * config.json) recommends: the fields vLLM's `--generation-config auto` applies to requests
 * that omit them, and the ids that end generation besides the model's EOS. `has` holds a
 * DSV4_GENCFG_* bit for each field the file gives (JSON null counts as absent). Values as in
 * the file: top_p 1 and top_k 0 or -1 mean off. */
enum {
    DSV4_GENCFG_TEMPERATURE = 1 << 0,
    DSV4_GENCFG_TOP_P = 1 << 1,
    DSV4_GENCFG_TOP_K = 1 << 2,
    DSV4_GENCFG_MIN_P = 1 << 3,
    DSV4_GENCFG_REPETITION_PENALTY = 1 << 4,
    DSV4_GENCFG_MAX_NEW_TOKENS = 1 << 5,
    DSV4_GENCFG_EOS_TOKEN_ID = 1 << 6,
};
/* the most ids an eos_token_id list may hold */
#define DSV4_GENCFG_MAX_EOS 16
typedef struct dsv4_gen_config {
    unsigned has;               /* DSV4_GENCFG_* */
    double temperature;         /* [0, 2] */
    double top_p;               /* (0, 1] */
    int top_k;                  /* -1 or more */
    double min_p;               /* [0, 1] */
    double repetition_penalty;  /* (0, 10] */
    int max_new_tokens;         /* 1 or more: vLLM caps every request's max_tokens by it */
    int n_eos;                  /* eos_token_id: an id or a list of ids (each in [0, the
                                 * vocabulary)), every one of which ends generation in
                                 * transformers and vLLM (the model's EOS among them or not) */
    int32_t eos_token_id[DSV4_GENCFG_MAX_EOS];
} dsv4_gen_config;
/* The model directory's generation_config.json, read at dsv4_model_open: 0 with *out (has
 * = 0 when there is no file or it gives none of the fields), or DSV4_ERR_CONFIG naming the
 * file and the field when it is malformed (a JSON syntax error, a field of the wrong type or
 * outside the range above, an eos_token_id that is not a token of the model's vocabulary).
 * dsv4_model_open itself does not fail on it: a caller that does not use the defaults still
 * opens the model. */
DSV4_API int dsv4_model_gen_config(const dsv4_model *m, dsv4_gen_config *out, dsv4_err *err);

/* Weights fingerprint (serving.md §g): SHA-256 over config.json, every shard's size and
 * safetensors header, and a 64 KiB sample every 1 GiB of each shard's tensor data (full = 0:
 * cheap, about 10 MiB read for the release; it misses a change outside the samples), or
 * every byte of tensor data (full = 1: reads the whole checkpoint). The two modes give
 * different values. KV files carry it; MPI ranks compare it at engine create. */
DSV4_API int dsv4_model_fingerprint(const dsv4_model *m, int full, uint8_t out[32], dsv4_err *err);
/* SHA-256 of the canonical math-relevant config fields (sizes, ratios, rope, routing, hc,
 * norms' eps; not token ids, max_position_embeddings or quantization_config): equal for two
 * config.json files that compute the same function, whatever their formatting. */
DSV4_API int dsv4_model_config_hash(const dsv4_model *m, uint8_t out[32], dsv4_err *err);

/* Progress of a long operation: done of total bytes (called from the caller's thread). */
typedef void (*dsv4_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Reads every weight page once, on `threads` threads (0 = dsv4_available_cores()), so the
 * first tokens do not wait for the disk: the weights are mmap'd and otherwise page in as
 * the model first touches them. With expert parallelism pass this process's rank and the
 * rank count: it then reads only the routed experts it owns (and every dense weight); 0, 1
 * reads everything. progress (may be NULL) is called about five times a second. */
DSV4_API int dsv4_model_warmup(const dsv4_model *m, int threads, int rank, int n_ranks,
                               dsv4_progress_fn progress, void *user, dsv4_err *err);
/* Pins the same weights in memory (mlock), so the system never pages them out. Needs a
 * locked-memory limit as large as the weights (ulimit -l) or CAP_IPC_LOCK. */
DSV4_API int dsv4_model_mlock(const dsv4_model *m, int rank, int n_ranks, dsv4_err *err);

/* ---- machine ------------------------------------------------------------------------ */

/* The cores this process may use: the CPU affinity mask (what taskset and container
 * cpusets set), capped by a cgroup CPU quota (cpu.max, or cpu.cfs_quota_us under cgroup
 * v1) rounded up; at least 1. The engine's default thread count (threads = 0). */
DSV4_API int dsv4_available_cores(void);

/* This machine's memory in bytes: MemTotal, or the container's cgroup memory limit when
 * that is lower; 0 if unknown. */
DSV4_API uint64_t dsv4_machine_ram_bytes(void);

/* ---- distribution (MPI) ------------------------------------------------------------- */

/* A process group for context-parallel prefill and expert-parallel MoE. Without MPI (or
 * with one rank) it has size 1 and everything runs locally. */
typedef struct dsv4_dist dsv4_dist;

/* DSV4_PAR_DP (only with DSV4_PAR_EP): data-parallel attention (serving.md
 * §d). Every rank is the home rank of its own sequences: it creates them, holds their
 * caches and calls dsv4_forward / dsv4_mtp_forward with its own spans (any number, zero
 * included); only the MoE sub-blocks exchange rows. The ranks still make the same sequence
 * of forward and MTP calls (one each per step, a rank without rows passes none), and a
 * refusal on any rank (bad spans, a full cache) is the same clean error on every rank with
 * nothing changed anywhere. Each rank's outputs are bitwise what one process computes for
 * its spans; a non-finite output (DSV4_ERR_NUMERIC, found after the compute) fails the call
 * only on the rank whose rows it is, and breaks only that rank's sequences of the call.
 * DSV4_PAR_DP | DSV4_PAR_CP: in every dsv4_forward, each rank's longest non-speculative
 * span that touches at least 2 granules per rank (cp_granule; the first of equals) runs as
 * a context-parallel prefill over the whole group with that rank as its home, before the
 * rest of the call runs as above: the caller sees no difference (the same outputs, bitwise,
 * in the same places, the cache on the home rank), only a long chunk spread over every
 * rank's cores. The call's agreement carries each rank's CP span (one gather, as without
 * CP); the CP prefills run in rank order, then the other spans. MTP calls are unchanged.
 * Without DP, rank 0 is the home rank of every sequence and the others idle.
 * DSV4_PAR_DP_HEAD (only with DSV4_PAR_DP): the LM head of a DP group sharded over the
 * vocabulary: each rank reads 1/K of the head a call for every rank's rows instead of the
 * whole head for its own (dsv4_lm_head_dist / _argmax: collective then; see there). */
enum { DSV4_PAR_NONE = 0, DSV4_PAR_CP = 1, DSV4_PAR_EP = 2, DSV4_PAR_DP = 4, DSV4_PAR_DP_HEAD = 8 };

/* Initialises MPI (MPI_Init_thread) if this build has it and wraps MPI_COMM_WORLD. */
DSV4_API int dsv4_dist_init(int *argc, char ***argv, dsv4_dist **out, dsv4_err *err);
/* MPI_Finalize (when dsv4_dist_init initialised MPI) and frees d. */
DSV4_API void dsv4_dist_finalize(dsv4_dist *d);
DSV4_API int dsv4_dist_rank(const dsv4_dist *d);
DSV4_API int dsv4_dist_size(const dsv4_dist *d);
/* 1 when this build has MPI. */
DSV4_API int dsv4_dist_available(void);
/* Peer timeout: within a call, a collective that has not completed after `seconds`
 * (default 300; 0 = wait forever) fails on the ranks that wait, naming the ranks that did
 * not answer (stopped, deadlocked, or far behind). Time between calls is never limited:
 * ranks of an idle server may wait for the next step indefinitely. After a timeout the
 * group is unusable (the pending operation cannot be cancelled): end the job with
 * dsv4_dist_abort. Every rank should set the same value. */
DSV4_API int dsv4_dist_set_timeout(dsv4_dist *d, double seconds, dsv4_err *err);
/* Ends every rank (MPI_Abort) after a failure on one of them, so none hangs in a
 * collective; in a single process it returns and the caller exits normally. */
DSV4_API void dsv4_dist_abort(dsv4_dist *d, int status);
/* How the group's last agreement ended on this rank. An agreement is the check every rank
 * makes before a collective call (a forward, an MTP forward, a sharded head) computes; when
 * a rank's status fails it, every rank returns an error and nothing changed anywhere.
 * DSV4_DIST_PASSED: no rank's status refused it (it passed, or failed otherwise: ranks that
 * disagree, a broken group, a timed-out exchange);
 * DSV4_DIST_REFUSED_HERE: this rank's own status refused it; DSV4_DIST_REFUSED_ELSEWHERE:
 * only other ranks refused it, so this rank may make the same call again as it is. */
enum { DSV4_DIST_PASSED = 0, DSV4_DIST_REFUSED_HERE = 1, DSV4_DIST_REFUSED_ELSEWHERE = 2 };
DSV4_API int dsv4_dist_last_refusal(const dsv4_dist *d);
/* Broadcasts n bytes of buf from rank 0 to every rank (every rank passes the same n; a
 * no-op with one rank). wait_forever = 0: the peer timeout applies; 1: no deadline, for a
 * rank that waits between calls for the next one (a served model's followers wait for the
 * next step while the server is idle); the waiting rank sleeps between polls instead of
 * spinning. Like every collective it is made by one thread of each rank at a time. */
DSV4_API int dsv4_dist_bcast(dsv4_dist *d, void *buf, size_t n, int wait_forever, dsv4_err *err);
/* Every rank's n bytes (the same n everywhere) to every rank: all [size, n], rank r's at
 * r * n (with one rank: mine copied). Under the peer timeout. */
DSV4_API int dsv4_dist_allgather(dsv4_dist *d, const void *mine, size_t n, void *all, dsv4_err *err);
/* Each rank's n bytes to rank 0, packed in rank order into all; counts[r] (read on rank 0
 * only, counts[0] = n there) is rank r's n, which rank 0 knows beforehand (e.g. from a
 * dsv4_dist_allgather of the sizes). Under the peer timeout. */
DSV4_API int dsv4_dist_gatherv(dsv4_dist *d, const void *mine, size_t n, void *all, const size_t *counts,
                               dsv4_err *err);

/* ---- engine ------------------------------------------------------------------------- */

typedef struct dsv4_engine dsv4_engine;

typedef struct dsv4_engine_opts {
    int64_t max_context;   /* longest sequence; 0 = 4096 */
    int max_seqs;          /* live sequences; 0 = 4 */
    int c_max;             /* most rows of one span; 0 = 2048 */
    int max_rows;          /* most rows of one call, all its spans together (a server's step
                            * budget); sizes the scratch arena made at create, so no call
                            * allocates. 0 = max_seqs x c_max */
    int mtp;               /* 1: keep MTP caches (D_max = 1) */
    int threads;           /* worker threads; 0 = dsv4_available_cores() */
    uint64_t cache_bytes;  /* byte budget for compressed pools; 0 = enough for max_seqs x max_context */
    int block;             /* B: compressed block size in positions; 0 = lcm(ratios) */
    int win_block;         /* B_w: window page size in positions; 0 = 64 */
    int reference;         /* 1: portable scalar kernels only (no SIMD) */
    dsv4_dist *dist;       /* process group, NULL = single process */
    int parallel;          /* DSV4_PAR_CP | DSV4_PAR_EP; every rank makes the same calls
                            * (with DSV4_PAR_EP | DSV4_PAR_DP, CP or not: calls of the same
                            * kind, each rank with its own spans) */
    int ep_wave;           /* EP: rows per rank per exchange wave (T_w); 0 = min(256, rows of
                            * the largest call); larger calls run several waves */
    int cp_granule;        /* CP: granule G in positions (serving.md §c); 0 = the smallest
                            * multiple of every compress ratio that is >= window - 1 */
    int w8a8;              /* P2 W8A8 fast path (serving.md §f): INT8 per-channel weight copies
                            * made at create, INT8 per-token activations. 0 = off; 1 = wq_b,
                            * wo_b, indexer wq_b, shared/routed experts, MTP e_proj/h_proj;
                            * 2 = also wq_a, wkv, wo_a */
    unsigned fidelity;     /* P3 fidelity mode (spec/model.md §6, serving.md §f): DSV4_FID_*
                            * bits, each item switchable; 0 = the exact path, bitwise unchanged.
                            * Not with w8a8 (an error at create). */
    int prefix_entries;    /* most snapshots the prefix cache keeps (LRU); 0 = 64 */
    int verify_weights;    /* with a process group: 0 = ranks compare the sampled weights
                            * fingerprint at create (cheap; misses a difference outside the
                            * samples), 1 = a hash of every weight byte (reads the whole
                            * checkpoint). Ranks always compare the config, the options and
                            * the kernel level too; a mismatch fails create on every rank. */
    dsv4_progress_fn progress; /* progress of create's slow part, the W8A8 weight copies (INT8
                                * bytes written of all; minutes at Flash size), from the
                                * caller's thread; NULL = none. Not compared across ranks. */
    void *progress_user;
    int kv_dtype;          /* storage of the cached KV rows (serving.md §a.1): DSV4_KV_*;
                            * 0 = DSV4_KV_DEFAULT. Rows are rounded to it where they are
                            * produced, so every schedule still gives the same bits. */
    int pin_threads;       /* 1: pin worker thread i to the i-th CPU of the creating thread's
                            * affinity mask (CPU 0 of it left to the thread that calls the
                            * engine, whose own affinity is not changed); 0 = let the OS place
                            * them. Results are the same either way. */
    int numa;              /* NUMA placement: DSV4_NUMA_*; 0 = DSV4_NUMA_AUTO. Results are the
                            * same either way; dsv4_engine_get_opts gives what was done. */
    int fp4_layout;        /* in-memory layout of the packed FP4 weights (the routed experts):
                            * DSV4_FP4_*; 0 = DSV4_FP4_AUTO. Results are the same bits either
                            * way; dsv4_engine_get_opts gives what was done. */
    int scratch_resident;  /* 1: the scratch arena in 2 MB pages, every page written at create
                            * (on the engine's threads): no call pays its page faults, and its
                            * whole size (dsv4_mem_fit's scratch_bytes) is resident from create.
                            * 0: lazy 4 KB pages, resident as calls first touch them (a
                            * 2048-row chunk of flash_quarter touched 275 MB of its 1.63 GB).
                            * A server's choice (dsv4 serve and bench set it); same bits. */
} dsv4_engine_opts;

/* NUMA placement of the weights (dsv4_engine_opts.numa), for machines whose memory is in
 * several nodes (multi-socket servers, EPYC in NPS2/4 mode):
 *   AUTO        INTERLEAVE when the process may allocate on more than one node, else NONE
 *   NONE        the kernel's default: a page on the node of the thread that first reads it
 *   INTERLEAVE  the weights' pages spread round-robin over the nodes (mbind MPOL_INTERLEAVE,
 *               pages already read moved now), and the workers' own allocations and page
 *               faults interleaved too: every memory controller serves the GEMV stream.
 *               Read the weights after create, or warm them up before it (pages mapped
 *               by another process too are not moved).
 * On one node (or a build without libnuma) every mode is NONE, and get_opts says so. */
enum {
    DSV4_NUMA_AUTO = 0,
    DSV4_NUMA_NONE = 1,
    DSV4_NUMA_INTERLEAVE = 2,
};
/* "auto", "none" or "interleave" -> DSV4_NUMA_*; DSV4_ERR_ARG with a message otherwise. */
DSV4_API int dsv4_numa_parse(const char *s, int *mode, dsv4_err *err);
/* The name of a DSV4_NUMA_* value, "?" when unknown. */
DSV4_API const char *dsv4_numa_name(int mode);
/* Memory nodes this process may allocate on (1 without NUMA support in kernel or build). */
DSV4_API int dsv4_numa_nodes(void);

/* Where the weights sit in memory (dsv4_engine_opts.fp4_layout, the CLI's --weights-memory;
 * both named for the packed FP4 (e2m1) experts, which it first moved; the C names stay):
 *   AUTO     a copy when the copy, the cache and scratch and a headroom (5 % of RAM, at least
 *            1 GiB) fit in the memory available at create (MemAvailable, within a cgroup's
 *            limit) and the process has no locked memory (dsv4_model_mlock): LANES where the
 *            kernel level is avx512vbmi or avx2, COPY at avx512 and portable; NATURAL otherwise (a model larger than
 *            memory, read through the page cache, stays mapped)
 *   NATURAL  ("mapped") the checkpoint's bytes, read in place from the mapped files: their pages stay
 *            clean page cache (4 KB pages), shared by every process (and engine) that maps them
 *   COPY     the same bytes copied at engine create into the engine's own memory, 2 MB aligned
 *            with transparent huge pages where the system allows: and with them every other
 *            weight of the blocks (the dense FP8 / BF16 matrices, all scales, hc's mixing
 *            matrices; not the embedding and the LM head). No TLB walk every 4 KB, and the
 *            prefetchers run past what were page ends: on a Zen 5 (BENCHMARKS.md session 26)
 *            alternating forwards in one process, mapped experts took 1.9 % / 4.3 % / 1.5 %
 *            longer at batch 1 / batch 16 / prefill 512 than copied ones, and the other weights
 *            mapped a further ~5-8 % / ~1.5-2.5 % at batch 1 / 16
 *   LANES    as COPY, each FP4 matrix whose width is a multiple of 128 repacked on the way (a
 *            64-byte line holds 128 columns in the order the AVX-512 decoder wants). On a Zen 5
 *            (BENCHMARKS.md session 30), alternating forwards in one process, ~1 % faster than
 *            COPY at batch 16 and prefill 512 and 0.3-2 % at batch 1; timed on Zen 5 only
 * COPY and LANES cost a pass over every copied byte at create and private memory as large as
 * those weights: several processes on one node no longer share the experts' pages, and the
 * mapped file pages, no longer read after create, stay in the page cache until the system
 * needs the memory. Experts another rank owns (expert parallelism) and matrices made INT8
 * by w8a8 are not copied. With NUMA interleaving the copies are interleaved too.
 * dsv4_model_warmup before create makes the copy read from memory; dsv4_model_mlock locks the
 * mapped pages, which a COPY or LANES engine no longer reads for those matrices (it would hold
 * both).
 * The same bits in every layout: only the speed differs. */
enum {
    DSV4_FP4_AUTO = 0,
    DSV4_FP4_NATURAL = 1,
    DSV4_FP4_LANES = 2,
    DSV4_FP4_COPY = 3,
    /* SHUFFLE: LANES with each FP4 matrix whose width is a multiple of 64 and whose scales are
     * ue8m0 bytes other than 255 in the shuffle layout instead (kernels/fp4_shuf.h: the AVX2
     * kernels decode it with two vpshufb table lookups a 32 weights); the others as LANES. AUTO's
     * copy at avx2. Read natively at avx2 only (other levels: through their GEMM, same bits). */
    DSV4_FP4_SHUFFLE = 4,
};
/* "auto", "mapped" (or its old name "natural"), "copy", "lanes" or "shuffle" -> DSV4_FP4_*; DSV4_ERR_ARG
 * with a message otherwise. The CLI's --weights-memory (formerly --fp4-layout) takes these. */
DSV4_API int dsv4_fp4_layout_parse(const char *s, int *layout, dsv4_err *err);
/* The name of a DSV4_FP4_* value ("mapped" for NATURAL), "?" when unknown. */
DSV4_API const char *dsv4_fp4_layout_name(int layout);

/* KV row storage (serving.md §a.1): window rows, compressed entries, indexer keys.
 *   F32   the reference: results as the spec's FP32 math (the golden tests use it)
 *   BF16  half the bytes; every row rounded to BF16 where it is produced
 *   FP8   FP8-split window/compressed rows (e4m3 nope channels per 64 with a ue8m0 scale,
 *         BF16 rope channels: fidelity item F2's rounding) and BF16 indexer keys
 * Any of the three may add DSV4_KV_IDX_FP4 ("f32+fp4", "bf16+fp4", "fp8+fp4"): the indexer
 * keys stored as FP4 instead (e2m1 per value with a ue8m0 scale per 32, dI/2 + dI/32 bytes:
 * 68 for Flash, against 256 in BF16). Only with fidelity item F3 (engine create refuses it
 * otherwise): F3 rounds every key to exactly those values, so FP4 keys are lossless there
 * and the results are the bits of the same engine with F32 or BF16 keys.
 * The compressor state stays F32 in every mode. */
enum {
    DSV4_KV_DEFAULT = 0, /* BF16 */
    DSV4_KV_F32 = 1,
    DSV4_KV_BF16 = 2,
    DSV4_KV_FP8 = 3,
    DSV4_KV_IDX_FP4 = 0x10, /* a flag on F32 / BF16 / FP8 (not on DEFAULT): FP4 indexer keys */
};
/* "f32", "bf16", "fp8", each optionally with "+fp4" (DSV4_KV_IDX_FP4) -> DSV4_KV_*;
 * DSV4_ERR_ARG with a message otherwise. */
DSV4_API int dsv4_kv_dtype_parse(const char *s, int *dtype, dsv4_err *err);
/* The name of a DSV4_KV_* value (DEFAULT resolved), "?" when unknown. */
DSV4_API const char *dsv4_kv_dtype_name(int dtype);

/* Items of fidelity mode P3: the official model's activation roundings (spec/model.md §6).
 * F1 applies by role, to the projections the release stores FP8/FP4 (wq_a, wq_b, wkv, wo_b,
 * indexer wq_b, shared and routed w1/w2/w3, MTP e_proj/h_proj; never wo_a), whatever
 * format this checkpoint stores them in, so a BF16 test checkpoint simulates the release. */
enum {
    DSV4_FID_F1 = 1u << 0, /* FP8 act-quant (per 128, ue8m0) before those projections, BF16 out */
    DSV4_FID_F2 = 1u << 1, /* KV FP8 round trip: window rows and main compressed entries */
    DSV4_FID_F3 = 1u << 2, /* indexer Hadamard + FP4 round trip of qI and keys */
    DSV4_FID_F4 = 1u << 3, /* BF16 activations at the official graph's rounding points */
    DSV4_FID_F5 = 1u << 4, /* MoE: BF16 weighted intermediate, FP32 sum rounded to BF16 */
    DSV4_FID_OFFICIAL = 0x1fu,
};

/* Parses a fidelity setting: "official" (all items), "none" (0), or a comma list of items
 * "F1,F3" (case-insensitive, no spaces). Returns 0, or DSV4_ERR_ARG with a message. */
DSV4_API int dsv4_fidelity_parse(const char *s, unsigned *items, dsv4_err *err);

/* The floating-point environment: on x86, dsv4_engine_create, dsv4_forward,
 * dsv4_mtp_forward(_out) and the dsv4_lm_head* calls run under the default MXCSR (round to
 * nearest, no flush-to-zero, no denormals-are-zero) whatever the caller's, and give the
 * caller its own back, so a program built with -ffast-math gets the same bits. */
DSV4_API int dsv4_engine_create(const dsv4_model *m, const dsv4_engine_opts *opts, dsv4_engine **out,
                                dsv4_err *err);

/* Does serving fit in this machine's memory? Weights are mmap'd, so every byte read stays
 * resident only while memory lasts; past that the system pages weights in from disk on
 * every token. The figures, for a model and the engine options it would run with: */
typedef struct dsv4_mem_fit {
    uint64_t weights_bytes;  /* tensor data of the checkpoint (resident once read) */
    uint64_t routed_bytes;   /* of which routed experts: what expert parallelism divides */
    uint64_t cache_bytes;    /* the engine's cache pools for these options (F32 rows) */
    uint64_t scratch_bytes;  /* the engine's scratch arena: every buffer of its largest call */
    uint64_t need_bytes;     /* weights + cache + scratch (W8A8 copies not counted) */
    uint64_t ram_bytes;      /* dsv4_machine_ram_bytes() */
    uint64_t headroom_bytes; /* left for the system: max(1 GiB, 5% of RAM) */
    int fits;                /* need + headroom <= RAM */
    /* When it does not fit: the fewest expert-parallel ranks on machines like this one
     * that do (0: none up to 64), and what the fullest rank then holds: the dense weights,
     * 1/ranks of the routed experts, its scratch and, on the home rank 0, the cache. */
    int ep_ranks;
    uint64_t ep_rank_bytes;
} dsv4_mem_fit;

/* From a config.json alone, with the released checkpoint's formats (FP8 projections, FP4
 * experts): no weights needed. */
DSV4_API int dsv4_mem_fit_config(const char *config_json, const dsv4_engine_opts *opts,
                                 dsv4_mem_fit *out, dsv4_err *err);
/* For an opened model, from its files' tensor bytes. */
DSV4_API int dsv4_mem_fit_model(const dsv4_model *m, const dsv4_engine_opts *opts, dsv4_mem_fit *out,
                                dsv4_err *err);
DSV4_API void dsv4_engine_free(dsv4_engine *e);

/* The options the engine runs with, defaults filled in (max_context, max_seqs, c_max,
 * threads, ...), and the model it was created on. */
DSV4_API dsv4_engine_opts dsv4_engine_get_opts(const dsv4_engine *e);
/* The memory nodes the engine saw at create (its NUMA decision: get_opts().numa). */
DSV4_API int dsv4_engine_numa_nodes(const dsv4_engine *e);
/* The FP4 matrices the engine reads in the lanes layout (repacked at create) and in the
 * natural one, mapped or copied (all of them with DSV4_FP4_NATURAL or COPY; with LANES those
 * whose width is not a multiple of 128 and the experts another rank owns). Either pointer
 * may be NULL. */
DSV4_API void dsv4_engine_fp4_counts(const dsv4_engine *e, int64_t *lanes, int64_t *natural);
DSV4_API const dsv4_model *dsv4_engine_model(const dsv4_engine *e);

/* Sequences are small integer handles owned by the engine. */
DSV4_API int dsv4_seq_create(dsv4_engine *e, int *seq, dsv4_err *err);
DSV4_API int dsv4_seq_free(dsv4_engine *e, int seq, dsv4_err *err);
/* Committed length n of a live sequence, or -1 for an invalid handle. */
DSV4_API int64_t dsv4_seq_length(const dsv4_engine *e, int seq);
/* MTP length m (positions the MTP block has consumed), or -1. */
DSV4_API int64_t dsv4_seq_mtp_length(const dsv4_engine *e, int seq);
/* Benchmarks only: makes the empty live sequence seq n positions long without computing
 * them (n < max_context; one process): every cached row a later step reads (window rows,
 * compressed entries and indexer keys, the compressors' rings) holds pseudo-random values
 * of its shape, rounded and stored in the cache's formats (seed picks them). A decode step
 * after it reads and computes what one after a real prefill of n positions would, except
 * which entries the indexer selects; its outputs mean nothing. The MTP block's cache stays
 * empty (its length 0). */
DSV4_API int dsv4_seq_fill_synthetic(dsv4_engine *e, int seq, int64_t n, uint64_t seed, dsv4_err *err);

/* Pages of the paged caches in use and in all (window pool, compressed-block pool) and
 * sequence slots, for a server's load metrics. */
typedef struct dsv4_cache_stats {
    int64_t win_used, win_total;
    int64_t blk_used, blk_total;
    int seqs_used, seqs_total;
} dsv4_cache_stats;
DSV4_API dsv4_cache_stats dsv4_engine_cache_stats(const dsv4_engine *e);
/* Which way the CSA indexer found each row's top-k since the engine was created, in rows
 * (one a querying row and CSA layer that sees more than index_topk entries; the others keep
 * every entry and score none): every score exact, or bounded (approximate scores, exact
 * ones near the boundary) over F32 / BF16 keys, over FP4 keys by integer block dots, or
 * over FP4 keys unpacked to F32. Each process counts the rows its attention scored; for
 * benchmarks and metrics. */
typedef struct dsv4_indexer_stats {
    int64_t exact, bounded_f32, bounded_int, bounded_unpack;
} dsv4_indexer_stats;
DSV4_API dsv4_indexer_stats dsv4_engine_indexer_stats(const dsv4_engine *e);
/* Context-parallel prefills this rank was the home of and that completed (DSV4_PAR_CP,
 * also inside a DP group), for a server's metrics: 0 where CP never ran. */
DSV4_API int64_t dsv4_engine_cp_prefills(const dsv4_engine *e);

/* Runs fn(arg, i) for every i in [0, n) on the engine's threads, the calling thread among
 * them, and returns when every call has: the serving side's per-row work between forwards
 * (a step's sampling, which would otherwise run on one thread while the others wait). Call
 * it from the thread that runs the engine, between its calls; fn must not call the engine.
 * n <= 0 does nothing. */
DSV4_API void dsv4_engine_for_each(dsv4_engine *e, int n, void (*fn)(void *arg, int i), void *arg);

/* ---- sharing and prefix cache (spec/serving.md §g) ----------------------------------- */

/* A = lcm of the nonzero compress ratios (128 for Flash; 1 without compression): the
 * lengths at which snapshots can be taken. */
DSV4_API int dsv4_engine_alignment(const dsv4_engine *e);

/* A new sequence with the state of src (any length, also mid-window): the compressed blocks
 * closed at src's length are shared by reference (both block tables name the same pages,
 * which neither writes again); the open block, the window rows and the compressor state
 * are copied. The two sequences are then independent. On a follower rank of an
 * expert-parallel group (no caches: dsv4_seq_mirror) the new sequence has src's lengths
 * alone, the fork the home rank made of the same sequence, so that the group's later calls
 * agree on it. */
DSV4_API int dsv4_seq_fork(dsv4_engine *e, int src, int *dst, dsv4_err *err);

/* A snapshot: the state of a sequence at a compression-aligned length n (n % A == 0,
 * n > 0; with MTP, m == n - 1), owned by the engine, kept outside any sequence slot. It
 * holds references on the closed compressed blocks and copies of the rest, the n tokens,
 * and the final hidden [D] and last-block streams [hc, D] of position n - 1 (from the
 * forward that reached n), so that a restored sequence can sample x_n and run its first
 * MTP row without recomputation. Freed by dsv4_snapshot_free or dsv4_engine_free. */
typedef struct dsv4_snapshot dsv4_snapshot;

/* tokens: the sequence's n tokens; hidden [D], streams [hc, D]: position n - 1's outputs. */
DSV4_API int dsv4_snapshot_take(dsv4_engine *e, int seq, const int32_t *tokens, const float *hidden,
                                const float *streams, dsv4_snapshot **out, dsv4_err *err);
/* A new sequence in the snapshot's state (length n, MTP length m); hidden [D] and streams
 * [hc, D] (each may be NULL) receive position n - 1's outputs. Pool exhaustion
 * (DSV4_ERR_CACHE_FULL) leaves nothing allocated. */
DSV4_API int dsv4_snapshot_restore(dsv4_engine *e, const dsv4_snapshot *s, int *seq, float *hidden,
                                   float *streams, dsv4_err *err);
/* On a follower rank of an expert-parallel group (one that holds no caches: its forwards
 * only join the MoE exchange, serving.md §d): a new sequence in the state a restored
 * snapshot of length n leaves (length n; MTP length n - 1 with MTP caches, else 0), for
 * when the home rank restored one (dsv4_snapshot_restore, dsv4_prefix_start), so that the
 * group's later calls agree on the sequence. n: a positive multiple of the alignment.
 * DSV4_ERR_UNSUPPORTED on a rank that holds caches (one process, the home rank). */
DSV4_API int dsv4_seq_mirror(dsv4_engine *e, int64_t n, int *seq, dsv4_err *err);
DSV4_API void dsv4_snapshot_free(dsv4_engine *e, dsv4_snapshot *s);
DSV4_API int64_t dsv4_snapshot_length(const dsv4_snapshot *s);
DSV4_API const int32_t *dsv4_snapshot_tokens(const dsv4_snapshot *s);

/* The prefix cache: snapshots the engine keeps and finds by their tokens. Keys form a hash
 * chain over aligned token blocks (block i's key covers tokens [0, (i+1)·A)); a match is
 * confirmed token by token, and the longest one wins. Unreferenced entries are dropped
 * least recently used first when a reservation is short of compressed blocks, or when
 * more than opts.prefix_entries are kept; a call that would fit with the cache empty never
 * fails because of it. */

/* Keeps seq's state at its length (aligned, as for dsv4_snapshot_take) in the prefix
 * cache; an entry with the same tokens is only marked recently used. */
DSV4_API int dsv4_prefix_insert(dsv4_engine *e, int seq, const int32_t *tokens, const float *hidden,
                                const float *streams, dsv4_err *err);
/* Starts a sequence for a prompt of n_tokens tokens: restores the longest cached prefix
 * (*n_cached = its length <= n_tokens, hidden [D] / streams [hc, D] receive its position
 * n_cached - 1, each may be NULL) or, on a miss, creates an empty sequence (*n_cached = 0).
 * The caller then runs the forward over tokens [n_cached, n_tokens). */
DSV4_API int dsv4_prefix_start(dsv4_engine *e, const int32_t *tokens, int64_t n_tokens, int *seq,
                               int64_t *n_cached, float *hidden, float *streams, dsv4_err *err);

/* Hands a snapshot (e.g. one loaded from a file) to the prefix cache, which owns it from
 * then on (the handle must not be used again; a duplicate of an entry is freed). */
DSV4_API int dsv4_prefix_adopt(dsv4_engine *e, dsv4_snapshot *s, dsv4_err *err);

/* KV persistence (spec/serving.md §g file format). Save writes NAME.tmp.PID, fsyncs it and
 * renames it over path (a crash leaves the old file or the new one, never a torn one).
 * Load validates the whole file — magic, version, config and weights fingerprints, widths,
 * dtypes, fidelity/W8A8 mode, alignment, size, every CRC32C — before building a snapshot
 * (outside the pools: restore it with dsv4_snapshot_restore); any failure is
 * DSV4_ERR_FORMAT (or _IO) naming the file and the check. The file records the kernel
 * level it was made with; loading under another level is allowed. */
DSV4_API int dsv4_snapshot_save(dsv4_engine *e, const dsv4_snapshot *s, const char *path, dsv4_err *err);
DSV4_API int dsv4_snapshot_load(dsv4_engine *e, const char *path, dsv4_snapshot **out, dsv4_err *err);

typedef struct dsv4_prefix_stats {
    int64_t hits, misses;         /* dsv4_prefix_start calls that restored / did not */
    int64_t reused_tokens;        /* positions restored instead of computed */
    int64_t inserts, evictions;   /* entries added / dropped (pressure or count limit) */
    int64_t entries;              /* entries kept now */
    int64_t host_bytes;           /* their copies outside the pools */
    int64_t pool_bytes;           /* compressed blocks only they hold (evicting all frees it) */
} dsv4_prefix_stats;
DSV4_API dsv4_prefix_stats dsv4_prefix_get_stats(const dsv4_engine *e);
/* The keys of the entries the prefix cache holds now, at most cap of them into keys (in no
 * order; keys may be NULL when cap is 0); returns how many entries it holds. An entry of n
 * tokens is keyed by the hash chain's key of its n / A blocks: a prompt restores it only
 * when the prompt's chain key at that block is the same (and its tokens agree). */
DSV4_API int64_t dsv4_prefix_keys(const dsv4_engine *e, uint64_t *keys, int64_t cap);

/* One span: rows [start, start + n_tokens) of a sequence; start must equal its length n.
 * Prefill, chunked prefill, decode and speculative verification are all spans.
 *
 * Speculative spans (serving.md §b, §e): with speculative set, the span (at most
 * 1 + D_max rows, D_max = 1 when the engine keeps MTP caches, else 0) runs like any other
 * but commits nothing: the sequence's length stays n until dsv4_seq_commit(e, seq, k)
 * accepts its first k rows. Until then every other call on that sequence (forward,
 * mtp_forward) fails with DSV4_ERR_STATE; dsv4_seq_free is allowed. Rollback guarantee of
 * commit(k < C): nothing a later call reads was changed by the rejected rows — their
 * window rows and compressed entries sit at positions >= n and are rewritten when those
 * positions run again, their compressor ring rows overwrite only positions no longer
 * needed (the rings are D_max rows longer than the carried state), and pages that only
 * rejected rows used go back to the pools, so the block tables and every row a later call
 * reads are as if the rejected rows had never run. */
typedef struct dsv4_span {
    int seq;
    int64_t start;
    int n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    int n_hidden;             /* rows whose final hidden state is wanted ... */
    const int *hidden_rows;   /* ... as indices in [0, n_tokens); NULL = the last n_hidden rows */
    int n_streams;            /* rows whose last-block hc streams are wanted (MTP input) */
    const int *stream_rows;   /* NULL = the last n_streams rows */
    int speculative;          /* 1: verify rows, committed later by dsv4_seq_commit */
} dsv4_span;

/* Runs every span in one call (any mix of prefill chunks and single-token decodes, each
 * sequence at most once). Outputs are packed in span order, then row order:
 *   hidden  [sum n_hidden, D]       final RMSNorm output
 *   streams [sum n_streams, hc, D]  last-block streams
 * Validation happens before any state changes; on error no sequence is modified, with one
 * exception: a failure after the compute began (out of memory between layers, a peer's
 * exchange failing or timing out) marks the call's written sequences broken (every later
 * call on them fails with DSV4_ERR_STATE: free them).
 * Under DSV4_PAR_DP each rank passes its own spans (see there; with DSV4_PAR_CP a rank's
 * long prefill span runs over the whole group, transparently). Under DSV4_PAR_DP |
 * DSV4_PAR_CP the ranks' CP spans run first, one after another in rank order, each
 * committed when it completes: when one of them fails midway, the call fails on every rank,
 * and every rank whose CP span had begun (completed and committed ones included) finds its
 * CP span's sequence broken; the call's other spans were not run (unchanged). A caller frees
 * the broken sequences (dsv4_serve ends those requests with the error). Rolling a completed
 * CP prefill back is not offered: its compressor rings keep only D_max rows past the
 * committed length (see dsv4_span). */
DSV4_API int dsv4_forward(dsv4_engine *e, const dsv4_span *spans, int n_spans, float *hidden,
                          float *streams, dsv4_err *err);

/* Accepts the first k rows (1 <= k <= C) of seq's pending speculative span of C rows:
 * n <- start + k; the rest is rolled back (see dsv4_span). DSV4_ERR_STATE when seq has no
 * pending speculative span, DSV4_ERR_ARG for a k out of range (the span stays pending). */
DSV4_API int dsv4_seq_commit(dsv4_engine *e, int seq, int k, dsv4_err *err);
/* Rows of seq's pending speculative span (0 = none), or -1 for an invalid handle. */
DSV4_API int dsv4_seq_pending(const dsv4_engine *e, int seq);
/* In an engine with MTP caches: seq will not run its MTP rows (decoding without drafts,
 * or a state without its MTP part). Its window pages are then freed by the main length
 * alone (otherwise they wait for the MTP rows), and dsv4_mtp_forward refuses it. Lasts
 * until dsv4_seq_free. */
DSV4_API int dsv4_seq_mtp_off(dsv4_engine *e, int seq, dsv4_err *err);

/* MTP block 0 over MTP positions [start, start + n) of a sequence (start must equal m):
 * row i consumes the main model's last-block streams of position start+i and the token at
 * position start+i+1, and yields the MTP hidden state (apply dsv4_lm_head for logits).
 * A speculative decoder needs the hidden state of a span's last row only (the next draft),
 * or of none (rows that only catch the MTP cache up, e.g. after a prefill chunk): the
 * other rows then stop after the attention sub-block, which writes everything later rows
 * read, and skip the MoE sub-block and the output head; the rows computed are bitwise
 * those of a full run, and so is the cache. */
enum {
    DSV4_MTP_OUT_ALL = 0,   /* every row's hidden state (the default) */
    DSV4_MTP_OUT_LAST = 1,  /* the last row's only: one hidden row for the span */
    DSV4_MTP_OUT_NONE = 2,  /* none: the rows fill the MTP cache only */
};
typedef struct dsv4_mtp_span {
    int seq;
    int64_t start;
    int n;
    const int32_t *next_tokens;  /* [n] */
    const float *streams;        /* [n, hc, D] */
} dsv4_mtp_span;

/* hidden [sum n, D]: every row's hidden state, in span order. */
DSV4_API int dsv4_mtp_forward(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans,
                              float *hidden, dsv4_err *err);
/* The same with out[i] (DSV4_MTP_OUT_*) saying which rows of span i yield a hidden state
 * (out NULL: all): hidden [rows wanted, D] in span order, n rows for OUT_ALL, 1 for
 * OUT_LAST, none for OUT_NONE; it may be NULL when no row is wanted. A row not wanted
 * still writes its rows of the MTP cache but computes no queries, attention heads,
 * output projection or MoE, so the trace and choice hooks see only the wanted rows after
 * the MTP block's attention. */
DSV4_API int dsv4_mtp_forward_out(dsv4_engine *e, const dsv4_mtp_span *spans, int n_spans,
                                  const int *out, float *hidden, dsv4_err *err);

/* Serving-side LM head: logits[r] = hidden[r] . head.weight^T for r < n_rows, FP32,
 * hidden [n_rows, D] -> logits [n_rows, V]. */
DSV4_API int dsv4_lm_head(dsv4_engine *e, const float *hidden, int n_rows, float *logits,
                          dsv4_err *err);

/* Vocabulary shard `shard` of `n_shards` (serving.md §b): rows [lo, hi) of head.weight with
 * lo = shard * ceil(V / n_shards), hi = min(V, lo + ceil(V / n_shards)) (hi <= lo: empty).
 * logits [n_rows, hi - lo] = hidden [n_rows, D] . head.weight[lo:hi]^T, the same values the
 * full dsv4_lm_head gives for those columns. */
DSV4_API void dsv4_lm_head_shard_range(int vocab, int shard, int n_shards, int *lo, int *hi);
DSV4_API int dsv4_lm_head_shard(dsv4_engine *e, const float *hidden, int n_rows, int shard,
                                int n_shards, float *logits, dsv4_err *err);

/* With a process group (opts.dist, opts.parallel set, more than one rank) these are
 * collective: every rank calls them with the same n_rows, and only the home rank's
 * (rank 0's) hidden rows are read; they are broadcast, each rank computes its vocabulary
 * shard. Without one they run locally on the full head.
 *   dsv4_lm_head_dist:   logits [n_rows, V] gathered on the home rank (valid only there).
 *   dsv4_lm_head_argmax: greedy ids [n_rows] (and values, may be NULL) on every rank,
 *                        reduced with MPI_Allreduce (larger value, then lower id): equal to
 *                        the argmax of the full logits, ties to the lowest token id.
 * Under DSV4_PAR_DP every rank is the home rank of its own rows (each its own n_rows, zero
 * allowed) and gets the results of those rows only: logits [n_rows, V] from _dist, ids and
 * values [n_rows] from _argmax, bitwise what the full head gives. Without DSV4_PAR_DP_HEAD
 * both run locally on the full head (not collective). With it they are collective: every
 * rank makes the same number of head calls in the same order, each call on a rank either
 * kind (one rank's _dist may meet another's _argmax), and each rank computes its
 * vocabulary shard for every rank's rows (the rows allgathered, the shards' logits or
 * argmax pairs sent back to their home rank); a refusal or failure on any rank fails the
 * call on every rank with that rank's message, and the peer timeout applies. */
DSV4_API int dsv4_lm_head_dist(dsv4_engine *e, const float *hidden, int n_rows, float *logits,
                               dsv4_err *err);
DSV4_API int dsv4_lm_head_argmax(dsv4_engine *e, const float *hidden, int n_rows, int32_t *ids,
                                 float *values, dsv4_err *err);

/* Optional debugging hook: called after every attention sub-block (kind 0) and every block
 * (kind 1) with the hc streams [hc, D] of one row at absolute position pos. */
typedef void (*dsv4_trace_fn)(void *user, int seq, int64_t pos, int layer, int kind,
                              const float *streams);
DSV4_API void dsv4_engine_set_trace(dsv4_engine *e, dsv4_trace_fn fn, void *user);

/* Optional debugging hook for the discrete choices of one row at absolute position pos:
 * kind DSV4_CHOICE_EXPERTS — the K routed experts in k order (single-process MoE path);
 * kind DSV4_CHOICE_CSA — the compressed entries a CSA layer's indexer selected, ascending. */
enum { DSV4_CHOICE_EXPERTS = 0, DSV4_CHOICE_CSA = 1 };
typedef void (*dsv4_choice_fn)(void *user, int seq, int64_t pos, int layer, int kind,
                               const int *ids, int n);
DSV4_API void dsv4_engine_set_choice_trace(dsv4_engine *e, dsv4_choice_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
