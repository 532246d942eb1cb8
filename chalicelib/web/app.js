// Wiring: state, I/O and event handling. Decisions come from the pure modules (selection, merge, admission,
// transcript, drafts, retry, status, echo); views.js renders; morphdom patches the page in place.

import morphdom from "./morphdom.js";
import { API_BASE, createApi, newId } from "./api.js";
import { claims, createAuth, workspaceOf } from "./auth.js";
import {
  Phase, admissionLabel, beginLate, beginRespond, buildAnswers, canSendLate, composeLate, isBusy, lateMessageBody,
  lateResult, respondResult, unansweredQuestions,
} from "./admission.js";
import { createDrafts } from "./drafts.js";
const push = (use) => localStorage.getItem("clarify.push.device") && import("./push.js").then(use); // docs/push.md
import { pendingEchoes } from "./echo.js";
import { applyEvent, createEventDeduper, mergeSessionList, mergeTaskPage, mergeTaskSnapshot, newlyPending } from "./merge.js";
import { describeFailure, retryDelay } from "./retry.js";
import { createDesktopActivator, createTaskSessionLoader, createTaskSheetController } from "./selection.js";
import { activeBundle, joinNewest, joinOlder, pendingQuestions } from "./transcript.js";
import { pageTitle, renderApp } from "./views.js";

const PHONE_QUERY = "(max-width: 767px)";
const EVENT_WAIT_SECONDS = 10;
const SKIP_UNDO_MS = 5000;
const TASK_PAGE = 50; // tasks per page of the list; more as the list scrolls
const TRANSCRIPT_PAGE = 50; // messages per transcript page; older ones as the conversation scrolls up
const NOTICE_MS = 6000;
const SURFACES_KEY = "clarify.surfaces";
const SNAPSHOT_KEY = "clarify.snapshot";
const TEXT_FIELD = /^(TEXTAREA|INPUT:(text|search|password|))$/;
const rememberKey = (taskId) => `clarify.remembered.${taskId}`;
const phoneQuery = window.matchMedia(PHONE_QUERY);
const drafts = createDrafts(localStorage);
const auth = createAuth({ storage: localStorage });

const state = {
  token: null,
  layout: phoneQuery.matches ? "phone" : "desktop",
  online: true, // the event feed answers
  offlineSince: null,
  snapshotAt: null, // showing a stored snapshot taken then (until the server answers)
  notices: [], // [{id, text, tone}] that clear themselves
  tasks: new Map(),
  order: [],
  tasksLoaded: false,
  tasksCursor: null, // the next page of the task list (null: all loaded)
  tasksError: null,
  filter: "",
  deleted: new Set(),
  sessions: new Map(), // taskId -> sessions, newest first
  route: { taskId: null, sessionId: null },
  taskNotice: null,
  session: null,
  transcript: null, // {sessionId, current_turn_id, messages, older_cursor, pending_clarifications}
  transcriptError: null,
  surfaces: new Map(), // clarificationId -> admission surface
  lateOpen: new Set(),
  echoes: new Map(), // sessionId -> [echo]
  skipping: null, // {cid, until}
  renaming: null, // taskId
  confirm: null, // {kind: "delete"|"stop", id}
  creating: false,
  sheet: null, // {id, controller}
  activating: null,
  drafts,
};

const api = createApi({ getToken: () => auth.fresh(), refresh: () => auth.refresh(), onUnauthorized: () => expired() });
const answerKey = (cid) => `answer:${cid}`;
const answerDraft = (cid) => drafts.get(answerKey(cid), {});

// ------------------------------------------------------------------ rendering

const root = document.getElementById("app");
const announcer = document.getElementById("announcer");
let renderQueued = false;
let afterRender = [];
let shownOverlay = null;

/** A field the person is typing in keeps its text through any re-render (same field identity). */
function keepTyped(fromEl, toEl) {
  if (fromEl.tagName === "DETAILS") toEl.open = fromEl.open; // a menu or note the person opened stays open
  const kind = fromEl.tagName === "INPUT" ? `INPUT:${fromEl.getAttribute("type") ?? ""}` : fromEl.tagName;
  if (TEXT_FIELD.test(kind) && fromEl.dataset.field && fromEl.dataset.field === toEl.dataset.field) toEl.value = fromEl.value;
  return true;
}

function render(then) {
  if (then) afterRender.push(then);
  if (renderQueued) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    const log = document.getElementById("transcript");
    const pinned = !log || log.scrollHeight - log.scrollTop - log.clientHeight < 48;
    const shown = log?.dataset.session;
    morphdom(root, renderApp(state), { onBeforeElUpdated: keepTyped });
    document.title = pageTitle(state);
    const next = document.getElementById("transcript");
    // Follow new messages while the reader is at the bottom (and on opening a session); never yank them back.
    if (next && (pinned || next.dataset.session !== shown)) next.scrollTop = next.scrollHeight;
    onOverlayShown();
    watchMore();
    const pending = afterRender;
    afterRender = [];
    for (const fn of pending) fn();
    saveSnapshot();
  });
}

function announce(text) {
  if (!announcer) return;
  announcer.textContent = "";
  setTimeout(() => { announcer.textContent = text; }, 30);
}

let noticeIds = 0;
function notify(text, tone = "info") {
  const id = ++noticeIds;
  state.notices = [...state.notices.slice(-2), { id, text, tone }];
  render();
  setTimeout(() => {
    state.notices = state.notices.filter((n) => n.id !== id);
    render();
  }, NOTICE_MS);
}

const isTextField = (el) => !!el && (el.tagName === "TEXTAREA" || (el.tagName === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(el.type)));
/** Someone is typing in `el`: a text field holding text (an empty message box focused is not typing). */
const typingIn = (el) => isTextField(el) && (el.id !== "composer-input" || el.value !== "");

