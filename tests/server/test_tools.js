// test_tools.js — tool calls streamed token by token and tool_choice, with the official
// clients on scripted answers (random weights never write DSML by themselves):
//  - a streamed answer's tool_calls arrive as deltas, the name first and the arguments in
//    many fragments (the openai client's ChatCompletionStream accumulates them into the
//    non-streamed answer exactly);
//  - tool_choice "none": no tools in the prompt and DSML in the answer is plain content;
//    "required" and a named function: the DSML opening (and the name) are forced tokens,
//    so even unscripted random weights open a call; bad choices are 400s;
//  - Anthropic's tool_choice {"type": "tool"} the same way;
//  - a streamed Anthropic answer's tool_use input arrives as many input_json_delta
//    fragments adding up to the non-streamed input;
//  - strict tools (chat, Anthropic, Responses where `strict` defaults to true): valid
//    arguments from random weights.
'use strict';
const assert = require('assert');
const OpenAI = require('openai').default;
const Anthropic = require('@anthropic-ai/sdk').default;
const { start, run } = require('./harness');
const { WEATHER_TOOL } = require('./common');

const D = '｜DSML｜';
const P = (name, str, v) => `<${D}parameter name="${name}" string="${str}">${v}</${D}parameter>`;
const PARAMS = `${P('city', 'true', 'Paris "centre", rue de l\'Été')}\n${P('days', 'false', '3')}\n</${D}invoke>`;
const TWO_CALLS = `<${D}tool_calls>\n<${D}invoke name="get_weather">\n${PARAMS}\n` +
  `<${D}invoke name="get_time">\n${P('zone', 'true', 'CET')}\n</${D}invoke>\n</${D}tool_calls>`;
const TIME_TOOL = { type: 'function', function: { name: 'get_time', description: 'Time in a zone',
  parameters: { type: 'object', properties: { zone: { type: 'string' } } } } };
const SCRIPT = [
  { match: 'STREAM_CALLS', text: 'Checking both.\n\n' + TWO_CALLS },
  // after the forced opening `...<invoke name="` of tool_choice "required"
  { match: 'REQUIRED_CALL', text: `get_weather">\n${PARAMS}\n</${D}tool_calls>` },
  // after the forced `...<invoke name="get_weather">\n` of a named choice
  { match: 'NAMED_CALL', text: `${PARAMS}\n</${D}tool_calls>` },
];
const WANT_ARGS = { city: 'Paris "centre", rue de l\'Été', days: 3 };
const OPENING = `\n\n<${D}tool_calls>\n<${D}invoke name="`;

