#!/bin/sh
# The whole test suite: installs the dependencies (Debian packages), runs the libFuzzer
# targets for a short bounded time, every test of the default (Release) build (warnings are
# errors there), then the tests labelled "fast" and "golden" again in an AddressSanitizer +
# UndefinedBehaviorSanitizer build, and the thread pool and kernel tests in a ThreadSanitizer
# build without MPI.
set -e
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
sh scripts/setup.sh --test

sh scripts/fuzz.sh

# Ninja (setup.sh --test installs it) for the trees this script creates: it builds a list of
# targets in parallel, where make builds one target after another, and it compiles a test's
# sources while the library still links. A tree configured before keeps its generator.
gen() { # build dir -> the -G option for a new tree
    if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then echo "-GNinja"; fi
}
# shellcheck disable=SC2046 # gen prints one word or nothing
cmake $(gen build) -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSV4_WERROR=ON >/dev/null
cmake --build build -j "$JOBS"
# one test more than the CPUs: a few tests mostly wait (peer timeouts, a pty, an idle
# server), and the others use the CPU meanwhile
(cd build && ctest --output-on-failure -j $((JOBS + 1)))

# The sanitizer trees compile the AVX-512 kernels only where this CPU can run them: elsewhere
# their tests skip, so the sanitizers would never see that code run (the Release tree still
# compiles it, warnings as errors). On a Zen 3 (AVX2) that was a third of the ASan tree's
# compile time and half of the TSan tree's.
AVX512=ON
if [ -r /proc/cpuinfo ]; then
    for f in avx512f avx512bw avx512vl avx512dq; do grep -qw "$f" /proc/cpuinfo || AVX512=OFF; done
fi

# -g1 (line tables, enough for the sanitizers' stack traces) instead of -g: the full debug
# info of the inlined SIMD kernels took a third of this build's compile and link time.
# The npm clients come from the Release tree's install (the same lock file), not a second one.
# shellcheck disable=SC2046
cmake $(gen build-san) -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-g1 -DDSV4_SANITIZE=ON \
    "-DDSV4_AVX512=$AVX512" "-DDSV4_NPM_DIR=$PWD/build/tests/server/npm" >/dev/null
# Only the programs and libraries that its tests run (scripts/test_targets.py); make would build
# a target list one target at a time, so without Ninja the whole tree.
if [ "$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' build-san/CMakeCache.txt)" = Ninja ]; then
    # shellcheck disable=SC2046 # one target name a line
    cmake --build build-san -j "$JOBS" --target $(python3 scripts/test_targets.py build-san "fast|golden")
else
    cmake --build build-san -j "$JOBS"
fi
(cd build-san && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$JOBS" -L "fast|golden")

# ThreadSanitizer over the thread pool, the kernels and MoE that run on it, the regex masks
# shared by the n choices of a request (test_regex_mask: two threads on one cache), and one engine
# schedule (test_no_alloc: prefill chunks, batched decodes, MTP and head on 2 threads):
# about 30 s. MPI is off in this tree, which also checks that the library and these
# tests build without it.
TSAN_TESTS="test_threads test_ops test_codec test_cpu test_attn_ops test_fidelity test_cores test_moe test_no_alloc test_regex_mask"
# shellcheck disable=SC2046
cmake $(gen build-tsan) -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DDSV4_TSAN=ON -DDSV4_MPI=OFF "-DDSV4_AVX512=$AVX512" >/dev/null
# shellcheck disable=SC2086 # the list is word-split on purpose
cmake --build build-tsan -j "$JOBS" --target $TSAN_TESTS
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 \
    ctest --output-on-failure -j "$JOBS" -R "^($(echo "$TSAN_TESTS" | tr ' ' '|'))\$")
