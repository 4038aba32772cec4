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

module.exports = { SCRIPT, WEATHER_TOOL, TOOL_BLOCK };
