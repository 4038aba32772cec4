#!/bin/sh
# The whole test suite: installs the dependencies (Debian packages), runs the libFuzzer
# targets for a short bounded time, every test of the default (Release) build (warnings are
# errors there), then the tests labelled "fast" and "golden" again in an AddressSanitizer +
# UndefinedBehaviorSanitizer build.
set -e
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
sh scripts/setup.sh --test

sh scripts/fuzz.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSV4_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
(cd build && ctest --output-on-failure -j "$JOBS")

cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DDSV4_SANITIZE=ON >/dev/null
cmake --build build-san -j "$JOBS"
(cd build-san && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS" -L "fast|golden")
