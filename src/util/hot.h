/* hot.h — the hot kernels' addresses fixed by construction (issue 16).
 *
 * Where a kernel's code lies mod 4 KB (the L1i sets, the branch predictors' and the op
 * cache's indexing) and mod 64 (its loops' lines and fetch blocks) moved the end-to-end
 * figures by 2-8 % when an unrelated change resized the code linked before it (BENCHMARKS.md,
 * sessions 19, 21, 22: a 16-byte shift cost batch 1 6-8 % in pairs). So each function that
 * a profile of prefill, batch-1 and batch-16 decode finds hot (BENCHMARKS.md, "Session 23,
 * hot") is declared with its own offset in a 4 KB page:
 *
 *     DSV4_HOT_AT(gemv_fp4_n1, 0x6a0)
 *     static void gemv_fp4_n1(...) { ... }
 *
 * It goes in section ".text.sorted.dsv4.<name>.1", after a pad section ".<name>.0" that is
 * aligned to 4 KB and holds <offset> bytes of int3. GNU ld's default script places all
 * ".text.sorted.*" sections in one run sorted by name (after .text.unlikely / .startup / .hot,
 * before plain .text), so the function starts at <offset> mod 4096 whatever precedes it and
 * whatever the other hot functions' sizes: no change outside a hot function moves it, and a
 * hot function that grows past the next one's offset only costs a page of padding. The
 * offsets are those the functions had in main 40719b3 (the layout the session-21/22 pads
 * kept), so adopting this moved no hot function mod 4096. Offsets are multiples of 16
 * (GCC's function alignment). A static function's clones (.constprop, .isra) share its
 * section: the first one emitted gets the offset. Put it on the definition only (on a
 * declaration too, it pads twice).
 *
 * A section attribute also stops GCC's hot/cold splitting of the function (none of these
 * had a .cold part: the instructions are those of plain .text). Other toolchains and
 * non-ELF targets get plain .text. Checked by scripts/check_hot_layout.py (ctest
 * layout_hot): each lies at its declared offset, and a pad linked before the library moves
 * none of them. */
#ifndef DSV4_UTIL_HOT_H
#define DSV4_UTIL_HOT_H

#if defined(__GNUC__) && defined(__ELF__) && defined(__x86_64__)
#define DSV4_HOT_AT(name, off) DSV4_HOT_AT_(name, off)
#define DSV4_HOT_AT_(name, off)                                                                    \
    __asm__(".pushsection .text.sorted.dsv4." #name ".0,\"ax\",@progbits\n\t.balign 4096\n\t"      \
            ".skip " #off ", 0xcc\n\t.popsection");                                                \
    __attribute__((section(".text.sorted.dsv4." #name ".1")))
#else
#define DSV4_HOT_AT(name, off)
#endif

#endif
