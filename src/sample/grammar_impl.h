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
    /* Counted repetitions as chains of levels (the copies left, this one included): the m
     * copies of X{m,n} written out in their rule, and the nested optionals O(n-m) .. O1
     * after them, are two chains. Level k's positions are cbase[cb0[c] + k - 1] + 0 (the
     * copy's element) and + 1 (where the copy returns when it is a rule: O(k)'s call of
     * O(k-1)); every level >= 2 of a chain has the same elements, so two states that differ
     * only in high levels read the same short texts alike (grammar.c's clamp). Only
     * repetitions of something that always reads a character are chains. */
    int32_t *pchain;        /* (n_e) the chain of position p, -1 none */
    int32_t *plevel;        /* (n_e) its level */
    int32_t *cbase;         /* the chains' levels' first positions */
    int32_t *cb0;           /* (n_chain) chain c's levels start at cbase[cb0[c]] */
    int n_chain;
};

#endif
