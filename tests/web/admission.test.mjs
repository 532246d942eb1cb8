// Answering, Skip and late answers: the admission state machine and its retry identity.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  Phase, admissionLabel, answersComplete, beginLate, beginRespond, buildAnswers, canSendLate, composeLate, initialSurface,
  lateMessageBody, lateResult, respondResult,
} from "../../chalicelib/web/admission.js";

const ids = () => {
  let n = 0;
  return () => `id${++n}`;
};
const QUESTIONS = [
  { question_id: "q1", options: [{ option_id: "a", label: "A" }, { option_id: "b", label: "B" }] },
  { question_id: "q2", options: [{ option_id: "a", label: "A" }, { option_id: "b", label: "B" }] },
];
const ANSWERS = [{ question_id: "q1", selected_options: ["a"] }, { question_id: "q2", selected_options: [], custom_text: "mine" }];
const response = (status, body) => ({ kind: "response", status, ok: status < 300, body });
const inactive = (reason, extra = {}) => response(409, { error: { code: "clarification_inactive", retryable: false,
  details: { reason, late_answer_allowed: !["answered", "rejected"].includes(reason), ...extra } } });

describe("answers", () => {
  test("a draft becomes one answer per question, with custom text when written", () => {
    const draft = { q1: { selected: ["a"] }, q2: { selected: [], custom: "  mine " } };
    assert.deepEqual(buildAnswers(QUESTIONS, draft), ANSWERS);
    assert.equal(answersComplete(QUESTIONS, draft), true);
    assert.equal(answersComplete(QUESTIONS, { q1: { selected: ["a"] } }), false);
  });
});

describe("respond", () => {
  test("a success is answered (or skipped for a rejection)", () => {
    const newId = ids();
    const s = beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId);
    assert.equal(s.phase, Phase.RESPONDING);
    assert.equal(respondResult(s, response(200, { status: "answered", delivery: "live" }), newId).phase, Phase.ANSWERED);
    const skip = beginRespond(initialSurface("c1"), { rejected: true }, newId);
    assert.equal(respondResult(skip, response(200, { status: "rejected", delivery: "live" }), newId).phase, Phase.SKIPPED);
  });

  test("a recognised inactive result keeps the answers and prepares an ordinary message with a fresh identity", () => {
    const newId = ids();
    const s = respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId), inactive("superseded"), newId);
    assert.equal(s.phase, Phase.LATE_READY);
    assert.deepEqual(s.answers, ANSWERS);
    assert.equal(s.clientMessageId, "id2");
    assert.deepEqual(lateMessageBody(s), { client_message_id: "id2", content: "",
      in_reply_to: { clarification_id: "c1", answers: ANSWERS } });
    assert.equal(canSendLate(s), true);
  });

  for (const reason of ["expired", "cancelled", "session_terminal"]) {
    test(`inactive because ${reason}: the answer continues as a new message`, () => {
      const newId = ids();
      assert.equal(respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId), inactive(reason), newId).phase, Phase.LATE_READY);
    });
  }

  test("an inactive result the server does not allow late answers for: nothing is sent, the answers stay", () => {
    const newId = ids();
    const s = respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId),
      inactive("superseded", { late_answer_allowed: false }), newId);
    assert.equal(s.phase, Phase.RESPOND_FAILED);
    assert.deepEqual(s.answers, ANSWERS);
    assert.equal(canSendLate(s), false);
  });

  test("someone else answered first: the winner is shown and nothing is sent", () => {
    const newId = ids();
    const winner = { status: "answered", rejected: false, answers: [] };
    const s = respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId), inactive("answered", { response: winner }), newId);
    assert.equal(s.phase, Phase.LOST);
    assert.deepEqual(s.winner, winner);
    assert.equal(canSendLate(s, { userRetry: true }), false);
  });

  test("a Skip of an inactive question closes it: a rejection is never sent as a message", () => {
    const newId = ids();
    const s = respondResult(beginRespond(initialSurface("c1"), { rejected: true }, newId), inactive("superseded"), newId);
    assert.equal(s.phase, Phase.CLOSED);
    assert.equal(s.clientMessageId, null);
  });

  test("no response: the outcome is unknown and no other delivery path starts on its own", () => {
    const newId = ids();
    const s = respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId), { kind: "transport" }, newId);
    assert.equal(s.phase, Phase.RESPOND_UNKNOWN);
    assert.equal(s.clientMessageId, null);
    assert.equal(canSendLate(s), false);
  });

  test("a retry of the same answer reuses its Idempotency-Key; a changed answer gets a new one", () => {
    const newId = ids();
    const first = beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId);
    const failed = respondResult(first, response(503, { error: { code: "dispatch_failed", retryable: true, message: "x" } }), newId);
    assert.equal(failed.phase, Phase.RESPOND_FAILED);
    assert.equal(failed.retryable, true);
    assert.deepEqual(failed.answers, ANSWERS, "a failure keeps the answers");
    assert.equal(beginRespond(failed, { answers: ANSWERS }, newId).idempotencyKey, first.idempotencyKey);
    assert.notEqual(beginRespond(failed, { answers: [ANSWERS[0]] }, newId).idempotencyKey, first.idempotencyKey);
  });

  test("a 502 dispatch_ambiguous is an unknown outcome, never a late message", () => {
    const newId = ids();
    const s = respondResult(beginRespond(initialSurface("c1"), { answers: ANSWERS }, newId),
      response(502, { error: { code: "dispatch_ambiguous", retryable: false } }), newId);
    assert.equal(s.phase, Phase.RESPOND_UNKNOWN);
  });
});

