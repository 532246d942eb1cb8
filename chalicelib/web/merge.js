// Revision merging and event dedupe: pure functions over plain objects (no DOM, no fetch).
//
// The server orders every projection with a revision: a task's status_summary.revision and a session's
// pending_action_revision. The event feed is at-least-once and REST snapshots can arrive late, so the
// client accepts a projection only when it is not older than the one it holds.

/** Compare two revisions: numbers, numeric strings or {epoch, sequence}. Returns -1, 0 or 1; null is oldest. */
export function compareRevisions(a, b) {
  if (a == null && b == null) return 0;
  if (a == null) return -1;
  if (b == null) return 1;
  if (typeof a === "object" || typeof b === "object") {
    const ea = big(a?.epoch ?? 0), eb = big(b?.epoch ?? 0);
    if (ea !== eb) return ea < eb ? -1 : 1;
    const sa = big(a?.sequence ?? 0), sb = big(b?.sequence ?? 0);
    return sa === sb ? 0 : sa < sb ? -1 : 1;
  }
  const x = big(a), y = big(b);
  return x === y ? 0 : x < y ? -1 : 1;
}

function big(value) {
  try {
    return BigInt(typeof value === "number" ? Math.trunc(value) : String(value));
  } catch {
    return -1n;
  }
}

/** The summary to keep: the incoming one only when its revision is not older than the stored one. */
export function mergeSummary(stored, incoming) {
  if (!incoming) return stored ?? null;
  if (!stored) return { ...incoming };
  return compareRevisions(incoming.revision, stored.revision) >= 0 ? { ...stored, ...incoming } : stored;
}

/**
 * The tasks that have a pending question in `after` but had none in `before` (two task maps): what deserves a
 * notification, however the client learnt it — an event, or a snapshot that already held the question when
 * its event arrived.
 */
export function newlyPending(before, after) {
  const ids = [];
  for (const [id, task] of after) {
    if (task.status_summary?.pending_action && !before.get(id)?.status_summary?.pending_action) ids.push(id);
  }
  return ids;
}

/** A task with an incoming status summary merged in (the task object is copied, never mutated). */
export function mergeTaskSummary(task, summary) {
  const merged = mergeSummary(task.status_summary, summary);
  return merged === task.status_summary ? task : { ...task, status_summary: merged };
}

/**
 * Apply a task-list snapshot (GET /tasks) to the tasks held. Presence follows the snapshot, except that a task
 * this client learnt about after the snapshot was requested (`keep`: created here or announced by an event) stays,
 * and a task known to be deleted (`gone`) never comes back. Each summary keeps whichever revision is newer, so a
 * late snapshot cannot undo an event. Returns {tasks: Map, order: [ids]}.
 */
export function mergeTaskSnapshot(tasks, snapshot, { keep = new Set(), gone = new Set() } = {}) {
  const next = new Map();
  for (const incoming of snapshot) if (!gone.has(incoming.id)) next.set(incoming.id, mergeTask(tasks.get(incoming.id), incoming));
  for (const id of keep) if (!next.has(id) && tasks.has(id) && !gone.has(id)) next.set(id, tasks.get(id));
  return { tasks: next, order: [...next.keys()] };
}

/** A further page of the task list added to the tasks held (nothing held is dropped). */
export function mergeTaskPage(tasks, page, { gone = new Set() } = {}) {
  const next = new Map(tasks);
  for (const incoming of page) if (!gone.has(incoming.id)) next.set(incoming.id, mergeTask(tasks.get(incoming.id), incoming));
  return { tasks: next, order: [...next.keys()] };
}

function mergeTask(held, incoming) {
  return held
    ? { ...held, ...incoming, status_summary: mergeSummary(held.status_summary, incoming.status_summary),
      last_activity_at: latest(held.last_activity_at, incoming.last_activity_at) }
    : { ...incoming };
}

const latest = (a, b) => (!a ? b ?? null : !b ? a : a > b ? a : b);

/** When anything last happened in a task (the server's last_activity_at, bumped by later events). */
export const activityOf = (task) => task?.last_activity_at ?? task?.created_at ?? "";

/** The task with its activity moved forward to `at` (never backward). */
export function bumpActivity(task, at) {
  if (!task || !at || activityOf(task) >= at) return task;
  return { ...task, last_activity_at: at };
}

/**
 * The task list's order: tasks with a pending question first, then the most recently active; `filter` keeps
 * the titles containing it (case-insensitive). `pending(task)` says whether a task shows the question icon.
 */
export function orderTasks(tasks, { filter = "", pending = () => false } = {}) {
  const needle = filter.trim().toLocaleLowerCase();
  const list = [...tasks.values()].filter((t) => !needle || String(t.title ?? "").toLocaleLowerCase().includes(needle));
  const key = (t) => [pending(t) ? 0 : 1, activityOf(t), t.created_at ?? "", t.id];
  return list.sort((a, b) => {
    const [pa, aa, ca, ia] = key(a), [pb, ab, cb, ib] = key(b);
    if (pa !== pb) return pa - pb;
    if (aa !== ab) return aa < ab ? 1 : -1;
    if (ca !== cb) return ca < cb ? 1 : -1;
    return ia < ib ? -1 : ia > ib ? 1 : 0;
  }).map((t) => t.id);
}

