// ecma_check.js — replays test_json_regex.c's ECMA table through V8: every row must be what
// `new RegExp(pattern, "u").test(text)` answers, so the table is ECMA-262's semantics and not
// a copy of the compiler's.   node tests/sample/ecma_check.js
'use strict';
const fs = require('fs');
const src = fs.readFileSync(__dirname + '/test_json_regex.c', 'latin1');
const table = src.slice(src.indexOf('static const row ECMA[] = {'), src.indexOf('/* outside the subset'));
const esc = { n: 10, t: 9, r: 13, f: 12, v: 11, b: 8, '\\': 92, '"': 34 };
// a C string literal's bytes
function bytes(lit) {
  const out = [];
  for (let i = 0; i < lit.length; i++) {
    if (lit[i] !== '\\') { out.push(lit.charCodeAt(i)); continue; }
    const c = lit[++i];
    if (c === 'x') { out.push(parseInt(lit.substr(i + 1, 2), 16)); i += 2; } else out.push(esc[c]);
  }
  return Buffer.from(out).toString('utf8');
}
const row = /\{((?:\s*"(?:[^"\\]|\\.)*")+),\s*((?:\s*"(?:[^"\\]|\\.)*")+),\s*([01])\}/g;
const lits = (s) => [...s.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => bytes(m[1])).join('');
let n = 0, bad = 0;
for (const m of table.matchAll(row)) {
  const p = lits(m[1]), s = lits(m[2]), want = +m[3];
  n++;
  const got = new RegExp(p, 'u').test(s) ? 1 : 0;
  if (got !== want) { bad++; console.log('differs from V8:', JSON.stringify(p), JSON.stringify(s), 'table', want, 'V8', got); }
}
console.log(`${n} rows, ${bad} differ from V8`);
process.exit(bad || n < 50 ? 1 : 0);
