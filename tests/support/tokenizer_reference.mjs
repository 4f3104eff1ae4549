// The independent reference for tests/actor/test_bpe_tokenizer.cpp and bench/tokenizer.cpp:
// Hugging Face's JS tokenizers (@huggingface/tokenizers, fetched into
// build/test-assets/node by scripts/fetch_tokenizer_assets.sh) answering requests.
//
//   node tests/support/tokenizer_reference.mjs NODE_MODULES TOKENIZER_DIR < requests.jsonl > answers.jsonl
//     each request line {"encode": "text"}  -> {"ids": [...], "text": decode(ids)}
//                       {"decode": [ids]}   -> {"text": "..."}
//   node tests/support/tokenizer_reference.mjs NODE_MODULES TOKENIZER_DIR --bench TEXT_FILE
//     -> {"mb": ..., "seconds": ...}: encoding the whole file once, after a warm-up run
//
// encode() leaves out the post-processor (add_special_tokens: false) and decode() keeps
// special tokens and does not clean up spaces, as tandem's Tokenizer does.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, dir, mode, benchFile] = process.argv.slice(2);
if (!modules || !dir) {
  console.error("usage: tokenizer_reference.mjs NODE_MODULES TOKENIZER_DIR [--bench TEXT_FILE] < requests.jsonl");
  process.exit(2);
}
const packageDir = path.join(modules, "@huggingface", "tokenizers");
const packageJson = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8"));
const { Tokenizer } = await import(pathToFileURL(path.join(packageDir, packageJson.main)).href);

const readJson = (file, fallback) => (fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : fallback);
const tokenizer = new Tokenizer(readJson(path.join(dir, "tokenizer.json")), readJson(path.join(dir, "tokenizer_config.json"), {}));
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;
const decode = (ids) => ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

if (mode === "--bench") {
  const text = fs.readFileSync(benchFile, "utf8");
  encode(text.slice(0, 100000));  // warm-up: JIT and caches
  const start = process.hrtime.bigint();
  encode(text);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ mb: Buffer.byteLength(text, "utf8") / 1e6, seconds }));
} else {
  const out = [];
  for (const line of fs.readFileSync(0, "utf8").split("\n")) {
    if (line.length === 0) continue;
    const request = JSON.parse(line);
    if (request.encode !== undefined) {
      const ids = encode(request.encode);
      out.push(JSON.stringify({ ids, text: decode(ids) }));
    } else {
      out.push(JSON.stringify({ text: decode(request.decode) }));
    }
  }
  process.stdout.write(out.join("\n") + "\n");
}
