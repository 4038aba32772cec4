// test_format_tools.js — structured output beside tools, and allowed_tools, through the official
// openai client on the random-weight model at temperature 1 (several seeds: a mask that let a
// wrong token through would show as an answer that does not parse or validate):
//  - chat's response_format with tools: tool_choice auto gives the JSON document or a tool
//    call (strict tools' arguments valid, a free tool's name one of the tools), never both,
//    streamed the same as not; required / named: the call alone; none: the document alone;
//    thinking on: the same after the reasoning; /tokenize counts the chat's prompt_tokens;
//  - /v1/responses' text.format with tools, the same way (its chat path);
//  - the guided JSON fields (guided_json, structured_outputs.json / json_object, SGLang's
//    json_schema) with tools, the same way as response_format, every tool_choice;
//  - allowed_tools (chat's {type, allowed_tools: {mode, tools}}, Responses' {type, mode,
//    tools}): every tool in the prompt, the calls restricted to the listed ones (required: one
//    of them is called); bad lists are 400s naming the param.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, run } = require('./harness');

const D = '｜DSML｜';
const F = { type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object',
  properties: { a: { enum: ['p', 'q'] }, n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['a'],
  additionalProperties: false } } };
const G = { type: 'function', function: { name: 'g', parameters: { type: 'object', properties: { x: { type: 'string' } } } } };
const H = { type: 'function', function: { name: 'h', strict: true, parameters: { type: 'object',
  properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } } };
const X = { type: 'object', properties: { v: { enum: ['x', 'y'] } }, required: ['v'], additionalProperties: false };
const FMT = { type: 'json_schema', json_schema: { name: 'out', schema: X, strict: true } };
const messages = [{ role: 'user', content: 'tell me about the weather in paris' }];

// a value of X, and a call's arguments under its tool (a free tool's: any object)
const validDoc = (text) => {
  const v = JSON.parse(text);
  return JSON.stringify(Object.keys(v)) === '["v"]' && ['x', 'y'].includes(v.v);
};
const ARGS = {
  f: (a) => Object.keys(a).every((k) => ['a', 'n'].includes(k)) && ['p', 'q'].includes(a.a) &&
    (!('n' in a) || (Number.isInteger(a.n) && a.n >= 0 && a.n <= 9)),
  g: (a) => typeof a === 'object' && a !== null && !Array.isArray(a),
  h: (a) => JSON.stringify(Object.keys(a)) === '["ok"]' && typeof a.ok === 'boolean',
};

// One answer {content, calls: [[name, args]], finish} checked: ended, it is the document
// alone (want has 'doc') or calls alone of the names in want; cut by max_tokens, what came
// is a beginning of one of them. Returns 'doc', 'call' or 'length'.
function check(what, a, want, valid = validDoc) {
  const calls = a.calls || [];
  const text = (a.content || '').trim();
  for (const [name, args] of calls) {
    assert(want.includes(name), `${what}: called ${name}, not one of ${want}: ${JSON.stringify(a)}`);
    if (a.finish !== 'length') assert(ARGS[name](JSON.parse(args)), `${what}: ${name}(${args}) is not valid`);
  }
  if (a.finish === 'length') {
    assert(!calls.length || !text, `${what}: text beside calls ${JSON.stringify(a)}`);
    assert(!text || text[0] === '{' || (text.startsWith(`<${D}`) && want.some((n) => n !== 'doc')),
      `${what}: ${JSON.stringify(a)}`);
    return 'length';
  }
  if (calls.length) {
    assert.strictEqual(a.finish, 'tool_calls', what);
    assert.strictEqual(text, '', `${what}: text beside calls ${JSON.stringify(a)}`);
    return 'call';
  }
  assert(want.includes('doc'), `${what}: no call ${JSON.stringify(a)}`);
  assert.strictEqual(a.finish, 'stop', what);
  assert(valid(text), `${what}: ${JSON.stringify(text)} is not a value of the schema`);
  return 'doc';
}

const answer = (r) => {
  const c = r.choices[0];
  return { content: c.message.content, reasoning: c.message.reasoning_content, finish: c.finish_reason,
    calls: (c.message.tool_calls || []).map((t) => [t.function.name, t.function.arguments]) };
};

