// test_gbnf.js — grammar-guided decoding as vLLM (structured_outputs.grammar,
// guided_grammar), SGLang (ebnf) and llama.cpp (grammar) clients send it, through the official
// `openai` client (the fields at the top level, where Python's extra_body puts them): GBNF /
// EBNF grammars with recursion (arithmetic, nested lists, balanced brackets with counts and
// negated classes), on chat and completions, streaming, n > 1, logprobs, a stop string, a
// thinking answer; temperature 1 over several seeds, so a broken mask would show. Every answer
// that ends ("stop") is a sentence of its grammar by a small recognizer written here from the
// grammar's rules; a cut one ("length") is a prefix of one. The compiler's refusals are 400s
// naming the field; an ambiguous grammar's tokens that would pass the parse-stack bound are
// left out, and a mask that passes the work budget ends its request with an error that says so.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, run } = require('./harness');

const msgs = [{ role: 'user', content: 'Write an expression.' }];

// ---- a recognizer: parsers yield every end position; st.more when one ran out of text ----
const lit = (w) => function* (s, i, st) {
  const have = s.slice(i, i + w.length);
  if (have === w) yield i + w.length;
  else if (i + have.length === s.length && w.startsWith(have)) st.more = true;
};
const cls = (re) => function* (s, i, st) {
  if (i >= s.length) { st.more = true; return; }
  const c = String.fromCodePoint(s.codePointAt(i));
  if (re.test(c)) yield i + c.length;
};
const seq = (...ps) => function* (s, i, st) {
  if (!ps.length) { yield i; return; }
  for (const j of ps[0](s, i, st)) yield* seq(...ps.slice(1))(s, j, st);
};
const alt = (...ps) => function* (s, i, st) { for (const p of ps) yield* p(s, i, st); };
const rep = (p, m, n) => function* (s, i, st) { // p{m,n}, n Infinity for no bound (p never empty)
  if (m <= 0) yield i;
  if (n <= 0) return;
  for (const j of p(s, i, st)) if (j > i) yield* rep(p, m - 1, n - 1)(s, j, st);
};
const ref = (f) => function* (s, i, st) { yield* f()(s, i, st); };
// 'complete', 'prefix' (some continuation is a sentence) or 'bad'
function recognize(p, s) {
  const st = { more: false };
  for (const j of p(s, 0, st)) if (j === s.length) return 'complete';
  return st.more ? 'prefix' : 'bad';
}

// arithmetic (recursive through parentheses and unary minus), llama.cpp's layout
const ARITH = `# arithmetic
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")" | "-" factor
num    ::= [0-9]{1,4} ("." [0-9]{1,2})?
`;
const A = {};
A.num = seq(rep(cls(/[0-9]/), 1, 4), rep(seq(lit('.'), rep(cls(/[0-9]/), 1, 2)), 0, 1));
A.factor = alt(ref(() => A.num), seq(lit('('), ref(() => A.expr), lit(')')), seq(lit('-'), ref(() => A.factor)));
A.term = seq(ref(() => A.factor), rep(seq(alt(lit('*'), lit('/')), ref(() => A.factor)), 0, Infinity));
A.expr = seq(ref(() => A.term), rep(seq(alt(lit('+'), lit('-')), ref(() => A.term)), 0, Infinity));

// a JSON-like list (xgrammar's EBNF layout: a rule continued over lines), strings with escapes
const LIST = `root ::= list
list ::= "[" (value ("," " "? value)*)? "]"
value ::= list | str | [0-9]{1,3}
  | "true" | "null"
str ::= "\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\n] ){0,8} "\\""
`;
const L = {};
L.str = seq(lit('"'), rep(alt(cls(/[^"\\\x00-\x1f]/u), seq(lit('\\'), cls(/["\\n]/))), 0, 8), lit('"'));
L.value = alt(ref(() => L.list), ref(() => L.str), rep(cls(/[0-9]/), 1, 3), lit('true'), lit('null'));
L.list = seq(lit('['), rep(seq(ref(() => L.value), rep(seq(lit(','), rep(lit(' '), 0, 1), ref(() => L.value)), 0, Infinity)), 0, 1), lit(']'));

// balanced brackets, each holding a short word of letters that are not 'q' (a negated class)
const BRACKETS = `root ::= group{1,3} "."?
group ::= "(" word? group* ")" | "<" word? ">"
word ::= [^q\\x00-\\x60{-\\U0010FFFF]{1,5}
`;
const B = {};
B.word = rep(cls(/^[a-pr-z]$/u), 1, 5);
B.group = alt(seq(lit('('), rep(ref(() => B.word), 0, 1), rep(ref(() => B.group), 0, Infinity), lit(')')),
  seq(lit('<'), rep(ref(() => B.word), 0, 1), lit('>')));
