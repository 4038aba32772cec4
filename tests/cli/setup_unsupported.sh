#!/bin/sh
# scripts/setup.sh elsewhere than Debian 12 / Ubuntu 22.04 / 24.04 stops with status 1 and
# says which releases it supports and what to install; a supported release gets past that
# check (here it then stops at the missing apt-get: PATH holds no package tools).
SETUP=$1 TMP=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$TMP" && mkdir -p "$TMP" || fail "mkdir $TMP"
SH=$(command -v sh)
run() { # os-release lines... -> status, output in $TMP/err
    printf '%s\n' "$@" > "$TMP/os-release"
    env PATH=/nonexistent DSV4_OS_RELEASE="$TMP/os-release" "$SH" "$SETUP" --test > "$TMP/out" 2> "$TMP/err"
    echo $?
}
for os in "ID=fedora VERSION_ID=40 PRETTY_NAME=Fedora-40" "ID=debian VERSION_ID=11 PRETTY_NAME=Debian-11" \
          "ID=ubuntu VERSION_ID=20.04 PRETTY_NAME=Ubuntu-20.04"; do
    # shellcheck disable=SC2086
    [ "$(run $os)" = 1 ] || fail "$os: not refused"
    name=${os##*PRETTY_NAME=}
    grep -q "setup.sh: $name is not one this script supports (Debian 12," "$TMP/err" || fail "$os: $(cat "$TMP/err")"
    grep -q "Ubuntu 22.04, Ubuntu 24.04). Install the equivalents of:.*libcjson-dev.*libmicrohttpd-dev" "$TMP/err" ||
        fail "$os: no package list: $(cat "$TMP/err")"
done
for os in "ID=debian VERSION_ID=12 PRETTY_NAME=Debian-12" "ID=ubuntu VERSION_ID=22.04 PRETTY_NAME=Ubuntu-22.04" \
          "ID=ubuntu VERSION_ID=24.04 PRETTY_NAME=Ubuntu-24.04"; do
    # shellcheck disable=SC2086
    [ "$(run $os)" = 1 ] || fail "$os: status"
    name=${os##*PRETTY_NAME=}
    grep -q "setup.sh: apt-get not found on $name; install:" "$TMP/err" || fail "$os: $(cat "$TMP/err")"
done
echo "setup_unsupported: reached the end; every check above exits 1 on failure"
