// Writes the reference fixtures of prompt/hf: token ids of a seeded corpus
// of strings, and renderings and ids of seeded chat conversations with
// tools, as the JavaScript ports of the Hugging Face tokenizers and Jinja
// produce them.
//
// Usage: node gen.mjs OUTDIR [TOKENIZER_DIR]
// OUTDIR gets corpus.jsonl.gz and chats.jsonl.gz; TOKENIZER_DIR (default
// OUTDIR/qwen3) holds tokenizer.json.gz and tokenizer_config.json.
import { Tokenizer } from "@huggingface/tokenizers";
import { Environment, Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const outDir = process.argv[2];
if (!outDir) {
	console.error("usage: node gen.mjs OUTDIR [TOKENIZER_DIR]");
	process.exit(2);
}
const tokDir = process.argv[3] ?? path.join(outDir, "qwen3");
const tokenizerJSON = JSON.parse(zlib.gunzipSync(fs.readFileSync(path.join(tokDir, "tokenizer.json.gz"))).toString("utf8"));
const config = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(tokenizerJSON, config);
pythonStrip();
const template = new Template(config.chat_template);
const encode = (s) => tokenizer.encode(s, { add_special_tokens: false }).ids;

// pythonStrip makes the strip, lstrip and rstrip methods of template
// strings take Python's optional argument, the characters to strip, as
// jinja2 under transformers does: the JavaScript port ignores it and
// strips whitespace (Qwen3's template strips '\n' around reasoning).
function pythonStrip() {
	const env = new Environment();
	env.set("s", "");
	const proto = Object.getPrototypeOf(env.lookupVariable("s"));
	const desc = Object.getOwnPropertyDescriptor(proto, "builtins");
	const pyspace = "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
	Object.defineProperty(proto, "builtins", {
		get() {
			const map = desc.get.call(this);
			if (map.__python) return map;
			const Fn = map.get("strip").constructor;
			const Str = this.constructor;
			const strip = (left, right) =>
				new Fn((args) => {
					const chars = args.length > 0 && args[0].type === "StringValue" ? [...args[0].value] : [...pyspace];
					const cps = [...this.value];
					let i = 0, j = cps.length;
					while (left && i < j && chars.includes(cps[i])) i++;
					while (right && j > i && chars.includes(cps[j - 1])) j--;
					return new Str(cps.slice(i, j).join(""));
				});
			map.set("strip", strip(true, true));
			map.set("lstrip", strip(true, false));
			map.set("rstrip", strip(false, true));
			map.__python = true;
			return map;
		},
	});
}

// mulberry32: a small seeded generator, so the corpus is the same on every run.
function rng(seed) {
	let a = seed >>> 0;
	return () => {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}
const rand = rng(20261201);
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];
const many = (n, f) => Array.from({ length: n }, f);

const words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "World", "token", "routing", "cache", "prefix", "engine", "gateway", "don't", "it's", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "We'Re", "x'ſ", "HTTP", "JSON", "camelCase", "snake_case", "kebab-case", "naïve", "café", "façade", "Zürich", "straße", "ÆØÅ"];
const multilingual = [
	"你好，世界！这是一个测试。", "東京は日本の首都です。", "カタカナとひらがな", "안녕하세요 세계", "Привет, мир! Как дела?",
	"Γειά σου Κόσμε", "مرحبا بالعالم، كيف حالك؟", "שלום עולם", "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีชาวโลก",
	"Xin chào thế giới", "Merhaba dünya", "Witaj świecie", "ইংরেজি বাংলা", "தமிழ் மொழி", "ქართული ენა", "Հայերեն",
	"e\u0301 a\u0300 o\u0308 n\u0303", "\u1100\u1161\u11a8", "Å Å", "ﬁ ﬂ ｆｕｌｌｗｉｄｔｈ", "①②③ ⅠⅡⅢ ½ ¾", "٠١٢٣٤٥٦٧٨٩", "१२३४५",
];
const emoji = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "1️⃣", "#️⃣", "❤️", "🤷🏽‍♀️", "🧑🏿‍🚀", "✨", "🔥", "🙏", "☕", "🦀", "🐍", "👁️‍🗨️"];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>", "<|vision_start|>", "<|im_start|", "<|im_sta", "<think", "<|", "|>", "<<|im_end|>>"];
const spaces = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "  \n  ", "\u00a0", "\u3000", "\u2028", "\u0085", "\u2003", "\ufeff", "\u200b", "\f", "\v"];
const puncts = ["!", "?", ".", ",", ";", ":", "...", "--", "==", "->", "=>", "{", "}", "[", "]", "(", ")", "\"", "'", "`", "```", "#", "##", "@", "$", "%", "^", "&&", "||", "*", "/", "\\", "~", "<", ">", "<=", "«»", "—", "…", "¿", "¡", "、", "。", "「」"];

