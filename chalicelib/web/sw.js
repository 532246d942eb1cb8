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
    .then((keys) => Promise.all(keys.filter((k) => k !== CACHE && k !== "clarify-push-v1").map((k) => caches.delete(k))))
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
  if (event.action) return; // an option: Web Push below
  event.notification.close();
  const target = event.notification.data?.url ?? "/";
  event.waitUntil(self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
    const open = windows.find((w) => new URL(w.url).origin === self.location.origin);
    if (open) return open.navigate(target).then((w) => (w ?? open).focus());
    return self.clients.openWindow(target);
  }));
});

// Web Push (docs/push.md)
self.addEventListener("push", (e) => {
  const p = e.data.json();
  e.waitUntil(self.registration.showNotification(p.title, { body: p.question, tag: `session-${p.session_id}`, renotify: true,
    icon: "/web/icon.svg", data: { ...p, url: `/#/tasks/${p.task_id}/sessions/${p.session_id}` },
    actions: (p.question_id && p.options || []).map((o) => ({ action: o.option_id, title: o.label })) }));
});

self.addEventListener("notificationclick", (e) => {
  const d = e.notification.data;
  if (!e.action) return;
  e.notification.close();
  e.waitUntil(caches.open("clarify-push-v1").then((c) => c.match("/push/token")).then((t) => t?.text())
    .then((t) => t && fetch(`/api/v1/clarifications/${d.clarification_id}/respond`, { method: "POST",
      headers: { Authorization: `Bearer ${t}`, "Idempotency-Key": `push:${d.clarification_id}` },
      body: JSON.stringify({ answers: [{ question_id: d.question_id, selected_options: [e.action] }] }) }))
    .catch(() => null).then((r) => r?.ok || r?.status === 409 || self.clients.openWindow(d.url)));
});
