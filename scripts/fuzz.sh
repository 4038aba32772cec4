#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a bounded time on its
# seed corpus: fuzz_safetensors (dsv4_st_open_buffer), fuzz_config (dsv4_config_parse),
# fuzz_kvfile (dsv4_kv_parse, the KV snapshot reader), fuzz_tokenizer_json (the
# tokenizer.json loader, then encode/decode round trips on the loaded tokenizer) and
# fuzz_chat (the chat encoder, the conversation object and the DSML parser); with
# ../shared also fuzz_tokenizer (any text through DeepSeek's own tokenizer).
# Built straight from the few sources they need, so no CMake configure is involved.
#
#   FUZZ_SECONDS   seconds per target (default 15: six targets stay within the CI budget)
#   FUZZ_BUILD_DIR binaries, grown corpora and crash artifacts (default build-fuzz)
#   CC_FUZZ        compiler (default clang)
#   FUZZ_ONLY      space-separated target names to build and run (default: all)
#
# A crash, leak, UB report or timeout makes the script fail; the input that caused it is
# left as $FUZZ_BUILD_DIR/<target>-crash-* (reproduce: $FUZZ_BUILD_DIR/<target> FILE).
set -e
cd "$(dirname "$0")/.."
CC_FUZZ=${CC_FUZZ:-clang}
OUT=${FUZZ_BUILD_DIR:-build-fuzz}
SECS=${FUZZ_SECONDS:-15}

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
    # New inputs go to the first (build) directory; the committed seeds stay untouched.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/$name" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$3" \
        $([ -f "tests/fuzz/$name.dict" ] && echo "-dict=tests/fuzz/$name.dict") -artifact_prefix="$OUT/$name-" -print_final_stats=1 \
        "$OUT/corpus_$name" "tests/fuzz/corpus/$2" 2>"$OUT/$name.log" || {
        tail -n 60 "$OUT/$name.log" >&2
        echo "fuzz.sh: $name FAILED (log: $OUT/$name.log)" >&2
        exit 1
    }
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$OUT/$name.log" | sed "s/^/fuzz.sh: $name /"
}

build fuzz_safetensors src/model/safetensors.c
build fuzz_config src/model/config.c
build fuzz_kvfile src/cache/kvfile.c src/util/crc32c.c
# shellcheck disable=SC2086
build fuzz_tokenizer_json $TOK_SRC $TOK_LIBS
# shellcheck disable=SC2086
build fuzz_chat src/tok/chat.c src/tok/dsml.c src/tok/pyjson.c src/tok/textbuf.c $TOK_SRC $TOK_LIBS
run fuzz_safetensors safetensors 8192
run fuzz_config config 8192
run fuzz_kvfile kvfile 16384
run fuzz_tokenizer_json tokenizer_json 16384
run fuzz_chat chat 8192
# the tokenizer target needs DeepSeek's tokenizer.json (../shared) and PCRE2
DSV4_TOKENIZER=${DSV4_TOKENIZER:-../shared/tokenizer/tokenizer.json}
if [ -f "$DSV4_TOKENIZER" ]; then
    export DSV4_TOKENIZER
    # shellcheck disable=SC2086
    build fuzz_tokenizer $TOK_SRC $TOK_LIBS
    run fuzz_tokenizer tokenizer 4096
else
    echo "fuzz.sh: $DSV4_TOKENIZER not found, fuzz_tokenizer skipped"
fi
echo "fuzz.sh: no crashes"