/** A new question: say so, and move focus to its first option unless the person is typing somewhere. */
function onOverlayShown() {
  const overlay = document.getElementById("overlay");
  const cid = overlay?.dataset.clarificationId ?? null;
  if (cid === shownOverlay) return;
  shownOverlay = cid;
  if (!cid) return;
  const bundle = findEntry(cid);
  const first = bundle ? pendingQuestions(bundle)[0] : null;
  announce(`The agent asks: ${first?.prompt ?? "a question"}`);
  // The first option takes focus unless the person is typing (on the phone this also puts the keyboard away).
  if (!typingIn(document.activeElement)) overlay.querySelector("input[type=radio]")?.focus();
}

// ------------------------------------------------------------------ pages load as the lists scroll

// A sentinel ([data-more]) at the end of the task list and at the top of the conversation loads the next page
// when it comes into view. Observing again after each render asks once more whether it is in view: a page that
// did not fill the list yet brings the next one.
const moreObserver = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    if (entry.target.dataset.more === "tasks") loadMoreTasks();
    else if (entry.target.dataset.more === "older") loadOlder();
  }
}) : null;

function watchMore() {
  if (!moreObserver) return;
  moreObserver.disconnect();
  if (tasksMore || olderLoad) return; // observed again once the page in flight arrived (its render)
  for (const el of document.querySelectorAll("[data-more]")) moreObserver.observe(el);
}

// ------------------------------------------------------------------ offline snapshot (what the page opens to)

let snapshotTimer = null;
function saveSnapshot() {
  if (!state.token || state.snapshotAt || !state.tasksLoaded) return;
  clearTimeout(snapshotTimer);
  snapshotTimer = setTimeout(() => {
    const held = state.transcript;
    const transcript = held ? { ...held, messages: held.messages.slice(-200), older_cursor: held.messages.length > 200 ? null : held.older_cursor } : null;
    const data = { at: new Date().toISOString(), tasks: [...state.tasks.values()], sessions: [...state.sessions], transcript, session: state.session };
    try {
      localStorage.setItem(SNAPSHOT_KEY, JSON.stringify(data));
    } catch {
      // a full storage only costs the offline view
    }
  }, 300);
}

function restoreSnapshot() {
  try {
    const data = JSON.parse(localStorage.getItem(SNAPSHOT_KEY) ?? "null");
    if (!data) return;
    state.tasks = new Map(data.tasks.map((t) => [t.id, t]));
    state.order = [...state.tasks.keys()];
    state.sessions = new Map(data.sessions);
    state.tasksLoaded = true;
    state.snapshotAt = data.at;
    if (data.transcript) state.transcript = { ...data.transcript, stale: true }; // replaced, not joined, once read
    if (data.session) state.session = data.session;
  } catch {
    localStorage.removeItem(SNAPSHOT_KEY);
  }
}

// ------------------------------------------------------------------ tasks and sessions

let tasksLoad = null;
let tasksAgain = false;
let learnt = 0;
const learntAt = new Map(); // taskId -> when this client learnt of it (a counter)

function learnTask(task) {
  state.tasks = new Map(state.tasks).set(task.id, { ...state.tasks.get(task.id), ...task });
  if (!state.order.includes(task.id)) state.order = [...state.order, task.id];
  learntAt.set(task.id, ++learnt);
}

/** One snapshot of the task list at a time; asking during a load runs exactly one more after it. */
function loadTasks() {
  if (tasksLoad) {
    tasksAgain = true;
    return tasksLoad;
  }
  const since = learnt;
  tasksGeneration++;
  tasksLoad = (async () => {
    try {
      const body = await api.listTasks(TASK_PAGE);
      const keep = new Set([...learntAt].filter(([, at]) => at > since).map(([id]) => id));
      if (state.route.taskId) keep.add(state.route.taskId); // the open task stays, whichever page holds it
      const merged = mergeTaskSnapshot(state.tasks, body.tasks ?? [], { keep, gone: state.deleted });
      if (state.tasksLoaded) notifyQuestions(state.tasks, merged.tasks); // the first snapshot is what the user opened
      state.tasks = merged.tasks;
      state.order = merged.order;
      state.tasksLoaded = true;
      state.tasksCursor = body.next_cursor ?? null; // the first page again: further pages as the list scrolls
      state.tasksError = null;
      state.snapshotAt = null;
      if (state.route.taskId && !state.tasks.has(state.route.taskId) && state.deleted.has(state.route.taskId)) leaveDeleted(state.route.taskId);
    } catch (error) {
      if (error?.name !== "AbortError") state.tasksError = describeFailure(error?.result);
    } finally {
      tasksLoad = null;
      const held = heldEvents;
      heldEvents = [];
      if (held.length) handleEvents(held);
      render();
      if (tasksAgain) {
        tasksAgain = false;
        loadTasks();
      }
    }
  })();
  return tasksLoad;
}

let tasksGeneration = 0;
let tasksMore = null;

/** The next page of the task list, once, while none is in flight and no first page is being read again. */
function loadMoreTasks() {
  if (tasksMore || tasksLoad || !state.tasksCursor) return;
  const generation = tasksGeneration;
  tasksMore = (async () => {
    try {
      const body = await api.listTasks(TASK_PAGE, state.tasksCursor);
      if (generation !== tasksGeneration) return; // the list started over meanwhile
      const merged = mergeTaskPage(state.tasks, body.tasks ?? [], { gone: state.deleted });
      state.tasks = merged.tasks;
      state.order = merged.order;
      state.tasksCursor = body.next_cursor ?? null;
    } catch (error) {
      if (error?.name !== "AbortError") notify(`More tasks could not be loaded. ${describeFailure(error?.result)}`, "error");
    } finally {
      tasksMore = null;
      render();
    }
  })();
}

