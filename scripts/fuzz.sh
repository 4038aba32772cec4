#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a bounded time on its
# seed corpus: fuzz_safetensors (dsv4_st_open_buffer), fuzz_config (dsv4_config_parse),
# fuzz_kvfile (dsv4_kv_parse, the KV snapshot reader), fuzz_tokenizer_json (the
# tokenizer.json loader, then encode/decode round trips on the loaded tokenizer) and
# fuzz_chat (the chat encoder, the conversation object and the DSML parser),
# fuzz_json_schema (structured output's schema compiler, matcher and vocabulary mask); with
# ../shared also fuzz_tokenizer (any text through DeepSeek's own tokenizer).
# Built straight from the few sources they need, so no CMake configure is involved.
#
#   FUZZ_SECONDS   seconds per target (default 12: seven targets in four waves of two stay
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
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
-fno-sanitize-recover=undefined -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc \
$(pkg-config --cflags libcjson)"
LIBS="$(pkg-config --libs libcjson) -lm"
TOK_SRC="src/tok/tokenizer.c src/tok/tokenizer_encode.c src/tok/tokenizer_decode.c"
TOK_LIBS="$(pkg-config --libs libpcre2-8) -lpthread"

# 0 when target $1 is selected by FUZZ_ONLY (or FUZZ_ONLY is empty)
selected() { [ -z "${FUZZ_ONLY:-}" ] || case " $FUZZ_ONLY " in *" $1 "*) true ;; *) false ;; esac; }

build() { # name sources...
    name=$1
    shift
    selected "$name" || return 0
    echo "fuzz.sh: building $OUT/$name"
    # shellcheck disable=SC2086
    $CC_FUZZ $CFLAGS -o "$OUT/$name" "tests/fuzz/$name.c" "$@" src/util/err.c src/util/file.c $LIBS
}

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

# Up to $JOBS builds or runs at once, each in the background; `drain` waits for all of them
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

# the tokenizer target needs DeepSeek's tokenizer.json (../shared) and PCRE2
DSV4_TOKENIZER=${DSV4_TOKENIZER:-../shared/tokenizer/tokenizer.json}
have_tok=0
if [ -f "$DSV4_TOKENIZER" ]; then
    have_tok=1
    export DSV4_TOKENIZER
else
    echo "fuzz.sh: $DSV4_TOKENIZER not found, fuzz_tokenizer skipped"
fi

bg build fuzz_safetensors src/model/safetensors.c
bg build fuzz_config src/model/config.c
bg build fuzz_kvfile src/cache/kvfile.c src/util/crc32c.c
# shellcheck disable=SC2086
bg build fuzz_tokenizer_json $TOK_SRC $TOK_LIBS
# shellcheck disable=SC2086
bg build fuzz_chat src/tok/chat.c src/tok/dsml.c src/tok/pyjson.c src/tok/textbuf.c $TOK_SRC $TOK_LIBS
# shellcheck disable=SC2086
bg build fuzz_json_schema src/sample/json_schema.c src/sample/json_match.c src/sample/json_number.c src/sample/json_regex.c src/sample/json_reads.c src/sample/json_vocab.c $TOK_SRC $TOK_LIBS
# shellcheck disable=SC2086
[ $have_tok -eq 0 ] || bg build fuzz_tokenizer $TOK_SRC $TOK_LIBS
drain
bg run fuzz_safetensors safetensors 8192
bg run fuzz_config config 8192
bg run fuzz_kvfile kvfile 16384
bg run fuzz_tokenizer_json tokenizer_json 16384
bg run fuzz_chat chat 8192
bg run fuzz_json_schema json_schema 4096
[ $have_tok -eq 0 ] || bg run fuzz_tokenizer tokenizer 4096
drain
echo "fuzz.sh: no crashes"
