// Expected token ids, from the JavaScript port of Hugging Face tokenizers
// (@huggingface/tokenizers), for the committed tokenizer files, their
// variants and the rendered chats. Run from this directory after
// render_chat.py; see README.md.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
import zlib from "zlib";

const spec = JSON.parse(fs.readFileSync("texts.json", "utf8"));
const chats = JSON.parse(fs.readFileSync("chats.expected.json", "utf8"));
const load = (name) => ({
  json: JSON.parse(zlib.gunzipSync(fs.readFileSync(`../models/${name}/tokenizer.json.gz`)).toString("utf8")),
  config: JSON.parse(fs.readFileSync(`../models/${name}/tokenizer_config.json`, "utf8")),
});
const bases = { qwen3: load("qwen3"), llama2: load("llama2") };
const models = { ...bases };
for (const [name, v] of Object.entries(spec.variants)) {
  const json = structuredClone(bases[v.base].json);
  Object.assign(json, v.set);
  models[name] = { json, config: bases[v.base].config };
}
const texts = [...spec.texts, ...spec.invalid_utf8.map((c) => c.text)];
const out = {};
for (const [name, m] of Object.entries(models)) {
  const tok = new Tokenizer(m.json, m.config);
  out[name] = texts.map((text) => ({
    text,
    plain: tok.encode(text, { add_special_tokens: false }).ids,
    special: tok.encode(text, { add_special_tokens: true }).ids,
  }));
}
// Chat prompts carry their special tokens: engines add none.
const qwen = new Tokenizer(models.qwen3.json, models.qwen3.config);
out.chats = Object.fromEntries(
  Object.entries(chats)
    .filter(([k, v]) => k.startsWith("qwen3/") && !v.startsWith("ERROR"))
    .map(([k, v]) => [k, qwen.encode(v, { add_special_tokens: false }).ids]),
);
fs.writeFileSync("../expected-ids.json", JSON.stringify(out) + "\n");
console.error(Object.keys(out).join(" "));