/** A task opened by its address that no loaded page holds yet: read on its own. */
async function learnRouteTask(taskId) {
  const result = await api.getTask(taskId);
  if (result.ok && !state.tasks.has(taskId) && !state.deleted.has(taskId)) {
    learnTask(result.body);
    render();
  }
}

const loader = createTaskSessionLoader({
  fetchSessions: async (taskId, signal) => (await api.listSessions(taskId, signal)).sessions ?? [],
  commit: (taskId, sessions) => {
    const merged = mergeSessionList(state.sessions.get(taskId), sessions);
    state.sessions = new Map(state.sessions).set(taskId, merged);
    render();
    return merged;
  },
});

function refreshSessions(taskId) {
  if (!taskId || loader.inFlight(taskId)) return; // never abort an activation's authoritative load
  loader.load(taskId).catch(() => {});
}

const getTask = (taskId) => state.tasks.get(taskId);
const remembered = (taskId) => localStorage.getItem(rememberKey(taskId));

function applyDecision(decision) {
  if (decision.kind === "session") go({ taskId: decision.taskId, sessionId: decision.sessionId });
  else if (decision.kind === "task") go({ taskId: decision.taskId, sessionId: null }, decision.reason);
}

const desktop = createDesktopActivator({ getTask, loadSessions: (id) => loader.load(id), remembered, apply: applyDecision });

async function activate(taskId, where) {
  state.activating = taskId;
  render();
  try {
    if (where === "sheet") await state.sheet?.controller.select(taskId);
    else await desktop.activate(taskId);
  } finally {
    if (state.activating === taskId) state.activating = null;
    render();
  }
}

async function createTask(where) {
  const title = String(drafts.get("new-task")).trim();
  if (!title || state.creating) return;
  state.creating = true;
  render();
  const result = await api.createTask(title);
  state.creating = false;
  if (!result.ok) {
    notify(`The task was not created. ${describeFailure(result, "title")}`, "error");
    render();
    return;
  }
  drafts.reset("new-task");
  learnTask(result.body);
  desktop.invalidate(); // an older activation in flight must not take over
  go({ taskId: result.body.id, sessionId: null });
  if (where === "sheet") state.sheet?.controller.close();
  render(() => document.getElementById("new-session-prompt")?.focus());
}

async function createSession() {
  const taskId = state.route.taskId;
  const key = `new-session:${taskId}`;
  const prompt = String(drafts.get(key)).trim();
  const result = await api.createSession(taskId, prompt);
  if (!result.ok) {
    notify(`The session did not start. ${describeFailure(result, "prompt")}`, "error");
    return;
  }
  drafts.reset(key);
  if (prompt) state.echoes.set(result.body.id, [{ clientMessageId: `start-${result.body.id}`, content: prompt, at: new Date().toISOString(),
    status: result.body.admission?.admission ?? "sent", messageId: result.body.admission?.message_id ?? null,
    turnId: result.body.admission?.turn_id ?? null }]);
  state.sessions = new Map(state.sessions).set(taskId, mergeSessionList(state.sessions.get(taskId), [result.body, ...(state.sessions.get(taskId) ?? [])]));
  go({ taskId, sessionId: result.body.id });
  render(() => document.getElementById("composer-input")?.focus());
}

async function renameTask(taskId) {
  const key = `rename:${taskId}`;
  const title = String(drafts.get(key, getTask(taskId)?.title ?? "")).trim();
  if (!title) return;
  const result = await api.renameTask(taskId, title);
  if (!result.ok) {
    notify(`Not renamed. ${describeFailure(result, "title")}`, "error");
    return;
  }
  drafts.reset(key);
  state.renaming = null;
  learnTask(result.body);
  notify("Task renamed.");
}

async function deleteTask(taskId) {
  const title = getTask(taskId)?.title ?? "the task";
  const result = await api.deleteTask(taskId);
  state.confirm = null;
  if (!result.ok && result.status !== 404) {
    notify(`Not deleted. ${describeFailure(result)}`, "error");
    return;
  }
  forgetTask(taskId);
  go({ taskId: null, sessionId: null });
  notify(`Deleted “${title}”.`);
}

function forgetTask(taskId) {
  state.deleted.add(taskId);
  const tasks = new Map(state.tasks);
  tasks.delete(taskId);
  state.tasks = tasks;
  state.order = state.order.filter((id) => id !== taskId);
}

function leaveDeleted(taskId) {
  if (state.route.taskId !== taskId) return;
  go({ taskId: null, sessionId: null });
  notify("That task was deleted on another device.");
}

async function stopSession(sessionId) {
  state.confirm = null;
  const result = await api.cancelSession(sessionId);
  if (result.ok) {
    state.session = result.body;
    announce("The agent was stopped.");
  } else notify(`The agent was not stopped. ${describeFailure(result)}`, "error");
  refreshSessions(state.route.taskId);
  scheduleTranscriptRefresh();
}

// ------------------------------------------------------------------ phone sheet

let sheetIds = 0;
function openSheet() {
  if (state.sheet) return;
  const id = ++sheetIds;
  const controller = createTaskSheetController({
    getTask, loadSessions: (taskId) => loader.load(taskId), remembered, navigate: applyDecision,
    close: () => {
      if (state.sheet?.id !== id) return;
      state.sheet = null;
      render(() => { if (!isTextField(document.activeElement)) document.getElementById("open-sheet")?.focus(); });
    },
  });
  state.sheet = { id, controller };
  render(() => document.getElementById("task-sheet")?.focus()); // never a text field: the keyboard would cover the list
}

function unmountSheet() {
  state.sheet?.controller.unmount();
  state.sheet = null;
}

// ------------------------------------------------------------------ routes

function parseRoute(hash) {
  const m = /^#\/tasks\/([^/]+)(?:\/sessions\/([^/]+))?\/?$/.exec(hash);
  return m ? { taskId: decodeURIComponent(m[1]), sessionId: m[2] ? decodeURIComponent(m[2]) : null } : { taskId: null, sessionId: null };
}

