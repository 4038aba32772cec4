// test_batch.js — batch invariance and real batching: 32 requests (chat and completions,
// greedy and seeded sampling, some streaming, prompts from a few to a few hundred tokens)
// give exactly their solo outputs, logprobs included, when all 32 run at once in a
// shuffled arrival order; /metrics shows steps with several decode rows, and far fewer
// steps than one by one.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, metrics, run } = require('./harness');

const WORDS = 'the quick brown fox jumps over a lazy dog while seven wizards quietly hex'.split(' ');
function prompt(i) {
  const n = 3 + ((i * 37) % 11) * 25;  // 3 .. 253 words
  return Array.from({ length: n }, (_, k) => WORDS[(k * 7 + i) % WORDS.length]).join(' ');
}

// One request of the mix; resolves to everything that must not depend on the batch.
async function ask(client, i) {
  const sampled = i % 2 === 1;
  const common = { model: 'm', max_tokens: 4 + ((i * 5) % 17), temperature: sampled ? 0.9 : 0,
    ...(sampled ? { seed: 1000 + i, top_p: 0.95, top_k: 50 } : {}) };
  const stream = i % 3 === 0;
  if (i % 4 < 2) {
    const req = { ...common, messages: [{ role: 'user', content: prompt(i) }], logprobs: true, top_logprobs: 2 };
    if (!stream) {
      const r = await client.chat.completions.create(req);
      return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason,
        lp: r.choices[0].logprobs.content, n: r.usage.completion_tokens };
    }
    const out = { text: '', finish: null, lp: [], n: null };
    for await (const ch of await client.chat.completions.create({ ...req, stream: true,
      stream_options: { include_usage: true } })) {
      if (ch.usage) out.n = ch.usage.completion_tokens;
      const c = ch.choices[0];
      if (!c) continue;
      out.text += c.delta.content || '';
      if (c.logprobs) out.lp.push(...c.logprobs.content);
      if (c.finish_reason) out.finish = c.finish_reason;
    }
    return out;
  }
  const req = { ...common, prompt: prompt(i), logprobs: 2 };
  if (!stream) {
    const r = await client.completions.create(req);
    return { text: r.choices[0].text, finish: r.choices[0].finish_reason, lp: r.choices[0].logprobs.token_logprobs,
      n: r.usage.completion_tokens };
  }
  const out = { text: '', finish: null, lp: [], n: null };
  for await (const ch of await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    if (ch.usage) out.n = ch.usage.completion_tokens;
    const c = ch.choices[0];
    if (!c) continue;
    out.text += c.text;
    if (c.logprobs) out.lp.push(...c.logprobs.token_logprobs);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

run('server_batch', async () => {
  const srv = await start(['--max-seqs', '32', '--step-tokens', '96', '--max-context', '1024']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const N = 32;
  const m0 = await metrics(srv.url);
  const solo = [];
  for (let i = 0; i < N; i++) solo.push(await ask(client, i));
  const m1 = await metrics(srv.url);

  // all at once, in a shuffled arrival order
  const order = Array.from({ length: N }, (_, i) => (i * 13 + 5) % N);
  const together = new Array(N);
  await Promise.all(order.map((i) => ask(client, i).then((r) => { together[i] = r; })));
  const m2 = await metrics(srv.url);
  for (let i = 0; i < N; i++) assert.deepStrictEqual(together[i], solo[i], `request ${i} differs in the batch`);

  const steps = (a, b) => b.dsv4_steps_total - a.dsv4_steps_total;
  const single = (a, b) => b['dsv4_step_decode_rows_bucket{le="1"}'] - a['dsv4_step_decode_rows_bucket{le="1"}'];
  const multi = steps(m1, m2) - single(m1, m2);
  console.log(`solo: ${steps(m0, m1)} steps; concurrent: ${steps(m1, m2)} steps, ${multi} with 2+ decode rows, ` +
    `${m2.dsv4_decode_rows_total - m1.dsv4_decode_rows_total} decode rows`);
  assert.strictEqual(single(m0, m1), steps(m0, m1), 'one by one, no step has two decode rows');
  assert(multi > 0, 'no step with more than one decode row');
  assert(steps(m1, m2) * 3 < steps(m0, m1), 'the concurrent run did not batch');
  await srv.stop();
});
