// Task activation: which session a task row opens, and the races around the authoritative sessions load.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  activateTask, createDesktopActivator, createSelectionController, createTaskSessionLoader, createTaskSheetController,
  effectivePendingAction, resolvePendingOwner, resolvePreferredSession, showsQuestionIcon,
} from "../../chalicelib/web/selection.js";
import { flush, manualFetch, session, task } from "./helpers.mjs";

const PENDING = { pending_action: "clarification", revision: 5, primary_session_id: "primary" };

const SESSIONS = [
  session("newest-clean", { created_at: "2026-01-04T00:00:00Z" }),
  session("owner", { created_at: "2026-01-03T00:00:00Z", pending_action: "clarification" }),
  session("older-owner", { created_at: "2026-01-02T00:00:00Z", pending_action: "clarification" }),
  session("primary", { created_at: "2026-01-01T00:00:00Z", is_primary: true }),
];

/** A little world: tasks held by the client, a manual sessions endpoint, a loader committing to a cache. */
function world(tasks) {
  const state = { tasks: new Map(tasks.map((t) => [t.id, t])), sessions: new Map(), commits: [] };
  const fake = manualFetch();
  const loader = createTaskSessionLoader({
    fetchSessions: fake.fetchSessions,
    commit: (taskId, sessions) => {
      state.commits.push({ taskId, ids: sessions.map((s) => s.id) });
      state.sessions.set(taskId, sessions);
      return sessions;
    },
  });
  const getTask = (id) => state.tasks.get(id);
  const setSummary = (id, summary) => state.tasks.set(id, { ...state.tasks.get(id), status_summary: { ...state.tasks.get(id).status_summary, ...summary } });
  return { state, fake, loader, getTask, setSummary, load: (id) => loader.load(id) };
}

describe("resolving the session", () => {
  test("the newest input-capable session whose pending action matches owns the task's question", () => {
    assert.equal(resolvePendingOwner(SESSIONS, "clarification"), "owner");
  });

  test("a session that cannot take input is never the owner, and nothing else is guessed", () => {
    const sessions = [session("done", { input_capable: false, pending_action: "clarification" }), session("clean")];
    assert.equal(resolvePendingOwner(sessions, "clarification"), null);
  });

  test("order comes from created_at, not from the list order", () => {
    const shuffled = [SESSIONS[2], SESSIONS[3], SESSIONS[1], SESSIONS[0]];
    assert.equal(resolvePendingOwner(shuffled, "clarification"), "owner");
  });

  test("a clean task prefers the remembered session, then the primary, then the newest", () => {
    const clean = SESSIONS.map((s) => ({ ...s, pending_action: null }));
    assert.equal(resolvePreferredSession(clean, { rememberedId: "older-owner", primaryId: "primary" }), "older-owner");
    assert.equal(resolvePreferredSession(clean, { rememberedId: "gone", primaryId: "primary" }), "primary");
    assert.equal(resolvePreferredSession(clean.filter((s) => !s.is_primary), {}), "newest-clean");
    assert.equal(resolvePreferredSession([], {}), null);
  });

  test("the summary's pending action wins; an explicit clear overrides the legacy field; legacy is the fallback", () => {
    assert.equal(effectivePendingAction(task("t", { pending_action: "clarification" })), "clarification");
    assert.equal(effectivePendingAction({ id: "t", pending_action: "clarification", status_summary: { pending_action: null, revision: 2 } }), null);
    assert.equal(effectivePendingAction({ id: "t", pending_action: "clarification" }), "clarification");
    assert.equal(effectivePendingAction(undefined), null);
  });

  test("the question icon shows exactly when the summary advertises a clarification", () => {
    assert.equal(showsQuestionIcon(task("t", { pending_action: "clarification" })), true);
    assert.equal(showsQuestionIcon(task("t", { pending_action: null })), false);
  });
});

