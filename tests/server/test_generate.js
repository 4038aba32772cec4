// test_generate.js — greedy output through the server equals `dsv4 generate` for the same
// prompt, token for token (the shared request -> tokens -> sampling -> text path): chat
// with the template, and plain completion after BOS.
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
  await srv.stop();
});
