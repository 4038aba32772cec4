#!/usr/bin/env python3
"""check_hot_layout.py [--no-avx512] LIB A B [PROG...]: the hot functions' placement (src/util/hot.h).

LIB: the static library; A: a program linking all of it; B: the same after a pad in the
sections linked before the hot ones (tests/util/layout_hot_pad.c); PROG: other programs
linking it. A hot function is one in a section .text.sorted.dsv4.<name>.1, whose pad section
.text.sorted.dsv4.<name>.0 is as long as its declared offset. Checks that the library has
them (and the main kernels among them), that each section's first function lies at its
declared offset mod 4096 in A, that B's pad moved other code but no hot function mod 4096,
and that every hot function lies at the same offset mod 4096 in each PROG as in A.
--no-avx512: LIB was built without the AVX-512 kernels (DSV4_AVX512=OFF), so theirs are not
looked for (and it says so). Exit 1 with the reasons otherwise."""
import collections
import re
import subprocess
import sys

# Functions that must be among the hot ones: one of each area's main kernels. MUST_AVX512 are
# in the files that DSV4_AVX512=OFF compiles to stubs (hc.c's AVX-512 code does not depend on
# it; 36 hot functions remain without them, 30 asked for either way).
MUST = ['dots_rows_avx512', 'worker_main', 'one_task']
MUST_AVX512 = ['gemv_fp4_n1', 'micro4', 'smallm_fp4_fused', 'gemv1_fp8v_xs_bits', 'dsv4_attn_dot_rows_x512']
LEAST = 30
PREFIX = '.text.sorted.dsv4.'


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def hot_functions(lib):
    """(name, size) -> declared offset (the first function of its section) or None (a clone
    after it), from the library's objects (a static name may also be another file's)."""
    pads = {}  # (object, section name) -> size
    obj = None
    for line in run('objdump', '-h', lib).splitlines():
        m = re.match(r'^(\S+):\s+file format', line)
        if m:
            obj = m.group(1)
        p = line.split()
        if len(p) >= 3 and p[1].startswith(PREFIX) and p[1].endswith('.0'):
            pads[(obj, p[1][:-2])] = int(p[2], 16) % 4096  # after its page alignment
    hot = {}
    for line in run('objdump', '-t', lib).splitlines():
        m = re.match(r'^(\S+):\s+file format', line)
        if m:
            obj = m.group(1)
        p = line.split()  # value, flags, section, size, [.hidden], name
        sec = [i for i, t in enumerate(p) if t.startswith(PREFIX) and t.endswith('.1')]
        if sec and 'F' in p[1:sec[0]] and len(p) > sec[0] + 2:
            first = int(p[0], 16) == 0
            hot[(p[-1], int(p[sec[0] + 1], 16))] = pads.get((obj, p[sec[0]][:-2])) if first else None
    return hot


def functions(prog):
    """(name, size) -> sorted addresses of the program's function symbols."""
    d = collections.defaultdict(list)
    for line in run('nm', '-S', '--defined-only', prog).splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in 'tT':
            d[(p[3], int(p[1], 16))].append(int(p[0], 16))
    return {k: sorted(v) for k, v in d.items()}


def main():
    args = sys.argv[1:]
    avx512 = '--no-avx512' not in args
    args = [x for x in args if x != '--no-avx512']
    if len(args) < 3:
        sys.exit(__doc__)
    lib, a, b, progs = args[0], args[1], args[2], args[3:]
    must = MUST + MUST_AVX512 if avx512 else MUST
    if not avx512:
        print('check_hot_layout: SKIPPED in part: %s was built without the AVX-512 kernels (DSV4_AVX512=OFF); '
              'not looked for: %s' % (lib, ' '.join(MUST_AVX512)))
    hot = hot_functions(lib)
    fa, fb = functions(a), functions(b)
    mod = lambda f, n: [x % 4096 for x in f[n]]
    names = lambda ns: ' '.join(sorted(n[0] for n in ns)[:8])
    bad = []
    missing = [m for m in must if not any(n[0].split('.')[0] == m for n in hot)]
    if len(hot) < LEAST or missing:
        bad.append('%d hot functions in %s (expected >= %d), missing %s' % (len(hot), lib, LEAST, missing))
    there = [m for m in MUST_AVX512 if not avx512 and any(n[0].split('.')[0] == m for n in hot)]
    if there:
        bad.append('--no-avx512, but %s holds the AVX-512 kernels %s' % (lib, there))
    in_a = [n for n in hot if n in fa]
    if len(in_a) < len(hot):
        bad.append('%d hot functions not in %s: %s' % (len(hot) - len(in_a), a, names(set(hot) - set(in_a))))
    off = [n for n in in_a if hot[n] is not None and mod(fa, n) != [hot[n]]]
    if off:
        bad.append('%d hot functions not at their declared offsets in %s: %s' % (len(off), a, names(off)))
    moved = [n for n in in_a if n in fb and mod(fa, n) != mod(fb, n)]
    if moved:
        bad.append('the pad moved %d hot functions mod 4096: %s' % (len(moved), names(moved)))
    others = [n for n in fa if n not in hot and n in fb and len(fa[n]) == 1 and len(fb[n]) == 1]
    if not any((fb[n][0] - fa[n][0]) % 4096 for n in others):
        bad.append('the pad moved no other function mod 4096: the check proves nothing')
    for prog in progs:
        fp = functions(prog)
        off = [n for n in in_a if n in fp and mod(fp, n) != mod(fa, n)]
        if off:
            bad.append('%d hot functions lie elsewhere mod 4096 in %s than in %s: %s'
                       % (len(off), prog, a, names(off)))
    for line in bad:
        print('check_hot_layout: ' + line)
    print('check_hot_layout: %d hot functions, %d with a declared offset, %d found in %s%s'
          % (len(hot), sum(v is not None for v in hot.values()), len(in_a), a, ', FAIL' if bad else ', ok'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