run('server_tools', async () => {
  const srv = await start(['--max-context', '1024'], { script: SCRIPT });
  const client = new OpenAI({ apiKey: 'x', baseURL: srv.url + '/v1', maxRetries: 0 });
  const model = 'm';
  const tools = [WEATHER_TOOL, TIME_TOOL];
  const ask = (content, extra = {}) => ({ model, temperature: 0, tools, messages: [{ role: 'user', content }], ...extra });

  // streamed tool calls: name first, then argument fragments, adding up to the non-streamed answer
  const whole = await client.chat.completions.create(ask('weather and time? STREAM_CALLS'));
  const wm = whole.choices[0].message;
  assert.strictEqual(whole.choices[0].finish_reason, 'tool_calls');
  assert.strictEqual(wm.content, 'Checking both.');
  assert.deepStrictEqual(wm.tool_calls.map((c) => c.function.name), ['get_weather', 'get_time']);
  assert.deepStrictEqual(JSON.parse(wm.tool_calls[0].function.arguments), WANT_ARGS);
  const fragments = [0, 0];
  const names = [];
  const stream = client.beta.chat.completions.stream(ask('weather and time? STREAM_CALLS'));
  stream.on('chunk', (ch) => {
    for (const tc of ch.choices[0]?.delta?.tool_calls || []) {
      if (tc.function?.name) {
        assert.strictEqual(fragments[tc.index], 0, 'the name must come before the arguments');
        names[tc.index] = tc.function.name;
      }
      if (tc.function?.arguments) fragments[tc.index]++;
    }
  });
  const fin = await stream.finalChatCompletion();
  const sm = fin.choices[0].message;
  assert.strictEqual(fin.choices[0].finish_reason, 'tool_calls');
  assert.strictEqual(sm.content, wm.content);
  assert.deepStrictEqual(names, ['get_weather', 'get_time']);
  for (let i = 0; i < 2; i++) {
    assert.match(sm.tool_calls[i].id, new RegExp(`^call_${fin.id}_${i}$`));
    assert.strictEqual(sm.tool_calls[i].function.name, wm.tool_calls[i].function.name);
    assert.strictEqual(sm.tool_calls[i].function.arguments, wm.tool_calls[i].function.arguments);
  }
  console.log(`tool_calls streamed: arguments in ${fragments.join(" and ")} fragments`);
  // "Paris \"centre\", rue de l'Été" alone is more than a dozen tokens
  assert(fragments[0] >= 10, `arguments of call 0 in ${fragments[0]} fragments`);
  assert(fragments[1] >= 2, `arguments of call 1 in ${fragments[1]} fragments`);

  // tool_choice "none": the same scripted text is content, DSML and all; no tools rendered
  const none = await client.chat.completions.create(ask('weather and time? STREAM_CALLS', { tool_choice: 'none' }));
  assert.strictEqual(none.choices[0].finish_reason, 'stop');
  assert.strictEqual(none.choices[0].message.tool_calls, undefined);
  assert.strictEqual(none.choices[0].message.content, 'Checking both.\n\n' + TWO_CALLS);
  const auto = await client.chat.completions.create(ask('weather and time? STREAM_CALLS', { tool_choice: 'auto' }));
  assert(none.usage.prompt_tokens < auto.usage.prompt_tokens, 'tool_choice none still rendered the tools');
  let noneStreamed = '';
  for await (const ch of await client.chat.completions.create(ask('weather and time? STREAM_CALLS',
    { tool_choice: 'none', stream: true }))) {
    assert(!ch.choices[0]?.delta?.tool_calls, 'tool_calls delta with tool_choice none');
    noneStreamed += ch.choices[0]?.delta?.content || '';
  }
  assert.strictEqual(noneStreamed, none.choices[0].message.content);

  // "required": the opening is forced, the script writes the rest (non-streamed and streamed)
  const req = await client.chat.completions.create(ask('go REQUIRED_CALL', { tool_choice: 'required' }));
  assert.strictEqual(req.choices[0].finish_reason, 'tool_calls');
  assert.strictEqual(req.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepStrictEqual(JSON.parse(req.choices[0].message.tool_calls[0].function.arguments), WANT_ARGS);
  const reqs = await client.beta.chat.completions.stream(ask('go REQUIRED_CALL', { tool_choice: 'required' }))
    .finalChatCompletion();
  assert.deepStrictEqual(reqs.choices[0].message.tool_calls[0].function, req.choices[0].message.tool_calls[0].function);
  // a named function: the opening and the name are forced
  const named = await client.chat.completions.create(ask('go NAMED_CALL',
    { tool_choice: { type: 'function', function: { name: 'get_weather' } } }));
  assert.strictEqual(named.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepStrictEqual(JSON.parse(named.choices[0].message.tool_calls[0].function.arguments), WANT_ARGS);
  // unscripted random weights: the answer still begins with the forced tokens
  for (const [choice, text] of [['required', OPENING],
    [{ type: 'function', function: { name: 'get_time' } }, OPENING + 'get_time">\n']]) {
    const r = await client.chat.completions.create(ask('anything at all', { tool_choice: choice, max_tokens: 24,
      logprobs: true }));
    const got = r.choices[0].logprobs.content.map((t) => t.token).join('');
    assert(got.startsWith(text), `tool_choice ${JSON.stringify(choice)}: the answer begins ${JSON.stringify(got)}`);
  }
  // bad choices
  for (const [choice, tl] of [['sometimes', tools], [{ type: 'function', function: { name: 'nope' } }, tools],
    ['required', undefined], [{ type: 'function' }, tools]])
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
      tools: tl, tool_choice: choice }), (e) => e.status === 400, `tool_choice ${JSON.stringify(choice)}`);

  // Anthropic: {"type": "tool", "name"} forces the named call
  const ac = new Anthropic({ apiKey: 'x', baseURL: srv.url, maxRetries: 0 });
  const at = await ac.messages.create({ model, max_tokens: 200, temperature: 0,
    tools: [{ name: 'get_weather', description: 'w', input_schema: { type: 'object' } }],
    tool_choice: { type: 'tool', name: 'get_weather' }, messages: [{ role: 'user', content: 'go NAMED_CALL' }] });
  assert.strictEqual(at.stop_reason, 'tool_use');
  const use = at.content.find((b) => b.type === 'tool_use');
  assert.deepStrictEqual(use.input, WANT_ARGS);

  // Anthropic, streamed: each call's tool_use block opens with its name, then its input
  // arrives as many input_json_delta fragments that add up to the non-streamed input
  const atools = tools.map((t) => ({ name: t.function.name, description: t.function.description,
    input_schema: t.function.parameters }));
  const areq = { model, max_tokens: 300, temperature: 0, tools: atools,
    messages: [{ role: 'user', content: 'weather and time? STREAM_CALLS' }] };
  const awhole = await ac.messages.create(areq);
  assert.strictEqual(awhole.stop_reason, 'tool_use');
  const wantUses = awhole.content.filter((b) => b.type === 'tool_use');
  assert.deepStrictEqual(wantUses.map((b) => b.name), ['get_weather', 'get_time']);
  assert.deepStrictEqual(wantUses[0].input, WANT_ARGS);
  const afrag = {};
  const astream = ac.messages.stream(areq);
  astream.on('streamEvent', (ev) => {
    if (ev.type === 'content_block_start' && ev.content_block.type === 'tool_use') {
      assert.deepStrictEqual(ev.content_block.input, {}, 'a tool_use block opens with an empty input');
      afrag[ev.index] = 0;
    }
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') {
      assert(ev.index in afrag, 'input_json_delta outside a tool_use block');
      afrag[ev.index]++;
    }
  });
  const afin = await astream.finalMessage();
  assert.strictEqual(afin.stop_reason, 'tool_use');
  assert.deepStrictEqual(afin.content.filter((b) => b.type === 'text').map((b) => b.text), ['Checking both.']);
  const gotUses = afin.content.filter((b) => b.type === 'tool_use');
  assert.deepStrictEqual(gotUses.map((b) => [b.name, b.input]), wantUses.map((b) => [b.name, b.input]));
  gotUses.forEach((b, i) => assert.strictEqual(b.id, `toolu_${afin.id}_${i}`));
  const counts = Object.values(afrag);
  console.log(`tool_use streamed: input in ${counts.join(' and ')} fragments`);
  assert(counts.length === 2 && counts[0] >= 10 && counts[1] >= 2, `input fragments ${counts}`);

  // strict tools: the arguments follow the schema even from random weights (free output is
  // noise), on every seed; tool_choice required, named, parallel_tool_calls false, auto
  const BOOK = { type: 'function', function: { name: 'book', strict: true, parameters: { type: 'object',
    properties: { room: { enum: ['red', 'blue'] }, nights: { type: 'integer', minimum: 1, maximum: 30 },
      guest: { type: 'object', properties: { name: { type: 'string', maxLength: 6 }, vip: { type: 'boolean' } },
        required: ['name', 'vip'], additionalProperties: false },
      note: { type: 'string', maxLength: 8 } },
    required: ['room', 'nights', 'guest', 'note'], additionalProperties: false } } };
  const validBook = (a) => {
    const keys = (o) => Object.keys(o).sort().join();
    return keys(a) === 'guest,nights,note,room' && ['red', 'blue'].includes(a.room) && Number.isInteger(a.nights) && a.nights >= 1 && a.nights <= 30 &&
      typeof a.note === 'string' && [...a.note].length <= 8 && a.guest && typeof a.guest === 'object' &&
      keys(a.guest) === 'name,vip' && typeof a.guest.name === 'string' && [...a.guest.name].length <= 6 &&
      typeof a.guest.vip === 'boolean';
  };
  // (a tool that is not strict, TIME_TOOL, takes any arguments: noise would not end them)
  const strictAsk = (seed, extra) => ask('book a room', { tools: [BOOK], temperature: 1, seed,
    max_tokens: 600, ...extra });
  const callsOf = (r) => r.choices[0].message.tool_calls || [];
  for (const [seed, extra] of [[1, { tool_choice: 'required' }], [2, { tool_choice: 'required' }],
    [3, { tool_choice: 'required', parallel_tool_calls: false }],
    [4, { tool_choice: { type: 'function', function: { name: 'book' } }, tools: [TIME_TOOL, BOOK] }]]) {
    const r = await client.chat.completions.create(strictAsk(seed, extra));
    assert.strictEqual(r.choices[0].finish_reason, 'tool_calls', `seed ${seed}: ${JSON.stringify(r.choices[0])}`);
    const calls = callsOf(r);
    if (extra.parallel_tool_calls === false || typeof extra.tool_choice === 'object') assert.strictEqual(calls.length, 1);
    for (const c of calls) {
      assert.strictEqual(c.function.name, 'book');
      assert(validBook(JSON.parse(c.function.arguments)), `seed ${seed}: ${c.function.arguments}`);
    }
    console.log(`strict, seed ${seed}: ${calls.map((c) => c.function.name + c.function.arguments).join(' ')}`);
  }
  // auto: free text, and any call the model opens is valid
  for (const seed of [5, 6]) {
    const r = await client.chat.completions.create(strictAsk(seed, { tool_choice: 'auto', max_tokens: 40 }));
    for (const c of callsOf(r)) assert(validBook(JSON.parse(c.function.arguments)), c.function.arguments);
  }
  // a strict tool whose schema the constraint cannot enforce: 400 naming it
  await assert.rejects(client.chat.completions.create(ask('x', { tools: [{ type: 'function', function: {
    name: 'grep', strict: true, parameters: { type: 'object', properties: { re: { type: 'string', pattern: '(?=a)' } } } } }] })),
  (e) => e.status === 400 && /strict tool 'grep'/.test(e.message), 'a bad strict schema');
  // tools that are not strict are not compiled: two with one name, a '<' in a name are fine
  const loose = await client.chat.completions.create(ask('x', { max_tokens: 1, tools: [TIME_TOOL, TIME_TOOL,
    { type: 'function', function: { name: 'a<b', parameters: { type: 'object' } } }] }));
  assert.strictEqual(loose.choices.length, 1);
  // Anthropic: strict tool use the same way
  // (no seed on this API: one call, so that noise cannot chain calls past max_tokens)
  const ab = await ac.messages.create({ model, max_tokens: 600, temperature: 1,
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
    tools: [{ name: 'book', strict: true, input_schema: BOOK.function.parameters }],
    messages: [{ role: 'user', content: 'book a room' }] });
  assert.strictEqual(ab.stop_reason, 'tool_use');
  const uses = ab.content.filter((x) => x.type === 'tool_use');
  assert.strictEqual(uses.length, 1);
  assert(validBook(uses[0].input), JSON.stringify(uses[0].input));
  // Responses: a function tool without `strict` is strict (OpenAI's Responses default), so
  // random weights still write valid arguments; `strict: false` opts out; a schema outside
  // the subset is then served non-strict (200), where `strict: true` is a 400
  const rtool = (extra) => ({ type: 'function', name: 'book', parameters: BOOK.function.parameters, ...extra });
  const rr = await client.responses.create({ model, input: 'book a room', temperature: 0, max_output_tokens: 600,
    tool_choice: 'required', parallel_tool_calls: false, tools: [rtool({})] });
  const rcalls = rr.output.filter((x) => x.type === 'function_call');
  assert.strictEqual(rcalls.length, 1, JSON.stringify(rr.output));
  assert(validBook(JSON.parse(rcalls[0].arguments)), rcalls[0].arguments);
  console.log(`responses, strict by default: ${rcalls[0].arguments}`);
  const grep = { type: 'object', properties: { re: { type: 'string', pattern: '(?=a)' } } };
  const rl = await client.responses.create({ model, input: 'x', max_output_tokens: 2,
    tools: [rtool({ strict: false }), { type: 'function', name: 'grep', parameters: grep }] });
  assert.strictEqual(rl.object, 'response');
  await assert.rejects(client.responses.create({ model, input: 'x', max_output_tokens: 2,
    tools: [{ type: 'function', name: 'grep', parameters: grep, strict: true }] }),
  (e) => e.status === 400 && /strict tool 'grep'/.test(e.message), 'a bad strict schema (responses)');
  await srv.stop();
});
