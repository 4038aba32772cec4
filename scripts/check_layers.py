#!/usr/bin/env python3
"""check_layers.py — every #include "..." edge of the repository against the allowed graph.

Layers point one way (README, issue 13):

    tools, bench/, examples/  ->  public headers (include/) only (the CLI starts the HTTP
                                  server through include/dsv4_server.h); developer tools
                                  and benchmarks also through the ONE internal header below
    serve/ (HTTP server)      ->  public headers only, and its own headers
    serve, bench (src/bench)  ->  engine, tok, sample and everything below
    engine -> attn, moe, hc, dist -> cache -> model -> kernels -> util

A module may include its own headers, the public headers, and any module of a lower rank
that its row below lists (directly or through a lower module's row: the allowed set is the
transitive closure). There are no per-file exceptions. Edges that owners are still
removing are listed, exactly, in PENDING; the check fails if one of them is gone (so the
list only shrinks) or if any other edge breaks the graph.

Usage: check_layers.py [REPO_ROOT]   (exit 0: clean, 1: violations, 2: usage)
"""
import os
import re
import sys

# module -> the modules it may include directly (src/<module>/...); closed transitively
ALLOWED = {
    "util": [],
    "kernels": ["util"],
    "model": ["kernels", "util"],
    "cache": ["model"],
    "hc": ["model"],
    "moe": ["model"],
    "attn": ["cache", "model"],
    "dist": ["moe", "model"],
    "engine": ["attn", "moe", "hc", "cache", "dist"],
    "tok": ["util"],
    "sample": ["kernels", "util"],
    "serve": ["engine", "tok", "sample"],
    "bench": ["engine"],
}

# The one declared internal header: developer tools (gen-model, info, bench, run's dumps)
# and benchmarks reach the library's internals through it and nothing else.
INTERNAL = "dsv4_internal.h"

# Wrong-way edges whose owners are removing them: (including file, included header).
# Each entry names who removes it. Empty this list; never add to it.
PENDING = {
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def closure():
    out = {}
    for m in ALLOWED:
        seen, todo = set(), list(ALLOWED[m])
        while todo:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo.extend(ALLOWED[d])
        out[m] = seen
    return out


def sources(root, top):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), root)


def verdict(path, inc, reach, public, src_modules):
    """None when the edge path -> inc is allowed, else the reason."""
    parts = path.split(os.sep)
    here = os.path.dirname(path)
    head = inc.split("/")[0]
    if inc in public:
        return None
    if parts[0] == "include":
        return "public headers include only public headers"
    if parts[0] == "src" and len(parts) == 2:
        # src/dsv4_internal.h itself: it exists to reach every internal header
        return None if parts[1] == INTERNAL and head in src_modules else "unknown top-level source"
    if parts[0] == "src":
        mod = parts[1]
        if mod not in ALLOWED:
            return "module src/%s has no row in ALLOWED" % mod
        if head == mod:
            return None
        if head not in src_modules:
            return "not a library header"
        if head not in reach[mod]:
            return "%s may not include %s" % (mod, head)
        return None
    if parts[0] == "serve":
        if head == "serve" and os.path.exists(inc):
            return None  # the server's own headers
        return "serve/ reaches the library through public headers only"
    if parts[0] in ("tools", "bench", "examples"):
        if "/" not in inc and os.path.exists(os.path.join(here, inc)):
            return None  # the program's own header, next to it
        if inc == INTERNAL and parts[0] != "examples":
            return None
        return "%s reach the library through public headers%s" % (
            parts[0], "" if parts[0] == "examples" else " and " + INTERNAL)
    return None  # tests/ are white-box


def main():
    if len(sys.argv) > 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = sys.argv[1] if len(sys.argv) == 2 else os.path.join(os.path.dirname(__file__), "..")
    os.chdir(root)
    public = set(f for f in os.listdir("include") if f.endswith(".h"))
    src_modules = set(d for d in os.listdir("src") if os.path.isdir(os.path.join("src", d)))
    reach = closure()
    bad, seen_pending, n_edges = [], set(), 0
    for top in ("include", "src", "serve", "tools", "bench", "examples"):
        if not os.path.isdir(top):
            continue
        for path in sources(".", top):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                n_edges += 1
                why = verdict(path, inc, reach, public, src_modules)
                if why is None:
                    continue
                if (path, inc) in PENDING:
                    seen_pending.add((path, inc))
                    continue
                bad.append("%s -> %s: %s" % (path, inc, why))
    for edge in sorted(set(PENDING) - seen_pending):
        bad.append("%s -> %s: listed in PENDING but gone or allowed now: delete the entry" % edge)
    for line in bad:
        print("check_layers: " + line)
    print("check_layers: %d include edges, %d violations, %d pending (%s)" % (
        n_edges, len(bad), len(seen_pending),
        ", ".join(sorted(set(PENDING[e] for e in seen_pending))) or "none"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