function routeHash({ taskId, sessionId }) {
  if (!taskId) return "#/";
  return `#/tasks/${encodeURIComponent(taskId)}${sessionId ? `/sessions/${encodeURIComponent(sessionId)}` : ""}`;
}

function go(route, notice = null) {
  const hash = routeHash(route);
  if (location.hash !== hash) history.pushState(null, "", hash);
  applyRoute(route, notice);
}

function applyRoute(route, notice = null) {
  const previous = state.route;
  state.route = route;
  state.taskNotice = route.sessionId ? null : notice;
  if (route.taskId !== previous.taskId) {
    state.renaming = null;
    state.confirm = null;
  }
  if (route.sessionId !== previous.sessionId) {
    // Release the outgoing session's layout: its transcript and overlay (typed text stays in the drafts).
    if (state.transcript?.sessionId !== route.sessionId) state.transcript = null;
    state.transcriptError = null;
    if (state.session?.id !== route.sessionId) state.session = null;
    state.skipping = null;
  }
  if (route.taskId && route.sessionId) {
    localStorage.setItem(rememberKey(route.taskId), route.sessionId);
    loadTranscript(route.sessionId);
  }
  if (route.taskId) refreshSessions(route.taskId);
  if (route.taskId && state.tasksLoaded && !state.tasks.has(route.taskId)) learnRouteTask(route.taskId);
  render(() => {
    if (route.taskId !== previous.taskId) document.querySelector(".task-row[aria-current=true]")?.scrollIntoView({ block: "nearest" });
  });
}

function onExternalNavigation() {
  const route = parseRoute(location.hash);
  if (route.taskId === state.route.taskId && route.sessionId === state.route.sessionId) return;
  desktop.invalidate(); // an external active-task change makes an in-flight activation inert
  applyRoute(route);
}
window.addEventListener("popstate", onExternalNavigation);
window.addEventListener("hashchange", onExternalNavigation);

// ------------------------------------------------------------------ transcript

let transcriptGeneration = 0;
let transcriptTimer = null;

/** The newest page of the conversation (again), joined to the older pages held. */
async function loadTranscript(sessionId) {
  const generation = ++transcriptGeneration;
  try {
    const [body, session] = await Promise.all([api.transcript(sessionId, TRANSCRIPT_PAGE), api.getSession(sessionId).catch(() => null)]);
    if (generation !== transcriptGeneration || state.route.sessionId !== sessionId) return;
    const held = state.transcript?.sessionId === sessionId && !state.transcript.stale ? state.transcript : null;
    state.transcript = { ...body, sessionId, ...joinNewest(held, body) };
    if (session) state.session = session;
    state.transcriptError = null;
    state.echoes.set(sessionId, pendingEchoes(state.transcript.messages, state.echoes.get(sessionId)));
    persistEchoes();
    if (state.skipping && !activeBundle(body.messages, body.pending_clarifications)) state.skipping = null;
    render();
  } catch (error) {
    if (generation !== transcriptGeneration) return;
    state.transcriptError = error?.result?.status === 404 ? "This session does not exist." : describeFailure(error?.result);
    render();
  }
}

let olderLoad = null;

/** The page before the oldest message held, put above it; the reader's place in the conversation stays. */
function loadOlder() {
  const held = state.transcript;
  if (olderLoad || !held?.older_cursor || held.sessionId !== state.route.sessionId) return;
  olderLoad = (async () => {
    try {
      const page = await api.transcript(held.sessionId, TRANSCRIPT_PAGE, held.older_cursor);
      const now = state.transcript;
      if (now?.sessionId !== held.sessionId || now.older_cursor !== held.older_cursor) return; // started over meanwhile
      const log = conversationScroller();
      const fromBottom = log ? log.scrollHeight - log.scrollTop : null;
      state.transcript = { ...now, ...joinOlder(now, page) };
      afterRender.push(() => {
        const next = conversationScroller();
        if (next && fromBottom != null) next.scrollTop = next.scrollHeight - fromBottom;
      });
    } catch (error) {
      if (error?.name !== "AbortError") notify(`Earlier messages could not be loaded. ${describeFailure(error?.result)}`, "error");
    } finally {
      olderLoad = null;
      render();
    }
  })();
}

/** What scrolls the conversation: the transcript, or on the phone while a question is open the whole route. */
function conversationScroller() {
  return ["transcript", "session-route"].map((id) => document.getElementById(id))
    .find((el) => el && /auto|scroll/.test(getComputedStyle(el).overflowY)) ?? null;
}

function scheduleTranscriptRefresh() {
  clearTimeout(transcriptTimer);
  transcriptTimer = setTimeout(() => state.route.sessionId && loadTranscript(state.route.sessionId), 60);
}

// ------------------------------------------------------------------ events: a snapshot, then the feed from its cursor

const deduper = createEventDeduper();
let eventsAbort = null;
let wakeFeed = null;

async function eventLoop() {
  eventsAbort?.abort();
  const abort = (eventsAbort = new AbortController());
  let cursor = null;
  let wait = 0;
  let failures = 0;
  while (!abort.signal.aborted) {
    try {
      // First a cursor at the present, then the snapshot: whatever happens after the cursor arrives as events.
      const page = await api.events(cursor ?? "now", cursor ? wait : 0, abort.signal);
      const first = cursor == null;
      cursor = page.cursor ?? cursor;
      wait = page.events?.length ? 0 : EVENT_WAIT_SECONDS;
      if (first || failures || !state.online) {
        failures = 0;
        reconnected();
      }
      handleEvents(page.events ?? []);
    } catch (error) {
      if (abort.signal.aborted) return;
      failures++;
      wait = 0; // the first answer after a failure must come back at once, not after a long-poll
      if (!state.tasksLoaded) state.tasksError = describeFailure(error?.result); // a first load says so, never "Loading…" forever
      if (state.online || !state.tasksLoaded) {
        state.online = false;
        state.offlineSince ??= new Date().toISOString();
        render();
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, retryDelay(failures));
        wakeFeed = () => { clearTimeout(timer); resolve(); };
      });
      wakeFeed = null;
    }
  }
}

