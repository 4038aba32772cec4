// test_preempt.js — pool pressure: the compressed-cache pools hold 10 blocks of 128
// positions and 8 requests arrive at once; each prompt fits one block and each answer
// grows into a second one, mid-generation. All complete (the newest running request is
// preempted when a step runs out of pages, and recomputed later from its tokens) with
// exactly the outputs each gives alone, sampled ones included.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, metrics, run } = require('./harness');

// fixed per-sequence bytes (8 x 137,216 at c_max 64, with the MTP caches this model's
// server keeps by default) + 10 blocks x 6,272 bytes for this test's model: the planner
// accepts it (T_cap = (10 - 8) x 128 >= max_context 256); bytes of F32 rows (--kv-dtype f32)
const CACHE = 8 * 137216 + 10 * 6272;

function req(i) {
  const words = Array.from({ length: 100 + 2 * i }, (_, k) => ['alpha', 'beta', 'gamma', 'delta'][(k + i) % 4]);
  return { model: 'm', prompt: words.join(' '), max_tokens: 40, temperature: i % 2 ? 0.8 : 0, seed: 7 + i,
    logprobs: 1 };
}

run('server_preempt', async () => {
  const srv = await start(['--max-seqs', '8', '--max-context', '256', '--step-tokens', '64',
    '--cache-bytes', String(CACHE), '--kv-dtype', 'f32']);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const shape = (r) => ({ text: r.choices[0].text, finish: r.choices[0].finish_reason,
    lp: r.choices[0].logprobs.token_logprobs });
  const solo = [];
  for (let i = 0; i < 8; i++) solo.push(shape(await client.completions.create(req(i))));
  const m0 = await metrics(srv.url);
  const together = await Promise.all(solo.map((_, i) => client.completions.create(req(i)).then(shape)));
  const m1 = await metrics(srv.url);
  for (let i = 0; i < 8; i++) assert.deepStrictEqual(together[i], solo[i], `request ${i} differs under preemption`);
  const pre = m1.dsv4_preemptions_total - m0.dsv4_preemptions_total;
  console.log(`preemptions: ${pre}`);
  assert(pre > 0, 'the pools never ran out: the test does not exercise preemption');
  assert.strictEqual(m1['dsv4_requests_total{status="5xx"}'], 0);
  await srv.stop();
});