describe("activating a task", () => {
  test("a pending task opens its owner, outranking the remembered and the primary session", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load, rememberedSessionId: "primary" });
    w.fake.calls[0].resolve(SESSIONS);
    assert.deepEqual(await result, { kind: "session", taskId: "t1", sessionId: "owner", via: "pending-owner" });
  });

  test("sessions are always loaded from the server, even when they are cached", async () => {
    const w = world([task("t1", PENDING)]);
    w.state.sessions.set("t1", SESSIONS);
    for (let i = 0; i < 2; i++) {
      const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
      w.fake.calls[i].resolve(SESSIONS);
      assert.equal((await result).sessionId, "owner");
    }
    assert.equal(w.fake.calls.length, 2);
  });

  test("a clean task follows the normal order (remembered first)", async () => {
    const w = world([task("t1", { primary_session_id: "primary" })]);
    const clean = SESSIONS.map((s) => ({ ...s, pending_action: null }));
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load, rememberedSessionId: "older-owner" });
    w.fake.calls[0].resolve(clean);
    assert.deepEqual(await result, { kind: "session", taskId: "t1", sessionId: "older-owner", via: "remembered" });
  });

  test("a changed summary revision discards the delayed choice and opens the task-only route", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.setSummary("t1", { revision: 6 }); // same action, newer revision: the choice was made for an older projection
    w.fake.calls[0].resolve(SESSIONS);
    assert.deepEqual(await result, { kind: "task", taskId: "t1", reason: "changed", releaseLayout: true });
  });

  test("a changed pending action discards the delayed choice and opens the task-only route", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.setSummary("t1", { pending_action: null, revision: 6 });
    w.fake.calls[0].resolve(SESSIONS);
    assert.deepEqual(await result, { kind: "task", taskId: "t1", reason: "changed", releaseLayout: true });
  });

  test("a clean task that became pending during the load opens the task-only route, not a guess", async () => {
    const w = world([task("t1", { primary_session_id: "primary" })]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.setSummary("t1", { pending_action: "clarification", revision: 2 });
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await result).reason, "changed");
  });

  test("a task deleted while the load was in flight leaves the selection inert", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.state.tasks.delete("t1");
    w.fake.calls[0].resolve(SESSIONS);
    assert.deepEqual(await result, { kind: "inert", taskId: "t1", reason: "missing" });
  });

  test("a deleted task using the legacy pending-action projection is inert too", async () => {
    const legacy = { id: "t1", title: "t1", pending_action: "clarification" };
    const w = world([legacy]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.state.tasks.delete("t1");
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await result).kind, "inert");
  });

  test("a task that was never listed is inert without a request", async () => {
    const w = world([]);
    assert.deepEqual(await activateTask("nope", { getTask: w.getTask, loadSessions: w.load }),
      { kind: "inert", taskId: "nope", reason: "missing" });
    assert.equal(w.fake.calls.length, 0);
  });

  test("no matching input-capable owner: release the layout and open the task-only route without guessing", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load, rememberedSessionId: "primary" });
    w.fake.calls[0].resolve([session("done", { input_capable: false, pending_action: "clarification" }), session("primary", { is_primary: true })]);
    assert.deepEqual(await result, { kind: "task", taskId: "t1", reason: "no-owner", releaseLayout: true });
  });

  test("a failed load of a pending task falls back to the task-only route, never to a session", async () => {
    const w = world([task("t1", PENDING)]);
    w.state.sessions.set("t1", SESSIONS);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load, rememberedSessionId: "primary" });
    w.fake.calls[0].reject(new Error("HTTP 500"));
    assert.deepEqual(await result, { kind: "task", taskId: "t1", reason: "load-failed", releaseLayout: true });
  });

  test("a failed load of a task that disappeared meanwhile is inert", async () => {
    const w = world([task("t1", PENDING)]);
    const result = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    w.state.tasks.delete("t1");
    w.fake.calls[0].reject(new Error("HTTP 500"));
    assert.equal((await result).kind, "inert");
  });
});

