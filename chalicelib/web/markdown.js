// A small Markdown subset for chat messages, parsed into plain nodes (never HTML): the renderer turns them
// into DOM elements and text nodes, so no message can inject markup or script. Links are kept only for
// http(s) and mailto addresses.
//
// Blocks: fenced code (```), headings (#), lists (-, *, +, 1.), quotes (>), paragraphs (a single newline is a
// line break). Inline: `code`, **strong**, *em* / _em_, [text](url), bare http(s) URLs.
//
// Node shapes: {type: "text", text} | {type: "br"} | {type: "code", text} | {type: "pre", lang, text}
//   | {type: "a", href, children} | {type: "strong"|"em"|"p"|"heading"|"li"|"quote", children}
//   | {type: "ul"|"ol", items: [li]}

const FENCE = /^\s{0,3}(```|~~~)\s*([\w+-]*)\s*$/;
const HEADING = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const ORDERED = /^\s{0,3}\d{1,9}[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;

export function parseMarkdown(source) {
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      i++; // the closing fence (or the end of the message)
      blocks.push({ type: "pre", lang: fence[2] || "", text: body.join("\n") });
    } else if (!line.trim()) {
      i++;
    } else if (HEADING.test(line)) {
      blocks.push({ type: "heading", children: inline(HEADING.exec(line)[1]) });
      i++;
    } else if (BULLET.test(line) || ORDERED.test(line)) {
      const ordered = !BULLET.test(line);
      const pattern = ordered ? ORDERED : BULLET;
      const items = [];
      for (; i < lines.length && pattern.test(lines[i]); i++) items.push({ type: "li", children: inline(pattern.exec(lines[i])[1]) });
      blocks.push({ type: ordered ? "ol" : "ul", items });
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(QUOTE.exec(lines[i])[1]);
      blocks.push({ type: "quote", children: withBreaks(body) });
    } else {
      const body = [];
      for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) body.push(lines[i]);
      blocks.push({ type: "p", children: withBreaks(body) });
    }
  }
  return blocks;
}

const startsBlock = (line) => FENCE.test(line) || HEADING.test(line) || BULLET.test(line) || ORDERED.test(line) || QUOTE.test(line);

function withBreaks(lines) {
  return lines.flatMap((l, n) => (n ? [{ type: "br" }, ...inline(l)] : inline(l)));
}

const INLINE = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|(?<![\w*])\*(?=\S)([^*]*?\S)\*(?![\w*])|(?<![\w_])_(?=\S)([^_]*?\S)_(?![\w_])|\[([^\]\n]+)\]\(\s*([^)\s]+)\s*\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

/** Inline spans of one line of text. */
export function inline(text) {
  const out = [];
  let rest = String(text ?? "");
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) {
      pushText(out, rest);
      break;
    }
    if (m.index) pushText(out, rest.slice(0, m.index));
    if (m[1]) out.push({ type: "code", text: m[2].trim() || m[2] });
    else if (m[3]) out.push({ type: "strong", children: inline(m[3]) });
    else if (m[4] || m[5]) out.push({ type: "em", children: inline(m[4] ?? m[5]) });
    else if (m[6]) {
      const href = safeHref(m[7]);
      if (href) out.push({ type: "a", href, children: inline(m[6]) });
      else pushText(out, m[0]); // an unsafe scheme stays visible as the text that was written
    } else out.push({ type: "a", href: m[8], children: [{ type: "text", text: m[8] }] });
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

function pushText(out, text) {
  const last = out[out.length - 1];
  if (last?.type === "text") last.text += text;
  else out.push({ type: "text", text });
}

/** The address when it is http(s) or mailto, else null (javascript:, data: and relative links are dropped). */
export function safeHref(raw) {
  try {
    const url = new URL(String(raw));
    return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}
