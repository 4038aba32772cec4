/* prefix_cache.h — the server's side of the prefix cache (spec/serving.md §g, issue 11):
 * which snapshots to keep, where a request starts, and the KV directory (--kv-dir).
 *
 * The engine keeps the snapshots (dsv4_prefix_*) and finds them by their tokens; this
 * module decides what is worth keeping — the longest aligned prefix of each prompt, and of
 * each conversation when its request ends — and, with a directory, writes those to disk
 * and reads them back after a restart. Files are named by a hash chain of their tokens,
 * so a lookup needs no file reads; a file is read (and fully validated) only when a
 * request would use it. A file that fails validation is renamed to NAME.bad with a
 * warning on stderr and the request is served cold.
 *
 * Saves run on the scheduler thread, between steps (a snapshot is window rows, carries and
 * closed compressed blocks: milliseconds at the sizes measured in BENCHMARKS.md). The
 * directory is kept within its byte budget by deleting the least recently used files (a
 * hit touches the file's mtime, so the order survives restarts). Scheduler thread only.
 */
#ifndef DSV4_SERVE_PREFIX_CACHE_H
#define DSV4_SERVE_PREFIX_CACHE_H

#include <stdint.h>

#include "dsv4.h"

typedef struct srv_pcache srv_pcache;

typedef struct srv_pcache_stats {
    int64_t hits, misses;            /* admissions that restored a prefix / did not */
    int64_t reused_tokens;           /* positions restored instead of computed */
    int64_t disk_files, disk_bytes;  /* in the directory now */
    int64_t disk_loads, disk_saves;  /* files read into the cache / written */
    int64_t disk_bad;                /* files set aside (failed validation) */
} srv_pcache_stats;

/* dir: NULL = memory only; dir_bytes: the directory's budget (0 = unlimited). Creates the
 * directory if missing, deletes the NAME.tmp.PID files of interrupted saves, indexes the
 * *.kv files. Every call below also takes NULL, no cache (--prefix-entries 0): no snapshot
 * points, nothing kept (srv_pcache_start is then not to be called). Under MPI the cache is
 * rank 0's alone: the followers hold no caches and only mirror the lengths it restores
 * (step_msg.h). */
int srv_pcache_create(dsv4_engine *e, const char *dir, uint64_t dir_bytes, srv_pcache **out,
                      dsv4_err *err);
void srv_pcache_free(srv_pcache *pc);

/* The last aligned length worth a snapshot for a prompt of n tokens: the largest multiple
 * of the alignment A below n (a request with the same prompt restores at most n - 1
 * tokens, so that one row is left to give its logits); 0 when n <= A. */
int64_t srv_pcache_prompt_point(const srv_pcache *pc, int64_t n);
/* Whether length n is aligned (a snapshot can be taken there). */
int srv_pcache_aligned(const srv_pcache *pc, int64_t n);
/* The chain keys of tokens[0, n)'s aligned prefixes, in *keys (grown as needed; *cap
 * entries): keys[i] names the prefix of (i + 1) A tokens (the KV directory's file names
 * hold it) and depends on every one of them. Returns how many, n / A (0 without a cache),
 * or -1 when out of memory. */
int64_t srv_pcache_keys(const srv_pcache *pc, const int32_t *tokens, int64_t n, uint64_t **keys, int64_t *cap);

/* Starts a sequence for a context of n tokens: restores the longest cached prefix of its
 * first n - 1 tokens, from memory or from the directory (*n_cached = its length, streams
 * [hc, D] receive its last position's streams), or creates an empty sequence. Errors are
 * the engine's (out of sequence slots, ...). */
int srv_pcache_start(srv_pcache *pc, const int32_t *tokens, int64_t n, int *seq, int64_t *n_cached,
                     float *streams, dsv4_err *err);

/* Keeps seq's state at its (aligned) length in the cache and the directory; hidden [D] and
 * streams [hc, D] are its last position's outputs. Failures only cost the reuse (a
 * warning for disk errors). */
void srv_pcache_keep(srv_pcache *pc, int seq, const int32_t *tokens, const float *hidden,
                     const float *streams);
/* A private snapshot of seq (the conversation so far) replacing *snap; the old one is
 * freed. Nothing happens when seq cannot be snapshot now (e.g. MTP rows behind). */
void srv_pcache_hold(srv_pcache *pc, int seq, const int32_t *tokens, const float *hidden,
                     const float *streams, dsv4_snapshot **snap);
/* Hands *snap (if any) to the cache, and to the directory when save is set; *snap = NULL. */
void srv_pcache_release(srv_pcache *pc, dsv4_snapshot **snap, int save);

/* The chain keys of every prefix a request could restore here now, from memory (the
 * engine's entries, dsv4_prefix_keys) or the directory (its files), in *keys (grown as
 * needed; *cap entries), ascending, each once: keys[i] of srv_pcache_keys for a prompt
 * matches one when the prompt's first (i + 1) A tokens are held. Returns how many (0
 * without a cache), or -1 when out of memory. */
int64_t srv_pcache_held(const srv_pcache *pc, uint64_t **keys, int64_t *cap);

srv_pcache_stats srv_pcache_get_stats(const srv_pcache *pc);

#endif
