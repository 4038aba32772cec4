// test_dp_cp.js — context-parallel prefill inside the DP server (`mpirun -np 2 dsv4 serve
// --parallel ep`, --attention dp and --cp on by default): a rank's long prefill chunk runs
// over both ranks with that rank as home, while the other requests go on decoding.
// Three requests decode (streamed, greedy and seeded) while a long prompt (3 chunks of
// --step-tokens 512, each touching 4 granules of 128: CP prefills) is placed on rank 1, then
// a longer prompt that shares its beginning restores it from rank 1's prefix cache and
// computes the cold rest (CP again), MTP on throughout: every answer, logprobs included,
// byte-identical to one process; the restored tokens counted; the CP prefills counted per
// home rank in /metrics (dsv4_rank_cp_prefills_total), and none with --cp off.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const { start, metrics, run } = require('./harness');

const ARGS = ['--max-seqs', '4', '--step-tokens', '512', '--max-context', '2048', '--no-warmup', '--prefix-entries', '4'];
const WORDS = 'amber birch cedar dune ember fjord grove heath inlet juniper kelp larch'.split(' ');
const text = (n, k) => Array.from({ length: n }, (_, i) => WORDS[(i * k + (i >> 3)) % WORDS.length]).join(' ');
const LONG = `Summarize: ${text(700, 5)}`;
const LONGER = `${LONG} and then ${text(500, 7)}`;

async function answers(opts) {
  const srv = await start(ARGS, opts);
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const one = (prompt, extra = {}) => client.completions.create({ model: 'm', prompt, max_tokens: 8, temperature: 0,
    logprobs: 2, ...extra }).then((r) => ({ text: r.choices[0].text, lp: r.choices[0].logprobs,
    n: r.usage.prompt_tokens, cached: r.usage.prompt_tokens_details ? r.usage.prompt_tokens_details.cached_tokens : 0 }));
  // decoder 0 alone first (rank 0: both idle), then the long prompt (rank 1: the fewest live
  // requests), then decoders 1 and 2 (wherever load puts them); each decoder streams until
  // its answer's end, the long prompts prefill meanwhile
  const seen = [0, 0, 0];
  const decoder = async (i) => {
    let out = '';
    const sampled = i === 1;
    for await (const ch of await client.completions.create({ model: 'm', prompt: `count with me ${i}`, max_tokens: 90,
      temperature: sampled ? 0.9 : 0, ...(sampled ? { seed: 11, top_p: 0.9 } : {}), stream: true })) {
      if (ch.choices[0]) { out += ch.choices[0].text; seen[i]++; }
    }
    return out;
  };
  const decoders = [decoder(0)];
  while (seen[0] < 2) await new Promise((r) => setTimeout(r, 10));
  const longP = one(LONG);
  await new Promise((r) => setTimeout(r, 50));
  decoders.push(decoder(1), decoder(2));
  const long = await longP;
  const longer = await one(LONGER, { temperature: 0.8, seed: 5 });  // its prefix, restored on rank 1
  const dec = await Promise.all(decoders);
  const m = await metrics(srv.url);
  const help = (await (await fetch(srv.url + '/metrics')).text()).split('\n').find((l) => l.startsWith('# HELP dsv4_steps_total '));
  await srv.stop();
  return { long, longer, dec, m, help };
}

run('server_dp_cp', async () => {
  const one = await answers({});
  const dp = await answers({ mpi: 2, dp: true });
  assert.deepStrictEqual(dp.long, one.long, 'the long prompt differs under DP + CP');
  assert.deepStrictEqual(dp.longer, one.longer, 'the longer prompt differs under DP + CP');
  for (let i = 0; i < 3; i++) assert.strictEqual(dp.dec[i], one.dec[i], `decoder ${i} differs under DP + CP`);
  // 1,170 tokens: chunks at 0 and 512 touch 4 granules each (CP), the last 146 tokens 2;
  // 2,015 tokens, 1,152 restored: the chunk at 1,152 is CP, the last 351 tokens are not
  assert(one.long.n > 1024 && one.longer.n > one.long.n + 512, `prompt tokens ${one.long.n} ${one.longer.n}`);
  assert(dp.longer.cached >= 1024, `DP + CP: ${dp.longer.cached} tokens restored`);
  assert(dp.m['dsv4_rank_requests_total{rank="1"}'] >= 2, 'the long prompts were not placed on rank 1');
  assert.strictEqual(dp.m['dsv4_requests_total{status="5xx"}'], 0);
  // the chunks at 0 and 512 of the long prompt and at 1,152 of the longer one, all homed on
  // rank 1; the decoders' short prompts none
  assert.strictEqual(dp.m['dsv4_rank_cp_prefills_total{rank="1"}'], 3, 'CP prefills homed on rank 1');
  assert.strictEqual(dp.m['dsv4_rank_cp_prefills_total{rank="0"}'], 0, 'CP prefills homed on rank 0');
  // the step figures are rank 0's under DP, and their help says so (one process: no note)
  assert.match(dp.help, /rank 0's steps only/, dp.help);
  assert.doesNotMatch(one.help, /rank 0/, one.help);
  // --cp off: the same answer, no CP prefill anywhere
  const off = await start(ARGS.concat(['--cp', 'off']), { mpi: 2, dp: true });
  const r = await new OpenAI({ apiKey: 'x', baseURL: off.url + '/v1', maxRetries: 0 }).completions.create({
    model: 'm', prompt: LONG, max_tokens: 8, temperature: 0, logprobs: 2 });
  const mo = await metrics(off.url);
  await off.stop();
  assert.deepStrictEqual(r.choices[0].logprobs, one.long.lp, 'the long prompt differs under DP with --cp off');
  for (let k = 0; k < 2; k++) assert.strictEqual(mo[`dsv4_rank_cp_prefills_total{rank="${k}"}`], 0, `--cp off: rank ${k}`);
  console.log(`DP + CP: prompts ${one.long.n} and ${one.longer.n} tokens (${dp.longer.cached} restored), ` +
    `${dp.m.dsv4_mtp_accepted_total} accepted drafts`);
}, { limitMs: 120000 });
