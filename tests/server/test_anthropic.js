// test_anthropic.js — the official `@anthropic-ai/sdk` client against `dsv4 serve`'s
// /v1/messages: text answers (non-streaming and streaming), tool use round trip, thinking,
// x-api-key authentication and Anthropic's error shape.
'use strict';
const assert = require('assert');
const Anthropic = require('@anthropic-ai/sdk').default;
const OpenAI = require('openai').default;
const { start, http, run } = require('./harness');
const { SCRIPT } = require('./common');

const KEY = 'anthropic-key-9';
const TOOL = { name: 'get_weather', description: 'Weather forecast for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } };

run('server_anthropic', async () => {
  const srv = await start(['--api-key', KEY, '--max-context', '1024'], { script: SCRIPT });
  const client = new Anthropic({ apiKey: KEY, baseURL: srv.url, maxRetries: 0 });
  const model = 'dsv4';
  const messages = [{ role: 'user', content: 'Tell me a story.' }];

  // greedy text answer; equals the OpenAI chat answer for the same conversation
  const m = await client.messages.create({ model, max_tokens: 10, temperature: 0, system: 'You are terse.', messages });
  assert.strictEqual(m.type, 'message');
  assert.strictEqual(m.role, 'assistant');
  assert.strictEqual(m.stop_reason, 'max_tokens');
  assert.strictEqual(m.content[0].type, 'text');
  assert.strictEqual(m.usage.output_tokens, 10);
  const oa = new OpenAI({ apiKey: KEY, baseURL: srv.url + '/v1', maxRetries: 0 });
  const o = await oa.chat.completions.create({ model, max_tokens: 10, temperature: 0,
    messages: [{ role: 'system', content: 'You are terse.' }, ...messages] });
  assert.strictEqual(m.content[0].text, o.choices[0].message.content);
  assert.strictEqual(m.usage.input_tokens, o.usage.prompt_tokens);

  // streaming: the SDK assembles the same message from the events
  const stream = client.messages.stream({ model, max_tokens: 10, temperature: 0, system: 'You are terse.', messages });
  let deltas = '';
  stream.on('text', (t) => { deltas += t; });
  const fm = await stream.finalMessage();
  assert.strictEqual(fm.content[0].text, m.content[0].text);
  assert.strictEqual(deltas, m.content[0].text);
  assert.strictEqual(fm.stop_reason, 'max_tokens');
  assert.strictEqual(fm.usage.output_tokens, 10);

  // stop_sequences
  const half = m.content[0].text.slice(2, 4);
  const stops = ['never seen \u2603', half];
  const ms = await client.messages.create({ model, max_tokens: 10, temperature: 0, system: 'You are terse.',
    messages, stop_sequences: stops });
  assert.strictEqual(ms.content[0].text, m.content[0].text.slice(0, m.content[0].text.indexOf(half)));
  assert.strictEqual(ms.stop_reason, 'stop_sequence');
  assert.strictEqual(ms.stop_sequence, half);  // the string that matched, not the first given
  const mss = await client.messages.stream({ model, max_tokens: 10, temperature: 0, system: 'You are terse.',
    messages, stop_sequences: stops }).finalMessage();
  assert.strictEqual(mss.stop_reason, 'stop_sequence');
  assert.strictEqual(mss.stop_sequence, half);
  assert.strictEqual(mss.content[0].text, ms.content[0].text);
  assert.strictEqual(m.stop_sequence, null);
  assert.strictEqual(fm.stop_sequence, null);

  // tool use (scripted) and the tool_result round trip
  const tq = [{ role: 'user', content: 'Weather in Paris? TOOLCALL_TEST' }];
  const t1 = await client.messages.create({ model, max_tokens: 200, temperature: 0, tools: [TOOL], messages: tq });
  assert.strictEqual(t1.stop_reason, 'tool_use');
  assert.deepStrictEqual(t1.content[0], { type: 'text', text: 'Let me check.' });
  const use = t1.content[1];
  assert.strictEqual(use.type, 'tool_use');
  assert.strictEqual(use.name, 'get_weather');
  assert.deepStrictEqual(use.input, { city: 'Paris', days: 3 });
  const ts = await client.messages.stream({ model, max_tokens: 200, temperature: 0, tools: [TOOL], messages: tq }).finalMessage();
  assert.deepStrictEqual(ts.content.map((b) => b.type), ['text', 'tool_use']);
  assert.deepStrictEqual(ts.content[1].input, { city: 'Paris', days: 3 });
  assert.strictEqual(ts.stop_reason, 'tool_use');
  const t2 = await client.messages.create({ model, max_tokens: 200, temperature: 0, tools: [TOOL], messages: [
    ...tq, { role: 'assistant', content: t1.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'WEATHER_RESULT_42: sunny' }] }] });
  assert.strictEqual(t2.content[0].text, 'It is sunny in Paris.');
  assert.strictEqual(t2.stop_reason, 'end_turn');

  // thinking (scripted): a thinking block, then the text
  const th = await client.messages.create({ model, max_tokens: 200, temperature: 0,
    thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Hi THINK_TEST' }] });
  assert.strictEqual(th.content[0].type, 'thinking');
  assert.strictEqual(th.content[0].thinking, 'I should greet.');
  assert.deepStrictEqual(th.content[1], { type: 'text', text: 'Hello there!' });
  const ths = await client.messages.stream({ model, max_tokens: 200, temperature: 0,
    thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Hi THINK_TEST' }] }).finalMessage();
  assert.strictEqual(ths.content[0].thinking, 'I should greet.');
  assert.strictEqual(ths.content[1].text, 'Hello there!');

  // authentication and errors in Anthropic's shape
  const bad = new Anthropic({ apiKey: 'nope', baseURL: srv.url, maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model, max_tokens: 4, messages }), (e) => e.status === 401);
  const noMax = await http(srv.url + '/v1/messages', { headers: { 'x-api-key': KEY }, body: { model, messages } });
  assert.strictEqual(noMax.status, 400);
  assert.strictEqual(noMax.json.type, 'error');
  assert.strictEqual(noMax.json.error.type, 'invalid_request_error');
  assert.match(noMax.json.error.message, /max_tokens/);
  const badBlock = await http(srv.url + '/v1/messages', { headers: { 'x-api-key': KEY },
    body: { model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] } });
  assert.strictEqual(badBlock.status, 400);
  assert.strictEqual(badBlock.json.error.type, 'invalid_request_error');

  await srv.stop();
});
