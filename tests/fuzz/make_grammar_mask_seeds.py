#!/usr/bin/env python3
"""make_grammar_mask_seeds.py — the seeds of fuzz_grammar_mask (tests/fuzz/corpus/grammar_mask):
a grammar, a NUL byte, then steering bytes (each picks the next token among those allowed).
The grammars: test_grammar's (brackets, arithmetic, a JSON-like value, counts and negated
classes, UTF-8), a SQL-ish one, an ambiguous one, and counts past the mask key's clamp.

    python3 tests/fuzz/make_grammar_mask_seeds.py tests/fuzz/corpus/grammar_mask
"""
import os
import sys

GRAMMARS = {
    'parens': 'root ::= p*\np ::= "(" p* ")" | "[" p* "]"\n',
    'arith': 'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
             'factor ::= num | "(" expr ")" | "-" factor\nnum ::= [0-9]+ ("." [0-9]{1,3})?\n',
    'json': 'root ::= value\nvalue ::= obj | list | str | num | "true" | "false" | "null"\n'
            'obj ::= "{" ws (str ws ":" ws value ("," ws str ws ":" ws value)*)? "}"\n'
            'list ::= "[" ws (value ws ("," ws value ws)*)? "]"\n'
            'str ::= "\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\nt])* "\\""\nnum ::= "-"? [0-9]+\nws ::= [ \\t\\n]{0,4}\n',
    'counts': 'root ::= id{2,4} ("-" [^-\\n]{1,3}){0,2} "!"?\nid ::= [a-z_][^\\x00-\\x40]{,2}\n',
    'utf8': 'root ::= ("caf\\u00e9" | "\xe4\xb8\xad" | [\\U0001F600-\\U0001F64F])+ "."?\n',
    'sql': 'root ::= "SELECT " cols " FROM " name (" WHERE " name "=" num)?\ncols ::= name (", " name)*\n'
           'name ::= [a-z] [a-z0-9_]{0,7}\nnum ::= [0-9]{1,3}\n',
    'ambiguous': 'root ::= x\nx ::= "a" x "b" | "a" x "c" | "(" x ")" | ""\n',
    # counts past the clamp of the mask's key (the vocabulary's longest token + 2): one level,
    # nested counts, copies of one or two characters under an alternative, copies moved
    'clamp': 'root ::= "\\"" [^"]{0,30} "\\"" | ([a-c]{3,20} ","){2,14} "." | "y" ([0-9] | "ab"){0,25} "c" | '
             '"<" [a-c]{12}{2} "!"\n',
}
STEERS = [b'', bytes(range(0, 256, 11)), bytes(range(255, 0, -13)), b'\x00' * 24, b'\xff' * 24, b'\x80\x10\xf0\x40' * 6]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, g in GRAMMARS.items():
        for k, s in enumerate(STEERS[:4] if name != 'json' else STEERS):
            with open(os.path.join(out, f'{name}_{k}'), 'wb') as f:
                f.write(g.encode('utf-8') + b'\x00' + s)


if __name__ == '__main__':
    main()
