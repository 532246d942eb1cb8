// How the client waits between attempts, and how it words a failure for people (never a raw server string).

/** Delays between feed attempts while the API does not answer: short and bounded (at most 1 s). */
export const RETRY_STEPS_MS = Object.freeze([250, 500, 1000]);

export function retryDelay(failures) {
  return RETRY_STEPS_MS[Math.min(Math.max(failures, 1), RETRY_STEPS_MS.length) - 1];
}

/**
 * A sentence for a failed call. result: {kind: "transport"} or {kind: "response", status, body}. What was typed
 * is always kept, so the words say so when `kept` names it ("message", "answer", "title").
 */
export function describeFailure(result, kept = null) {
  const keep = kept ? ` Your ${kept} is kept.` : "";
  if (!result || result.kind === "transport") return `Clarify can't be reached right now.${keep}`;
  const { status } = result;
  const error = result.body?.error ?? {};
  if (status === 401) return "Your sign-in is no longer valid. Sign in again.";
  if (status === 404) return "This is no longer here: it was deleted or never existed.";
  if (status === 409 && error.code === "session_unavailable") {
    return `This session can't take messages any more (it has ended).${keep}`;
  }
  if (status === 409 && error.code === "queue_full") return `The agent's queue is full; try again when it finishes.${keep}`;
  if (status === 413) return `That is too long to send.${keep}`;
  if (status === 400 || status === 422) return `${sentence(error.message) || "That was not accepted."}${keep}`;
  if (status === 503 && error.code === "not_ready") return `Clarify is starting up; try again in a moment.${keep}`;
  if (status >= 500) return `Clarify had a problem and did not finish (HTTP ${status}).${keep}`;
  return `${sentence(error.message) || `The request failed (HTTP ${status}).`}${keep}`;
}

const sentence = (text) => {
  const t = String(text ?? "").trim();
  if (!t) return "";
  const s = t[0].toUpperCase() + t.slice(1);
  return /[.!?]$/.test(s) ? s : `${s}.`;
};
