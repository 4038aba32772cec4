#!/bin/sh
# Installs the pinned client libraries (package-lock.json) into DIR/node_modules with
# `npm ci`, unless the same lock file was installed there already.
set -e
src=$(dirname "$0")
dir=$1
mkdir -p "$dir"
if [ -f "$dir/node_modules/.dsv4-lock" ] && cmp -s "$src/package-lock.json" "$dir/node_modules/.dsv4-lock"; then
    exit 0
fi
cp "$src/package.json" "$src/package-lock.json" "$dir/"
cd "$dir"
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json node_modules/.dsv4-lock
