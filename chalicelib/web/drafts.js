// Everything typed, kept per field until it is sent or discarded: a re-render, an event or a reload never loses
// it. Values live in memory and in Storage (localStorage in the page), JSON-encoded under one prefix.
//
// A field's generation changes only when the app resets it on purpose (after a send); the renderer keeps what
// the person typed in a field whose generation did not change, so a background re-render cannot empty it.

export function createDrafts(storage, prefix = "clarify.draft.") {
  const memory = new Map();
  const gens = new Map();
  const read = (key) => {
    if (memory.has(key)) return memory.get(key);
    let value;
    try {
      const raw = storage?.getItem(prefix + key);
      value = raw == null ? undefined : JSON.parse(raw);
    } catch {
      value = undefined;
    }
    memory.set(key, value);
    return value;
  };
  const write = (key, value) => {
    memory.set(key, value);
    try {
      if (isEmpty(value)) storage?.removeItem(prefix + key);
      else storage?.setItem(prefix + key, JSON.stringify(value));
    } catch {
      // storage full or unavailable: the draft still lives in memory for this page
    }
  };
  return {
    get: (key, fallback = "") => read(key) ?? fallback,
    set: write,
    /** Forget a draft (it was sent) and start the field afresh. */
    reset(key) {
      write(key, undefined);
      gens.set(key, (gens.get(key) ?? 0) + 1);
    },
    /** The identity a rendered field carries: same key and generation = the person's text stays. */
    field: (key) => `${key}#${gens.get(key) ?? 0}`,
    has: (key) => !isEmpty(read(key)),
  };
}

export function isEmpty(value) {
  if (value == null || value === "") return true;
  if (typeof value === "object") return Object.values(value).every(isEmpty);
  return false;
}

/** An answer draft ({questionId: {selected, custom}}) has something the person chose or wrote. */
export function answerDraftHasContent(draft) {
  return Object.values(draft ?? {}).some((d) => (d?.selected ?? []).length > 0 || String(d?.custom ?? "").trim());
}
