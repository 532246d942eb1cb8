// Clarify's service worker: the client's files are cached so the installed app opens without a network, where
// it shows the last snapshot the page kept. Network first (a deploy is visible at once), the cache when offline.
// API calls are never cached or answered here: their truth is the server's.

const CACHE = "clarify-shell-v1";
const SHELL = ["/", "/web/style.css", "/web/app.js", "/web/api.js", "/web/admission.js", "/web/drafts.js", "/web/echo.js", "/web/auth.js",
  "/web/markdown.js", "/web/merge.js", "/web/morphdom.js", "/web/retry.js", "/web/selection.js", "/web/status.js",
  "/web/transcript.js", "/web/views.js", "/web/push.js", "/web/manifest.webmanifest", "/web/icon.svg", "/web/icon-maskable.svg"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE && k !== PUSH_CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin || url.pathname.startsWith("/api/")) return;
  const key = event.request.mode === "navigate" ? "/" : url.pathname;
  event.respondWith(fetch(event.request)
    .then((response) => {
      if (response.ok) {
        const copy = response.clone();
        caches.open(CACHE).then((cache) => cache.put(key, copy));
      }
      return response;
    })
    .catch(() => caches.match(key).then((hit) => hit ?? Response.error())));
});

self.addEventListener("notificationclick", (event) => {
  if (event.action) return; // a notification's action button: the Web Push section below answers it
  event.notification.close();
  const target = event.notification.data?.url ?? "/";
  event.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
    const open = windows.find((w) => new URL(w.url).origin === self.location.origin);
    if (open) return open.navigate(target).then((w) => (w ?? open).focus());
    return self.clients.openWindow(target);
  }));
});

// ------------------------------------------------------------------ Web Push (docs/push.md)
// A push is {type: "clarification", clarification_id, session_id, task_id, title, question} (plus question_id and
// options when one question of at most two options can be answered from the notification). One notification per
// session (its tag): a newer question replaces it; the same question pushed again replaces it silently.

const PUSH_CACHE = "clarify-push-v1"; // the page's access token for answering from a notification (push.js)
const enc = encodeURIComponent;

self.addEventListener("push", (event) => {
  let data = null;
  try { data = event.data?.json(); } catch { data = null; }
  event.waitUntil(showQuestion(data?.type === "clarification" ? data : null));
});

async function showQuestion(p) {
  if (!p) return self.registration.showNotification("Clarify", { body: "Something changed.", icon: "/web/icon.svg" });
  const tag = `session-${p.session_id}`;
  const shown = await self.registration.getNotifications({ tag });
  const repeat = shown.some((n) => n.data?.clarification_id === p.clarification_id);
  const url = `/#/tasks/${enc(p.task_id)}/sessions/${enc(p.session_id)}`;
  return self.registration.showNotification(p.title || "The agent has a question", {
    body: p.question, tag, renotify: !repeat, icon: "/web/icon.svg", requireInteraction: true,
    data: { url, clarification_id: p.clarification_id, session_id: p.session_id, task_id: p.task_id,
      question_id: p.question_id ?? null },
    actions: p.question_id ? (p.options ?? []).slice(0, 2).map((o) => ({ action: `answer:${o.option_id}`, title: o.label })) : [],
  });
}

self.addEventListener("notificationclick", (event) => {
  const data = event.notification.data;
  if (!event.action?.startsWith("answer:") || !data?.clarification_id) return; // a tap: the listener above opens it
  event.notification.close();
  event.waitUntil(answer(data, event.action.slice("answer:".length)));
});

async function answer(data, optionId) {
  const token = await (await caches.open(PUSH_CACHE)).match("/push/token").then((r) => r?.text());
  const resp = token ? await fetch(`/api/v1/clarifications/${enc(data.clarification_id)}/respond`, {
    method: "POST",
    // One key per question: a double tap, or a retry, is the same answer.
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "Idempotency-Key": `push:${data.clarification_id}` },
    body: JSON.stringify({ answers: [{ question_id: data.question_id, selected_options: [optionId] }] }),
  }).catch(() => null) : null;
  if (resp?.ok || resp?.status === 409) return; // answered, or settled elsewhere meanwhile
  return self.clients.openWindow(data.url); // signed out, token expired or offline: answer in the app
}
