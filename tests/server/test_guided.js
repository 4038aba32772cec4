// test_guided.js — guided decoding as vLLM and SGLang clients send it, through the official
// `openai` client (the fields go at the top level of the body, where Python's extra_body
// puts them): structured_outputs {regex, choice, json, json_object}, the older guided_regex /
// guided_choice / guided_json, SGLang's regex; on chat and completions, streaming, n > 1,
// logprobs, temperature 1 over several seeds, so a broken mask would show. Every answer that
// ends ("stop") matches the regex whole (V8's RegExp) or is one of the choices (quotes,
// backslash, newline, UTF-8, "", duplicates; 1,000 entries); a cut one ("length") is a
// prefix. The benchmark clients' sampling fields: ignore_eos (exactly max_tokens tokens with
// EOS made likeliest), min_tokens, stop_token_ids, include_stop_str_in_output,
// skip_special_tokens. The bad cases are 400s naming the field.
'use strict';
const assert = require('assert');
const fs = require('fs');
const path = require('path');
const OpenAI = require('openai').default;
const { start, http, metrics, run, MODEL } = require('./harness');

const vocab = JSON.parse(fs.readFileSync(path.join(MODEL, 'tokenizer.json'), 'utf8')).model.vocab;
const EOS = 1, BOS = 0;
const msgs = [{ role: 'user', content: 'Give me a date, an address or an answer.' }];

const DATES = '\\d{4}-\\d{2}-\\d{2}(?:, \\d{4}-\\d{2}-\\d{2}){0,2}';
const EMAIL = '[a-z]{1,8}@[a-z]{1,8}\\.(?:com|org)';
const CHOICES = ['yes', 'no', 'no', 'y"es\\', 'line\nbreak', 'caf\u00e9 \u4e2d\u6587', '', 'yesterday'];

// the answer ended and matches whole, or was cut and is a prefix of some match (its
// characters are each allowed: a loose check, the ended ones are the exact one)
function checkRegex(rx, text, finish, what) {
  assert(finish === 'stop' || finish === 'length', `${what}: finish ${finish}`);
  if (finish === 'stop') assert(new RegExp(`^(?:${rx})$`, 'u').test(text), `${what}: '${text}' does not match /${rx}/`);
  return finish === 'stop';
}

