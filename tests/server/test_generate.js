// test_generate.js — greedy output through the server equals `dsv4 generate` for the same
// prompt, token for token (the shared request -> tokens -> sampling -> text path): chat
// with the template, and plain completion after BOS. Also a step wider than a span.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, run, generate } = require('./harness');

run('server_generate', async () => {
  const srv = await start([]);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const round4 = (x) => Number(x.toFixed(4));
  for (const prompt of ['Write a haiku about the sea.', 'Why is the sky blue? Explain briefly.']) {
    const g = generate(['--chat', '--prompt', prompt, '-n', '16', '--temperature', '0', '--logprobs', '1']);
    const r = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: prompt }],
      max_tokens: 16, temperature: 0, logprobs: true });
    assert.strictEqual(r.choices[0].message.content, g.text);
    assert.deepStrictEqual(r.choices[0].logprobs.content.map((e) => round4(e.logprob)), g.logprobs);

    const gc = generate(['--prompt', prompt, '-n', '16', '--temperature', '0', '--logprobs', '1']);
    const c = await client.completions.create({ model: 'm', prompt, max_tokens: 16, temperature: 0, logprobs: 1 });
    assert.strictEqual(c.choices[0].text, gc.text);
    assert.deepStrictEqual(c.choices[0].logprobs.token_logprobs.map(round4), gc.logprobs);
  }
  // a step wider than one span (max_context 64 < step_tokens 128): four 40-token prompts
  // prefill in one step of 160 rows, in spans of at most 64, and answer as they do alone
  const ids = (i) => Array.from({ length: 40 }, (_, k) => 1000 + 37 * i + k);
  const alone = [];
  for (let i = 0; i < 4; i++)
    alone.push((await client.completions.create({ model: 'm', prompt: ids(i), max_tokens: 8, temperature: 0 })).choices[0].text);
  await srv.stop();
  const narrow = await start(['--max-context', '64', '--step-tokens', '160', '--max-seqs', '4']);
  const nc = new OpenAI({ apiKey: 'x', baseURL: narrow.url + '/v1', maxRetries: 0 });
  const together = await Promise.all([0, 1, 2, 3].map((i) =>
    nc.completions.create({ model: 'm', prompt: ids(i), max_tokens: 8, temperature: 0 }).then((r) => r.choices[0].text)));
  assert.deepStrictEqual(together, alone);
  await narrow.stop();
});
