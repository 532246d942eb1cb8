// Web Push on this device (docs/push.md), loaded by app.js once the user turns it on. The service worker answers
// a notification's option with the token kept here for it (PUSH_CACHE); sign out removes the subscription, the
// device and that token. DEVICE (in localStorage) says push is on here; views.js reads it for the control's words.
const PUSH_CACHE = "clarify-push-v1", DEVICE = "clarify.push.device";
let tokenOf = () => null;

const pushOn = () => Boolean(localStorage.getItem(DEVICE));

export function initPush(getToken) {
  tokenOf = getToken;
  document.addEventListener("visibilitychange", saveToken);
  saveToken();
}

async function saveToken() {
  if (!pushOn()) return;
  const token = await tokenOf(), cache = await caches.open(PUSH_CACHE);
  await (token ? cache.put("/push/token", new Response(token)) : cache.delete("/push/token"));
}

/** Turns push on (asking for permission) or off, then re-renders; a problem is announced in words. */
export async function togglePush(api, announce, render) {
  const problem = await (pushOn() ? stopPush(api).then(() => null) : startPush(api)).catch(() => "Push could not be turned on here.");
  if (problem) announce(problem);
  render();
}

async function startPush(api) {
  if ((await Notification.requestPermission()) !== "granted") return "Notifications are blocked for this site.";
  const config = await api.call("GET", "/push/config");
  if (!config.ok) return "Push is not available right now.";
  const key = Uint8Array.from(atob(config.body.vapid_public_key.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
  const manager = (await navigator.serviceWorker.ready).pushManager;
  let sub = await manager.getSubscription();
  if (sub && new Uint8Array(sub.options.applicationServerKey).join() !== key.join()) sub = await sub.unsubscribe() && null; // a new key
  sub ??= await manager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  const saved = await api.call("POST", "/devices", { body: { ...sub.toJSON(), label: navigator.platform || "browser" } });
  if (!saved.ok) return "Could not register this device; try again.";
  localStorage.setItem(DEVICE, saved.body.device_id);
  return saveToken().then(() => null);
}

export async function stopPush(api) {
  const id = localStorage.getItem(DEVICE);
  localStorage.removeItem(DEVICE);
  await caches.delete(PUSH_CACHE);
  await (await (await navigator.serviceWorker?.getRegistration())?.pushManager.getSubscription())?.unsubscribe();
  if (id) await api.call("DELETE", `/devices/${encodeURIComponent(id)}`);
}

/** A task the page saw waiting stops waiting (answered elsewhere): its notifications close. */
export function closeSettled(before, after) {
  const settled = [...before.keys()].filter((id) => before.get(id).status_summary?.pending_action && !after.get(id)?.status_summary?.pending_action);
  if (settled.length) navigator.serviceWorker?.getRegistration().then((r) => r?.getNotifications())
    .then((shown) => shown?.forEach((n) => settled.includes(n.data?.task_id) && n.close())).catch(() => {});
}