function number() {
	switch (int(5)) {
		case 0: return String(int(10));
		case 1: return String(int(1e6));
		case 2: return (rand() * 1000).toFixed(int(5));
		case 3: return String(int(1e9)) + String(int(1e9));
		default: return "-" + int(100) + "e" + int(20);
	}
}

function prose(n) {
	const parts = [];
	for (let i = 0; i < n; i++) {
		const r = rand();
		if (r < 0.55) parts.push(pick(words));
		else if (r < 0.65) parts.push(pick(puncts));
		else if (r < 0.75) parts.push(number());
		else if (r < 0.82) parts.push(pick(multilingual));
		else if (r < 0.88) parts.push(pick(emoji));
		else if (r < 0.93) parts.push(pick(spaces));
		else parts.push(pick(specials));
		parts.push(rand() < 0.8 ? " " : pick(spaces));
	}
	return parts.join("");
}

const idents = ["ctx", "req", "resp", "err", "buf", "tokens", "i", "n", "userID", "block_hash", "kvIndex", "handler"];
function code() {
	const lang = int(4);
	const lines = [];
	const depth = () => (lang === 1 ? "    " : lang === 2 ? "  " : "\t").repeat(int(4));
	for (let i = 0, n = 2 + int(12); i < n; i++) {
		const a = pick(idents), b = pick(idents);
		switch (lang) {
			case 0: lines.push(depth() + pick([`if ${a} != nil {`, `${a} := ${b}[${int(9)}:]`, `return ${a}, fmt.Errorf("x: %w", err)`, `for _, ${a} := range ${b} {`, "}", `// ${pick(words)} ${pick(words)}`])); break;
			case 1: lines.push(depth() + pick([`def ${a}(${b}, *args, **kwargs):`, `${a} = [x ** 2 for x in range(${int(100)})]`, `return {'${a}': ${b}}`, `# ${pick(words)}'s ${pick(words)}`, `print(f"{${a}!r:>10}")`, `"""${pick(words)}."""`])); break;
			case 2: lines.push(depth() + pick([`const ${a} = await fetch(\`/api/\${${b}}\`);`, `${a}?.${b} ?? null;`, `export function ${a}(${b}) {`, `});`, `/* ${pick(multilingual)} */`, `let x = ${number()};`])); break;
			default: lines.push(depth() + pick([`SELECT ${a}, COUNT(*) FROM t WHERE ${b} > ${int(100)};`, `#include <stdio.h>`, `${a}->${b} = malloc(sizeof(*${a}));`, `  <div class="${a}">${pick(words)}</div>`, `$ ${a} --flag=${int(9)} | grep '${b}'`]));
		}
	}
	return lines.join(pick(["\n", "\n", "\r\n", "\n\n"])) + (rand() < 0.5 ? "\n" : "");
}

function jsonValue(d) {
	const r = rand();
	if (d > 2 || r < 0.3) return pick([number(), JSON.stringify(pick(words)), "true", "false", "null", JSON.stringify(prose(2 + int(5)))]);
	if (r < 0.6) return "[" + many(int(4), () => jsonValue(d + 1)).join(pick([",", ", "])) + "]";
	return "{" + many(1 + int(4), () => JSON.stringify(pick(idents)) + pick([":", ": "]) + jsonValue(d + 1)).join(pick([",", ", ", ",\n  "])) + "}";
}

// Characters chosen to stress the pre-tokenizer's classes and NFC.
const soup = [..."aZ09 _'\"\t\n\r\u00a0\u0085\u2028\u3000\ufeff\u200d\u0301\u0308\u094d\u093f\u0e31\u064e!?.-é漢字ſ'sSLl𝔘𝟙½Ⅻ٣🙂\u{1f3fd}<|>"];
function charSoup(n) {
	return many(n, () => pick(soup)).join("");
}

