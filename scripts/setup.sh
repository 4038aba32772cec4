#!/bin/sh
# Installs the Debian/Ubuntu packages dsv4 needs, as root or through sudo; does nothing when
# they are all present.
#
#   sh scripts/setup.sh          what building and running need (the demo, generate, chat)
#   sh scripts/setup.sh --test   also what the test suite needs: clang with its sanitizer and
#                                fuzzer runtime, Open MPI (multi-rank tests; the build uses it
#                                when present), python3 + numpy (test scripts, oracle checks),
#                                ninja (test.sh's build trees)
#
# Supported: Debian 12 (bookworm), Ubuntu 22.04 (jammy) and 24.04 (noble). Elsewhere it stops
# with the list of packages to install by other means (unless they are all installed).
# Package names per release: the same everywhere except clang's sanitizer and libFuzzer
# runtime, which follows the default clang (bookworm: clang 14, runtime split out as
# libclang-rt-14-dev; jammy: clang 14, runtime inside libclang-common-14-dev; noble:
# clang 18, libclang-rt-18-dev).
#
#   DSV4_OS_RELEASE  the os-release file to read (default /etc/os-release; for tests)
set -e
RUN="build-essential cmake pkg-config libcjson-dev libpcre2-dev libssl-dev libmicrohttpd-dev libedit-dev libnuma-dev"
TEST="clang libopenmpi-dev openmpi-bin python3 python3-numpy util-linux ninja-build"

OS_RELEASE=${DSV4_OS_RELEASE:-/etc/os-release}
# shellcheck disable=SC1090
[ -r "$OS_RELEASE" ] && . "$OS_RELEASE"
case "${ID:-unknown}:${VERSION_ID:-}" in
    debian:12)    CLANG_RT=libclang-rt-14-dev ;;
    ubuntu:22.04) CLANG_RT=libclang-common-14-dev ;;
    ubuntu:24.04) CLANG_RT=libclang-rt-18-dev ;;
    *)            CLANG_RT="" ;;
esac
PACKAGES=$RUN
[ "$1" = "--test" ] && PACKAGES="$RUN $TEST $CLANG_RT"

missing=""
if command -v dpkg-query >/dev/null 2>&1; then
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && exit 0
fi
if [ -z "$CLANG_RT" ]; then
    echo "setup.sh: ${PRETTY_NAME:-this system} is not one this script supports (Debian 12," >&2
    echo "Ubuntu 22.04, Ubuntu 24.04). Install the equivalents of:$PACKAGES" >&2
    echo "(and for --test a clang with its sanitizer/libFuzzer runtime), then build with cmake." >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: apt-get not found on ${PRETTY_NAME:-this system}; install:$PACKAGES" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup.sh: run as root (no sudo) to install:$missing" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
echo "setup.sh: installing$missing" >&2
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
