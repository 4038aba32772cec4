#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a bounded time on its
# seed corpus. The targets, their sources, seeds and input limits are listed once, in
# tests/fuzz/targets.txt (which tests/fuzz/CMakeLists.txt reads too): fuzz_safetensors
# (dsv4_st_open_buffer), fuzz_config (dsv4_config_parse), fuzz_kvfile (dsv4_kv_parse, the KV
# snapshot reader), fuzz_tokenizer_json (the tokenizer.json loader, then encode/decode round
# trips on the loaded tokenizer), fuzz_chat (the chat encoder, the conversation object and the
# DSML parser), fuzz_json_schema (structured output's schema compiler, matcher and vocabulary
# mask), fuzz_json_mask (that mask's fast paths against its definition at every step of a
# token sequence), fuzz_tool_mask (the strict tools' mask against its whole walk, the same
# way, over fuzzed tools lists and a JSON document beside them); with ../shared also fuzz_tokenizer (any text through DeepSeek's own tokenizer) and
# fuzz_serve (the server's request bodies through every endpoint's handler, and the answers'
# JSON and SSE with the streamed tool-call parser).
# Built straight from the few sources they need, so no CMake configure is involved.
#
#   FUZZ_SECONDS   seconds per target (default 12: eight targets in four waves of two stay
#                  within the CI budget of six at 15 s)
#   FUZZ_BUILD_DIR binaries, grown corpora and crash artifacts (default build-fuzz)
#   CC_FUZZ        compiler (default clang)
#   FUZZ_ONLY      space-separated target names to build and run (default: all)
#   FUZZ_JOBS      targets built or run at once (default: the online CPUs); each target
#                  still gets FUZZ_SECONDS of its own, so the fuzzing done is the same
#
# A crash, leak, UB report or timeout makes the script fail; the input that caused it is
# left as $FUZZ_BUILD_DIR/<target>-crash-* (reproduce: $FUZZ_BUILD_DIR/<target> FILE).
set -e
cd "$(dirname "$0")/.."
CC_FUZZ=${CC_FUZZ:-clang}
OUT=${FUZZ_BUILD_DIR:-build-fuzz}
SECS=${FUZZ_SECONDS:-12}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $JOBS in '' | *[!0-9]* | 0) echo "fuzz.sh: FUZZ_JOBS must be a positive integer, not '$JOBS'" >&2; exit 2 ;; esac

if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
    echo "fuzz.sh: $CC_FUZZ not found (scripts/setup.sh --test installs clang and its runtime)" >&2
    exit 1
fi
mkdir -p "$OUT"
# -Werror=sometimes-uninitialized: the one build CI compiles the server's sources with clang, whose
# flow check sees a goto past an initializer that GCC's -Wall does not (session 47's echo_s)
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
-fno-sanitize-recover=undefined -Wall -Wextra -Wno-unused-parameter -Werror=sometimes-uninitialized \
-Werror=uninitialized -Iinclude -Isrc -I. \
$(pkg-config --cflags libcjson)"
LIBS="$(pkg-config --libs libcjson libpcre2-8) -lpthread -lm"
LIST=tests/fuzz/targets.txt

# 0 when target $1 is selected by FUZZ_ONLY (or FUZZ_ONLY is empty)
selected() { [ -z "${FUZZ_ONLY:-}" ] || case " $FUZZ_ONLY " in *" $1 "*) true ;; *) false ;; esac; }

run() { # name seed-dir max-len
    name=$1
    selected "$name" || return 0
    mkdir -p "$OUT/corpus_$name"
    echo "fuzz.sh: running $name for ${SECS}s"
    dict=""
    [ ! -f "tests/fuzz/$name.dict" ] || dict="-dict=tests/fuzz/$name.dict"
    # New inputs go to the first (build) directory; the committed seeds stay untouched.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/$name" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$3" \
        ${dict:+"$dict"} -artifact_prefix="$OUT/$name-" -print_final_stats=1 \
        "$OUT/corpus_$name" "tests/fuzz/corpus/$2" 2>"$OUT/$name.log" || {
        tail -n 60 "$OUT/$name.log" >&2
        echo "fuzz.sh: $name FAILED (log: $OUT/$name.log)" >&2
        exit 1
    }
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$OUT/$name.log" | sed "s/^/fuzz.sh: $name /"
}

