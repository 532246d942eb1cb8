// Status in words, echoes of your own messages, and the task list's order.
import assert from "node:assert/strict";
import { test } from "node:test";

import { pendingEchoes, withEchoes } from "../../chalicelib/web/echo.js";
import { applyEvent, mergeTaskSnapshot, newlyPending, orderTasks } from "../../chalicelib/web/merge.js";
import { clarificationStateWords, replyInsteadNote, sessionStateWords, sessionStatus } from "../../chalicelib/web/status.js";
import { task } from "./helpers.mjs";

test("the status line says what the agent does, never a raw state name; Stop only while it can be stopped", () => {
  assert.deepEqual(sessionStatus({ state: "RUNNING" }), { text: "Agent is working…", tone: "working", canStop: true });
  assert.equal(sessionStatus({ state: "WAITING_FOR_INPUT" }, { agent_disconnected: false }).text, "Agent is waiting for your answer");
  assert.equal(sessionStatus({ state: "WAITING_FOR_INPUT" }, { agent_disconnected: true }).text,
    "Agent stopped waiting — your answer will resume it");
  assert.equal(sessionStatus({ state: "CANCELLED" }).canStop, false);
  for (const state of ["CREATED", "RUNNING", "IDLE", "WAITING_FOR_INPUT", "COMPLETED", "FAILED", "CANCELLED"]) {
    assert.doesNotMatch(sessionStatus({ state }).text + sessionStateWords(state), /[A-Z]{2,}|_/);
  }
  assert.equal(clarificationStateWords({ answerable: false, state: "superseded" }), "Set aside");
  assert.match(replyInsteadNote({ agent_disconnected: false }), /queued/);
  assert.match(replyInsteadNote({ agent_disconnected: true }), /set aside/);
});

test("your message shows at once, before the agent's reply of its turn, until the transcript has it", () => {
  const reply = { id: "m2", type: "message", turn_id: "t2" };
  const earlier = { id: "m1", type: "message", turn_id: "t1" };
  const echo = { clientMessageId: "c1", content: "hi", status: "sent", messageId: "m9", turnId: "t2" };
  assert.deepEqual(withEchoes([earlier, reply], [echo]).map((m) => m.id), ["m1", "echo-c1", "m2"]);
  assert.deepEqual(withEchoes([earlier], [{ ...echo, turnId: null }]).map((m) => m.id), ["m1", "echo-c1"]);
  const stored = { id: "m9", type: "message", turn_id: "t2" };
  assert.deepEqual(withEchoes([earlier, stored, reply], [echo]).map((m) => m.id), ["m1", "m9", "m2"]);
  assert.deepEqual(pendingEchoes([stored], [echo, { clientMessageId: "c2" }]).map((e) => e.clientMessageId), ["c2"]);
});

test("tasks with a pending question come first, then the most recently active; search filters titles", () => {
  const tasks = new Map([
    ["old", task("old", {}, { title: "Old cache", last_activity_at: "2026-01-01T00:00:01Z" })],
    ["new", task("new", {}, { title: "New API", last_activity_at: "2026-01-03T00:00:00Z" })],
    ["ask", task("ask", { pending_action: "clarification" }, { title: "Asks", last_activity_at: "2026-01-01T00:00:00Z" })],
  ]);
  const pending = (t) => t.status_summary.pending_action === "clarification";
  assert.deepEqual(orderTasks(tasks, { pending }), ["ask", "new", "old"]);
  assert.deepEqual(orderTasks(tasks, { pending, filter: " CACHE" }), ["old"]);
});

test("events move a task's activity forward; created/updated/deleted tasks apply without a reload", () => {
  let c = { tasks: new Map([["t1", task("t1", {}, { last_activity_at: "2026-01-01T00:00:00Z" })]]), order: ["t1"], sessions: new Map() };
  c = applyEvent(c, { id: "e1", type: "message.added", task_id: "t1", session_id: "s1", at: "2026-01-02T00:00:00Z" }).caches;
  assert.equal(c.tasks.get("t1").last_activity_at, "2026-01-02T00:00:00Z");
  const created = applyEvent(c, { id: "e2", type: "task.created", task_id: "t2", at: "2026-01-03T00:00:00Z",
    payload: { id: "t2", title: "Two", created_at: "2026-01-03T00:00:00Z", status_summary: { pending_action: null, revision: 0 } } });
  assert.equal(created.effects.refreshTasks, false);
  c = created.caches;
  c = applyEvent(c, { id: "e3", type: "task.updated", task_id: "t2", at: "2026-01-04T00:00:00Z", payload: { id: "t2", title: "Renamed" } }).caches;
  assert.equal(c.tasks.get("t2").title, "Renamed");
  const deleted = applyEvent(c, { id: "e4", type: "task.deleted", task_id: "t2", payload: { id: "t2" } });
  assert.equal(deleted.effects.deletedTask, "t2");
  assert.equal(deleted.caches.tasks.has("t2"), false);
});

test("a task that comes to have a pending question is reported (for a notification), however it was learnt", () => {
  const c = { tasks: new Map([["t1", task("t1", { revision: 1 })], ["t2", task("t2", { revision: 1 })]]),
    order: ["t1", "t2"], sessions: new Map() };
  const e = { id: "e", type: "task.status_summary.updated", task_id: "t1",
    payload: { task_id: "t1", status_summary: { pending_action: "clarification", revision: 2 } } };
  const afterEvent = applyEvent(c, e).caches.tasks;
  assert.deepEqual(newlyPending(c.tasks, afterEvent), ["t1"]);
  // A snapshot that already holds the question (its event, held meanwhile, then changes nothing) still reports it.
  const snapshot = [task("t1", { revision: 1 }), task("t2", { pending_action: "clarification", revision: 2 })];
  const merged = mergeTaskSnapshot(c.tasks, snapshot).tasks;
  assert.deepEqual(newlyPending(c.tasks, merged), ["t2"]);
  const again = applyEvent({ ...c, tasks: merged }, { ...e, id: "e2", task_id: "t2",
    payload: { task_id: "t2", status_summary: { pending_action: "clarification", revision: 2 } } }).caches.tasks;
  assert.deepEqual(newlyPending(merged, again), []); // known already: nothing new
  assert.deepEqual(newlyPending(afterEvent, afterEvent), []);
});

test("a snapshot requested before a create or a delete neither drops the new task nor revives the deleted one", () => {
  const held = new Map([["new", task("new")], ["gone", task("gone")]]);
  const snapshot = [task("gone"), task("other")];
  const merged = mergeTaskSnapshot(held, snapshot, { keep: new Set(["new"]), gone: new Set(["gone"]) });
  assert.deepEqual([...merged.tasks.keys()].sort(), ["new", "other"]);
});
