// Answering a clarification and delivering a late answer: a pure state machine per question surface.
//
// Results are plain values: {kind: "response", status, body} when the server answered, {kind: "transport"}
// when no response arrived (the outcome is unknown). The machine never starts a second delivery path on
// an unknown outcome, and a retry reuses the identity (Idempotency-Key / client_message_id) of the attempt
// it repeats, so the server can deduplicate it.

export const Phase = Object.freeze({
  EDITING: "editing", // answers being chosen (also after a correctable error)
  RESPONDING: "responding", // POST /respond in flight
  RESPOND_FAILED: "respond_failed", // the server refused; retry allowed with the same key when retryable
  RESPOND_UNKNOWN: "respond_unknown", // no response: outcome unknown, nothing else started
  ANSWERED: "answered", // 200 answered (delivery live/resumed/recorded)
  SKIPPED: "skipped", // 200 rejected
  LOST: "lost", // someone else answered or skipped first
  CLOSED: "closed", // a Skip of an inactive question: nothing to reject, nothing sent
  LATE_READY: "late_ready", // late answer composed, not yet sent
  LATE_SENDING: "late_sending", // POST /messages in flight
  LATE_DONE: "late_done", // admitted: sent, queued or steered
  LATE_FAILED: "late_failed", // refused; answers kept, retry offered
  LATE_UNKNOWN: "late_unknown", // no response: retry offered with the same client_message_id
  DISMISSED: "dismissed",
});

/** A fresh surface for one clarification bundle. */
export function initialSurface(clarificationId) {
  return { clarificationId, phase: Phase.EDITING, answers: null, rejected: false, idempotencyKey: null,
    clientMessageId: null, note: "", admission: null, messageId: null, delivery: null, error: null, winner: null,
    retryable: false, reason: null };
}

// ------------------------------------------------------------------ answers

/** draft: {questionId: {selected: [optionId...], custom: ""}} -> the respond/in_reply_to answers list. */
export function buildAnswers(questions, draft) {
  return questions.map((q) => {
    const d = draft?.[q.question_id] ?? {};
    const answer = { question_id: q.question_id, selected_options: [...(d.selected ?? [])] };
    const custom = (d.custom ?? "").trim();
    if (custom) answer.custom_text = custom;
    return answer;
  });
}

/** Every question has a choice or a custom answer. */
export function answersComplete(questions, draft) {
  return questions.length > 0 && buildAnswers(questions, draft).every((a) => a.selected_options.length > 0 || a.custom_text);
}

/** Questions still open in a bundle (rows without a response): those a late answer covers. */
export function unansweredQuestions(entry) {
  return (entry?.questions ?? []).filter((q) => q.response == null);
}

const sameBody = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// ------------------------------------------------------------------ respond (the original tool request)

/** Start (or retry) a respond. A retry of the same body keeps its Idempotency-Key; a new body gets a new one. */
export function beginRespond(surface, { answers = null, rejected = false }, newId) {
  const repeat = surface.idempotencyKey && surface.rejected === rejected && sameBody(surface.answers, answers);
  return { ...surface, phase: Phase.RESPONDING, answers, rejected, error: null, retryable: false,
    idempotencyKey: repeat ? surface.idempotencyKey : newId() };
}