/** The API answers (again): drop stale errors and load what may have been missed. */
function reconnected() {
  state.online = true;
  state.offlineSince = null;
  loadTasks();
  if (state.route.taskId) refreshSessions(state.route.taskId);
  if (state.route.sessionId) loadTranscript(state.route.sessionId);
  resendUnconfirmed();
  render();
}

/** Messages whose outcome is unknown (sent during an outage) go again with the same identity: the server
 * admits a client_message_id once, so a resend never duplicates one that did arrive. */
function resendUnconfirmed() {
  for (const [sid, list] of state.echoes) {
    for (const echo of list) if (echo.status === "unknown") sendMessage(sid, { retryId: echo.clientMessageId });
  }
}

function retryNow() {
  if (wakeFeed) wakeFeed();
  else reconnected();
}

let heldEvents = [];

function handleEvents(events) {
  if (tasksLoad) {
    // Applied on top of the snapshot being loaded (revisions order them), never before it: an event about a
    // task the client does not know yet would otherwise ask for yet another snapshot.
    heldEvents.push(...events);
    return;
  }
  let changed = false;
  const tasksBefore = state.tasks;
  for (const event of events) {
    if (!deduper.admit(event.id)) continue;
    if (event.task_id && state.deleted.has(event.task_id)) continue;
    const before = { tasks: state.tasks, sessions: state.sessions, order: state.order };
    const { caches, effects } = applyEvent(before, event);
    if (caches.tasks !== before.tasks || caches.sessions !== before.sessions) changed = true;
    state.tasks = caches.tasks;
    state.sessions = caches.sessions;
    state.order = caches.order;
    if (event.type === "task.created" && caches.tasks.has(event.task_id)) learntAt.set(event.task_id, ++learnt);
    if (effects.deletedTask) {
      state.deleted.add(effects.deletedTask);
      leaveDeleted(effects.deletedTask);
    }
    if (effects.refreshTasks) loadTasks();
    if (effects.refreshSession && effects.refreshSession === state.route.sessionId) scheduleTranscriptRefresh();
  }
  notifyQuestions(tasksBefore, state.tasks);
  if (changed) render();
}

// ------------------------------------------------------------------ system notifications (the page is in the background)

function notifyQuestions(before, after) {
  push((p) => p.closeSettled(before, after));
  for (const taskId of newlyPending(before, after)) notifyQuestion(taskId);
}

function notifyQuestion(taskId) {
  if (document.visibilityState !== "hidden" || !("Notification" in window) || Notification.permission !== "granted") return;
  const task = getTask(taskId);
  const options = { body: task ? `In “${task.title}”` : "A task needs your answer", tag: `question-${taskId}`,
    data: { url: `/${routeHash({ taskId, sessionId: null })}` }, icon: "/web/icon.svg" };
  navigator.serviceWorker?.getRegistration()
    .then((registration) => (registration ? registration.showNotification("The agent has a question", options) : new Notification("The agent has a question", options)))
    .catch(() => {});
}

async function askNotifications() {
  if (!("Notification" in window)) return;
  await Notification.requestPermission();
  render();
}

// ------------------------------------------------------------------ answering

const surfaceOf = (cid) => state.surfaces.get(cid) ?? { clarificationId: cid, phase: Phase.EDITING, answers: null, rejected: false,
  idempotencyKey: null, clientMessageId: null, note: "", admission: null, messageId: null, delivery: null, error: null,
  winner: null, retryable: false, reason: null };

function setSurface(surface) {
  state.surfaces = new Map(state.surfaces).set(surface.clarificationId, surface);
  if ([Phase.ANSWERED, Phase.SKIPPED, Phase.LATE_DONE].includes(surface.phase)) {
    drafts.reset(answerKey(surface.clarificationId)); // delivered: nothing left to keep
    drafts.reset(`late-note:${surface.clarificationId}`);
  }
  persistSurfaces();
  render();
}

function findEntry(cid) {
  const t = state.transcript;
  return t?.pending_clarifications?.find((m) => m.clarification_id === cid) ?? t?.messages.find((m) => m.clarification_id === cid) ?? null;
}

async function submitAnswers(cid) {
  const entry = findEntry(cid);
  const current = surfaceOf(cid);
  if (!entry || isBusy(current)) return; // answering all questions submits once
  const answers = buildAnswers(pendingQuestions(entry), answerDraft(cid));
  let surface = beginRespond(current, { answers }, newId);
  setSurface(surface);
  const result = await api.respond(cid, { answers }, surface.idempotencyKey);
  surface = respondResult(surfaceOf(cid), result, newId);
  if (result.kind === "transport" || result.status >= 500) surface = { ...surface, error: describeFailure(result, "answer") };
  setSurface(surface);
  if (surface.phase === Phase.LATE_READY) {
    // A recognised inactive result: the kept answers continue as an ordinary message to the same session.
    await sendLate(cid, entry.session_id ?? state.route.sessionId);
  }
  if (surface.phase === Phase.ANSWERED) {
    announce("Answer sent to the agent.");
    render(() => document.getElementById("composer-input")?.focus());
  }
  scheduleTranscriptRefresh();
}

