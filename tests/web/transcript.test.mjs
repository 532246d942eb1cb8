// What the chat shows: the overlay follows `answerable` only; inactive questions never claim the agent waits.
import assert from "node:assert/strict";
import { test } from "node:test";

import { activeBundle, entryStatusText, offersLateAnswer, pendingQuestions, responseText } from "../../chalicelib/web/transcript.js";

const entry = (id, extra = {}) => ({
  type: "clarification", id, clarification_id: id, state: "active_live", answerable: true, agent_disconnected: false,
  late_answer_allowed: false, late_answer_message_id: null, dismissed: false,
  questions: [{ question_id: "q1", title: "T", prompt: "P", status: "pending", response: null,
    options: [{ option_id: "a", label: "Alpha" }, { option_id: "b", label: "Beta" }] }],
  ...extra,
});

test("the overlay shows the newest answerable bundle and nothing else", () => {
  const stale = entry("old", { state: "active_detached", answerable: false, agent_disconnected: true }); // server says inactive
  const current = entry("new");
  assert.equal(activeBundle([current, stale, { type: "message" }]).clarification_id, "new");
  assert.equal(activeBundle([stale]), null);
});

test("only pending rows are asked again", () => {
  const e = entry("c", { questions: [...entry("c").questions, { question_id: "q2", status: "answered", response: {}, options: [] }] });
  assert.deepEqual(pendingQuestions(e).map((q) => q.question_id), ["q1"]);
});

test("superseded and expired questions offer a late answer and never say the agent is waiting", () => {
  for (const state of ["superseded", "expired"]) {
    const e = entry("c", { state, answerable: false, late_answer_allowed: true, agent_disconnected: true });
    assert.equal(offersLateAnswer(e), true);
    assert.doesNotMatch(entryStatusText(e), /is waiting/);
    assert.match(entryStatusText(e), /not waiting/);
  }
});

test("a question answered late, or dismissed, says so", () => {
  assert.match(entryStatusText(entry("c", { state: "superseded", answerable: false, late_answer_message_id: "m" })), /new message/);
  assert.match(entryStatusText(entry("c", { state: "superseded", answerable: false, dismissed: true })), /Dismissed/);
  assert.equal(offersLateAnswer(entry("c", { state: "superseded", answerable: false, late_answer_allowed: false })), false);
});

test("a live answerable question says the agent waits; a detached one says answering resumes it", () => {
  assert.match(entryStatusText(entry("c")), /waiting for your answer/);
  assert.match(entryStatusText(entry("c", { agent_disconnected: true, state: "active_detached" })), /resumes/);
});

test("answers show their option labels and custom text", () => {
  const q = { ...entry("c").questions[0], response: { selected_options: ["b"], custom_text: "why not" } };
  assert.equal(responseText(q), "Beta, “why not”");
  assert.equal(responseText({ ...q, response: { rejected: true } }), "Skipped");
});

test("an answered or skipped question says nothing its badge already says", () => {
  assert.equal(entryStatusText(entry("c", { state: "answered", answerable: false })), "");
  assert.equal(entryStatusText(entry("c", { state: "rejected", answerable: false })), "");
});
