// test_endpoints.js — the calls clients make beside generation: Anthropic's
// messages.countTokens (equal to the usage.input_tokens of the same request, system, tools
// and thinking included), OpenAI's models.retrieve (404 in OpenAI's shape for another id),
// and vLLM's /tokenize and /detokenize (a chat counted as /v1/chat/completions counts it, a
// raw prompt as /v1/completions tokenizes it, bad input a 400).
'use strict';
const assert = require('assert');
const Anthropic = require('@anthropic-ai/sdk').default;
const OpenAI = require('openai').default;
const { start, http, run } = require('./harness');

const KEY = 'endpoints-key-3';
const TOOL = { name: 'get_weather', description: 'Weather forecast for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

run('server_endpoints', async () => {
  const srv = await start(['--api-key', KEY, '--max-context', '1024']);
  const auth = { authorization: `Bearer ${KEY}` };
  const ac = new Anthropic({ apiKey: KEY, baseURL: srv.url, maxRetries: 0 });
  const oc = new OpenAI({ apiKey: KEY, baseURL: srv.url + '/v1', maxRetries: 0 });

  // count_tokens: the prompt exactly as /v1/messages renders it
  const reqs = [
    { messages: [{ role: 'user', content: 'Tell me a story.' }] },
    { system: 'You are terse.', messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: [{ type: 'text', text: 'And the weather?' }] }] },
    { messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [TOOL] },
    { messages: [{ role: 'user', content: 'Think first.' }], thinking: { type: 'enabled', budget_tokens: 1024 } },
  ];
  const counts = [];
  for (const q of reqs) {
    const c = await ac.messages.countTokens({ model: 'dsv4', ...q });
    const m = await ac.messages.create({ model: 'dsv4', max_tokens: 1, temperature: 0, ...q });
    assert.strictEqual(m.usage.cache_read_input_tokens, 0);
    assert.strictEqual(c.input_tokens, m.usage.input_tokens, JSON.stringify(q));
    counts.push(c.input_tokens);
  }
  assert(counts[2] > counts[0] + 10, 'the tools are counted');
  // its errors are /v1/messages's (Anthropic's shape, 400 / 401)
  await assert.rejects(ac.messages.countTokens({ model: 'dsv4', messages: [] }),
    (e) => e.status === 400 && e.error.type === 'error' && e.error.error.type === 'invalid_request_error' &&
      /messages: must be a non-empty array/.test(e.error.error.message));
  const bad = { model: 'dsv4', messages: [{ role: 'robot', content: 'x' }] };
  const e1 = await http(srv.url + '/v1/messages/count_tokens', { body: bad, headers: { 'x-api-key': KEY } });
  const e2 = await http(srv.url + '/v1/messages', { body: { ...bad, max_tokens: 4 }, headers: { 'x-api-key': KEY } });
  assert.strictEqual(e1.status, 400);
  assert.strictEqual(e1.body, e2.body);
  const e3 = await http(srv.url + '/v1/messages/count_tokens', { body: reqs[0] });
  assert.strictEqual(e3.status, 401);
  assert.strictEqual(e3.json.error.type, 'authentication_error');
  assert.strictEqual((await http(srv.url + '/v1/messages/count_tokens', { method: 'GET', headers: auth })).status, 405);

  // models.retrieve: the listed model, and OpenAI's 404 for another id
  const listed = (await oc.models.list()).data[0];
  const got = await oc.models.retrieve(listed.id);
  assert.deepStrictEqual(got, listed);
  await assert.rejects(oc.models.retrieve('no-such-model'),
    (e) => e.status === 404 && e.error.type === 'invalid_request_error' && e.error.code === 'model_not_found' &&
      /no-such-model/.test(e.error.message));
  // a client's bytes echoed in a message come back as valid UTF-8 (a bad byte U+FFFD), cut
  // on a character boundary (the raw bytes decoded strictly)
  const strict = async (path) => {
    const r = await fetch(srv.url + path, { headers: auth });
    return [r.status, JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(await r.arrayBuffer()))];
  };
  const [s1, j1] = await strict('/v1/models/a%ffb');
  assert.strictEqual(s1, 404);
  assert.strictEqual(j1.error.message, 'The model `a\ufffdb` does not exist or you do not have access to it.');
  const [s2, j2] = await strict('/v1/models/%ff' + '%C3%A9'.repeat(150));
  assert.strictEqual(s2, 404);
  assert.match(j2.error.message, /^The model `\ufffd(é)+` does not exist/);
  const [s3, j3] = await strict('/v1/n%ffo' + '%C3%A9'.repeat(80));
  assert.strictEqual(s3, 404);
  assert.match(j3.error.message, /^no route GET \/v1\/n\ufffdo(é)+$/);
  assert.strictEqual((await http(srv.url + '/v1/models/' + listed.id, { method: 'GET' })).status, 401);

  // /tokenize a chat: the count is /v1/chat/completions's prompt_tokens
  const chat = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me a story.' }];
  const tk = await http(srv.url + '/tokenize', { body: { model: 'dsv4', messages: chat }, headers: auth });
  assert.strictEqual(tk.status, 200, tk.body);
  const o = await oc.chat.completions.create({ model: 'dsv4', max_tokens: 1, messages: chat });
  assert.strictEqual(tk.json.count, o.usage.prompt_tokens);
  assert.strictEqual(tk.json.tokens.length, tk.json.count);
  assert.strictEqual(tk.json.max_model_len, 1024);
  assert.strictEqual(tk.json.token_strs, null);
  // without the generation prompt: the assistant turn's opening left out
  const ng = await http(srv.url + '/tokenize', { body: { messages: chat, add_generation_prompt: false }, headers: auth });
  assert(ng.json.count < tk.json.count);
  assert.deepStrictEqual(ng.json.tokens, tk.json.tokens.slice(0, ng.json.count));
  const opening = await http(srv.url + '/detokenize', { body: { tokens: tk.json.tokens.slice(ng.json.count) }, headers: auth });
  assert.strictEqual(opening.json.prompt, '<｜Assistant｜></think>');
  // thinking and tools change the chat as they change the request
  const th = await http(srv.url + '/tokenize', { body: { messages: chat, chat_template_kwargs: { thinking: true } }, headers: auth });
  const ot = await oc.chat.completions.create({ model: 'dsv4', max_tokens: 1, messages: chat, reasoning_effort: 'high' });
  assert.strictEqual(th.json.count, ot.usage.prompt_tokens);
  assert.notDeepStrictEqual(th.json.tokens, tk.json.tokens);
  // tool_choice and response_format change the chat's prompt (tools dropped for "none", the
  // format shown to the model; the format beside tools too): /tokenize renders them as chat does
  const otools = [{ type: 'function', function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.input_schema } }];
  const pet = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
  for (const q of [{ tools: otools, tool_choice: 'none' }, { tools: otools },
    { response_format: { type: 'json_object' } },
    { response_format: { type: 'json_schema', json_schema: { name: 'pet', schema: pet } } },
    { tools: otools, tool_choice: 'none', response_format: { type: 'json_object' } },
    { tools: otools, response_format: { type: 'json_object' } }]) {
    const t = await http(srv.url + '/tokenize', { body: { messages: chat, ...q }, headers: auth });
    assert.strictEqual(t.status, 200, t.body);
    const u = await oc.chat.completions.create({ model: 'dsv4', max_tokens: 1, messages: chat, ...q });
    assert.strictEqual(t.json.count, u.usage.prompt_tokens, JSON.stringify(q));
  }
  // a raw prompt: /v1/completions's tokens (BOS first), token strings on request
  const tp = await http(srv.url + '/tokenize', { body: { prompt: 'Hello world', return_token_strs: true }, headers: auth });
  const oc1 = await oc.completions.create({ model: 'dsv4', max_tokens: 1, prompt: 'Hello world' });
  assert.strictEqual(tp.json.count, oc1.usage.prompt_tokens);
  assert.strictEqual(tp.json.token_strs.length, tp.json.count);
  const tn = await http(srv.url + '/tokenize', { body: { prompt: 'Hello world', add_special_tokens: false }, headers: auth });
  assert.deepStrictEqual(tn.json.tokens, tp.json.tokens.slice(1));
  // the answer is written without cJSON: quotes and backslashes escaped (control bytes are
  // byte-level symbols in token strings), one string an id; an empty list is []
  const odd = 'say "hi" \\ \u0001\ttab é \\"';
  const to = await http(srv.url + '/tokenize', { body: { prompt: odd, return_token_strs: true, add_special_tokens: false }, headers: auth });
  assert.strictEqual(to.status, 200, to.body);
  assert(to.json, `not JSON: ${to.body}`);
  assert.strictEqual(to.json.token_strs.length, to.json.count);
  assert.strictEqual(to.json.tokens.length, to.json.count);
  assert(to.json.token_strs.some((t) => t.includes('"')) && to.json.token_strs.some((t) => t.includes('\\')), to.body);
  const te = await http(srv.url + '/tokenize', { body: { prompt: '', add_special_tokens: false, return_token_strs: true }, headers: auth });
  assert.deepStrictEqual(te.json, { count: 0, max_model_len: te.json.max_model_len, tokens: [], token_strs: [] });

  // /detokenize inverts it
  const dt = await http(srv.url + '/detokenize', { body: { tokens: tn.json.tokens }, headers: auth });
  assert.strictEqual(dt.status, 200, dt.body);
  assert.strictEqual(dt.json.prompt, 'Hello world');
  assert.strictEqual((await http(srv.url + '/detokenize', { body: { tokens: [] }, headers: auth })).json.prompt, '');

  // bad input: 400 in OpenAI's shape
  const bads = [
    ['/tokenize', {}, /'prompt' \(a string\) or 'messages'/],
    ['/tokenize', { prompt: 7 }, /'prompt' must be a string/],
    ['/tokenize', { prompt: 'x', messages: chat }, /not both/],
    ['/tokenize', { messages: [] }, /non-empty array/],
    ['/tokenize', { messages: [{ role: 'robot', content: 'x' }] }, /robot|role/],
    ['/tokenize', { messages: chat, continue_final_message: true }, /not supported/],
    ['/tokenize', { prompt: 'x', add_special_tokens: 'yes' }, /must be a boolean/],
    ['/detokenize', { tokens: 'abc' }, /must be an array/],
    ['/detokenize', { tokens: [1, 99999999] }, /tokens\[1\] is not a token id/],
    ['/detokenize', { tokens: [-1] }, /tokens\[0\]/],
    ['/detokenize', { tokens: [1.5] }, /tokens\[0\]/],
    ['/detokenize', { tokens: [2, 1e20] }, /tokens\[1\]/],
    ['/detokenize', { tokens: [-1e20] }, /tokens\[0\]/],
    ['/detokenize', [1, 2], /not a JSON object/],
    ['/tokenize', 'not json', /not a JSON object/],
  ];
  for (const [path, body, re] of bads) {
    const r = await http(srv.url + path, { body, headers: auth });
    assert.strictEqual(r.status, 400, `${path} ${JSON.stringify(body)}: ${r.body}`);
    assert.strictEqual(r.json.error.type, 'invalid_request_error');
    assert.match(r.json.error.message, re);
  }
  assert.strictEqual((await http(srv.url + '/tokenize', { body: { prompt: 'x' } })).status, 401);
  assert.strictEqual((await http(srv.url + '/detokenize', { method: 'GET', headers: auth })).status, 405);

  await srv.stop();
});
