// test_mpi.js — `mpirun -np 2 dsv4 serve --parallel ep` answers exactly like one process:
// the same concurrent mix (chat and completions, greedy and seeded, streaming, logprobs, a
// prompt long enough to prefill in chunks beside decodes, a scripted answer whose MTP drafts
// are accepted so the followers replay commits) gives identical outputs. The followers
// wait for the next step without a deadline: with a 6 s peer timeout the group sits idle
// for 7 s and then serves again. SIGTERM to rank 0 stops every rank, mpirun exits 0.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, metrics, run } = require('./harness');

const WORDS = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen';
const SCRIPT = [{ match: 'MPI_SCRIPT_3', text: `${WORDS} ${WORDS}` }];

async function ask(client, i) {
  const sampled = i % 2 === 1;
  const common = { model: 'm', max_tokens: 12 + i, temperature: sampled ? 0.9 : 0,
    ...(sampled ? { seed: 300 + i, top_p: 0.9 } : {}) };
  const content = i === 3 ? 'MPI_SCRIPT_3 please' : `tell me about item ${i} `.repeat(1 + i * 8);
  if (i === 2) {  // completions, streamed
    let text = '';
    for await (const ch of await client.completions.create({ ...common, prompt: content, stream: true }))
      text += ch.choices[0] ? ch.choices[0].text : '';
    return { text };
  }
  if (i === 5) {  // chat, streamed
    let text = '';
    for await (const ch of await client.chat.completions.create({ ...common, stream: true,
      messages: [{ role: 'user', content }] }))
      text += (ch.choices[0] && ch.choices[0].delta.content) || '';
    return { text };
  }
  const r = await client.chat.completions.create({ ...common, logprobs: true, top_logprobs: 2,
    messages: [{ role: 'user', content }] });
  return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason,
    lp: r.choices[0].logprobs.content, usage: r.usage };
}

async function answers(mpi) {
  const args = ['--max-seqs', '4', '--step-tokens', '32', '--max-context', '512', '--no-warmup'];
  if (mpi) args.push('--peer-timeout', '6');  // 1 s and 3 s: a loaded machine (load 15-20) missed them inside a step
  const srv = await start(args, { script: SCRIPT, mpi });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const out = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => ask(client, i)));
  if (mpi) {
    await new Promise((r) => setTimeout(r, 7000));  // idle past the peer timeout
    out.push(await ask(client, 0));
  }
  const m = await metrics(srv.url);
  await srv.stop();
  return { out, m };
}

run('server_mpi', async () => {
  const one = await answers(0);
  const two = await answers(2);
  for (let i = 0; i < 6; i++) assert.deepStrictEqual(two.out[i], one.out[i], `request ${i} differs under MPI`);
  assert.deepStrictEqual(two.out[6], one.out[0], 'the request after the idle wait differs');
  assert(one.out[4].text.length > 0 && one.out[1].text !== one.out[0].text);
  // the scripted drafts were accepted (about every other of its 15 tokens): rank 1
  // replayed speculative commits of 2 rows
  assert(two.m.dsv4_mtp_accepted_total >= 5, `accepted drafts: ${two.m.dsv4_mtp_accepted_total}`);
  console.log(`MPI: ${two.m.dsv4_mtp_accepted_total} accepted drafts, ` +
    `${two.m.dsv4_mtp_steps_total} MTP steps`);
}, { limitMs: 120000 });
