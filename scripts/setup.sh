#!/bin/sh
# Installs every build and test dependency from Debian packages (run as root, or with sudo).
# Does nothing when they are all present already.
set -e
PACKAGES="build-essential cmake pkg-config libcjson-dev libpcre2-dev libssl-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin
clang libclang-rt-14-dev python3 python3-numpy"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "setup.sh: installing$missing" >&2
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
