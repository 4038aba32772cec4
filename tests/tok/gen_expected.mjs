// gen_expected.mjs — writes expected_ids.json: the ids an independent implementation
// (@lenml/tokenizers, a dependency-free fork of transformers.js' tokenizers) gives for
// each string of corpus.json under shared/tokenizer/tokenizer.json. Run offline, by hand;
// the C test (test_tokenizer.c) only reads the committed fixture. npm is never needed to
// build or test dsv4.
//
// To rerun after changing corpus.json:
//   mkdir -p /tmp/tokoracle && (cd /tmp/tokoracle && npm install @lenml/tokenizers)
//   node tests/tok/gen_expected.mjs [path/to/tokenizer.json]
// (TOKORACLE=/path/to/@lenml/tokenizers/dist/main.mjs overrides where the module is.)
//
// Where the oracle is not tokenizers itself: JavaScript's \s counts U+FEFF and not U+0085,
// Oniguruma's (and so dsv4's) is Unicode White_Space, the other way round; and code points
// assigned after Unicode 14 (PCRE2 10.42's tables) have different categories. The corpus
// keeps those characters out of places where \s or a category decides a split.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tokPath = process.argv[2] ?? join(here, "../../../shared/tokenizer/tokenizer.json");
const modPath = process.env.TOKORACLE ?? "/tmp/tokoracle/node_modules/@lenml/tokenizers/dist/main.mjs";
const { TokenizerLoader } = await import(pathToFileURL(modPath).href);

const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(tokPath, "utf8")),
  // Only the class matters here: no BOS/EOS is added when add_special_tokens is false.
  tokenizerConfig: { tokenizer_class: "PreTrainedTokenizerFast", add_bos_token: false, add_eos_token: false },
});

const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));
const expected = corpus.map((text) => tokenizer.encode(text, { add_special_tokens: false }));
// One line per corpus entry keeps diffs of the fixture readable.
writeFileSync(join(here, "expected_ids.json"), "[\n" + expected.map((ids) => JSON.stringify(ids)).join(",\n") + "\n]\n");
console.log(`wrote ${expected.length} entries, ${expected.reduce((a, x) => a + x.length, 0)} ids`);
