// Task activation: which session a task row opens. Pure decision logic plus generation guards; the app
// injects the I/O (the sessions request, the live task projection) and applies the decision.
//
// A task that advertises a pending action opens the newest input-capable session whose pending_action
// matches it. That owner outranks remembered and primary sessions; the normal preference order
// (remembered -> primary -> newest) returns only for a clean task. Sessions are always loaded from the
// server before a pending task is opened, and the task projection is revalidated before the choice is used.

import { compareRevisions, newestFirst } from "./merge.js";

/** The error a superseded load throws to its caller: inert, never a failure needing a fallback. */
export class SupersededLoad extends Error {
  constructor(message = "a newer load of this task's sessions replaced this one") {
    super(message);
    this.name = "AbortError";
  }
}

export function isAbortError(error) {
  return error?.name === "AbortError";
}

/**
 * The pending action a task row advertises: the status summary's when the task has one (an explicit null
 * there is a clean task and overrides the legacy field), else the legacy task-level projection.
 */
export function effectivePendingAction(task) {
  if (!task) return null;
  const summary = task.status_summary;
  if (summary && typeof summary === "object" && "pending_action" in summary) return summary.pending_action ?? null;
  return task.pending_action ?? null;
}

/** The summary revision guarding a delayed choice (undefined when the task has no summary). */
export function summaryRevision(task) {
  return task?.status_summary?.revision;
}

/** True when the task row should show the question icon. */
export function showsQuestionIcon(task) {
  return effectivePendingAction(task) === "clarification";
}

/** The newest input-capable session whose pending_action matches the task's action, or null. */
export function resolvePendingOwner(sessions, action) {
  if (!action) return null;
  const owner = newestFirst(sessions ?? []).find((s) => s.input_capable === true && s.pending_action === action);
  return owner ? owner.id : null;
}

/** The normal order for a clean task: remembered, then primary, then the newest session. */
export function resolvePreferredSession(sessions, { rememberedId = null, primaryId = null } = {}) {
  const list = newestFirst(sessions ?? []);
  const has = (id) => id != null && list.some((s) => s.id === id);
  if (has(rememberedId)) return rememberedId;
  if (has(primaryId)) return primaryId;
  const primary = list.find((s) => s.is_primary);
  if (primary) return primary.id;
  return list.length ? list[0].id : null;
}

/**
 * Per-task generation guard for authoritative session loads. A newer load of the same task aborts the
 * older one; the older response never commits (it cannot replace the newer snapshot) and its caller gets
 * SupersededLoad. Loads of different tasks are independent.
 *   fetchSessions(taskId, signal) -> Promise<sessions[]>   (throws on failure)
 *   commit(taskId, sessions) -> sessions actually held after merging (returned to the caller)
 */
export function createTaskSessionLoader({ fetchSessions, commit }) {
  const current = new Map(); // taskId -> {generation, controller}
  let generations = 0;
  return {
    async load(taskId) {
      current.get(taskId)?.controller.abort();
      const mine = { generation: ++generations, controller: new AbortController() };
      current.set(taskId, mine);
      const isCurrent = () => current.get(taskId) === mine;
      let sessions;
      try {
        sessions = await fetchSessions(taskId, mine.controller.signal);
      } catch (error) {
        if (!isCurrent() || isAbortError(error)) throw new SupersededLoad();
        current.delete(taskId);
        throw error;
      }
      if (!isCurrent()) throw new SupersededLoad();
      current.delete(taskId);
      return commit(taskId, sessions);
    },
    /** True while a load of this task is in flight. */
    inFlight(taskId) {
      return current.has(taskId);
    },
  };
}

/**
 * A selection generation: each activation begins a new token; invalidate() (sheet closed or unmounted,
 * another task chosen elsewhere) makes every earlier token stale. Each controller is independent.
 */
export function createSelectionController() {
  let generation = 0;
  let disposed = false;
  return {
    begin() {
      return ++generation;
    },
    isCurrent(token) {
      return !disposed && token === generation;
    },
    invalidate() {
      generation++;
    },
    dispose() {
      disposed = true;
      generation++;
    },
  };
}

