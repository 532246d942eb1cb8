// Test helpers: deferred promises and a fake sessions endpoint whose responses the test releases by hand.

export function deferred() {
  let resolve, reject;
  const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
  return { promise, resolve, reject };
}

/** Lets pending promise callbacks run. */
export const flush = () => new Promise((r) => setTimeout(r, 0));

/** A fetchSessions whose every call waits until the test resolves it; honours the abort signal like fetch. */
export function manualFetch() {
  const calls = [];
  const fetchSessions = (taskId, signal) => {
    const d = deferred();
    const call = { taskId, signal, ...d, aborted: false };
    signal?.addEventListener("abort", () => { call.aborted = true; });
    calls.push(call);
    return d.promise;
  };
  return { calls, fetchSessions };
}

export function session(id, extra = {}) {
  return { id, task_id: "t1", state: "RUNNING", is_primary: false, input_capable: true, pending_action: null,
    pending_action_revision: 1, created_at: "2026-01-01T00:00:00Z", ...extra };
}

export function task(id, summary = {}, extra = {}) {
  return { id, title: id, status_summary: { pending_action: null, revision: 1, primary_session_id: null, ...summary }, ...extra };
}
