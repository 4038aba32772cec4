#!/usr/bin/env python3
"""check_prefetch_kept.py [--no-avx512] LIB: the hint loops made only of prefetches are in the built code.

A loop whose only statements are prefetches computes no value, so no test of results can see
it go, and GCC 12 at -O2 deletes such loops when it can work out their trip count
(src/util/prefetch.h): 77a2bab's rewrite of attention.c's two left that object without a
single prefetch instruction while every test passed. This reads LIB's objects (objdump -d)
and checks that the functions named below hold at least their count of prefetch
instructions. A function renamed, split or inlined elsewhere fails too: update the table
with the code. --no-avx512: LIB was built without the AVX-512 kernels (DSV4_AVX512=OFF, their
files compiled to stubs), so their rows are skipped, and it says so. Exit 1 with the reasons
otherwise."""
import re
import shutil
import subprocess
import sys

# (object, functions, prefetch instructions at least in them together, what they are): the
# loop's own function is listed beside the one it is inlined into, for builds that keep it
# apart (-O0). The objects in AVX512_OBJECTS hold code only when the AVX-512 kernels are built.
AVX512_OBJECTS = ('idx_approx_x512.c.o',)
MUST = [
    ('attention.c.o', ('row_heads', 'dsv4_rows_to_l2'), 1, "a decode row's K=V list toward L2 (attn/rows_l2.h)"),
    ('attention.c.o', ('row_task', 'row_prefetch_next'), 2,
     "the next prefill row's q and output rows (row_prefetch_next)"),
    ('idx_approx_x512.c.o', ('approx_avx512', 'prefetch_keys'), 1, "the next 32 indexer keys toward L1 (prefetch_keys)"),
    ('idx_approx_x512.c.o', ('approx_few_avx512', 'fq_run'), 1, "the next block's key lines, one a dot (fq_run)"),
    ('idx_approx_avx2.c.o', ('approx_panel_avx2', 'a2_prefetch_keys'), 1,
     "the next pass's indexer keys toward L1 (a2_prefetch_keys)"),
]


def prefetches(lib):
    """(object, function) -> prefetch instructions in it."""
    out = subprocess.run(['objdump', '-d', '--no-show-raw-insn', lib], capture_output=True, text=True,
                         check=True).stdout
    n, obj, fn = {}, None, None
    for line in out.splitlines():
        m = re.match(r'^(\S+\.o):\s+file format', line)
        if m:
            obj = m.group(1)
            continue
        m = re.match(r'^[0-9a-f]+ <([^>]+)>:$', line)
        if m:
            fn = m.group(1)
            n.setdefault((obj, fn), 0)
            continue
        if fn and re.search(r'\bprefetch\w*\s', line):
            n[(obj, fn)] += 1
    return n


def main():
    args = sys.argv[1:]
    avx512 = '--no-avx512' not in args
    args = [x for x in args if x != '--no-avx512']
    if len(args) != 1:
        print(__doc__.splitlines()[0])
        return 2
    if shutil.which('objdump') is None:
        print('SKIP: no objdump on PATH (binutils), nothing checked')
        return 0
    n = prefetches(args[0])
    bad = []
    for obj, fns, least, what in MUST:
        if not avx512 and obj in AVX512_OBJECTS:
            if any((obj, f) in n for f in fns):
                bad.append(f'{obj}: --no-avx512, but {" + ".join(fns)} are in the library')
                continue
            print(f'SKIP {obj} {" + ".join(fns)}: built without the AVX-512 kernels (DSV4_AVX512=OFF), not checked ({what})')
            continue
        found = [f for f in fns if (obj, f) in n]
        got = sum(n[(obj, f)] for f in found)
        name = ' + '.join(fns)
        if not found:
            bad.append(f'{obj}: none of {name} ({what})')
        elif got < least:
            bad.append(f'{obj}: {name} hold {got} prefetch instructions, at least {least} expected ({what})')
        else:
            print(f'{obj} {name}: {got} prefetch instructions (>= {least}: {what})')
    for b in bad:
        print('FAIL', b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
