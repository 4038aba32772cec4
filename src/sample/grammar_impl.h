/* grammar_impl.h — the compiled grammar's layout, shared by its compiler (grammar_compile.c)
 * and its matcher and mask (grammar.c); internal to those two files. */
#ifndef DSV4_GRAMMAR_IMPL_H
#define DSV4_GRAMMAR_IMPL_H

#include "sample/grammar.h"

enum { E_CHAR = 1, E_REF, E_ALT, E_END };

typedef struct gelem { int32_t type, a; } gelem;
typedef struct gclass { int32_t r0, nr; uint64_t ascii[2]; } gclass;

struct gr_grammar {
    gelem *e;               /* (n_e) every alternative's elements, each run ended by E_END */
    int n_e;
    int32_t *alt;           /* (n_alt) the first element of an alternative */
    int32_t *alt0, *nalt;   /* (n_rules) a rule's alternatives: alt[alt0 .. alt0 + nalt) */
    int n_rules, n_alt, root;
    uint32_t *rng;          /* [n_rng][2] the classes' ranges, sorted and disjoint */
    gclass *cls;            /* (n_cls) */
    int n_cls;
};

#endif
