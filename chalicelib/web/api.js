// The HTTP client for /api/v1 (same origin). Every call resolves to a plain result value:
//   {kind: "response", status, ok, body}   the server answered (any status)
//   {kind: "transport", error}             no response: the outcome is unknown
// An aborted call rejects with an AbortError (inert for callers that started a newer one).

export const API_BASE = "/api/v1";

// getToken may be async (a token refreshed before it expires); on a 401 `refresh` is asked once for a new token
// and the same request is sent again (same body and Idempotency-Key), so nothing typed or in flight is lost.
export function createApi({ getToken, refresh = async () => false, fetchImpl = (...args) => fetch(...args), base = API_BASE, onUnauthorized = () => {} }) {
  async function call(method, path, options = {}, retried = false) {
    const { body, headers = {}, signal } = options;
    const h = { Accept: "application/json", ...headers };
    const token = await getToken();
    if (token) h.Authorization = `Bearer ${token}`;
    if (body !== undefined) h["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetchImpl(base + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal });
    } catch (error) {
      if (error?.name === "AbortError") throw error;
      return { kind: "transport", error: String(error?.message ?? error) };
    }
    let parsed = null;
    try {
      const text = await resp.text();
      parsed = text ? JSON.parse(text) : null;
    } catch (error) {
      if (error?.name === "AbortError") throw error;
      parsed = null;
    }
    if (resp.status === 401 && !retried) {
      let renewed;
      try {
        renewed = await refresh();
      } catch (error) {
        return { kind: "transport", error: String(error?.message ?? error) }; // Cognito unreachable: still signed in
      }
      if (renewed) return call(method, path, options, true);
    }
    if (resp.status === 401) onUnauthorized();
    return { kind: "response", status: resp.status, ok: resp.ok, body: parsed };
  }

  /** GET that must succeed: resolves to the body, rejects with an Error carrying the result otherwise. */
  async function read(path, { signal } = {}) {
    const result = await call("GET", path, { signal });
    if (result.kind === "response" && result.ok) return result.body;
    const error = new Error(result.kind === "transport" ? `no response for ${path}` : `GET ${path}: HTTP ${result.status}`);
    error.result = result;
    throw error;
  }

  const enc = encodeURIComponent;
  return {
    call,
    /** One page of the task list (pending first, then the most recently active); `cursor` from the page before. */
    listTasks: (limit, cursor = null, signal) => read(`/tasks?limit=${limit}${cursor ? `&cursor=${enc(cursor)}` : ""}`, { signal }),
    getTask: (taskId) => call("GET", `/tasks/${enc(taskId)}`),
    createTask: (title) => call("POST", "/tasks", { body: { title } }),
    renameTask: (taskId, title) => call("PATCH", `/tasks/${enc(taskId)}`, { body: { title } }),
    deleteTask: (taskId) => call("DELETE", `/tasks/${enc(taskId)}`),
    cancelSession: (sessionId) => call("POST", `/sessions/${enc(sessionId)}/cancel`, { body: {} }),
    listSessions: (taskId, signal) => read(`/tasks/${enc(taskId)}/sessions`, { signal }),
    createSession: (taskId, prompt) => call("POST", `/tasks/${enc(taskId)}/sessions`, { body: prompt ? { prompt } : {} }),
    getSession: (sessionId, signal) => read(`/sessions/${enc(sessionId)}`, { signal }),
    /** One page of a transcript: the newest, or the one before `before` (an older_cursor). */
    transcript: (sessionId, limit, before = null, signal) =>
      read(`/sessions/${enc(sessionId)}/transcript?limit=${limit}${before ? `&before=${enc(before)}` : ""}`, { signal }),
    respond: (clarificationId, body, idempotencyKey) =>
      call("POST", `/clarifications/${enc(clarificationId)}/respond`, { body, headers: { "Idempotency-Key": idempotencyKey } }),
    dismiss: (clarificationId) => call("POST", `/clarifications/${enc(clarificationId)}/dismiss`, { body: {} }),
    sendMessage: (sessionId, body) => call("POST", `/sessions/${enc(sessionId)}/messages`, { body }),
    /** The feed from `after` (a cursor, or "now" for a cursor at the present without history). */
    events: (after, wait, signal) =>
      read(`/events?${after ? `after=${enc(after)}&` : ""}wait=${wait}`, { signal }),
  };
}

/** A random id for Idempotency-Key and client_message_id (allowed characters only). */
export function newId() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID().replaceAll("-", "");
  return Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16)).join("");
}