describe("overlapping loads of one task", () => {
  test("a load aborted by a newer load is inert and its late response never replaces the newer snapshot", async () => {
    const w = world([task("t1", PENDING)]);
    const older = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    const newer = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    assert.equal(w.fake.calls[0].aborted, true, "the newer load aborts the older request");
    w.fake.calls[1].resolve(SESSIONS);
    assert.equal((await newer).sessionId, "owner");
    w.fake.calls[0].resolve([session("stale-owner", { pending_action: "clarification" })]); // arrives last
    assert.deepEqual(await older, { kind: "inert", taskId: "t1", reason: "aborted" });
    assert.deepEqual(w.state.commits, [{ taskId: "t1", ids: SESSIONS.map((s) => s.id) }]);
    assert.equal(w.state.sessions.get("t1")[0].id, "newest-clean");
  });

  test("an aborted load is not a failure: no task-only fallback even if the request rejected", async () => {
    const w = world([task("t1", PENDING)]);
    const older = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    const newer = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    const abort = new Error("The operation was aborted"); abort.name = "AbortError";
    w.fake.calls[0].reject(abort);
    assert.equal((await older).kind, "inert");
    w.fake.calls[1].resolve(SESSIONS);
    assert.equal((await newer).kind, "session");
  });

  test("loads of different tasks do not guard each other", async () => {
    const w = world([task("t1", PENDING), task("t2", PENDING)]);
    const a = activateTask("t1", { getTask: w.getTask, loadSessions: w.load });
    const b = activateTask("t2", { getTask: w.getTask, loadSessions: w.load });
    assert.equal(w.fake.calls[0].aborted, false);
    w.fake.calls[1].resolve([session("t2-owner", { pending_action: "clarification" })]);
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await a).sessionId, "owner");
    assert.equal((await b).sessionId, "t2-owner");
  });
});

describe("desktop activation", () => {
  function desktop(w) {
    const applied = [];
    const activator = createDesktopActivator({ getTask: w.getTask, loadSessions: w.load, remembered: () => null,
      apply: (d) => applied.push(d) });
    return { activator, applied };
  }

  test("a newer click makes an older in-flight activation inert", async () => {
    const w = world([task("t1", PENDING), task("t2", { primary_session_id: "p2" })]);
    const { activator, applied } = desktop(w);
    const first = activator.activate("t1");
    const second = activator.activate("t2");
    w.fake.calls[1].resolve([session("p2", { is_primary: true })]);
    await second;
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await first).reason, "stale-selection");
    assert.deepEqual(applied.map((d) => d.sessionId), ["p2"]);
  });

  test("an external active-task change invalidates the in-flight choice", async () => {
    const w = world([task("t1", PENDING)]);
    const { activator, applied } = desktop(w);
    const pending = activator.activate("t1");
    activator.invalidate();
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await pending).kind, "inert");
    assert.deepEqual(applied, []);
  });

  test("the task-only fallback is applied with its reason", async () => {
    const w = world([task("t1", PENDING)]);
    const { activator, applied } = desktop(w);
    const pending = activator.activate("t1");
    w.fake.calls[0].resolve([session("clean")]);
    await pending;
    assert.deepEqual(applied, [{ kind: "task", taskId: "t1", reason: "no-owner", releaseLayout: true }]);
  });
});

