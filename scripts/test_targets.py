#!/usr/bin/env python3
"""test_targets.py — the build targets that a configured tree's selected tests run.

    python3 scripts/test_targets.py BUILD_DIR [LABEL_REGEX]

Prints the names of the targets (one a line) whose artifacts (programs, libraries) appear in
the command, arguments or environment of the tests that `ctest -L LABEL_REGEX` selects in
BUILD_DIR, so that `cmake --build BUILD_DIR --target ...` builds what those tests need and
nothing else (scripts/test.sh's sanitizer stage). The artifacts come from CMake's file API
(codemodel-v2): the script places the query and reconfigures BUILD_DIR once when there is no
reply yet. A test that reaches a program some other way (a path built inside a script) is
not seen: it then fails for the missing file, never passes silently.

Exit 0 with the list; 1 when a selected test names no target at all and nothing was found
(a broken query); 2 on usage errors.
"""
import glob
import json
import os
import re
import subprocess
import sys


def reply_index(build):
    found = sorted(glob.glob(os.path.join(build, ".cmake", "api", "v1", "reply", "index-*.json")))
    return found[-1] if found else None


def artifacts(build):
    """{absolute artifact path: target name} from the file API's codemodel-v2 reply."""
    query = os.path.join(build, ".cmake", "api", "v1", "query", "codemodel-v2")
    index = reply_index(build)
    if not os.path.exists(query) or index is None:
        os.makedirs(os.path.dirname(query), exist_ok=True)
        open(query, "a").close()
        subprocess.run(["cmake", build], check=True, stdout=subprocess.DEVNULL)
        index = reply_index(build)
    if index is None:
        sys.exit("test_targets.py: CMake wrote no file-API reply in %s" % build)
    reply = os.path.dirname(index)
    with open(index) as f:
        idx = json.load(f)
    model = next(r for r in idx["objects"] if r["kind"] == "codemodel")
    with open(os.path.join(reply, model["jsonFile"])) as f:
        code = json.load(f)
    build_dir = code["paths"]["build"]
    out = {}
    for cfg in code["configurations"]:
        for t in cfg["targets"]:
            with open(os.path.join(reply, t["jsonFile"])) as f:
                tj = json.load(f)
            for a in tj.get("artifacts", []):
                p = a["path"] if os.path.isabs(a["path"]) else os.path.join(build_dir, a["path"])
                out[os.path.normpath(p)] = tj["name"]
    return out


def artifact_of(arts, path):
    """The target whose artifact is path, or whose artifact path + "." starts it (the file
    API names a shared library libx.so; $<TARGET_FILE> is libx.so.MAJOR.MINOR.PATCH)."""
    if path in arts:
        return arts[path]
    for a, name in arts.items():
        if path.startswith(a + "."):
            return name
    return None


def add_tests(build):
    """{test name: the quoted words of its add_test line} from BUILD_DIR's CTestTestfile.cmake
    files (ctest's JSON leaves out the command of a test whose program is not built yet)."""
    out = {}
    for root, _, files in os.walk(build):
        if "CTestTestfile.cmake" not in files:
            continue
        with open(os.path.join(root, "CTestTestfile.cmake")) as f:
            for line in f:
                m = re.match(r"add_test\(\[=\[(.*?)\]=\]\s+(.*)\)\s*$", line)
                if m:
                    out[m.group(1)] = [w.replace('\\"', '"') for w in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))]
    return out


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    cmd = ["ctest", "--test-dir", build, "--show-only=json-v1"]
    if len(sys.argv) == 3:
        cmd += ["-L", sys.argv[2]]
    tests = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["tests"]
    commands = add_tests(build)
    arts = artifacts(build)
    names = set()
    for t in tests:
        words = commands.get(t["name"], [])
        for p in t.get("properties", []):
            if p["name"] == "ENVIRONMENT":
                words += [v.split("=", 1)[-1] for v in p["value"]]
        for w in words:
            for part in w.split(";"):
                if os.path.isabs(part):
                    name = artifact_of(arts, os.path.normpath(part))
                    if name:
                        names.add(name)
    if tests and not names:
        print("test_targets.py: no target found for %d tests in %s" % (len(tests), build), file=sys.stderr)
        return 1
    print("\n".join(sorted(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