/** One session record merged by pending_action_revision (an omitted pending_action keeps the prior value). */
export function mergeSession(stored, incoming) {
  if (!incoming) return stored ?? null;
  if (!stored) return { ...incoming };
  if (compareRevisions(incoming.pending_action_revision, stored.pending_action_revision) < 0) return stored;
  const merged = { ...stored, ...incoming };
  if (!("pending_action" in incoming)) merged.pending_action = stored.pending_action;
  return merged;
}

/** A sessions snapshot merged session by session with what is held; the result is newest first. */
export function mergeSessionList(held, incoming) {
  const byId = new Map((held ?? []).map((s) => [s.id, s]));
  return newestFirst(incoming.map((s) => mergeSession(byId.get(s.id), s)));
}

/** Sessions ordered newest first (the API's order; sorting again keeps a merged list honest). */
export function newestFirst(sessions) {
  return [...sessions].sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0));
}

/** Remembers event ids already applied; the feed is at-least-once. Bounded, oldest ids forgotten first. */
export function createEventDeduper(limit = 5000) {
  const seen = new Set();
  return {
    /** True the first time an id is offered, false for a redelivery. */
    admit(id) {
      if (id == null) return true;
      if (seen.has(id)) return false;
      seen.add(id);
      if (seen.size > limit) seen.delete(seen.values().next().value);
      return true;
    },
    get size() {
      return seen.size;
    },
  };
}

/**
 * Apply one feed event to the client caches. Pure: returns the new caches and what the app should refresh.
 * caches = {tasks: Map, order: [ids], sessions: Map taskId -> [session]}
 * effects: {refreshTasks, refreshSession: sessionId|null, refreshTaskSessions: taskId|null,
 *           deletedTask: taskId|null}
 * Every event of a known task moves its activity forward to the event's time.
 */
export function applyEvent(caches, event) {
  const effects = { refreshTasks: false, refreshSession: null, refreshTaskSessions: null, deletedTask: null };
  let { tasks, order, sessions } = caches;
  const payload = event.payload ?? {};
  const taskId = event.task_id ?? payload.task_id;
  if (event.at && tasks.has(taskId) && event.type !== "task.deleted") {
    const bumped = bumpActivity(tasks.get(taskId), event.at);
    if (bumped !== tasks.get(taskId)) tasks = new Map(tasks).set(taskId, bumped);
  }
  switch (event.type) {
    case "task.created":
    case "task.updated": {
      const held = tasks.get(payload.id ?? taskId);
      const incoming = { ...payload, last_activity_at: latest(payload.last_activity_at ?? payload.created_at, event.at) };
      const next = held
        ? { ...held, title: incoming.title ?? held.title, workflow_step: incoming.workflow_step ?? held.workflow_step,
          status_summary: mergeSummary(held.status_summary, incoming.status_summary),
          last_activity_at: latest(held.last_activity_at, incoming.last_activity_at) }
        : incoming;
      if (!next.id) break;
      tasks = new Map(tasks).set(next.id, next);
      if (!held) order = [...order, next.id];
      break;
    }
    case "task.deleted": {
      const id = payload.id ?? taskId;
      effects.deletedTask = id;
      if (tasks.has(id)) {
        tasks = new Map(tasks);
        tasks.delete(id);
        order = order.filter((x) => x !== id);
      }
      if (sessions.has(id)) {
        sessions = new Map(sessions);
        sessions.delete(id);
      }
      break;
    }
    case "task.status_summary.updated": {
      const task = tasks.get(taskId);
      if (!task) {
        effects.refreshTasks = true; // a task this client has not listed yet
        break;
      }
      const merged = mergeTaskSummary(task, payload.status_summary);
      if (merged !== task) {
        tasks = new Map(tasks);
        tasks.set(taskId, merged);
      }
      break;
    }
    case "session.updated": {
      if (!tasks.has(taskId)) effects.refreshTasks = true;
      const list = sessions.get(taskId);
      if (list) {
        const held = list.find((s) => s.id === payload.id);
        const merged = mergeSession(held, payload);
        if (merged !== held) {
          sessions = new Map(sessions);
          sessions.set(taskId, newestFirst([...list.filter((s) => s.id !== payload.id), merged]));
        }
      }
      effects.refreshSession = event.session_id ?? payload.id ?? null;
      break;
    }
    case "message.added":
    case "message.updated":
    case "message.deleted":
    case "turn.started":
    case "turn.completed":
      effects.refreshSession = event.session_id ?? null;
      break;
    default:
      if (event.task_id && !tasks.has(event.task_id)) effects.refreshTasks = true;
  }
  return { caches: { tasks, order, sessions }, effects };
}
