// What the chat shows for a transcript: pure functions over the server's transcript entries.
//
// The overlay follows the repository rule exactly as the server reports it (`answerable`); the client does
// not re-derive pending truth from turn ids or event payloads.

/**
 * The bundle the overlay shows: the newest answerable clarification, or null. `pending` is the page's
 * pending_clarifications (the session's active questions wherever they are, fresh on every page); when the
 * server gave it, it alone decides (an entry of an older page held since may be stale).
 */
export function activeBundle(messages, pending = undefined) {
  const entries = (pending ?? messages ?? []).filter((m) => m.type === "clarification" && m.answerable === true);
  return entries.length ? entries[entries.length - 1] : null;
}

/** The messages held with each pending clarification in its fresh form (older pages are not read again). */
export function freshMessages(messages, pending) {
  if (!pending?.length) return messages ?? [];
  const byId = new Map(pending.map((p) => [p.clarification_id, p]));
  return (messages ?? []).map((m) => (m.type === "clarification" && byId.has(m.clarification_id) ? byId.get(m.clarification_id) : m));
}

/**
 * The newest page read again, joined to what is held: the held messages before the page's first one stay (older
 * pages read as the person scrolled), the page replaces the rest. A page that does not reach back to what is held
 * (a gap: more new messages than a page) starts over from the page alone. Returns {messages, older_cursor}.
 */
export function joinNewest(held, page) {
  const messages = page.messages ?? [];
  const at = held && messages.length ? held.messages.findIndex((m) => m.id === messages[0].id) : -1;
  if (at < 0) return { messages, older_cursor: page.older_cursor ?? null };
  return { messages: [...held.messages.slice(0, at), ...messages], older_cursor: held.older_cursor ?? null };
}

/** An older page put before the messages held (a message already held is not repeated). */
export function joinOlder(held, page) {
  const ids = new Set(held.messages.map((m) => m.id));
  return { messages: [...(page.messages ?? []).filter((m) => !ids.has(m.id)), ...held.messages], older_cursor: page.older_cursor ?? null };
}

/** Questions the overlay asks: the pending rows of the active bundle (siblings already answered stay out). */
export function pendingQuestions(entry) {
  return (entry?.questions ?? []).filter((q) => q.status === "pending");
}

/** True when this entry offers "answer as new message". */
export function offersLateAnswer(entry) {
  return entry?.type === "clarification" && entry.late_answer_allowed === true && entry.answerable !== true;
}

const STATE_TEXT = {
  active_live: "The agent is waiting for your answer.",
  active_detached: "The agent stopped waiting. Answering resumes it with your answer.",
  delivery_claimed: "Delivering your answer…",
  answered: "", // the badge says it; the answers are listed under each question
  rejected: "",
  expired: "Expired: the session ended before this was answered. The agent is not waiting for it.",
  cancelled: "Withdrawn by the agent. The agent is not waiting for it.",
  superseded: "Superseded by newer work. The agent is not waiting for it.",
};

/** One line about an entry's state; never claims the agent waits unless the bundle is answerable and live. */
export function entryStatusText(entry) {
  if (entry.late_answer_message_id) return "Answered as a new message.";
  if (entry.dismissed) return "Dismissed. Kept in history; nothing was sent.";
  if (entry.answerable) return entry.agent_disconnected ? STATE_TEXT.active_detached : STATE_TEXT.active_live;
  const text = STATE_TEXT[entry.state];
  if (entry.state === "active_live" || entry.state === "active_detached") return "No longer active.";
  return text ?? "No longer active.";
}

/** The chosen labels of one answered question, for history display. */
export function responseText(question) {
  const r = question.response;
  if (!r) return "";
  if (r.rejected) return "Skipped";
  const labels = (r.selected_options ?? []).map((id) => question.options.find((o) => o.option_id === id)?.label ?? id);
  if (r.custom_text) labels.push(`“${r.custom_text}”`);
  return labels.join(", ");
}

/** A short label for a session in lists and headers. */
export function sessionLabel(session, index = null) {
  const n = index == null ? "" : ` ${index}`;
  return `${session.is_primary ? "Primary session" : "Session"}${n}`;
}
