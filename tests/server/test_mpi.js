// test_mpi.js — `mpirun -np 2 dsv4 serve --parallel ep --attention home` (rank 0 the home of every request;
// test_dp.js covers the default, --attention dp) answers exactly like one process:
// the same concurrent mix (chat and completions, greedy and seeded, streaming, logprobs, a
// prompt long enough to prefill in chunks beside decodes, a scripted answer whose MTP drafts
// are accepted so the followers replay commits) gives identical outputs. The followers
// wait for the next step without a deadline: with a 6 s peer timeout the group sits idle
// for 7 s and then serves again. SIGTERM to rank 0 stops every rank, mpirun exits 0.
// The prefix cache on the group (step_msg.h: rank 0's, the followers start a restored
// sequence at its length): a multi-turn chat and two users of its long system prompt hit
// it, with 2 entries kept (evictions on every server) and the group reading the --kv-dir
// the one-process server wrote; every answer equals the one-process server's with the
// cache and the one computed cold (--prefix-entries 0). n = 3 beside the mix: the other
// choices fork choice 0's prompt (the fork relayed to the followers, at an unaligned length),
// the choices those of one process.
'use strict';
const assert = require('assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const OpenAI = require('openai').default;
const { start, metrics, http, run } = require('./harness');
const { A, turns } = require('./common');


const WORDS = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen';
const SCRIPT = [{ match: 'MPI_SCRIPT_3', text: `${WORDS} ${WORDS}` }];

// the usage less its cached tokens (the group reads the one-process server's --kv-dir)
const tokens = (u) => ({ prompt: u.prompt_tokens, completion: u.completion_tokens, total: u.total_tokens });

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
    lp: r.choices[0].logprobs.content, usage: tokens(r.usage) };
}

// n = 3 (seeded): each choice's text, logprobs and finish; the prompt's tokens
async function choose(client) {
  const r = await client.chat.completions.create({ model: 'm', n: 3, max_tokens: 12, temperature: 0.9, seed: 330,
    logprobs: true, messages: [{ role: 'user', content: 'pick a colour '.repeat(20) }] });
  return { choices: r.choices.map((c) => [c.index, c.message.content, c.logprobs.content, c.finish_reason]),
    prompt: r.usage.prompt_tokens };
}

// opts: mpi (ranks), kvDir, cold (no prefix cache: only the turns)
async function answers({ mpi = 0, kvDir, cold = false, dp = false } = {}) {
  const args = ['--max-seqs', '4', '--step-tokens', '32', '--max-context', '512', '--no-warmup',
    '--prefix-entries', cold ? '0' : '2'];
  if (mpi) args.push('--peer-timeout', '6');  // 1 s and 3 s: a loaded machine (load 15-20) missed them inside a step
  if (kvDir) args.push('--kv-dir', kvDir);
  const srv = await start(args, { script: SCRIPT, mpi, dp });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const [out, picks] = cold ? [[], null] : await Promise.all([Promise.all([0, 1, 2, 3, 4, 5].map((i) => ask(client, i))),
    choose(client)]);
  const chat = await turns(client);
  // the endpoints that only tokenize answer on rank 0 as on one process
  const hi = [{ role: 'user', content: 'count me' }];
  const tok = [(await http(srv.url + '/tokenize', { body: { messages: hi } })).json,
    (await http(srv.url + '/v1/messages/count_tokens', { body: { model: 'm', messages: hi } })).json];
  if (mpi) {
    await new Promise((r) => setTimeout(r, 7000));  // idle past the peer timeout
    out.push(await ask(client, 0));
  }
  const m = await metrics(srv.url);
  await srv.stop();
  return { out, picks, chat, m, tok };
}

const strip = (t) => ({ text: t.text, lp: t.lp });

run('server_mpi', async () => {
  const kvDir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-mpi-kv-'));
  const one = await answers({ kvDir });
  const cold = await answers({ cold: true });
  const two = await answers({ mpi: 2, kvDir });
  fs.rmSync(kvDir, { recursive: true, force: true });
  for (let i = 0; i < 6; i++) assert.deepStrictEqual(two.out[i], one.out[i], `request ${i} differs under MPI`);
  assert.deepStrictEqual(two.out[6], one.out[0], 'the request after the idle wait differs');
  assert.deepStrictEqual(two.tok, one.tok);
  // n = 3: the group's choices are one process's, and both forked the prompt for choices 1, 2
  assert.deepStrictEqual(two.picks, one.picks, 'n = 3 differs under MPI');
  for (const [who, r] of [['one process', one], ['MPI', two]]) {
    assert.strictEqual(r.m.dsv4_choices_forked_total, 2, `${who}: the choices computed the prompt`);
    assert.strictEqual(r.m.dsv4_prompt_tokens_forked_total, 2 * one.picks.prompt);
  }
  assert(one.tok[0].count > 3 && one.tok[0].count === one.tok[1].input_tokens, JSON.stringify(one.tok));
  assert(one.out[4].text.length > 0 && one.out[1].text !== one.out[0].text);
  // the scripted drafts were accepted (about every other of its 15 tokens): rank 1
  // replayed speculative commits of 2 rows
  assert(two.m.dsv4_mtp_accepted_total >= 5, `accepted drafts: ${two.m.dsv4_mtp_accepted_total}`);

  // the prefix cache: the same answers with it (one process, the group) and without
  for (let i = 0; i < cold.chat.length; i++) {
    assert.deepStrictEqual(strip(one.chat[i]), strip(cold.chat[i]), `turn ${i}: one process, cached vs cold`);
    assert.deepStrictEqual(strip(two.chat[i]), strip(cold.chat[i]), `turn ${i}: MPI, cached vs cold`);
    assert.strictEqual(cold.chat[i].cached, 0);
  }
  const [t1, t2, u1, u2] = two.chat;
  assert(t1.n > 2 * A && t1.text.length > 0 && u1.text !== u2.text);
  // rank 0 read the first turn's prompt from the one-process server's file; the second
  // turn and both users restored at least the system prompt's aligned part
  assert.strictEqual(t1.cached, Math.floor((t1.n - 1) / A) * A, 'MPI: the first turn did not load its prefix');
  for (const t of [t2, u1, u2]) assert(t.cached >= 2 * A, `MPI: ${t.cached} tokens restored`);
  assert(one.chat[1].cached >= 2 * A, 'one process: the second turn restored nothing');
  const reused = two.chat.reduce((n, t) => n + t.cached, 0);
  assert(two.m.dsv4_prefix_reused_tokens_total >= reused);  // the mix's long prompts hit the files too
  assert(two.m.dsv4_prefix_hits_total >= 4 && two.m.dsv4_prefix_disk_loads_total >= 1);
  assert(two.m.dsv4_prefix_evictions_total > 0, 'no eviction with 2 entries kept');
  assert.strictEqual(cold.m.dsv4_prefix_hits_total, 0);
  console.log(`MPI: ${two.m.dsv4_mtp_accepted_total} accepted drafts, ` +
    `${two.m.dsv4_mtp_steps_total} MTP steps; prefix: ${two.m.dsv4_prefix_hits_total} hits, ` +
    `${reused} tokens reused, ${two.m.dsv4_prefix_evictions_total} evictions, ` +
    `${two.m.dsv4_prefix_disk_loads_total} disk loads`);
}, { limitMs: 120000 });