run('server_guided', async () => {
  const srv = await start(['--max-seqs', '4', '--max-context', '1024']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const base = { model: 'm', messages: msgs, temperature: 1.0, max_tokens: 48 };
  let ended = 0;

  // regex: structured_outputs (vLLM >= 0.10), guided_regex, SGLang's regex; seeds at temperature 1
  for (let seed = 1; seed <= 3; seed++) {
    const a = await client.chat.completions.create({ ...base, seed, structured_outputs: { regex: DATES } });
    ended += checkRegex(DATES, a.choices[0].message.content, a.choices[0].finish_reason, `dates seed ${seed}`);
    const b = await client.chat.completions.create({ ...base, seed, guided_regex: EMAIL, logprobs: true, top_logprobs: 2 });
    ended += checkRegex(EMAIL, b.choices[0].message.content, b.choices[0].finish_reason, `email seed ${seed}`);
    assert(b.choices[0].logprobs.content.map((t) => t.token).join('').startsWith(b.choices[0].message.content));
    const c = await client.completions.create({ model: 'm', prompt: 'The date:', temperature: 1, seed, max_tokens: 48, regex: DATES });
    ended += checkRegex(DATES, c.choices[0].text, c.choices[0].finish_reason, `completion seed ${seed}`);
  }
  // streaming, n = 3: each choice's deltas joined match
  const st = ['', '', ''], fin = [null, null, null];
  for await (const ch of await client.chat.completions.create({ ...base, seed: 9, n: 3, stream: true,
    structured_outputs: { regex: EMAIL } })) {
    for (const c of ch.choices) {
      st[c.index] += c.delta.content || '';
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 3; i++) ended += checkRegex(EMAIL, st[i], fin[i], `stream choice ${i}`);
  console.log(`regex: ${ended} of 15 answers ended and match, e.g. ${JSON.stringify(st)}`);
  // the n choices of a request share one mask cache: greedy, n = 4 draws n = 1's tokens four
  // times and walks the states n = 1 walks, once (dsv4_guided_mask_walks_total)
  const walks = async () => (await metrics(srv.url)).dsv4_guided_mask_walks_total;
  const w0 = await walks();
  const one = await client.chat.completions.create({ ...base, temperature: 0, structured_outputs: { regex: DATES } });
  const w1 = await walks();
  const four = await client.chat.completions.create({ ...base, temperature: 0, n: 4, structured_outputs: { regex: DATES } });
  const w4 = await walks();
  assert(four.choices.every((c) => c.message.content === one.choices[0].message.content), 'greedy choices differ');
  assert(w1 - w0 > 0 && w4 - w1 === w1 - w0, `walks: n = 1 ${w1 - w0}, n = 4 ${w4 - w1}`);
  assert(ended >= 8, 'too few regex answers ended');

  // choice: every answer is one of the list (legacy guided_choice too, and on completions)
  const seen = new Set();
  for (let seed = 1; seed <= 4; seed++) {
    const r = await client.chat.completions.create({ ...base, seed, n: 2, structured_outputs: { choice: CHOICES } });
    for (const c of r.choices) {
      assert.strictEqual(c.finish_reason, 'stop', JSON.stringify(c));
      assert(CHOICES.includes(c.message.content), `'${c.message.content}' is not a choice`);
      seen.add(c.message.content);
    }
    const s = await client.completions.create({ model: 'm', prompt: 'Answer:', temperature: 1, seed, max_tokens: 16,
      guided_choice: CHOICES, stream: true });
    let text = '';
    for await (const ch of s) text += ch.choices[0]?.text || '';
    assert(CHOICES.includes(text), `streamed '${text}' is not a choice`);
  }
  console.log(`choices drawn: ${JSON.stringify([...seen])}`);
  assert(seen.size >= 2, 'the choices drawn are all the same');
  const big = Array.from({ length: 1000 }, (_, i) => `item ${i * 7} \u00e9"\\`);
  const bigr = await client.chat.completions.create({ ...base, seed: 5, max_tokens: 32, guided_choice: big });
  assert(big.includes(bigr.choices[0].message.content), bigr.choices[0].message.content);

  // json through structured_outputs.json (a string, as vLLM takes it) and json_object
  const sj = await client.chat.completions.create({ ...base, seed: 2, max_tokens: 64,
    structured_outputs: { json: JSON.stringify({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
      additionalProperties: false }) } });
  if (sj.choices[0].finish_reason === 'stop') assert.strictEqual(typeof JSON.parse(sj.choices[0].message.content).ok, 'boolean');
  const jo = await client.chat.completions.create({ ...base, seed: 2, max_tokens: 64, structured_outputs: { json_object: true } });
  if (jo.choices[0].finish_reason === 'stop') assert.strictEqual(typeof JSON.parse(jo.choices[0].message.content), 'object');
  // thinking: the constraint applies to the answer after the reasoning
  const th = await client.chat.completions.create({ ...base, seed: 3, max_tokens: 64, thinking: { type: 'enabled' },
    guided_regex: DATES });
  assert.strictEqual(th.choices[0].finish_reason === 'stop' || th.choices[0].finish_reason === 'length', true);
  if (th.choices[0].finish_reason === 'stop') checkRegex(DATES, th.choices[0].message.content, 'stop', 'thinking');

  // thinking with EOS likeliest: not drawn in the reasoning, so a "stop" answer matches (rv-gx's repro)
  for (const seed of [2, 3]) {
    const r = await client.chat.completions.create({ ...base, seed, max_tokens: 40, guided_regex: '\\d{3}',
      chat_template_kwargs: { thinking: true }, logit_bias: { [EOS]: 100 } });
    checkRegex('\\d{3}', r.choices[0].message.content, r.choices[0].finish_reason, `thinking + EOS seed ${seed}`);
    assert.strictEqual(r.choices[0].finish_reason, 'length', 'EOS ended the reasoning');
  }

  // ignore_eos: EOS made likeliest, never drawn: exactly max_tokens
  const eosBias = { logit_bias: { [EOS]: 100 } };
  const plain = await client.chat.completions.create({ ...base, ...eosBias, seed: 1 });
  assert.strictEqual(plain.choices[0].finish_reason, 'stop');
  assert(plain.usage.completion_tokens <= 1, JSON.stringify(plain.usage));
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create({ ...base, ...eosBias, seed, max_tokens: 21, ignore_eos: true });
    assert.deepStrictEqual([r.choices[0].finish_reason, r.usage.completion_tokens], ['length', 21]);
  }
  // min_tokens: EOS waits; the same with a stop token id
  const mt = await client.chat.completions.create({ ...base, ...eosBias, seed: 1, min_tokens: 7 });
  assert.strictEqual(mt.choices[0].finish_reason, 'stop');
  assert.strictEqual(mt.usage.completion_tokens, plain.usage.completion_tokens + 7, JSON.stringify(mt.usage));
  const x = vocab.x, xx = vocab.xx;
  const sid = await client.chat.completions.create({ ...base, seed: 1, logit_bias: { [x]: 100 }, stop_token_ids: [x] });
  assert.deepStrictEqual([sid.choices[0].finish_reason, sid.choices[0].message.content], ['stop', '']);
  const sidm = await client.completions.create({ model: 'm', prompt: 'a', max_tokens: 20, logit_bias: { [x]: 100, [xx]: 50 },
    stop_token_ids: [x], min_tokens: 3 });
  assert.deepStrictEqual([sidm.choices[0].finish_reason, sidm.choices[0].text], ['stop', 'xxxxxx']);
  // include_stop_str_in_output: the stop string ends the text
  const stop = { model: 'm', prompt: 'a', max_tokens: 20, logit_bias: { [xx]: 100 }, stop: ['xxxx'] };
  const without = await client.completions.create(stop);
  const withs = await client.completions.create({ ...stop, include_stop_str_in_output: true });
  assert.deepStrictEqual([without.choices[0].text, withs.choices[0].text], ['', 'xxxx']);
  // skip_special_tokens: true hides a special token's text, false (and absent) shows it
  const sp = { ...base, max_tokens: 1, logit_bias: { [BOS]: 100 } };
  const hid = await client.chat.completions.create({ ...sp, skip_special_tokens: true });
  const shown = await client.chat.completions.create({ ...sp, skip_special_tokens: false });
  assert.deepStrictEqual([hid.choices[0].message.content, shown.choices[0].message.content.includes('begin')], ['', true]);

  // the bad cases
  const bad = async (body, what, url = '/v1/chat/completions') => {
    const r = await http(srv.url + url, { body: { model: 'm', messages: msgs, prompt: 'a', max_tokens: 4, ...body } });
    assert.strictEqual(r.status, 400, `${JSON.stringify(body)}: ${r.body}`);
    assert(r.json.error.message.includes(what), `${r.json.error.message} lacks ${what}`);
  };
  await bad({ guided_regex: 'a', guided_choice: ['a'] }, "'guided_regex' and 'guided_choice'");
  await bad({ structured_outputs: { regex: 'a', choice: ['a'] } }, "'structured_outputs.regex' and 'structured_outputs.choice'");
  await bad({ regex: 'a', response_format: { type: 'json_object' } }, "'response_format' and 'regex'");
  await bad({ guided_regex: 'a', response_format: { type: 'json_object' } }, "'response_format' and 'guided_regex'", '/v1/completions');
  await bad({ structured_outputs: { structural_tag: '{}' } }, "'structured_outputs.structural_tag' is not supported");
  await bad({ structured_outputs: 'a' }, "'structured_outputs' must be an object");
  await bad({ guided_regex: '(?=a)b' }, "'guided_regex': the regex uses a lookahead");
  await bad({ guided_regex: 'a)|(b' }, 'unbalanced');
  await bad({ structured_outputs: { regex: '[]' } }, 'matches no string');
  await bad({ guided_regex: 5 }, "'guided_regex' must be a string");
  await bad({ guided_choice: [] }, "'guided_choice' must be a non-empty list");
  await bad({ guided_choice: ['a', 3] }, 'item 1 is not a string');
  await bad({ guided_choice: 'a' }, "'guided_choice' must be a non-empty list");
  await bad({ guided_json: '{not json' }, "'guided_json' must be a JSON Schema");
  await bad({ structured_outputs: { json_object: 'yes' } }, "'structured_outputs.json_object' must be a boolean");
  await bad({ guided_regex: 'a', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] },
    "'guided_regex' together with 'tools'");
  await bad({ ignore_eos: 'yes' }, "'ignore_eos' must be a boolean");
  await bad({ min_tokens: -1 }, "'min_tokens' must be a number");
  await bad({ min_tokens: 1.5 }, "'min_tokens' must be an integer");
  await bad({ min_tokens: 9 }, "'min_tokens' (9) must be at most");
  await bad({ stop_token_ids: [1e9] }, "'stop_token_ids' must be a list");
  await bad({ stop_token_ids: 'a' }, "'stop_token_ids' must be a list");
  await bad({ include_stop_str_in_output: 1 }, "'include_stop_str_in_output' must be a boolean");
  await bad({ skip_special_tokens: 'no' }, "'skip_special_tokens' must be a boolean");
  await bad({ structured_outputs: { regexx: 'a' } }, "'structured_outputs.regexx' is not supported");
  await bad({ structured_outputs: { regex: 'a', disable_any_whitespace: true } }, "'structured_outputs.disable_any_whitespace'");
  await bad({ structured_outputs: { regex: 'a', whitespace_pattern: ' ' } }, "'structured_outputs.whitespace_pattern'");
  const huge = await http(srv.url + '/v1/chat/completions', { body: { model: 'm', messages: msgs, max_tokens: 2,
    guided_regex: '(a|b)*a(a|b){12}' } });
  assert(huge.status === 400 && huge.json.error.message.includes("automaton states") && !huge.json.error.message.includes("anchor"),
    huge.body);
  const opts = await client.chat.completions.create({ ...base, seed: 1, max_tokens: 8,
    structured_outputs: { regex: 'ok', disable_fallback: true, disable_additional_properties: true, disable_any_whitespace: false } });
  assert.deepStrictEqual([opts.choices[0].message.content, opts.choices[0].finish_reason], ['ok', 'stop']);
  // the endpoints without guided decoding refuse the fields, naming them
  await bad({ guided_regex: 'a', max_tokens: 4 }, "'guided_regex' is not supported on /v1/messages", '/v1/messages');
  const resp = await http(srv.url + '/v1/responses', { body: { model: 'm', input: 'hi', structured_outputs: { choice: ['a'] } } });
  assert(resp.status === 400 && resp.json.error.message.includes("'structured_outputs.choice' is not supported on /v1/responses"),
    resp.body);
  await srv.stop();
});
