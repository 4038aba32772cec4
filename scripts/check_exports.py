#!/usr/bin/env python3
"""check_exports.py — the shared library exports exactly the public API.

    check_exports.py LIBDSV4_SO HEADER...

Public API = every function declared DSV4_API in the given headers (include/*.h). The check
fails when a function declared in a public header lacks DSV4_API, when a DSV4_API function
is not exported (declared but not built, or hidden), or when the library exports anything
else (an internal symbol escaping -fvisibility=hidden). Exit 0: clean, 1: mismatch, 2: usage.
"""
import re
import subprocess
import sys

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# a declaration at file scope: starts at column 0, names dsv4_* followed by '('
DECL = re.compile(r"^(?!typedef|static|#)([^\n;{}()]*?)\b(dsv4_\w+)\s*\(", re.M)


def declared(headers):
    api, bare = set(), []
    for h in headers:
        with open(h, encoding="utf-8") as f:
            text = COMMENT.sub("", f.read())
        for m in DECL.finditer(text):
            if re.search(r"\bDSV4_API\b", m.group(1)):
                api.add(m.group(2))
            elif "(" not in m.group(1) and "=" not in m.group(1):
                bare.append("%s: %s" % (h, m.group(2)))
    return api, bare


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and not parts[2].startswith("_"):
            names.add(parts[2].split("@")[0])
    return names


def main():
    if len(sys.argv) < 3:
        print("usage: check_exports.py LIBDSV4_SO HEADER...", file=sys.stderr)
        return 2
    api, bare = declared(sys.argv[2:])
    have = exported(sys.argv[1])
    problems = ["declared without DSV4_API: " + b for b in bare]
    problems += ["DSV4_API but not exported: " + n for n in sorted(api - have)]
    problems += ["exported but not public: " + n for n in sorted(have - api)]
    for p in problems:
        print("check_exports: " + p)
    print("check_exports: %d public functions, %d exported symbols, %d problems" % (
        len(api), len(have), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