describe("phone task sheet", () => {
  function sheet(w, name, log) {
    return createTaskSheetController({
      getTask: w.getTask, loadSessions: w.load, remembered: () => null,
      navigate: (d) => log.push(`${name}:navigate:${d.kind}:${d.sessionId ?? d.reason}`),
      close: () => log.push(`${name}:close`),
    });
  }

  test("waits for the owner, then navigates and closes", async () => {
    const w = world([task("t1", PENDING)]);
    const log = [];
    const s = sheet(w, "A", log);
    const pending = s.select("t1");
    await flush();
    assert.deepEqual(log, [], "nothing happens before the authoritative load answers");
    w.fake.calls[0].resolve(SESSIONS);
    await pending;
    assert.deepEqual(log, ["A:navigate:session:owner", "A:close"]);
    assert.equal(s.open, false);
  });

  test("a changed pending action opens the task-only route and closes the sheet", async () => {
    const w = world([task("t1", PENDING)]);
    const log = [];
    const pending = sheet(w, "A", log).select("t1");
    w.setSummary("t1", { pending_action: null, revision: 9 });
    w.fake.calls[0].resolve(SESSIONS);
    await pending;
    assert.deepEqual(log, ["A:navigate:task:changed", "A:close"]);
  });

  test("no owner opens the task-only route and closes the sheet", async () => {
    const w = world([task("t1", PENDING)]);
    const log = [];
    const pending = sheet(w, "A", log).select("t1");
    w.fake.calls[0].resolve([session("clean")]);
    await pending;
    assert.deepEqual(log, ["A:navigate:task:no-owner", "A:close"]);
  });

  test("a deleted task leaves the sheet open and does nothing", async () => {
    const w = world([task("t1", PENDING)]);
    const log = [];
    const s = sheet(w, "A", log);
    const pending = s.select("t1");
    w.state.tasks.delete("t1");
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await pending).reason, "missing");
    assert.deepEqual(log, []);
    assert.equal(s.open, true);
  });

  test("an older tap in the same sheet is ignored", async () => {
    const w = world([task("t1", PENDING), task("t2", PENDING)]);
    const log = [];
    const s = sheet(w, "A", log);
    const older = s.select("t1");
    const newer = s.select("t2");
    w.fake.calls[0].resolve(SESSIONS);
    assert.equal((await older).kind, "inert");
    assert.deepEqual(log, []);
    w.fake.calls[1].resolve([session("t2-owner", { pending_action: "clarification" })]);
    await newer;
    assert.deepEqual(log, ["A:navigate:session:t2-owner", "A:close"]);
  });

  test("closing or unmounting the sheet makes its in-flight choice inert", async () => {
    const w = world([task("t1", PENDING), task("t2", PENDING)]);
    const log = [];
    const closed = sheet(w, "A", log);
    const p1 = closed.select("t1");
    closed.close();
    const unmounted = sheet(w, "B", log);
    const p2 = unmounted.select("t2");
    unmounted.unmount();
    w.fake.calls[0].resolve(SESSIONS);
    w.fake.calls[1].resolve(SESSIONS);
    assert.equal((await p1).kind, "inert");
    assert.equal((await p2).kind, "inert");
    assert.deepEqual(log, ["A:close"]);
  });

  test("two mounted sheets own their generations and cannot invalidate each other", async () => {
    const w = world([task("t1", PENDING), task("t2", PENDING)]);
    const log = [];
    const a = sheet(w, "A", log);
    const b = sheet(w, "B", log);
    const pa = a.select("t1");
    const pb = b.select("t2"); // a second sheet's tap does not make A's choice stale
    w.fake.calls[1].resolve([session("t2-owner", { pending_action: "clarification" })]);
    await pb;
    w.fake.calls[0].resolve(SESSIONS);
    await pa;
    assert.deepEqual(log, ["B:navigate:session:t2-owner", "B:close", "A:navigate:session:owner", "A:close"]);
  });

  test("closing one sheet does not cancel the other's choice", async () => {
    const w = world([task("t1", PENDING), task("t2", PENDING)]);
    const log = [];
    const a = sheet(w, "A", log);
    const b = sheet(w, "B", log);
    const pa = a.select("t1");
    b.select("t2");
    b.close();
    w.fake.calls[0].resolve(SESSIONS);
    await pa;
    assert.deepEqual(log, ["B:close", "A:navigate:session:owner", "A:close"]);
  });
});

test("selection controllers are independent", () => {
  const a = createSelectionController();
  const b = createSelectionController();
  const ta = a.begin();
  b.begin();
  b.invalidate();
  assert.equal(a.isCurrent(ta), true);
  a.dispose();
  assert.equal(a.isCurrent(ta), false);
});
