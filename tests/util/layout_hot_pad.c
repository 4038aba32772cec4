/* layout_hot_pad.c — code of odd sizes in every section that GNU ld's default script puts
 * before the hot ones (.text.unlikely, .text.startup, .text.hot) and in plain .text, linked
 * before the library: the change elsewhere that util/hot.h must not let move a hot kernel. */
__asm__(".pushsection .text.unlikely,\"ax\",@progbits\n\t.skip 1040, 0xcc\n\t.popsection\n\t"
        ".pushsection .text.startup,\"ax\",@progbits\n\t.skip 720, 0xcc\n\t.popsection\n\t"
        ".pushsection .text.hot,\"ax\",@progbits\n\t.skip 272, 0xcc\n\t.popsection\n\t"
        ".pushsection .text,\"ax\",@progbits\n\t.skip 48, 0xcc\n\t.popsection");
