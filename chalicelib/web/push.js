// Web Push on this device (docs/push.md): "Notify me on this device" subscribes with the deployment's VAPID
// key and registers the subscription with Clarify; sign out removes both. The service worker (sw.js, its Web
// Push section) shows the questions; it answers a notification's action with the access token this page last
// held, kept for it in a cache of its own (PUSH_CACHE), and opens the session instead when it cannot.

const PUSH_CACHE = "clarify-push-v1";
const TOKEN_KEY = "/push/token";
const DEVICE_KEY = "clarify.push.device";
let tokenOf = () => null;

export const pushSupported = () => "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
export const pushOn = () => Boolean(localStorage.getItem(DEVICE_KEY));

/** The topbar control's words, or null where this browser has no Web Push. */
export function pushLabel() {
  if (!pushSupported()) return null;
  return pushOn() ? "Stop notifying this device" : "Notify me on this device";
}

/** Called once at boot: keeps the service worker's copy of the access token fresh (leaving the page saves it). */
export function initPush(getToken) {
  tokenOf = getToken;
  document.addEventListener("visibilitychange", () => { if (pushOn()) saveToken(); });
  if (pushOn()) saveToken();
}

async function saveToken() {
  const token = await tokenOf();
  const cache = await caches.open(PUSH_CACHE);
  if (token) await cache.put(TOKEN_KEY, new Response(token));
  else await cache.delete(TOKEN_KEY);
}

function keyBytes(base64url) {
  const raw = atob(base64url.replace(/-/g, "+").replace(/_/g, "/"));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

/** Subscribe this device (asking for permission) or, when it is on, turn it off. Resolves to an error text or null. */
export async function togglePush(api) {
  if (pushOn()) return stopPush(api).then(() => null);
  if ((await Notification.requestPermission()) !== "granted") return "Notifications are blocked for this site.";
  const config = await api.call("GET", "/push/config");
  if (config.kind !== "response" || !config.ok) return "Push is not available right now.";
  const registration = await navigator.serviceWorker.ready;
  const key = keyBytes(config.body.vapid_public_key);
  let subscription = await registration.pushManager.getSubscription();
  const sameKey = subscription && new Uint8Array(subscription.options.applicationServerKey ?? []).join() === key.join();
  if (subscription && !sameKey) { await subscription.unsubscribe(); subscription = null; } // the deployment's key changed
  subscription ??= await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  const label = navigator.userAgentData?.platform || navigator.platform || "browser";
  const saved = await api.call("POST", "/devices", { body: { ...subscription.toJSON(), label } });
  if (saved.kind !== "response" || !saved.ok) return "Could not register this device; try again.";
  localStorage.setItem(DEVICE_KEY, saved.body.device_id);
  await saveToken();
  return null;
}

/** Turn push off here: the browser's subscription, Clarify's device and the token kept for the worker all go. */
export async function stopPush(api) {
  const deviceId = localStorage.getItem(DEVICE_KEY);
  localStorage.removeItem(DEVICE_KEY);
  await caches.delete(PUSH_CACHE);
  const registration = await navigator.serviceWorker?.getRegistration();
  await (await registration?.pushManager.getSubscription())?.unsubscribe();
  if (deviceId) await api.call("DELETE", `/devices/${encodeURIComponent(deviceId)}`);
}

/** A question answered elsewhere: when a task the page saw waiting stops waiting, its notifications close. (Only
 * that change counts: a push may arrive before the page's own view of the task knows of the question.) */
export function closeSettled(before, after) {
  const settled = [...before.keys()].filter((id) => before.get(id)?.status_summary?.pending_action
    && !after.get(id)?.status_summary?.pending_action);
  if (!settled.length) return;
  navigator.serviceWorker?.getRegistration().then((registration) => registration?.getNotifications())
    .then((shown) => (shown ?? []).filter((n) => settled.includes(n.data?.task_id)).forEach((n) => n.close()))
    .catch(() => {});
}