const BR = seq(rep(ref(() => B.group), 1, 3), rep(lit('.'), 0, 1));

const GRAMMARS = { arith: [ARITH, A.expr], list: [LIST, L.list], brackets: [BRACKETS, BR] };

function check(name, text, finish, what) {
  const [, p] = GRAMMARS[name];
  assert(finish === 'stop' || finish === 'length', `${what}: finish ${finish}`);
  const got = recognize(p, text);
  if (finish === 'stop') assert.strictEqual(got, 'complete', `${what}: '${text}' is not a sentence of ${name}`);
  else assert(got !== 'bad', `${what}: '${text}' is not a prefix of a sentence of ${name}`);
  return finish === 'stop';
}

run('server_grammar', async () => {
  // the recognizers themselves
  assert.strictEqual(recognize(A.expr, '(1+2)*-3.25'), 'complete');
  assert.strictEqual(recognize(A.expr, '(1+'), 'prefix');
  assert.strictEqual(recognize(A.expr, '1+)'), 'bad');
  assert.strictEqual(recognize(L.list, '[1, "a\\n", [true,null], []]'), 'complete');
  assert.strictEqual(recognize(L.list, '[1,]'), 'bad');
  assert.strictEqual(recognize(BR, '(ab<c>(d))<e>.'), 'complete');
  assert.strictEqual(recognize(BR, '(aq)'), 'bad');

  const srv = await start(['--max-seqs', '4', '--max-context', '1024']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const base = { model: 'm', messages: msgs, temperature: 1.0, max_tokens: 40 };
  let ended = 0, answers = 0;
  const seen = [];
  for (let seed = 1; seed <= 3; seed++) {
    const a = await client.chat.completions.create({ ...base, seed, structured_outputs: { grammar: ARITH } });
    ended += check('arith', a.choices[0].message.content, a.choices[0].finish_reason, `arith seed ${seed}`);
    const b = await client.chat.completions.create({ ...base, seed, guided_grammar: LIST, logprobs: true, top_logprobs: 2 });
    ended += check('list', b.choices[0].message.content, b.choices[0].finish_reason, `list seed ${seed}`);
    assert(b.choices[0].logprobs.content.map((t) => t.token).join('').startsWith(b.choices[0].message.content));
    const c = await client.completions.create({ model: 'm', prompt: 'Brackets:', temperature: 1, seed, max_tokens: 40,
      grammar: BRACKETS });
    ended += check('brackets', c.choices[0].text, c.choices[0].finish_reason, `brackets seed ${seed}`);
    const d = await client.chat.completions.create({ ...base, seed: seed + 10, ebnf: LIST });
    ended += check('list', d.choices[0].message.content, d.choices[0].finish_reason, `ebnf seed ${seed}`);
    answers += 4;
    seen.push(a.choices[0].message.content, b.choices[0].message.content, c.choices[0].text);
  }
  // streaming, n = 3: each choice's deltas joined are a sentence (or a prefix when cut)
  const st = ['', '', ''], fin = [null, null, null];
  for await (const ch of await client.chat.completions.create({ ...base, seed: 9, n: 3, stream: true,
    structured_outputs: { grammar: ARITH } })) {
    for (const c of ch.choices) {
      st[c.index] += c.delta.content || '';
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 3; i++) ended += check('arith', st[i], fin[i], `stream choice ${i}`);
  answers += 3;
  console.log(`grammar: ${ended} of ${answers} answers ended and are sentences, e.g. ${JSON.stringify(seen.slice(0, 6))}`);
  assert(ended >= 4, 'too few grammar answers ended');
  // the answers differ (the mask is not one path) and the brackets nest somewhere
  assert(new Set(seen).size >= 6, JSON.stringify(seen));
  // completions, streamed, with a stop string: the text before it is a prefix
  let text = '', finish = null;
  for await (const ch of await client.completions.create({ model: 'm', prompt: 'x', temperature: 1, seed: 4,
    max_tokens: 30, grammar: ARITH, stop: ['+'], stream: true })) {
    text += ch.choices[0]?.text || '';
    finish = ch.choices[0]?.finish_reason || finish;
  }
  assert(!text.includes('+') && recognize(A.expr, text) !== 'bad', `stop: '${text}'`);
  // max_tokens cuts: a prefix
  const cut = await client.chat.completions.create({ ...base, seed: 5, max_tokens: 3, guided_grammar: LIST });
  check('list', cut.choices[0].message.content, cut.choices[0].finish_reason, 'cut');
  // thinking: the grammar applies to the answer after the reasoning
  const th = await client.chat.completions.create({ ...base, seed: 3, max_tokens: 64, thinking: { type: 'enabled' },
    guided_grammar: ARITH });
  if (th.choices[0].finish_reason === 'stop') check('arith', th.choices[0].message.content, 'stop', 'thinking');

  // an ambiguous grammar: each "a" multiplies the parse stacks by 17, so a token of two or more
  // "a"s would pass 512: such tokens are left out of the mask, and the answer goes on with "a"
  const AMB = 'root ::= x\nx ::= ' + [...'bcdefghijklmnopq'].map((d) => `"a" x "${d}"`).join(' | ') + ' | "a"';
  const amb = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: msgs, max_tokens: 12,
    guided_grammar: AMB } });
  assert(amb.status === 200 && /^a[a-q]*$/.test(amb.json.choices[0].message.content), amb.body);
  // a grammar whose mask walk passes the work budget (rv-gram's: 8,000 ways to one character,
  // counted 1,000 times): at its first mask, a 400 naming the bound (made at intake: the
  // grammar's fault, whatever the tokens); past a forced first token ("\x01", one id), it ends
  // the request with the bound named (500); streamed, an error event
  const XS = ['x0 ::= [^\\x00]', ...Array.from({ length: 13 }, (_, i) => `x${i + 1} ::= x${i} | x${i}`)];
  const EXP = ['root ::= x13{0,1000}', ...XS].join('\n'), LATE = ['root ::= "\\x01" x13{0,1000}', ...XS].join('\n');
  for (const stream of [false, true]) {
    const first = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: msgs, max_tokens: 4,
      stream, guided_grammar: EXP } });
    assert(first.status === 400 && first.json.error.message.includes("'guided_grammar': the grammar cannot be followed " +
      "from its start: the grammar's token mask needs more than 4194304 expansions and steps"), first.body);
  }
  const big = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: msgs, max_tokens: 4,
    guided_grammar: LATE } });
  assert(big.status === 500 && big.json.error.message.includes('expansions and steps'), big.body);
  const bigs = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: msgs, max_tokens: 4,
    stream: true, guided_grammar: LATE } });
  assert(bigs.status === 200 && bigs.body.includes('expansions and steps') && bigs.body.includes('error'), bigs.body);

  // the bad cases: 400s naming the field, with the line and column
  const bad = async (body, what, url = '/v1/chat/completions') => {
    const r = await http(srv.url + url, { body: { model: 'm', messages: msgs, prompt: 'a', max_tokens: 4, ...body } });
    assert.strictEqual(r.status, 400, `${JSON.stringify(body)}: ${r.body}`);
    assert(r.json.error.message.includes(what), `${r.json.error.message} lacks ${what}`);
  };
  await bad({ guided_grammar: 'root ::= expr' }, "'guided_grammar': the grammar at line 1, column 10: undefined rule 'expr'");
  await bad({ structured_outputs: { grammar: 'root ::= e\ne ::= e "+" "1" | "1"' } },
    "'structured_outputs.grammar': the grammar at line 2, column 1: left recursion");
  await bad({ ebnf: 'start: "a"' }, "'ebnf': the grammar is in Lark's syntax");
  await bad({ grammar: 'expr ::= "a"' }, "'grammar': the grammar has no rule named 'root'", '/v1/completions');
  await bad({ grammar: '' }, "'grammar': the grammar is empty");
  await bad({ guided_grammar: 'root ::= ("a"' }, "an unclosed '('");
  await bad({ guided_grammar: 'root ::= "\\q"' }, "bad escape '\\q'");
  await bad({ guided_grammar: 'root ::= "a"{2000}' }, 'repetition bound past 1000');
  await bad({ guided_grammar: 5 }, "'guided_grammar' must be a string (a grammar)");
  await bad({ guided_grammar: 'root ::= "a"', guided_regex: 'a' }, "'guided_regex' and 'guided_grammar'");
  await bad({ grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, "'response_format' and 'grammar'");
  await bad({ guided_grammar: 'root ::= "a"', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] },
    "'guided_grammar' together with 'tools'");
  await bad({ structured_outputs: { structural_tag: '{}' } }, "'structured_outputs.structural_tag' is not supported");
  const resp = await http(srv.url + '/v1/responses', { body: { model: 'm', input: 'hi', guided_grammar: 'root ::= "a"' } });
  assert(resp.status === 400 && resp.json.error.message.includes("'guided_grammar' is not supported on /v1/responses"), resp.body);
  await srv.stop();
});
