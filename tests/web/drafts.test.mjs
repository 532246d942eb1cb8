// Drafts survive re-renders and reloads until sent; failures are worded for people.
import assert from "node:assert/strict";
import { test } from "node:test";

import { answerDraftHasContent, createDrafts } from "../../chalicelib/web/drafts.js";
import { RETRY_STEPS_MS, describeFailure, retryDelay } from "../../chalicelib/web/retry.js";

function memoryStorage() {
  const map = new Map();
  return { getItem: (k) => (map.has(k) ? map.get(k) : null), setItem: (k, v) => map.set(k, String(v)),
    removeItem: (k) => map.delete(k), map };
}

test("a draft written in one page is read back by the next (a reload)", () => {
  const storage = memoryStorage();
  createDrafts(storage).set("composer:s1", "half a thought");
  createDrafts(storage).set("answer:c1", { q1: { selected: ["a"], custom: "" } });
  const again = createDrafts(storage);
  assert.equal(again.get("composer:s1"), "half a thought");
  assert.deepEqual(again.get("answer:c1"), { q1: { selected: ["a"], custom: "" } });
});

test("reset forgets the draft and changes the field's identity; an empty draft is not stored", () => {
  const storage = memoryStorage();
  const drafts = createDrafts(storage);
  drafts.set("new-task", "Title");
  const before = drafts.field("new-task");
  assert.equal(drafts.field("new-task"), before, "typing keeps the identity");
  drafts.reset("new-task");
  assert.notEqual(drafts.field("new-task"), before);
  assert.equal(drafts.get("new-task"), "");
  drafts.set("x", "");
  assert.equal(storage.map.size, 0);
});

test("broken storage content reads as no draft", () => {
  const storage = memoryStorage();
  storage.setItem("clarify.draft.k", "{not json");
  assert.equal(createDrafts(storage).get("k", "fallback"), "fallback");
});

test("an answer draft has content when an option is picked or text is written", () => {
  assert.equal(answerDraftHasContent({ q1: { selected: [], custom: "  " } }), false);
  assert.equal(answerDraftHasContent({ q1: { selected: ["a"] } }), true);
  assert.equal(answerDraftHasContent({ q1: { custom: "mine" } }), true);
});

test("retries while the API is away are bounded at one second", () => {
  assert.deepEqual([1, 2, 3, 4, 50].map(retryDelay), [250, 500, 1000, 1000, 1000]);
  assert.ok(Math.max(...RETRY_STEPS_MS) <= 1000);
});

test("failures are worded for people; no raw server text for a 5xx", () => {
  const gateway = { kind: "response", status: 502, body: { message: "Internal server error" } };
  assert.equal(describeFailure(gateway, "message"), "Clarify had a problem and did not finish (HTTP 502). Your message is kept.");
  assert.equal(describeFailure({ kind: "transport" }, "answer"), "Clarify can't be reached right now. Your answer is kept.");
  const ended = { kind: "response", status: 409, body: { error: { code: "session_unavailable", message: "the session is CANCELLED" } } };
  assert.match(describeFailure(ended), /can't take messages any more/);
  const bad = { kind: "response", status: 400, body: { error: { message: "title is required" } } };
  assert.equal(describeFailure(bad), "Title is required.");
});
