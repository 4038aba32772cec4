#!/bin/sh
# Installs the build into a temporary prefix, then builds examples/batched_decode.c against
# the installed package twice, with pkg-config only and with find_package(dsv4), and runs
# both on a model (they must load the installed shared library, not the build tree's);
# examples/greedy.c (dsv4_text.h) is built with pkg-config too.
#   install_package.sh BUILD_DIR SOURCE_DIR WORK_DIR MODEL_DIR
set -e
BUILD=$1 SRC=$2 WORK=$3 MODEL=$4
CC=${CC:-cc}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK"
mkdir -p "$WORK"
PREFIX=$WORK/prefix
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null || fail "cmake --install"
for f in include/dsv4.h bin/dsv4; do [ -e "$PREFIX/$f" ] || fail "$f not installed"; done
pc=$(find "$PREFIX" -name dsv4.pc)
[ -n "$pc" ] || fail "dsv4.pc not installed"

# pkg-config only: no path into the source or build tree
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir dsv4)
[ -e "$libdir/libdsv4.a" ] && [ -e "$libdir/libdsv4.so" ] || fail "libraries not in $libdir"
# shellcheck disable=SC2046
$CC -std=c99 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags dsv4) "$SRC/examples/batched_decode.c" \
    -o "$WORK/batched_pc" $(pkg-config --libs dsv4) -Wl,-rpath,"$libdir" || fail "build with pkg-config"
ldd "$WORK/batched_pc" | grep -q "$libdir/libdsv4.so" || fail "batched_pc does not load $libdir/libdsv4.so"
"$WORK/batched_pc" "$MODEL" 2 4 >/dev/null || fail "batched_pc run"
# shellcheck disable=SC2046
$CC -std=c99 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags dsv4) "$SRC/examples/greedy.c" \
    -o "$WORK/greedy_pc" $(pkg-config --libs dsv4) -Wl,-rpath,"$libdir" || fail "build greedy with pkg-config"

# find_package(dsv4)
mkdir -p "$WORK/fp"
cat > "$WORK/fp/CMakeLists.txt" <<EOT
cmake_minimum_required(VERSION 3.18)
project(use_dsv4 C)
find_package(dsv4 0.3 REQUIRED)
add_executable(batched_cmake $SRC/examples/batched_decode.c)
target_link_libraries(batched_cmake PRIVATE dsv4::dsv4)
EOT
cmake -S "$WORK/fp" -B "$WORK/fp/build" -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null || fail "find_package(dsv4)"
cmake --build "$WORK/fp/build" >/dev/null || fail "build with find_package"
"$WORK/fp/build/batched_cmake" "$MODEL" 2 4 >/dev/null || fail "batched_cmake run"
"$PREFIX/bin/dsv4" info --model "$MODEL" >/dev/null || fail "installed dsv4 info"
echo "installed to $PREFIX; built and ran the example with pkg-config and find_package"