function startSkip(cid) {
  if (isBusy(surfaceOf(cid))) return;
  const until = Date.now() + SKIP_UNDO_MS;
  state.skipping = { cid, until };
  setTimeout(() => { if (state.skipping?.cid === cid && state.skipping.until === until) skip(cid); }, SKIP_UNDO_MS);
  announce("Skipping in 5 seconds. Undo is available.");
  render(() => document.querySelector("[data-action=undo-skip]")?.focus());
}

function undoSkip() {
  state.skipping = null;
  announce("Skip undone; your answers are kept.");
  render(() => document.querySelector("#overlay input[type=radio]")?.focus());
}

async function skip(cid) {
  state.skipping = null;
  const current = surfaceOf(cid);
  if (isBusy(current) || !findEntry(cid)?.answerable) return render();
  let surface = beginRespond(current, { rejected: true }, newId);
  setSurface(surface);
  const result = await api.respond(cid, { rejected: true }, surface.idempotencyKey);
  surface = respondResult(surfaceOf(cid), result, newId);
  if (result.kind === "transport" || result.status >= 500) surface = { ...surface, error: describeFailure(result) };
  setSurface(surface);
  if (surface.phase === Phase.SKIPPED) render(() => document.getElementById("composer-input")?.focus());
  scheduleTranscriptRefresh();
}

async function sendLate(cid, sessionId, { userRetry = false } = {}) {
  let surface = surfaceOf(cid);
  if (!canSendLate(surface, { userRetry })) return;
  surface = beginLate(surface);
  setSurface({ ...surface, sessionId });
  const result = await api.sendMessage(sessionId, lateMessageBody(surface));
  let next = { ...lateResult(surfaceOf(cid), result), sessionId };
  if (result.kind === "transport" || result.status >= 500) next = { ...next, error: describeFailure(result) };
  setSurface(next);
  if (surfaceOf(cid).phase === Phase.LATE_DONE) state.lateOpen.delete(cid);
  scheduleTranscriptRefresh();
}

async function sendLateFromForm(cid) {
  const entry = findEntry(cid);
  if (!entry || isBusy(surfaceOf(cid))) return;
  const answers = buildAnswers(unansweredQuestions(entry), answerDraft(cid));
  setSurface(composeLate(surfaceOf(cid), answers, newId, String(drafts.get(`late-note:${cid}`)).trim()));
  await sendLate(cid, entry.session_id ?? state.route.sessionId);
}

async function dismiss(cid) {
  const result = await api.dismiss(cid);
  if (result.kind === "response" && result.ok) {
    state.lateOpen.delete(cid);
    setSurface({ ...surfaceOf(cid), phase: Phase.DISMISSED, error: null });
  } else {
    notify(`The question was not dismissed. ${describeFailure(result)}`, "error");
  }
  scheduleTranscriptRefresh();
}

function discardDraft(cid) {
  drafts.reset(answerKey(cid));
  render();
}

function persistSurfaces() {
  // Unfinished deliveries survive a reload so a retry keeps its identity.
  const keep = [...state.surfaces.values()].filter((s) =>
    [Phase.LATE_READY, Phase.LATE_SENDING, Phase.LATE_FAILED, Phase.LATE_UNKNOWN, Phase.RESPONDING, Phase.RESPOND_UNKNOWN].includes(s.phase));
  localStorage.setItem(SURFACES_KEY, JSON.stringify(keep));
}

function restoreSurfaces() {
  try {
    for (const s of JSON.parse(localStorage.getItem(SURFACES_KEY) ?? "[]")) {
      // Whatever was in flight when the page went away has an unknown outcome: never resend on our own.
      const phase = s.phase === Phase.LATE_SENDING || s.phase === Phase.LATE_READY ? Phase.LATE_UNKNOWN
        : s.phase === Phase.RESPONDING ? Phase.RESPOND_UNKNOWN : s.phase;
      state.surfaces.set(s.clarificationId, { ...s, phase, retryable: true });
    }
  } catch {
    localStorage.removeItem(SURFACES_KEY);
  }
}

// ------------------------------------------------------------------ ordinary messages (shown at once as echoes)

const echoesOf = (sessionId) => state.echoes.get(sessionId) ?? [];

function setEcho(sessionId, clientMessageId, change) {
  state.echoes.set(sessionId, echoesOf(sessionId).map((e) => (e.clientMessageId === clientMessageId ? { ...e, ...change } : e)));
  persistEchoes();
  render();
}

function persistEchoes() {
  const open = [...state.echoes].map(([sid, list]) => [sid, list.filter((e) => !e.messageId)]).filter(([, list]) => list.length);
  drafts.set("echoes", Object.fromEntries(open));
}

function restoreEchoes() {
  for (const [sid, list] of Object.entries(drafts.get("echoes", {}))) {
    // A send interrupted by a reload has an unknown outcome: offer a retry with the same identity.
    state.echoes.set(sid, list.map((e) => (e.status === "sending" ? { ...e, status: "unknown", error: "The page closed before Clarify answered. Your message is kept." } : e)));
  }
}

async function sendMessage(sessionId, { retryId = null } = {}) {
  let echo;
  if (retryId) {
    echo = echoesOf(sessionId).find((e) => e.clientMessageId === retryId);
    if (!echo || echo.status === "sending") return;
    // A definite failure (the agent refused the message) is final for its client_message_id: the server
    // replays it to that id. So the retry is a new message; only an unknown outcome reuses the id.
    const id = echo.status === "failed" ? newId() : retryId;
    setEcho(sessionId, retryId, { clientMessageId: id, status: "sending", error: null });
    echo = echoesOf(sessionId).find((e) => e.clientMessageId === id);
  } else {
    const key = `composer:${sessionId}`;
    const content = String(drafts.get(key)).trim();
    if (!content) return;
    echo = { clientMessageId: newId(), content, at: new Date().toISOString(), status: "sending" };
    state.echoes.set(sessionId, [...echoesOf(sessionId), echo]);
    drafts.reset(key);
    persistEchoes();
    render(() => document.getElementById("composer-input")?.focus());
  }
  const result = await api.sendMessage(sessionId, { client_message_id: echo.clientMessageId, content: echo.content });
  const outcome = lateResult({ phase: Phase.LATE_SENDING }, result);
  if (outcome.phase === Phase.LATE_DONE) {
    setEcho(sessionId, echo.clientMessageId, { status: outcome.admission, messageId: outcome.messageId, turnId: result.body?.turn_id ?? null, error: null });
    announce(`Message ${admissionLabel(outcome.admission).toLowerCase()}.`);
  } else {
    const unknown = outcome.phase === Phase.LATE_UNKNOWN;
    setEcho(sessionId, echo.clientMessageId, { status: unknown ? "unknown" : "failed", retryable: unknown || outcome.retryable,
      error: describeFailure(result, "message") });
  }
  scheduleTranscriptRefresh();
}

