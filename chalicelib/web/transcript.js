// What the chat shows for a transcript: pure functions over the server's transcript entries.
//
// The overlay follows the repository rule exactly as the server reports it (`answerable`); the client does
// not re-derive pending truth from turn ids or event payloads.

/** The bundle the overlay shows: the newest answerable clarification entry, or null. */
export function activeBundle(messages) {
  const entries = (messages ?? []).filter((m) => m.type === "clarification" && m.answerable === true);
  return entries.length ? entries[entries.length - 1] : null;
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
