// test_openai.js — the official `openai` client against a real `dsv4 serve`: chat
// (non-streaming and streaming), completions, stop strings, logprobs, usage, seeds, tool
// call round trip, reasoning, authentication, malformed requests, context limits, SIGTERM.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, http, run, generate } = require('./harness');
const { SCRIPT, WEATHER_TOOL } = require('./common');

const KEY = 'test-key-123';

async function collect(stream) {
  const out = { content: '', reasoning: '', finish: null, usage: null, calls: [], logprobs: [], roles: 0 };
  for await (const ch of stream) {
    if (ch.usage) out.usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    if (c.delta.role) out.roles++;
    out.content += c.delta.content || '';
    out.reasoning += c.delta.reasoning_content || '';
    for (const tc of c.delta.tool_calls || []) {
      const t = (out.calls[tc.index] ||= { id: '', name: '', arguments: '' });
      if (tc.id) t.id = tc.id;
      if (tc.function?.name) t.name += tc.function.name;
      if (tc.function?.arguments) t.arguments += tc.function.arguments;
    }
    if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

run('server_openai', async () => {
  const srv = await start(['--api-key', KEY, '--max-context', '1024', '--max-body', '64K'], { script: SCRIPT });
  const client = new OpenAI({ apiKey: KEY, baseURL: srv.url + '/v1', maxRetries: 0 });
  const model = (await client.models.list()).data[0].id;
  const msgs = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];

  // chat, greedy, non-streaming: usage adds up, max_tokens ends it with "length"
  const a = await client.chat.completions.create({ model, messages: msgs, max_tokens: 12, temperature: 0 });
  const ca = a.choices[0];
  assert.strictEqual(ca.finish_reason, 'length');
  assert.strictEqual(ca.message.role, 'assistant');
  assert(ca.message.content.length > 0);
  assert.strictEqual(a.usage.completion_tokens, 12);
  assert(a.usage.prompt_tokens > 5);
  assert.strictEqual(a.usage.total_tokens, a.usage.prompt_tokens + 12);
  assert.strictEqual(a.usage.prompt_tokens_details.cached_tokens, 0);

  // streaming gives the same text, one role delta, usage last
  const s = await collect(await client.chat.completions.create({ model, messages: msgs, max_tokens: 12,
    temperature: 0, stream: true, stream_options: { include_usage: true } }));
  assert.strictEqual(s.content, ca.message.content);
  assert.strictEqual(s.finish, 'length');
  assert.strictEqual(s.roles, 1);
  assert.deepStrictEqual(s.usage, a.usage);

  // stop string: cut before its first occurrence, finish "stop"
  const text = ca.message.content;
  const k = Math.max(1, Math.floor(text.length / 2));
  const stop = text.slice(k, k + 2);
  const cut = text.indexOf(stop);
  const st = await client.chat.completions.create({ model, messages: msgs, max_tokens: 12, temperature: 0, stop: [stop] });
  assert.strictEqual(st.choices[0].message.content, text.slice(0, cut));
  assert.strictEqual(st.choices[0].finish_reason, 'stop');
  const sst = await collect(await client.chat.completions.create({ model, messages: msgs, max_tokens: 12,
    temperature: 0, stop, stream: true }));
  assert.strictEqual(sst.content, text.slice(0, cut));

  // logprobs: one entry per token; greedy picks the best; bytes spell the text
  const lp = await client.chat.completions.create({ model, messages: msgs, max_tokens: 12, temperature: 0,
    logprobs: true, top_logprobs: 3 });
  const entries = lp.choices[0].logprobs.content;
  assert.strictEqual(entries.length, 12);
  for (const e of entries) {
    assert.strictEqual(e.top_logprobs.length, 3);
    assert.strictEqual(e.token, e.top_logprobs[0].token);
    assert.strictEqual(e.logprob, e.top_logprobs[0].logprob);
    assert(e.logprob <= 0 && e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  assert.strictEqual(Buffer.from(entries.flatMap((e) => e.bytes)).toString('utf8'), text);
  const slp = await collect(await client.chat.completions.create({ model, messages: msgs, max_tokens: 12,
    temperature: 0, logprobs: true, top_logprobs: 3, stream: true }));
  assert.deepStrictEqual(slp.logprobs, entries);

  // seeds: same seed, same text; another seed, another text
  const sampled = (seed) => client.chat.completions.create({ model, messages: msgs, max_tokens: 16,
    temperature: 1, top_p: 0.95, seed }).then((r) => r.choices[0].message.content);
  const [x1, x2, y] = [await sampled(42), await sampled(42), await sampled(43)];
  assert.strictEqual(x1, x2);
  assert.notStrictEqual(x1, y);

  // completions: text and token ids as prompts, streaming equal, logprobs shape
  const c1 = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logprobs: 2 });
  assert.strictEqual(c1.choices[0].finish_reason, 'length');
  assert.strictEqual(c1.usage.completion_tokens, 10);
  assert.strictEqual(c1.choices[0].logprobs.tokens.length, 10);
  assert.strictEqual(c1.choices[0].logprobs.tokens.join(''), c1.choices[0].text);
  let sc = '';
  for await (const ch of await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10,
    temperature: 0, stream: true })) sc += ch.choices[0]?.text || '';
  assert.strictEqual(sc, c1.choices[0].text);
  const ids = await client.completions.create({ model, prompt: [0, 1000, 2000, 3000], max_tokens: 4, temperature: 0 });
  assert.strictEqual(ids.usage.prompt_tokens, 4);

  // special-token strings: live in a raw completion prompt (BOS + one control token), plain
  // text in chat content (several tokens, and no role token beyond the template's own)
  const sp = await client.completions.create({ model, prompt: '<｜User｜>', max_tokens: 1, temperature: 0 });
  assert.strictEqual(sp.usage.prompt_tokens, 2);
  const plain = await client.chat.completions.create({ model, max_tokens: 1, temperature: 0,
    messages: [{ role: 'user', content: 'x<｜User｜>' }] });
  const bare = await client.chat.completions.create({ model, max_tokens: 1, temperature: 0,
    messages: [{ role: 'user', content: 'x' }] });
  assert(plain.usage.prompt_tokens >= bare.usage.prompt_tokens + 3,
    `content '<｜User｜>' must be plain text: ${plain.usage.prompt_tokens} vs ${bare.usage.prompt_tokens}`);

  // a prompt that fits but leaves less room than max_tokens: generates until the context is full
  const long = Array.from({ length: 1018 }, (_, i) => 1000 + i);
  const full = await client.completions.create({ model, prompt: long, max_tokens: 100, temperature: 0 });
  assert.strictEqual(full.choices[0].finish_reason, 'length');
  assert.strictEqual(full.usage.completion_tokens, 6);
  // a prompt that can never fit: 400 with the numbers
  await assert.rejects(client.completions.create({ model, prompt: Array(1100).fill(1000), max_tokens: 4 }),
    (e) => e.status === 400 && /1100 tokens/.test(e.message) && /1024/.test(e.message));

  // tool call round trip (scripted answer): call parsed with JSON arguments, then the result
  const tmsgs = [{ role: 'user', content: 'What is the weather in Paris? TOOLCALL_TEST' }];
  const t1 = await client.chat.completions.create({ model, messages: tmsgs, tools: [WEATHER_TOOL], temperature: 0 });
  const m1 = t1.choices[0].message;
  assert.strictEqual(t1.choices[0].finish_reason, 'tool_calls');
  assert.strictEqual(m1.content, 'Let me check.');
  assert.strictEqual(m1.tool_calls.length, 1);
  assert.strictEqual(m1.tool_calls[0].type, 'function');
  assert.strictEqual(m1.tool_calls[0].function.name, 'get_weather');
  assert.deepStrictEqual(JSON.parse(m1.tool_calls[0].function.arguments), { city: 'Paris', days: 3 });
  const ts = await collect(await client.chat.completions.create({ model, messages: tmsgs, tools: [WEATHER_TOOL],
    temperature: 0, stream: true }));
  assert.strictEqual(ts.finish, 'tool_calls');
  assert.strictEqual(ts.content, 'Let me check.');
  assert.strictEqual(ts.calls[0].name, 'get_weather');
  assert.deepStrictEqual(JSON.parse(ts.calls[0].arguments), { city: 'Paris', days: 3 });
  const t2 = await client.chat.completions.create({ model, tools: [WEATHER_TOOL], temperature: 0, messages: [
    ...tmsgs, m1, { role: 'tool', tool_call_id: m1.tool_calls[0].id, content: 'WEATHER_RESULT_42: sunny' }] });
  assert.strictEqual(t2.choices[0].message.content, 'It is sunny in Paris.');
  assert.strictEqual(t2.choices[0].finish_reason, 'stop');

  // reasoning (scripted): thinking mode splits reasoning_content from content
  const th = await client.chat.completions.create({ model, temperature: 0, reasoning_effort: 'high',
    messages: [{ role: 'user', content: 'Say hello. THINK_TEST' }] });
  assert.strictEqual(th.choices[0].message.reasoning_content, 'I should greet.');
  assert.strictEqual(th.choices[0].message.content, 'Hello there!');
  assert.strictEqual(th.choices[0].finish_reason, 'stop');
  const ths = await collect(await client.chat.completions.create({ model, temperature: 0, stream: true,
    thinking: { type: 'enabled' }, messages: [{ role: 'user', content: 'Say hello. THINK_TEST' }] }));
  assert.strictEqual(ths.reasoning, 'I should greet.');
  assert.strictEqual(ths.content, 'Hello there!');
  // thinking off by default: the same script's text is all content
  const nt = await client.chat.completions.create({ model, temperature: 0, messages: [{ role: 'user', content: 'THINK_TEST' }] });
  assert.strictEqual(nt.choices[0].message.reasoning_content, undefined);

  // authentication: 401 without or with a wrong key; /health and /metrics need none
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: srv.url + '/v1', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model, messages: msgs }), (e) => e.status === 401);
  assert.strictEqual((await http(srv.url + '/v1/models', { method: 'GET' })).status, 401);
  const h = await http(srv.url + '/health', { method: 'GET' });
  assert.strictEqual(h.status, 200);
  assert.deepStrictEqual(h.json, { status: 'ok' });
  assert.strictEqual((await http(srv.url + '/metrics', { method: 'GET' })).status, 200);

  // malformed requests: 4xx in the OpenAI error shape, the server goes on
  const auth = { authorization: 'Bearer ' + KEY };
  const cases = [
    ['/v1/chat/completions', '{"messages": [', 400],
    ['/v1/chat/completions', { messages: msgs, temperature: 'hot' }, 400],
    ['/v1/chat/completions', { messages: 'hello' }, 400],
    ['/v1/chat/completions', { messages: msgs, n: 1000 }, 400],
    ['/v1/chat/completions', { messages: msgs, max_tokens: -1 }, 400],
    ['/v1/chat/completions', { messages: msgs, stop: [1, 2] }, 400],
    ['/v1/chat/completions', { messages: msgs, logit_bias: { abc: 1 } }, 400],
    ['/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }, 400],
    ['/v1/completions', { prompt: [-5] }, 400],
    ['/v1/completions', { prompt: {} }, 400],
    ['/v1/chat/completions', { messages: msgs, pad: 'x'.repeat(70000) }, 413],
    ['/v1/nothing', {}, 404],
  ];
  for (const [route, body, status] of cases) {
    const r = await http(srv.url + route, { body, headers: auth });
    assert.strictEqual(r.status, status, `${route} ${JSON.stringify(body).slice(0, 60)}: ${r.body}`);
    assert.strictEqual(typeof r.json.error.message, 'string', r.body);
  }
  assert.strictEqual((await http(srv.url + '/v1/chat/completions', { method: 'GET', headers: auth })).status, 405);
  // unknown fields are ignored
  const unk = await http(srv.url + '/v1/chat/completions', { headers: auth,
    body: { messages: msgs, max_tokens: 2, temperature: 0, frobnicate: { x: 1 } } });
  assert.strictEqual(unk.status, 200);

  // logit_bias: banning the greedy first token (its id from `dsv4 generate`) changes it
  const g = generate(['--chat', '--system', 'You are terse.', '--prompt', 'Tell me a story.', '-n', '1',
    '--temperature', '0', '--logprobs', '1']);
  assert.strictEqual(g.text, entries[0].token);
  const banned = await client.chat.completions.create({ model, messages: msgs, max_tokens: 1, temperature: 0,
    logprobs: true, logit_bias: { [String(g.ids[0])]: -100 } });
  assert.notStrictEqual(banned.choices[0].logprobs.content[0].token, entries[0].token);

  // SIGTERM with a stream in flight: the stream ends, the server exits 0 in the bound
  const long_stream = await client.chat.completions.create({ model, messages: msgs, max_tokens: 200,
    temperature: 0, stream: true });
  const it = long_stream[Symbol.asyncIterator]();
  await it.next();
  await srv.stop(20000);
});

