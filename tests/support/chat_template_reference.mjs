// The independent reference for tests/controller/test_chat_templates.cpp: transformers.js' Jinja
// implementation (@huggingface/jinja, fetched into build/test-assets/chat/node by
// scripts/fetch_chat_assets.sh) rendering chat templates.
//
//   node tests/support/chat_template_reference.mjs NODE_MODULES < requests.jsonl > answers.jsonl
//     each request line {"template": "...", "variables": {messages, add_generation_prompt, bos_token, ...}}
//       -> {"text": "..."} or {"error": "..."}
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules] = process.argv.slice(2);
if (!modules) {
  console.error("usage: chat_template_reference.mjs NODE_MODULES < requests.jsonl");
  process.exit(2);
}
const packageDir = path.join(modules, "@huggingface", "jinja");
const packageJson = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8"));
const entry = packageJson.exports?.["."]?.import ?? packageJson.module ?? packageJson.main;
const { Template } = await import(pathToFileURL(path.join(packageDir, typeof entry === "string" ? entry : entry.default)).href);

const out = [];
for (const line of fs.readFileSync(0, "utf8").split("\n")) {
  if (line.trim() === "") continue;
  const request = JSON.parse(line);
  try {
    out.push(JSON.stringify({ text: new Template(request.template).render(request.variables) }));
  } catch (error) {
    out.push(JSON.stringify({ error: String(error) }));
  }
}
process.stdout.write(out.join("\n") + "\n");