/** Apply the result of POST /clarifications/{id}/respond. */
export function respondResult(surface, result, newId) {
  if (result.kind === "transport") {
    return { ...surface, phase: Phase.RESPOND_UNKNOWN, retryable: true,
      error: "No response from the server: the outcome is unknown. Retry sends the same answer again." };
  }
  const { status, body } = result;
  if (status >= 200 && status < 300) {
    return { ...surface, phase: body?.status === "rejected" || surface.rejected ? Phase.SKIPPED : Phase.ANSWERED,
      delivery: body?.delivery ?? null, error: null };
  }
  const error = body?.error ?? {};
  if (status === 409 && error.code === "clarification_inactive") {
    const reason = error.details?.reason ?? null;
    if (reason === "answered" || reason === "rejected") {
      return { ...surface, phase: Phase.LOST, reason, winner: error.details?.response ?? null, error: null };
    }
    if (surface.rejected) return { ...surface, phase: Phase.CLOSED, reason, error: null };
    if (error.details?.late_answer_allowed === true) {
      // The server's one definition says it may be answered late: keep the answers, continue as a message.
      return { ...surface, phase: Phase.LATE_READY, reason, error: null, clientMessageId: newId() };
    }
    return { ...surface, phase: Phase.RESPOND_FAILED, reason, retryable: false, error: error.message ?? "The question is no longer active." };
  }
  if (status === 502 && error.code === "dispatch_ambiguous") {
    return { ...surface, phase: Phase.RESPOND_UNKNOWN, retryable: true,
      error: error.message ?? "The agent may have received the answer; retry asks for the same outcome again." };
  }
  if (status === 400 || status === 422) {
    return { ...surface, phase: Phase.EDITING, retryable: false, error: error.message ?? "The answer was not accepted." };
  }
  return { ...surface, phase: Phase.RESPOND_FAILED, retryable: error.retryable !== false,
    error: error.message ?? `The answer could not be delivered (HTTP ${status}).` };
}

// ------------------------------------------------------------------ late answer (an ordinary new message)

/** Compose a late answer from the transcript's "answer as new message" action. */
export function composeLate(surface, answers, newId, note = "") {
  const repeat = surface.clientMessageId && sameBody(surface.answers, answers) && surface.note === note;
  return { ...surface, phase: Phase.LATE_READY, answers, note, rejected: false, error: null,
    clientMessageId: repeat ? surface.clientMessageId : newId() };
}

/** The body of POST /sessions/{id}/messages for this surface's late answer. */
export function lateMessageBody(surface) {
  return { client_message_id: surface.clientMessageId, content: surface.note ?? "",
    in_reply_to: { clarification_id: surface.clarificationId, answers: surface.answers } };
}

/** A send may start only from a composed or retryable state; an ambiguous outcome waits for the user. */
export function canSendLate(surface, { userRetry = false } = {}) {
  if (surface.phase === Phase.LATE_READY) return true;
  if (!userRetry) return false;
  return surface.phase === Phase.LATE_FAILED ? surface.retryable : surface.phase === Phase.LATE_UNKNOWN;
}

export function beginLate(surface) {
  return { ...surface, phase: Phase.LATE_SENDING, error: null };
}

/** Apply the result of POST /sessions/{id}/messages. */
export function lateResult(surface, result) {
  if (result.kind === "transport") {
    return { ...surface, phase: Phase.LATE_UNKNOWN, retryable: true,
      error: "No response from the server: the message may or may not have been admitted. Retry will not duplicate it." };
  }
  const { status, body } = result;
  if (status >= 200 && status < 300) {
    return { ...surface, phase: Phase.LATE_DONE, admission: body?.admission ?? "sent", messageId: body?.message_id ?? null,
      error: null };
  }
  const error = body?.error ?? {};
  const message = error.message ?? `The message was not admitted (HTTP ${status}).`;
  if (status === 409 && error.code === "session_unavailable") {
    return { ...surface, phase: Phase.LATE_FAILED, retryable: true, error: `Session unavailable: ${message}` };
  }
  if (status === 422 || status === 400 || status === 409) {
    return { ...surface, phase: Phase.LATE_FAILED, retryable: false, error: message };
  }
  return { ...surface, phase: Phase.LATE_FAILED, retryable: error.retryable !== false, error: message };
}

/** Words for an admission: the UI distinguishes sent, steered and queued. */
export function admissionLabel(admission) {
  return { sent: "Sent", steered: "Steered into the running turn", queued: "Queued: sent when the agent's current turn ends" }[admission] ?? admission;
}

export function isBusy(surface) {
  return surface.phase === Phase.RESPONDING || surface.phase === Phase.LATE_SENDING;
}
