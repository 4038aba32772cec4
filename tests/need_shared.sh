#!/bin/sh
# need_shared.sh SHARED_DIR COMMAND... — runs COMMAND; when the shared/ directory (spec,
# golden, tokenizer, oracle) is absent, exits 77 instead (CTest's SKIP_RETURN_CODE for every
# test, tests/CMakeLists.txt) and says why.
dir=$1
shift
if [ ! -d "$dir" ]; then
    echo "SKIP: $dir not found; this test needs ../shared (spec, golden, tokenizer: configure with -DDSV4_SHARED_DIR=DIR)" >&2
    exit 77
fi
exec "$@"