describe("late answers", () => {
  const ready = (newId) => composeLate(initialSurface("c1"), ANSWERS, newId, "note");

  test("admission outcomes are told apart: sent, queued, steered", () => {
    const newId = ids();
    for (const admission of ["sent", "queued", "steered"]) {
      const s = lateResult(beginLate(ready(newId)), response(201, { message_id: "m1", admission }));
      assert.equal(s.phase, Phase.LATE_DONE);
      assert.equal(s.admission, admission);
    }
    assert.match(admissionLabel("queued"), /Queued/);
    assert.equal(admissionLabel("sent"), "Sent");
  });

  test("a failed admission keeps the answer and a retry reuses the same client_message_id", () => {
    const newId = ids();
    const s0 = ready(newId);
    const failed = lateResult(beginLate(s0), response(409, { error: { code: "session_unavailable", message: "busy" } }));
    assert.equal(failed.phase, Phase.LATE_FAILED);
    assert.equal(failed.retryable, true);
    assert.deepEqual(failed.answers, ANSWERS);
    assert.equal(canSendLate(failed), false, "no automatic resend");
    assert.equal(canSendLate(failed, { userRetry: true }), true);
    assert.equal(lateMessageBody(failed).client_message_id, s0.clientMessageId);
  });

  test("an ambiguous transport result does not resend by itself; a user retry keeps the identity", () => {
    const newId = ids();
    const s0 = ready(newId);
    const unknown = lateResult(beginLate(s0), { kind: "transport" });
    assert.equal(unknown.phase, Phase.LATE_UNKNOWN);
    assert.equal(canSendLate(unknown), false);
    assert.equal(canSendLate(unknown, { userRetry: true }), true);
    assert.equal(lateMessageBody(unknown).client_message_id, s0.clientMessageId);
  });

  test("composing the same late answer again keeps its identity; a different one gets a new identity", () => {
    const newId = ids();
    const s0 = ready(newId);
    assert.equal(composeLate(s0, ANSWERS, newId, "note").clientMessageId, s0.clientMessageId);
    assert.notEqual(composeLate(s0, [ANSWERS[0]], newId, "note").clientMessageId, s0.clientMessageId);
  });

  test("a refused late answer that cannot succeed by retrying is not offered as retryable", () => {
    const newId = ids();
    const s = lateResult(beginLate(ready(newId)), response(422, { error: { code: "idempotency_mismatch", message: "x" } }));
    assert.equal(s.phase, Phase.LATE_FAILED);
    assert.equal(s.retryable, false);
    assert.equal(canSendLate(s, { userRetry: true }), false);
  });
});