run('server_format_tools', async () => {
  const srv = await start(['--max-context', '1024', '--max-seqs', '8']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const ids = async (text) => {
    const r = await http(srv.url + '/tokenize', { body: { prompt: text, add_special_tokens: false } });
    assert.strictEqual(r.status, 200, r.body);
    return r.json.tokens;
  };
  const bias = (list) => Object.fromEntries(list.map((id) => [id, 100]));
  // +100 on the block opener's tokens: the call (one: parallel_tool_calls false)
  const opener = bias(await ids(`\n\n<${D}tool_calls>\n<${D}invoke name="`));
  const thinkEnd = bias(await ids('</think>'));
  const chat = (extra) => client.chat.completions.create({ model: 'm', max_tokens: 160, temperature: 1, messages,
    tools: [F, G, H], response_format: FMT, ...extra }).then(answer);
  const seen = { doc: 0, call: 0, length: 0 };
  const tally = (k) => { seen[k]++; return k; };

  // tool_choice auto: the document or a call; the same streamed
  const auto = [];
  for (let seed = 1; seed <= 3; seed++) auto.push(await chat({ seed }));
  for (let seed = 1; seed <= 2; seed++) auto.push(await chat({ seed, logit_bias: opener, parallel_tool_calls: false }));
  auto.forEach((a, i) => tally(check(`auto ${i}`, a, ['doc', 'f', 'g', 'h'])));
  assert(seen.doc >= 1 && seen.call >= 1, `auto: ${JSON.stringify(seen)}`);
  for (const [i, extra] of [[0, { seed: 1 }], [3, { seed: 1, logit_bias: opener, parallel_tool_calls: false }]]) {
    const s = await client.beta.chat.completions.stream({ model: 'm', max_tokens: 160, temperature: 1, messages,
      tools: [F, G, H], response_format: FMT, ...extra }).finalChatCompletion();
    const a = answer(s);
    assert.deepStrictEqual([a.content || '', a.calls, a.finish], [auto[i].content || '', auto[i].calls, auto[i].finish],
      `streamed ${i}`);
  }
  // required and named: the call alone (the format has no text to constrain)
  for (let seed = 1; seed <= 2; seed++)
    tally(check(`required ${seed}`, await chat({ seed, tool_choice: 'required', parallel_tool_calls: false }), ['f', 'g', 'h']));
  tally(check('named', await chat({ seed: 1, tool_choice: { type: 'function', function: { name: 'h' } } }), ['h']));
  // none: the document, no tools in the prompt
  const none = await client.chat.completions.create({ model: 'm', max_tokens: 160, temperature: 1, seed: 2, messages,
    tools: [F, G, H], response_format: FMT, tool_choice: 'none' });
  assert.strictEqual(check('none', answer(none), ['doc']), 'doc');
  // thinking on: the constraint after the reasoning (+100 on "</think>"'s tokens ends it)
  const ta = await chat({ seed: 1, thinking: true, logit_bias: thinkEnd });
  tally(check('thinking auto', ta, ['doc', 'f', 'g', 'h']));
  const tr = await chat({ seed: 1, thinking: true, tool_choice: 'required', tools: [F, H] });
  assert.strictEqual(check('thinking required', tr, ['f', 'h']), 'call');
  console.log(`answers: ${JSON.stringify(seen)}; e.g. ${JSON.stringify(auto[0].content)} | ${JSON.stringify(auto[3].calls)}`);

  // /tokenize renders as the chat does: its count is the chat's prompt_tokens
  const body = { model: 'm', messages, tools: [F, G, H], response_format: FMT };
  const counted = await http(srv.url + '/tokenize', { body });
  const used = await client.chat.completions.create({ ...body, max_tokens: 1 });
  assert.strictEqual(counted.status, 200, counted.body);
  assert.strictEqual(counted.json.count, used.usage.prompt_tokens);
  assert(none.usage.prompt_tokens < used.usage.prompt_tokens, 'tool_choice none renders no tools');

  // allowed_tools: the prompt keeps every tool, the calls only the listed ones
  const allowed = (mode, names) => ({ type: 'allowed_tools', allowed_tools: { mode,
    tools: names.map((name) => ({ type: 'function', function: { name } })) } });
  const plain = await client.chat.completions.create({ model: 'm', max_tokens: 1, messages, tools: [F, G, H] });
  for (let seed = 1; seed <= 2; seed++) {
    const a = await client.chat.completions.create({ model: 'm', max_tokens: 160, temperature: 1, seed, messages,
      tools: [F, G, H], tool_choice: allowed('required', ['h']) });
    assert.strictEqual(a.usage.prompt_tokens, plain.usage.prompt_tokens, 'allowed_tools keeps every tool in the prompt');
    assert.strictEqual(check(`allowed required ${seed}`, answer(a), ['h']), 'call');
  }
  for (let seed = 1; seed <= 2; seed++) {
    const a = await chat({ seed, logit_bias: opener, parallel_tool_calls: false, tool_choice: allowed('auto', ['h', 'f']) });
    check(`allowed auto ${seed}`, a, ['doc', 'f', 'h']);
  }
  // allowed_tools listing every tool, none strict: the names still constrained; a call cut by
  // max_tokens streams the call it announced and no raw DSML as content
  const G2 = { type: 'function', function: { name: 'g2', parameters: { type: 'object' } } };
  let cut = 0;
  for (let seed = 1; seed <= 2; seed++) {
    const names = [];
    let content = '', finish = null;
    for await (const ch of await client.chat.completions.create({ model: 'm', max_tokens: 40, temperature: 1, seed,
      messages, tools: [G, G2], tool_choice: allowed('required', ['g', 'g2']), stream: true })) {
      const c = ch.choices[0];
      if (!c) continue;
      content += c.delta.content || '';
      for (const t of c.delta.tool_calls || []) if (t.function?.name) names.push(t.function.name);
      if (c.finish_reason) finish = c.finish_reason;
    }
    assert(names.length >= 1 && names.every((n) => ['g', 'g2'].includes(n)), `full allowed list ${seed}: ${names}`);
    if (finish === 'length') cut++, assert.strictEqual(content, '', `cut call ${seed}: its DSML came out as content`);
  }
  assert(cut >= 1, 'no call was cut by max_tokens');
  // tool_choice "required" over free tools alone: the name is one of theirs too
  for (let seed = 1; seed <= 3; seed++) {
    const names = [];
    for await (const ch of await client.chat.completions.create({ model: 'm', max_tokens: 24, temperature: 1, seed,
      messages, tools: [G, G2], tool_choice: 'required', stream: true })) {
      for (const t of ch.choices[0]?.delta.tool_calls || []) if (t.function?.name) names.push(t.function.name);
    }
    assert(names.length >= 1 && names.every((n) => ['g', 'g2'].includes(n)), `required over free tools ${seed}: ${names}`);
  }
  const allowedCount = await http(srv.url + '/tokenize', { body: { messages, tools: [F, G, H], tool_choice: allowed('auto', ['g']) } });
  assert.strictEqual(allowedCount.json.count, plain.usage.prompt_tokens, allowedCount.body);

  // the guided JSON fields beside tools, served as response_format is (not shown in the
  // prompt): auto the document or a call, required / named / allowed the calls, none the
  // document; json_object any object. A regex or a choice list beside tools stays a 400.
  const isObject = (t) => { const v = JSON.parse(t); return typeof v === 'object' && v !== null && !Array.isArray(v); };
  const gchat = (field, extra) => client.chat.completions.create({ model: 'm', max_tokens: 160, temperature: 1, messages,
    tools: [F, G, H], ...field, ...extra }).then(answer);
  const FIELDS = [[{ guided_json: X }, validDoc], [{ structured_outputs: { json: JSON.stringify(X) } }, validDoc],
    [{ json_schema: X }, validDoc], [{ structured_outputs: { json_object: true } }, isObject]];
  // the opener's "\n\n" at +50 and its other tokens at +100: a JSON document's whitespace
  // (+100 in `opener`) does not win over the markup
  const nl = await ids('\n\n');
  const opener2 = { ...bias((await ids(`<${D}tool_calls>\n<${D}invoke name="`)).filter((id) => !nl.includes(id))),
    ...Object.fromEntries(nl.map((id) => [id, 50])) };
  const gseen = { doc: 0, call: 0, length: 0 };
  for (const [i, [field, valid]] of FIELDS.entries()) {
    const k = Object.keys(field)[0];
    gseen[check(`${k} auto`, await gchat(field, { seed: i + 1 }), ['doc', 'f', 'g', 'h'], valid)]++;
    gseen[check(`${k} auto opener`, await gchat(field, { seed: i + 1, logit_bias: opener2, parallel_tool_calls: false }),
      ['doc', 'f', 'g', 'h'], valid)]++;
  }
  assert(gseen.doc >= 2 && gseen.call >= 2, `guided auto: ${JSON.stringify(gseen)}`);
  assert.strictEqual(check('guided required', await gchat({ guided_json: X }, { seed: 1, tool_choice: 'required',
    tools: [F, H], parallel_tool_calls: false }), ['f', 'h']), 'call');
  assert.strictEqual(check('guided none', await gchat({ guided_json: X }, { seed: 2, tool_choice: 'none' }), ['doc']), 'doc');
  assert.strictEqual(check('guided named', await gchat({ structured_outputs: { json: X } },
    { seed: 3, tool_choice: { type: 'function', function: { name: 'f' } } }), ['f']), 'call');
  check('guided allowed auto', await gchat({ guided_json: X }, { seed: 2, logit_bias: opener, parallel_tool_calls: false,
    tool_choice: allowed('auto', ['h']) }), ['doc', 'h']);
  assert.strictEqual(check('guided allowed required', await gchat({ guided_json: X }, { seed: 1,
    tool_choice: allowed('required', ['h']) }), ['h']), 'call');
  console.log(`guided json beside tools: ${JSON.stringify(gseen)}`);
  for (const [field, param] of [[{ guided_regex: 'a+' }, 'guided_regex'],
    [{ structured_outputs: { choice: ['a', 'b'] } }, 'structured_outputs.choice'],
    [{ structured_outputs: { grammar: 'root ::= "a"' } }, 'structured_outputs.grammar']]) {
    const r = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages, tools: [F], ...field } });
    assert.strictEqual(r.status, 400, r.body);
    assert(r.json.error.message.includes('together with \'tools\' is not supported'), r.body);
    assert.strictEqual(r.json.error.param, param, r.body);
  }
  for (const [field, param] of [[{ guided_json: X, response_format: FMT }, 'guided_json'],
    [{ guided_json: X, guided_regex: 'a' }, 'guided_regex']]) {
    const r = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages, tools: [F], ...field } });
    assert.strictEqual(r.status, 400, r.body);
    assert(r.json.error.message.includes('one output constraint per request'), r.body);
    assert.strictEqual(r.json.error.param, param, r.body);
  }

  // the Responses API: text.format beside tools, allowed_tools in its own form
  const RT = [F, G, H].map((t) => ({ type: 'function', ...t.function }));
  const resp = (extra) => client.responses.create({ model: 'm', max_output_tokens: 160, temperature: 1, input: messages[0].content,
    tools: RT, text: { format: { type: 'json_schema', name: 'out', schema: X } }, ...extra }).then((r) => {
    const msg = r.output.find((o) => o.type === 'message');
    return { content: msg ? msg.content.map((c) => c.text).join('') : '', finish: r.status === 'incomplete' ? 'length'
      : r.output.some((o) => o.type === 'function_call') ? 'tool_calls' : 'stop',
    calls: r.output.filter((o) => o.type === 'function_call').map((o) => [o.name, o.arguments]) };
  });
  for (let seed = 1; seed <= 2; seed++) check(`responses auto ${seed}`, await resp({ seed }), ['doc', 'f', 'g', 'h']);
  assert.strictEqual(check('responses allowed', await resp({ seed: 1, tool_choice: { type: 'allowed_tools', mode: 'required',
    tools: [{ type: 'function', name: 'f' }] } }), ['f']), 'call');

  // bad lists: 400s naming the param
  const bad = async (path, tc, param, what) => {
    const b = path === '/v1/responses' ? { model: 'm', input: 'hi', tools: RT, tool_choice: tc }
      : { model: 'm', messages, tools: [F, G, H], tool_choice: tc };
    const r = await http(srv.url + path, { body: b });
    assert.strictEqual(r.status, 400, r.body);
    assert.strictEqual(r.json.error.param, param, r.body);
    assert(r.json.error.message.includes(what), r.body);
  };
  await bad('/v1/chat/completions', allowed('required', ['h', 'zz']), 'tool_choice.allowed_tools.tools[1]', "'zz' is not one of the tools");
  await bad('/v1/chat/completions', allowed('auto', []), 'tool_choice.allowed_tools.tools', 'non-empty array');
  await bad('/v1/chat/completions', { type: 'allowed_tools', allowed_tools: { mode: 'any', tools: [] } },
    'tool_choice.allowed_tools.mode', '"auto" or "required"');
  await bad('/v1/chat/completions', { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [{ type: 'function', name: 'h' }] } },
    'tool_choice.allowed_tools.tools[0]', 'must be {"type": "function"');
  await bad('/v1/chat/completions', { type: 'allowed_tools', allowed_tools: ['h'] }, 'tool_choice.allowed_tools', 'must be an object');
  await bad('/v1/responses', { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'zz' }] },
    'tool_choice.tools[0]', "'zz' is not one of the tools");
  await bad('/v1/responses', { type: 'allowed_tools', mode: 'auto', tools: [] }, 'tool_choice.tools', 'non-empty array');
  await bad('/v1/responses', { type: 'allowed_tools', mode: 'sometimes', tools: [{ type: 'function', name: 'h' }] },
    'tool_choice.mode', '"auto" or "required"');
  await bad('/v1/responses', { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'mcp', server_label: 's' }] },
    'tool_choice.tools[0]', 'only function tools');
  await bad('/v1/responses', { type: 'allowed_tools', mode: 'auto', tools: 'h' }, 'tool_choice.tools', 'must be an array');
  const nt = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages, tool_choice: allowed('auto', ['h']) } });
  assert.deepStrictEqual([nt.status, nt.json.error.param], [400, 'tool_choice.allowed_tools'], nt.body);
  await srv.stop();
});