function editEcho(sessionId, clientMessageId) {
  const echo = echoesOf(sessionId).find((e) => e.clientMessageId === clientMessageId);
  if (!echo) return;
  const key = `composer:${sessionId}`;
  const current = String(drafts.get(key)).trim();
  drafts.reset(key);
  drafts.set(key, current ? `${echo.content}\n${current}` : echo.content);
  state.echoes.set(sessionId, echoesOf(sessionId).filter((e) => e !== echo));
  persistEchoes();
  render(() => document.getElementById("composer-input")?.focus());
}

// ------------------------------------------------------------------ DOM events (delegated)

function pick(cid, questionId, optionId) {
  const draft = answerDraft(cid);
  drafts.set(answerKey(cid), { ...draft, [questionId]: { ...(draft[questionId] ?? {}), selected: [optionId] } });
  render();
}

/** A code block's text to the clipboard. */
function copyCode(button) {
  const text = button.closest(".code")?.querySelector("pre")?.textContent ?? "";
  navigator.clipboard?.writeText(text).then(() => announce("Copied."), () => notify("Could not copy: the browser did not allow it.", "error"));
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

root.addEventListener("click", (e) => {
  // An open menu closes on any click outside it, and once one of its items was chosen.
  for (const menu of document.querySelectorAll("details.menu[open]")) {
    if (!menu.contains(e.target) || e.target.closest(".menu-items button")) menu.open = false;
  }
  const el = e.target.closest("[data-action]");
  if (!el || el.tagName === "FORM" || el.tagName === "INPUT" || el.tagName === "TEXTAREA") return;
  const { action, taskId, sessionId, clarificationId: cid, where, echoId } = el.dataset;
  const sid = state.route.sessionId;
  switch (action) {
    case "skip-link": {
      const target = document.getElementById("composer-input") ?? document.getElementById("main");
      target?.focus();
      break;
    }
    case "activate-task": activate(taskId, where); break;
    case "open-session": go({ taskId, sessionId }); break;
    case "open-sheet": openSheet(); break;
    case "more-tasks": loadMoreTasks(); break;
    case "close-sheet": state.sheet?.controller.close(); break;
    case "skip": startSkip(cid); break;
    case "undo-skip": undoSkip(); break;
    case "skip-now": skip(cid); break;
    case "open-late": state.lateOpen.add(cid); render(() => document.querySelector(`#entry-${CSS.escape(cid)} input`)?.focus()); break;
    case "close-late": state.lateOpen.delete(cid); render(); break;
    case "dismiss": dismiss(cid); break;
    case "discard-draft": discardDraft(cid); break;
    case "retry-late": sendLate(cid, surfaceOf(cid).sessionId ?? sid, { userRetry: true }); break;
    case "retry-echo": sendMessage(sid, { retryId: echoId }); break;
    case "edit-echo": editEcho(sid, echoId); break;
    case "retry-now": retryNow(); break;
    case "retry-transcript": if (sid) loadTranscript(sid); break;
    case "copy-code": copyCode(el); break;
    case "toggle-why": state.whyOpen = !state.whyOpen; render(); break;
    case "rename-task": state.renaming = state.route.taskId; state.confirm = null; render(() => document.getElementById("rename-input")?.select()); break;
    case "cancel-rename": drafts.reset(`rename:${state.route.taskId}`); state.renaming = null; render(); break;
    case "delete-task": state.confirm = { kind: "delete", id: state.route.taskId }; state.renaming = null; render(() => document.querySelector("[data-action=confirm-delete]")?.focus()); break;
    case "confirm-delete": deleteTask(state.confirm?.id); break;
    case "stop": state.confirm = { kind: "stop", id: sid }; render(() => document.querySelector("[data-action=confirm-stop]")?.focus()); break;
    case "confirm-stop": stopSession(state.confirm?.id); break;
    case "cancel-confirm": state.confirm = null; render(); break;
    case "ask-notifications": askNotifications(); break;
    case "push-toggle": import("./push.js").then((p) => p.togglePush(api, announce, render)); break;
    case "sign-out": signOut(); break;
    default: return;
  }
  e.preventDefault();
});

root.addEventListener("change", (e) => {
  const el = e.target;
  if (el.dataset.action === "choose") pick(el.dataset.clarificationId, el.dataset.questionId, el.value);
});

root.addEventListener("input", (e) => {
  const el = e.target;
  const { action, clarificationId: cid, questionId, draft } = el.dataset;
  if (action === "custom") {
    const d = answerDraft(cid);
    drafts.set(answerKey(cid), { ...d, [questionId]: { ...(d[questionId] ?? {}), custom: el.value } });
  } else if (action === "filter") {
    state.filter = el.value;
  } else if (draft) {
    drafts.set(draft, el.value);
  } else return;
  render();
});

root.addEventListener("submit", (e) => {
  const form = e.target;
  e.preventDefault();
  const cid = form.dataset.clarificationId;
  switch (form.dataset.action) {
    case "submit-answers": submitAnswers(cid); break;
    case "send-late": sendLateFromForm(cid); break;
    case "send-message": sendMessage(state.route.sessionId); break;
    case "sign-in": signIn(new FormData(form)); break;
    case "create-task": createTask(form.closest("#task-sheet") ? "sheet" : "desktop"); break;
    case "create-session": createSession(); break;
    case "rename-task": renameTask(state.route.taskId); break;
    default:
  }
});

function shortcut(e) {
  const overlay = document.getElementById("overlay");
  if (/^[1-9]$/.test(e.key) && overlay && !typingIn(e.target) && !e.ctrlKey && !e.metaKey && !e.altKey) {
    // 1-9 pick an option of the question holding focus, else of the first question still without an answer.
    const cid = overlay.dataset.clarificationId;
    const groups = [...overlay.querySelectorAll("fieldset.question")];
    const draft = answerDraft(cid);
    const group = groups.find((g) => g.contains(document.activeElement))
      ?? groups.find((g) => !(draft[g.dataset.questionId]?.selected ?? []).length) ?? groups[0];
    const option = group?.querySelectorAll("input[type=radio]")[Number(e.key) - 1];
    if (!option) return false;
    pick(cid, group.dataset.questionId, option.value);
    // Then on to the next question still without an answer (or to Submit once all have one).
    const chosen = answerDraft(cid);
    const next = groups.find((g) => g !== group && !(chosen[g.dataset.questionId]?.selected ?? []).length);
    render(() => (next ? next.querySelector("input[type=radio]") : document.querySelector("#overlay [type=submit]"))?.focus());
    return true;
  }
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
    const form = e.target.closest?.("form");
    if (overlay && (overlay.contains(e.target) || !form || !typingIn(e.target))) overlay.requestSubmit();
    else if (form) form.requestSubmit();
    return true;
  }
  return false;
}

