/* dsv4_internal.h — the one door into the library's internals for developer tools
 * (dsv4 gen-model, info, bench, run's dumps) and the benchmarks under bench/.
 *
 * Embedders and the user-facing commands (generate, chat, serve, tokenize) use only the
 * public headers (include/dsv4.h, include/dsv4_text.h). Everything declared here is
 * internal: it may change with any commit, and it is not installed.
 * scripts/check_layers.py enforces that tools/ and bench/ include nothing else of src/. */
#ifndef DSV4_INTERNAL_H
#define DSV4_INTERNAL_H

#include "attn/attention.h"       /* bench_attn: sparse attention over stored rows */
#include "bench/bench_model.h"   /* dsv4 bench: the timed model run and its rooflines */
#include "cache/cache.h"         /* dsv4 info: the cache plan */
#include "dist/cp.h"             /* bench_cp: the CP partition and exchange volumes */
#include "dist/dist.h"
#include "dist/ep.h"
#include "engine/engine.h"       /* benchmarks read engine fields (threads, stats hooks) */
#include "engine/forward_cp.h"
#include "kernels/attn_ops.h"
#include "kernels/codec.h"       /* kernel benchmarks call the kernels directly */
#include "kernels/cpu.h"
#include "kernels/idx_approx.h"    /* bench_indexer: exact against bounded top-k */
#include "kernels/idx_scores.h"
#include "kernels/kctx.h"
#include "kernels/kv_rows.h"
#include "kernels/linear.h"
#include "kernels/linear_fast.h"  /* bench_linear: the row limits of the linear paths */
#include "kernels/probe.h"
#include "kernels/swiglu.h"       /* expf_exhaustive: the AVX-512 expf against libm */
#include "kernels/w8a8.h"
#include "model/config.h"        /* dsv4 gen-model: test checkpoints */
#include "model/generate.h"
#include "model/info.h"          /* dsv4 info: the checkpoint inventory */
#include "model/model.h"
#include "model/numerics.h"       /* bench_w8a8: P2 products through the w8a8 mode */
#include "moe/moe.h"             /* bench_linear --moe: a decode step's expert phase */
#include "sample/json.h"         /* bench_json: the structured-output mask */
#include "sample/grammar.h"      /* bench_guided: the grammar mask */
#include "sample/regex_mask.h"   /* bench_guided: the regex / choice mask */
#include "serve/gen.h"           /* bench_guided: the walks a generation's masks took */
#include "sample/tool_match.h"   /* bench_tools: the strict tool calls mask */
#include "model/safetensors.h"
#include "model/scan.h"          /* dsv4 info --check: the full non-finite scan */
#include "util/argmax.h"           /* dsv4 bench: the greedy ids, as dsv4_argmax */
#include "util/file.h"
#include "util/file_write.h"    /* output files: checked, fsync'd, atomic */

#endif
