// test_mtp.js — MTP speculative decoding in the server (serving.md §e): the same requests
// (greedy and seeded, chat and completions, logprobs, a scripted answer whose drafts are its
// script so that verify spans accept) give the same answers with --mtp on, concurrently, as
// with --mtp off one by one; /metrics counts the drafts, the accepted ones and tokens per step.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, metrics, run } = require('./harness');

// about 25 tokens, every draft of which is right
const WORDS = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen';
const SCRIPT = [{ match: 'MTP_SCRIPT_7', text: `${WORDS} ${WORDS}` }];

function ask(client, i) {
  const sampled = i % 2 === 1;
  const common = { model: 'm', max_tokens: 40, temperature: sampled ? 0.9 : 0, logprobs: true, top_logprobs: 1,
    ...(sampled ? { seed: 77 + i, top_p: 0.9 } : {}) };
  const content = i === 4 ? 'MTP_SCRIPT_7 please' : `tell me about item ${i} `.repeat(1 + i * 3);
  return client.chat.completions.create({ ...common, messages: [{ role: 'user', content }] })
    .then((r) => ({ text: r.choices[0].message.content, finish: r.choices[0].finish_reason,
      lp: r.choices[0].logprobs.content }));
}

async function answers(args, together) {
  const srv = await start(['--max-seqs', '6', '--step-tokens', '64', '--max-context', '512', ...args],
    { script: SCRIPT });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const out = [];
  if (together) out.push(...await Promise.all([0, 1, 2, 3, 4, 5].map((i) => ask(client, i))));
  else for (let i = 0; i < 6; i++) out.push(await ask(client, i));
  // a prompt of two whole --step-tokens chunks: its first token is drawn in the step of the
  // last chunk, so the MTP rows ready then are that chunk and the row that waited (more than
  // one span may hold; this was an HTTP 500 before the spec split them)
  const ids = Array.from({ length: 128 }, (_, k) => 5 + ((k * 37) % 200));
  const c = await client.completions.create({ model: 'm', prompt: ids, max_tokens: 12, temperature: 0 });
  out.push({ text: c.choices[0].text, finish: c.choices[0].finish_reason });
  const m = await metrics(srv.url);
  await srv.stop();
  return { out, m };
}

run('server_mtp', async () => {
  const off = await answers(['--mtp', 'off'], false);
  const on = await answers(['--mtp', 'on'], true);
  assert.strictEqual(on.out.length, 7);
  for (let i = 0; i < 7; i++) assert.deepStrictEqual(on.out[i], off.out[i], `request ${i} differs with MTP`);
  assert.strictEqual(off.m.dsv4_mtp_steps_total, 0);
  const m = on.m;
  console.log(`MTP: ${m.dsv4_mtp_accepted_total}/${m.dsv4_mtp_drafts_total} drafts accepted over ` +
    `${m.dsv4_mtp_steps_total} steps, ${m.dsv4_mtp_tokens_per_step} tokens/step`);
  assert(m.dsv4_mtp_drafts_total > 0, 'no draft was verified');
  // the scripted answer's drafts are right: every other of its ~30 tokens comes from an
  // accepted draft (random weights' own drafts are nearly always wrong)
  assert(m.dsv4_mtp_accepted_total >= 12, 'scripted drafts were not accepted');
  assert.strictEqual(m.dsv4_mtp_tokens_per_step,
    Number(((m.dsv4_mtp_steps_total + m.dsv4_mtp_accepted_total) / m.dsv4_mtp_steps_total).toFixed(6)));
});