document.addEventListener("keydown", (e) => {
  if (state.token && shortcut(e)) {
    e.preventDefault();
    return;
  }
  if (e.key === "Escape" && state.sheet) {
    state.sheet.controller.close();
    e.preventDefault();
  } else if (e.key === "Escape" && document.querySelector("details.menu[open]")) {
    const menu = document.querySelector("details.menu[open]");
    menu.open = false;
    menu.querySelector("summary").focus();
  } else if (e.key === "Escape" && (state.confirm || state.renaming)) {
    state.confirm = null;
    state.renaming = null;
    render();
  } else if (e.key === "Tab" && state.sheet) {
    const focusable = [...document.querySelectorAll("#task-sheet button, #task-sheet input")].filter((el) => !el.disabled);
    if (!focusable.length) return;
    const first = focusable[0], last = focusable[focusable.length - 1];
    if (e.shiftKey && document.activeElement === first) { last.focus(); e.preventDefault(); }
    else if (!e.shiftKey && document.activeElement === last) { first.focus(); e.preventDefault(); }
  } else if (e.key === "Enter" && !e.shiftKey && e.target.dataset?.action === "compose") {
    e.preventDefault();
    sendMessage(state.route.sessionId);
  }
});

phoneQuery.addEventListener("change", () => {
  state.layout = phoneQuery.matches ? "phone" : "desktop";
  if (!phoneQuery.matches) unmountSheet(); // a responsive remount drops the sheet's in-flight choice
  render();
});

// ------------------------------------------------------------------ sign in / boot

async function signIn(form) {
  const value = (name) => String(form.get(name) ?? "").trim();
  if (!state.pool) {
    auth.useToken(value("token"));
    return location.reload();
  }
  state.signingIn = true;
  state.signInNotice = null;
  render();
  try {
    const password = form.get("password") ?? "";
    state.challenge = await (state.challenge ? auth.answer(state.challenge, value("code")) : auth.signIn(value("email"), password));
    if (!state.challenge) return location.reload(); // a clean page for this user: nothing in memory from before
  } catch (error) {
    state.signInNotice = `Sign-in failed: ${error.message}`;
  }
  state.signingIn = false;
  render();
}

/** The session ended (its refresh token was refused): sign in again; drafts stay for the same user. */
function expired() {
  eventsAbort?.abort();
  auth.useToken(null);
  state.token = null;
  state.signInNotice = "Your session has ended. Sign in again.";
  render();
}

/** Sign out: nothing this browser kept for the user stays (tokens, drafts, snapshots), nor anything in memory. */
async function signOut() {
  await push((p) => p.stopPush(api))?.catch(() => {});
  eventsAbort?.abort();
  state.token = null; // nothing is kept from here on (the snapshot taken when the page hides included)
  auth.signOut().finally(() => location.reload());
}

function start() {
  render();
  applyRoute(parseRoute(location.hash));
  eventLoop();
}

async function boot() {
  const fromHash = /(?:^#|&)token=([^&]+)/.exec(location.hash); // a development token: the local stage only
  if (fromHash) {
    auth.useToken(decodeURIComponent(fromHash[1]));
    history.replaceState(null, "", location.pathname + location.search + "#/");
  }
  const config = await fetch(`${API_BASE}/auth/config`).then((r) => r.json()).catch(() => null); // offline: as last time
  if (config?.user_pool) auth.configure(config.user_pool);
  state.pool = auth.pool;
  state.email = auth.email;
  state.token = auth.token();
  state.noWorkspace = Boolean(state.token && claims(state.token).token_use === "access" && !workspaceOf(state.token));
  restoreSurfaces();
  restoreEchoes();
  if (state.token && !state.noWorkspace) {
    restoreSnapshot();
    start();
  } else render();
  navigator.serviceWorker?.register("/sw.js").catch(() => {});
  push((p) => p.initPush(() => state.token));
}

boot();
// Exposed for debugging in the browser console only.
window.clarify = { state, activeBundle };
