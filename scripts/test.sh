#!/bin/sh
# The whole test suite: the default (Release) build with every test, then the
# AddressSanitizer + UndefinedBehaviorSanitizer build on the tests labelled "fast",
# then the libFuzzer targets for a short bounded time.
set -e
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
(cd build && ctest --output-on-failure -j "$JOBS")

cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DDSV4_SANITIZE=ON >/dev/null
cmake --build build-san -j "$JOBS"
(cd build-san && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS" -L fast)

if [ -x scripts/fuzz.sh ]; then
    sh scripts/fuzz.sh
fi