/**
 * Decide what activating a task opens. Never navigates itself. Returns one of
 *   {kind: "session", taskId, sessionId, via: "pending-owner"|"remembered"|"primary"|"newest"}
 *   {kind: "task", taskId, reason: "changed"|"no-owner"|"load-failed"|"no-sessions", releaseLayout: true}
 *   {kind: "inert", taskId, reason: "missing"|"aborted"|"stale-selection"}
 * deps:
 *   getTask(taskId)          the live task projection now (undefined once the task is gone)
 *   loadSessions(taskId)     an authoritative, generation-guarded load (createTaskSessionLoader().load)
 *   rememberedSessionId      the session last opened for this task, if any
 *   isCurrent()              false once this selection was superseded (another tap, sheet closed ...)
 */
export async function activateTask(taskId, { getTask, loadSessions, rememberedSessionId = null, isCurrent = () => true }) {
  const before = getTask(taskId);
  if (!before) return inert(taskId, "missing");
  const action = effectivePendingAction(before);
  const revision = summaryRevision(before);

  let sessions;
  try {
    sessions = await loadSessions(taskId);
  } catch (error) {
    if (isAbortError(error)) return inert(taskId, "aborted");
    if (!isCurrent()) return inert(taskId, "stale-selection");
    if (!getTask(taskId)) return inert(taskId, "missing");
    return taskOnly(taskId, "load-failed"); // no guess: a failed load never falls back to another session
  }
  if (!isCurrent()) return inert(taskId, "stale-selection");

  const after = getTask(taskId);
  if (!after) return inert(taskId, "missing");
  const actionNow = effectivePendingAction(after);
  if (action) {
    // The delayed choice is only valid for the projection it was made for.
    if (actionNow !== action || compareRevisions(summaryRevision(after), revision) !== 0) {
      return taskOnly(taskId, "changed");
    }
    const owner = resolvePendingOwner(sessions, action);
    return owner ? { kind: "session", taskId, sessionId: owner, via: "pending-owner" } : taskOnly(taskId, "no-owner");
  }
  if (actionNow) return taskOnly(taskId, "changed"); // it became pending meanwhile: do not open a guess
  const primaryId = after.status_summary?.primary_session_id ?? null;
  const chosen = resolvePreferredSession(sessions, { rememberedId: rememberedSessionId, primaryId });
  if (!chosen) return taskOnly(taskId, "no-sessions");
  let via = "newest";
  if (chosen === rememberedSessionId) via = "remembered";
  else if (chosen === primaryId || sessions.find((s) => s.id === chosen)?.is_primary) via = "primary";
  return { kind: "session", taskId, sessionId: chosen, via };
}

function inert(taskId, reason) {
  return { kind: "inert", taskId, reason };
}

function taskOnly(taskId, reason) {
  return { kind: "task", taskId, reason, releaseLayout: true };
}

/**
 * The desktop task list's activator: one selection generation for the whole list, so a newer click (or an
 * external navigation calling invalidate) makes an older in-flight choice inert.
 *   apply(decision)  navigates; never called for an inert decision
 */
export function createDesktopActivator({ getTask, loadSessions, remembered, apply }) {
  const controller = createSelectionController();
  return {
    async activate(taskId) {
      const token = controller.begin();
      const decision = await activateTask(taskId, {
        getTask, loadSessions, rememberedSessionId: remembered(taskId), isCurrent: () => controller.isCurrent(token),
      });
      if (decision.kind !== "inert" && controller.isCurrent(token)) apply(decision);
      return decision;
    },
    invalidate: () => controller.invalidate(),
  };
}

/**
 * One mounted phone task sheet. It owns its selection generation: closing or unmounting it invalidates its
 * own in-flight choice and nobody else's.
 *   navigate(decision)  opens the session or the task-only route
 *   close()             closes this sheet
 * Outcomes: session / no owner / changed -> navigate and close; missing task or aborted load -> inert, the
 * sheet stays open.
 */
export function createTaskSheetController({ getTask, loadSessions, remembered, navigate, close }) {
  const controller = createSelectionController();
  let open = true;
  return {
    async select(taskId) {
      const token = controller.begin();
      const decision = await activateTask(taskId, {
        getTask, loadSessions, rememberedSessionId: remembered(taskId), isCurrent: () => open && controller.isCurrent(token),
      });
      if (decision.kind === "inert" || !open || !controller.isCurrent(token)) return decision;
      navigate(decision);
      this.close();
      return decision;
    },
    close() {
      if (!open) return;
      open = false;
      controller.dispose();
      close();
    },
    /** Unmount without calling close(): a responsive remount drops this sheet's pending choice. */
    unmount() {
      open = false;
      controller.dispose();
    },
    get open() {
      return open;
    },
  };
}