# Up to $JOBS runs at once, each in the background; `drain` waits for all of them
# and fails the script if any failed (a failed run has printed its log's tail already).
pids=""
bg() {
    "$@" &
    pids="$pids $!"
    # shellcheck disable=SC2086 # counting the pids
    set -- $pids
    [ $# -lt "$JOBS" ] || drain
}
drain() {
    failed=0
    for p in $pids; do wait "$p" || failed=1; done
    pids=""
    [ $failed -eq 0 ] || { echo "fuzz.sh: FAILED" >&2; exit 1; }
}

# fuzz_tokenizer and fuzz_serve need DeepSeek's tokenizer.json (../shared)
DSV4_TOKENIZER=${DSV4_TOKENIZER:-../shared/tokenizer/tokenizer.json}
have_tok=0
if [ -f "$DSV4_TOKENIZER" ]; then
    have_tok=1
    export DSV4_TOKENIZER
else
    echo "fuzz.sh: $DSV4_TOKENIZER not found, the targets that need it (fuzz_tokenizer, fuzz_serve) skipped"
fi

# The list, one target a line: "name corpus max-len needs sources...", the groups expanded.
awk '/^[ \t]*(#|$)/ { next }
     $1 ~ /^@/ { for (i = 2; i <= NF; i++) g[$1] = g[$1] " " $i; next }
     NF < 5 || ($4 != "-" && $4 != "tokenizer") { print FILENAME ": bad line: " $0 > "/dev/stderr"; exit 1 }
     { line = $1 " " $2 " " $3 " " $4
       for (i = 5; i <= NF; i++) {
           if ($i !~ /^@/) { line = line " " $i; continue }
           if (!($i in g)) { print FILENAME ": no group " $i > "/dev/stderr"; exit 1 }
           line = line g[$i]
       }
       print line }' "$LIST" >"$OUT/targets"

# 0 when what a target needs ($1: its "needs" column) is here
runnable() { [ "$1" != tokenizer ] || [ $have_tok -eq 1 ]; }

# The builds. The targets share most of their sources (the tokenizer's in 7 of 11, the schema
# matcher's in 5, err.c and file.c in all) and compile them with the same flags, so each source
# is compiled once into $OUT/obj (up to $JOBS at once through xargs, which starts the next one
# as soon as any ends; the largest files first), then each target is linked from its objects.
export CC_FUZZ CFLAGS LIBS OUT
mkdir -p "$OUT/obj"
obj() { echo "$OUT/obj/$(echo "$1" | sed 's|/|__|g; s|[.]c$|.o|')"; } # source -> its object
# shellcheck disable=SC2034 # corpus and maxlen are the run loop's
while read -r name corpus maxlen needs srcs; do
    # shellcheck disable=SC2086 # one source a word
    ! { runnable "$needs" && selected "$name"; } ||
        printf '%s\n' "tests/fuzz/$name.c" $srcs src/util/err.c src/util/file.c
done <"$OUT/targets" | sort -u >"$OUT/sources"
# shellcheck disable=SC2016 # sh -c expands $0, $1
while read -r src; do echo "$(wc -c <"$src") $src $(obj "$src")"; done <"$OUT/sources" | sort -rn | cut -d' ' -f2- |
    xargs -r -P "$JOBS" -L 1 sh -c '$CC_FUZZ $CFLAGS -c -o "$1" "$0"' ||
    { echo "fuzz.sh: a build FAILED" >&2; exit 1; }
# shellcheck disable=SC2034,SC2016 # corpus and maxlen are the run loop's; sh -c expands $0, $@
while read -r name corpus maxlen needs srcs; do
    if runnable "$needs" && selected "$name"; then
        objs=""
        for src in "tests/fuzz/$name.c" $srcs src/util/err.c src/util/file.c; do objs="$objs $(obj "$src")"; done
        echo "$name$objs"
    fi
done <"$OUT/targets" | xargs -r -P "$JOBS" -L 1 sh -c '
    echo "fuzz.sh: building $OUT/$0"
    # shellcheck disable=SC2086 # the flags are word-split on purpose
    $CC_FUZZ $CFLAGS -o "$OUT/$0" "$@" $LIBS' ||
    { echo "fuzz.sh: a build FAILED" >&2; exit 1; }
# shellcheck disable=SC2034 # srcs is the last loop's
while read -r name corpus maxlen needs srcs; do
    ! runnable "$needs" || bg run "$name" "$corpus" "$maxlen"
done <"$OUT/targets"
drain
echo "fuzz.sh: no crashes"
