// Revision merging and event dedupe: older projections never overwrite newer ones.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  applyEvent, compareRevisions, createEventDeduper, mergeSession, mergeSessionList, mergeSummary, mergeTaskSnapshot,
} from "../../chalicelib/web/merge.js";
import { session, task } from "./helpers.mjs";

const summaryEvent = (id, taskId, pending, revision) => ({
  id, type: "task.status_summary.updated", task_id: taskId, session_id: null,
  payload: { task_id: taskId, status_summary: { pending_action: pending, revision, primary_session_id: "p" } },
});

function caches(tasks = [], sessions = new Map()) {
  return { tasks: new Map(tasks.map((t) => [t.id, t])), order: tasks.map((t) => t.id), sessions };
}

test("revisions compare numerically, as numeric strings beyond 2^53, and as {epoch, sequence}", () => {
  assert.equal(compareRevisions(10, 9), 1);
  assert.equal(compareRevisions("9007199254740993", "9007199254740992"), 1);
  assert.equal(compareRevisions({ epoch: 2, sequence: 1 }, { epoch: 1, sequence: 99 }), 1);
  assert.equal(compareRevisions({ epoch: 1, sequence: 3 }, { epoch: 1, sequence: 3 }), 0);
  assert.equal(compareRevisions(null, 0), -1);
});

test("an older summary never overwrites a newer one; a newer one replaces it", () => {
  const held = { pending_action: null, revision: 7 };
  assert.equal(mergeSummary(held, { pending_action: "clarification", revision: 6 }), held);
  assert.deepEqual(mergeSummary(held, { pending_action: "clarification", revision: 8 }), { pending_action: "clarification", revision: 8 });
});

test("summary events apply live, in any order, and the newest revision wins", () => {
  let c = caches([task("t1", { revision: 1 })]);
  for (const e of [summaryEvent("e3", "t1", null, 3), summaryEvent("e2", "t1", "clarification", 2)]) {
    c = applyEvent(c, e).caches;
  }
  assert.deepEqual(c.tasks.get("t1").status_summary, { pending_action: null, revision: 3, primary_session_id: "p" });
});

test("a late task-list snapshot keeps the newer summary an event already delivered", () => {
  let c = caches([task("t1", { revision: 1 })]);
  c = applyEvent(c, summaryEvent("e2", "t1", null, 4)).caches;
  const snapshot = [task("t1", { pending_action: "clarification", revision: 3 }), task("t2")];
  const merged = mergeTaskSnapshot(c.tasks, snapshot);
  assert.equal(merged.tasks.get("t1").status_summary.revision, 4);
  assert.equal(merged.tasks.get("t1").status_summary.pending_action, null);
  assert.deepEqual(merged.order, ["t1", "t2"]);
});

test("a snapshot decides presence: a task it no longer lists is gone", () => {
  const merged = mergeTaskSnapshot(new Map([["gone", task("gone")]]), [task("t1")]);
  assert.equal(merged.tasks.has("gone"), false);
});

test("a summary event for an unknown task asks for a task-list refresh instead of inventing a row", () => {
  const { caches: c, effects } = applyEvent(caches([]), summaryEvent("e1", "new", "clarification", 1));
  assert.equal(c.tasks.size, 0);
  assert.equal(effects.refreshTasks, true);
});

test("sessions merge by pending_action_revision; an omitted pending_action keeps the prior value", () => {
  const held = session("s1", { pending_action: "clarification", pending_action_revision: 5 });
  assert.equal(mergeSession(held, { ...held, pending_action: null, pending_action_revision: 4 }), held);
  assert.equal(mergeSession(held, { id: "s1", state: "IDLE", pending_action_revision: 6 }).pending_action, "clarification");
  assert.equal(mergeSession(held, { ...held, pending_action: null, pending_action_revision: 6 }).pending_action, null);
});

test("a sessions snapshot cannot regress a session an event already advanced", () => {
  const newer = session("s1", { pending_action: null, pending_action_revision: 9 });
  const list = mergeSessionList([newer], [session("s1", { pending_action: "clarification", pending_action_revision: 8 }), session("s0", { created_at: "2025-01-01T00:00:00Z" })]);
  assert.deepEqual(list.map((s) => [s.id, s.pending_action]), [["s1", null], ["s0", null]]);
});

test("session.updated events update a cached list (adding new sessions) and ask to refresh that session", () => {
  const c = caches([task("t1")], new Map([["t1", [session("s1")]]]));
  const event = { id: "x", type: "session.updated", task_id: "t1", session_id: "s2",
    payload: session("s2", { created_at: "2026-02-01T00:00:00Z", pending_action: "clarification", pending_action_revision: 3 }) };
  const { caches: next, effects } = applyEvent(c, event);
  assert.deepEqual(next.sessions.get("t1").map((s) => s.id), ["s2", "s1"]);
  assert.equal(effects.refreshSession, "s2");
});

test("message and turn events ask to refresh the session's transcript", () => {
  for (const type of ["message.added", "message.updated", "message.deleted", "turn.started", "turn.completed"]) {
    const { effects } = applyEvent(caches([task("t1")]), { id: type, type, task_id: "t1", session_id: "s1", payload: {} });
    assert.equal(effects.refreshSession, "s1", type);
  }
});

test("the deduper admits an event id once and forgets the oldest ids past its bound", () => {
  const d = createEventDeduper(2);
  assert.equal(d.admit("a"), true);
  assert.equal(d.admit("a"), false);
  d.admit("b");
  d.admit("c");
  assert.equal(d.size, 2);
  assert.equal(d.admit("a"), true, "forgotten ids are admitted again (revisions still guard the merge)");
});
