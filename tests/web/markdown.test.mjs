// The chat's Markdown subset: plain nodes only, unsafe links dropped, code kept verbatim.
import assert from "node:assert/strict";
import { test } from "node:test";

import { inline, parseMarkdown, safeHref } from "../../chalicelib/web/markdown.js";

const text = (nodes) => nodes.map((n) => n.text ?? (n.children ? text(n.children) : "")).join("");

test("fenced code keeps its text verbatim, markup included, and its language", () => {
  const [pre, p] = parseMarkdown("```js\nconst a = `<b>` && 1 < 2;\n**not bold**\n```\nafter");
  assert.deepEqual(pre, { type: "pre", lang: "js", text: "const a = `<b>` && 1 < 2;\n**not bold**" });
  assert.equal(p.type, "p");
  assert.equal(text(p.children), "after");
});

test("an unclosed fence runs to the end of the message", () => {
  assert.deepEqual(parseMarkdown("```\nline"), [{ type: "pre", lang: "", text: "line" }]);
});

test("inline code, strong, emphasis and safe links", () => {
  const nodes = inline("Use `x<y>` with **care** and *style* or _this_, see [docs](https://example.org/a?b=1).");
  assert.deepEqual(nodes.map((n) => n.type), ["text", "code", "text", "strong", "text", "em", "text", "em", "text", "a", "text"]);
  assert.equal(nodes[1].text, "x<y>");
  assert.equal(nodes[9].href, "https://example.org/a?b=1");
});

test("javascript: and data: links stay plain text; raw HTML is text", () => {
  const nodes = inline("[click](javascript:alert(1)) <img src=x onerror=alert(1)> [d](data:text/html,x)");
  assert.ok(nodes.every((n) => n.type === "text"));
  assert.match(text(nodes), /<img src=x onerror=alert\(1\)>/);
  assert.equal(safeHref("javascript:alert(1)"), null);
  assert.equal(safeHref("/relative"), null);
  assert.equal(safeHref("mailto:a@b.c"), "mailto:a@b.c");
});

test("bare URLs become links without trailing punctuation", () => {
  const nodes = inline("See https://example.org/x.");
  assert.equal(nodes[1].href, "https://example.org/x");
  assert.equal(nodes[2].text, ".");
});

test("lists, headings, quotes and line breaks", () => {
  const blocks = parseMarkdown("# Plan\n- one\n- **two**\n\n1. first\n2. second\n\n> quoted\n> more\nline one\nline two");
  assert.deepEqual(blocks.map((b) => b.type), ["heading", "ul", "ol", "quote", "p"]);
  assert.equal(blocks[1].items.length, 2);
  assert.equal(blocks[1].items[1].children[0].type, "strong");
  assert.deepEqual(blocks[4].children.map((n) => n.type), ["text", "br", "text"]);
});

test("snake_case and multiplication are not emphasis", () => {
  assert.deepEqual(inline("a_b_c and 2*3*4"), [{ type: "text", text: "a_b_c and 2*3*4" }]);
});
