// common.js — scripted answers and prompts shared by the server tests.
'use strict';
const D = '｜DSML｜';
const P = (name, str, v) => `<${D}parameter name="${name}" string="${str}">${v}</${D}parameter>`;
const TOOL_BLOCK = `<${D}tool_calls>\n<${D}invoke name="get_weather">\n${P('city', 'true', 'Paris')}\n` +
  `${P('days', 'false', '3')}\n</${D}invoke>\n</${D}tool_calls>`;

// Random weights never write DSML or </think>: these requests get scripted answers
// (dsv4 serve --test-script), matched on a marker in the request body, first match wins.
const SCRIPT = [
  { match: 'WEATHER_RESULT_42', text: 'It is sunny in Paris.' },
  { match: 'TOOLCALL_TEST', text: 'Let me check.\n\n' + TOOL_BLOCK },
  { match: 'THINK_TEST', text: 'I should greet.</think>Hello there!' },
];

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather forecast for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'] },
  },
};

// A long system prompt for the prefix-cache tests: the model's alignment A (prefixes are
// kept at multiples of it) times more than two.
const A = 128;
const NAMES = 'amber birch cedar dune ember fjord grove heath inlet juniper'.split(' ');
const SYS = 'You answer briefly. ' + Array.from({ length: 240 }, (_, k) => NAMES[(k * 7) % 10]).join(' ');

// A chat of two turns, then two users of the same system prompt at once, then the first
// turn again; each answer with its logprobs and the prompt tokens restored.
async function turns(client) {
  const chat = async (messages, extra = {}) => {
    const r = await client.chat.completions.create({ model: 'm', max_tokens: 8, temperature: 0,
      logprobs: true, messages, ...extra });
    return { text: r.choices[0].message.content, lp: r.choices[0].logprobs.content,
      cached: r.usage.prompt_tokens_details.cached_tokens, n: r.usage.prompt_tokens };
  };
  const m1 = [{ role: 'system', content: SYS }, { role: 'user', content: 'What comes first?' }];
  const t1 = await chat(m1);
  const t2 = await chat([...m1, { role: 'assistant', content: t1.text }, { role: 'user', content: 'And then?' }]);
  const users = await Promise.all(['alpha', 'beta'].map((q, i) => chat([{ role: 'system', content: SYS },
    { role: 'user', content: `Tell me about ${q}.` }], { temperature: 0.9, top_p: 0.9, seed: 40 + i })));
  return [t1, t2, ...users, await chat(m1)];
}

module.exports = { SCRIPT, WEATHER_TOOL, TOOL_BLOCK, A, SYS, turns };