const corpus = [];
const add = (s) => corpus.push(s);
// Fixed cases first: edge cases of each alternative of the split pattern.
for (const s of ["", " ", "a", "'s", "'S", "'ſ", "x'LL", "'re'VE'm'd't", "''s", "  a", "   a", " \n a", "\n\n\n", "a\r\nb", "a \r\n b", "\t\tx", "!!!\n\n", " !!!\r\n", "123456789", "x1y22z333", "1.5e-10", "<|im_start|><|im_end|>", "<|im_start|>user\nhi<|im_end|>\n", "<think>\n\n</think>\n\n", "a".repeat(200), " ".repeat(300), "!".repeat(150) + "\n", "ab".repeat(120), "\u00a0\u00a0x", "x\u0085y", "x \ufeffz", "\u3000\u3000漢", "e\u0301", "\u0301\u0301", "한국어", "🤷🏽‍♀️🤷🏽‍♀️", "a😀b", "\u2028\u2029"]) add(s);
while (corpus.length < 600) add(prose(1 + int(40)));
while (corpus.length < 1000) add(code());
while (corpus.length < 1400) add(jsonValue(0));
while (corpus.length < 1700) add(charSoup(1 + int(60)));
while (corpus.length < 1900) add(many(1 + int(6), () => pick(multilingual) + pick(spaces) + pick(emoji)).join(pick(["", " ", "\n"])));
while (corpus.length < 2050) add(many(2 + int(8), () => pick([prose(3 + int(10)), code(), jsonValue(0), charSoup(20)])).join(pick(["\n", "\n\n", " "])));
// A few long ones, with long runs of one class.
for (let i = 0; i < 10; i++) add(prose(400) + pick(["x".repeat(500 + int(500)), " ".repeat(200 + int(500)), "=".repeat(300)]) + code());

const gz = (name, rows) => {
	fs.writeFileSync(path.join(outDir, name), zlib.gzipSync(rows.map((r) => JSON.stringify(r)).join("\n") + "\n", { level: 9 }));
};
gz("corpus.jsonl.gz", corpus.map((text) => ({ text, ids: encode(text) })));

// Chat conversations with tools, in the shape an OpenAI-compatible engine
// hands its template: tool call arguments as objects, tools as the
// request's tools array.
const toolNames = ["get_weather", "search_docs", "run_shell", "read_file", "write_file", "lookup_user", "计算", "send_email"];
function tool(name) {
	const props = {};
	for (let i = 0, n = 1 + int(4); i < n; i++) {
		props[pick(idents)] = pick([
			{ type: "string", description: prose(2 + int(6)) },
			{ type: "integer", minimum: int(10) },
			{ type: "array", items: { type: "string" } },
			{ type: "string", enum: [pick(words), pick(words)] },
			{ type: "boolean" },
		]);
	}
	const fn = { name, description: prose(3 + int(12)), parameters: { type: "object", properties: props, required: Object.keys(props).slice(0, int(3)) } };
	if (rand() < 0.2) delete fn.description;
	return { type: "function", function: fn };
}
function argsFor() {
	const o = {};
	for (let i = 0, n = int(4); i < n; i++) o[pick(idents)] = pick([pick(words), int(1000), rand() < 0.5, [pick(words), int(9)], { nested: pick(multilingual) }, prose(4), null]);
	return o;
}
function content() {
	return pick([prose(1 + int(25)), code(), pick(multilingual) + " " + pick(emoji), prose(5) + "\n\n" + code()]);
}
function conversation(i) {
	const tools = rand() < 0.85 ? many(1 + int(4), () => tool(pick(toolNames))) : undefined;
	const msgs = [];
	if (rand() < 0.7) msgs.push({ role: "system", content: pick(["You are a helpful assistant.", prose(5 + int(20))]) });
	for (let t = 0, turns = 1 + int(4); t < turns; t++) {
		msgs.push({ role: "user", content: content() });
		if (t === turns - 1 && rand() < 0.5) break;
		const calls = rand() < 0.6 ? many(1 + int(3), (_, k) => ({ id: `call_${i}_${t}_${k}`, type: "function", function: { name: pick(toolNames), arguments: argsFor() } })) : null;
		const think = rand() < 0.3 ? `<think>\n${prose(6)}\n</think>\n\n` : "";
		const am = { role: "assistant", content: calls && rand() < 0.5 ? "" : think + content() };
		if (calls) am.tool_calls = calls;
		msgs.push(am);
		if (calls) {
			for (const c of calls) msgs.push({ role: "tool", tool_call_id: c.id, content: pick([jsonValue(0), prose(8), "<tool_response>x</tool_response>"]) });
			if (rand() < 0.5) msgs.push({ role: "assistant", content: content() });
		}
	}
	const agp = rand() < 0.8;
	return { messages: msgs, tools, add_generation_prompt: agp };
}
const chats = [];
for (let i = 0; i < 240; i++) {
	const c = conversation(i);
	const text = template.render({ messages: c.messages, tools: c.tools, add_generation_prompt: c.add_generation_prompt, bos_token: "", eos_token: config.eos_token });
	chats.push({ ...c, text, ids: encode(text) });
}
gz("chats.jsonl.gz", chats);
console.log(`wrote ${corpus.length} strings and ${chats.length} chats to ${outDir}`);
