#!/bin/sh
# Installs every build and test dependency from Debian packages (run as root).
set -e
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config \
    libcjson-dev libpcre2-dev \
    libopenmpi-dev openmpi-bin \
    clang libclang-rt-14-dev \
    python3 python3-numpy >/dev/null
