// Wiring: state, I/O and event handling. Decisions come from the pure modules (selection, merge,
// admission, transcript); views.js renders; morphdom patches the page in place.

import morphdom from "./morphdom.js";
import { createApi, newId } from "./api.js";
import {
  Phase, admissionLabel, beginLate, beginRespond, buildAnswers, canSendLate, composeLate, initialSurface, isBusy,
  lateMessageBody, lateResult, respondResult, unansweredQuestions,
} from "./admission.js";
import { applyEvent, createEventDeduper, mergeSessionList, mergeTaskSnapshot } from "./merge.js";
import { createDesktopActivator, createTaskSessionLoader, createTaskSheetController } from "./selection.js";
import { activeBundle, pendingQuestions } from "./transcript.js";
import { renderApp } from "./views.js";

const PHONE_QUERY = "(max-width: 767px)";
const EVENT_WAIT_SECONDS = 10;
const TOKEN_KEY = "clarify.token";
const SURFACES_KEY = "clarify.surfaces";
const rememberKey = (taskId) => `clarify.remembered.${taskId}`;
const phoneQuery = window.matchMedia(PHONE_QUERY);

const state = {
  token: null,
  layout: phoneQuery.matches ? "phone" : "desktop",
  online: true,
  notice: null,
  tasks: new Map(),
  order: [],
  tasksLoaded: false,
  sessions: new Map(), // taskId -> sessions, newest first
  route: { taskId: null, sessionId: null },
  taskNotice: null,
  session: null,
  transcript: null, // {sessionId, current_turn_id, messages}
  transcriptError: null,
  surfaces: new Map(), // clarificationId -> admission surface
  drafts: new Map(), // clarificationId -> {questionId: {selected, custom}}
  lateOpen: new Set(),
  lateNotes: new Map(),
  composer: { text: "", phase: null, status: "", error: false, retryable: false, clientMessageId: null, sentText: null },
  sheet: null, // {id, controller}
  activating: null,
};

const api = createApi({ getToken: () => state.token, onUnauthorized: () => signOut("The token was refused. Sign in again.") });

// ------------------------------------------------------------------ rendering

const root = document.getElementById("app");
let renderQueued = false;
let afterRender = [];

function render(then) {
  if (then) afterRender.push(then);
  if (renderQueued) return;
  renderQueued = true;
  queueMicrotask(() => {
    renderQueued = false;
    const log = document.getElementById("transcript");
    const pinned = !log || log.scrollHeight - log.scrollTop - log.clientHeight < 48;
    const shown = log?.dataset.session;
    morphdom(root, renderApp(state));
    const next = document.getElementById("transcript");
    // Follow new messages while the reader is at the bottom (and on opening a session); never yank them back.
    if (next && (pinned || next.dataset.session !== shown)) next.scrollTop = next.scrollHeight;
    const pending = afterRender;
    afterRender = [];
    for (const fn of pending) fn();
  });
}

// ------------------------------------------------------------------ tasks and sessions

let tasksGeneration = 0;
async function loadTasks() {
  const generation = ++tasksGeneration;
  try {
    const body = await api.listTasks();
    if (generation !== tasksGeneration) return; // an older snapshot never replaces a newer one
    const merged = mergeTaskSnapshot(state.tasks, body.tasks ?? []);
    state.tasks = merged.tasks;
    state.order = merged.order;
    state.tasksLoaded = true;
    render();
  } catch (error) {
    if (error?.name !== "AbortError") state.notice = "Tasks could not be loaded.";
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
      render(() => document.getElementById("open-sheet")?.focus());
    },
  });
  state.sheet = { id, controller };
  render(() => document.querySelector("#task-sheet .task-row, #task-sheet input")?.focus());
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
  if (route.sessionId !== previous.sessionId) {
    // Release the outgoing session's layout: its transcript, overlay and composer.
    state.transcript = null;
    state.transcriptError = null;
    state.session = null;
    state.composer = { text: "", phase: null, status: "", error: false, retryable: false, clientMessageId: null, sentText: null };
  }
  if (route.taskId && route.sessionId) {
    localStorage.setItem(rememberKey(route.taskId), route.sessionId);
    loadTranscript(route.sessionId);
  }
  if (route.taskId && route.taskId !== previous.taskId) refreshSessions(route.taskId);
  else if (route.taskId && !route.sessionId) refreshSessions(route.taskId);
  render();
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

async function loadTranscript(sessionId) {
  const generation = ++transcriptGeneration;
  try {
    const [body, session] = await Promise.all([api.transcript(sessionId), api.getSession(sessionId).catch(() => null)]);
    if (generation !== transcriptGeneration || state.route.sessionId !== sessionId) return;
    state.transcript = { sessionId, ...body };
    if (session) state.session = session;
    state.transcriptError = null;
    render();
  } catch (error) {
    if (generation !== transcriptGeneration) return;
    state.transcriptError = error?.result?.status === 404 ? "This session does not exist." : "The transcript could not be loaded.";
    render();
  }
}

function scheduleTranscriptRefresh() {
  clearTimeout(transcriptTimer);
  transcriptTimer = setTimeout(() => state.route.sessionId && loadTranscript(state.route.sessionId), 60);
}

// ------------------------------------------------------------------ events

const deduper = createEventDeduper();
let eventsAbort = null;
let tasksTimer = null;

async function eventLoop() {
  eventsAbort?.abort();
  const abort = (eventsAbort = new AbortController());
  let cursor = null;
  let wait = 0;
  let backoff = 500;
  while (!abort.signal.aborted) {
    try {
      const page = await api.events(cursor, wait, abort.signal);
      cursor = page.cursor ?? cursor;
      wait = page.events?.length ? 0 : EVENT_WAIT_SECONDS;
      backoff = 500;
      if (!state.online) {
        state.online = true;
        loadTasks(); // catch up on anything missed while offline
        if (state.route.sessionId) scheduleTranscriptRefresh();
      }
      handleEvents(page.events ?? []);
    } catch (error) {
      if (abort.signal.aborted) return;
      state.online = false;
      render();
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 8000);
    }
  }
}

function handleEvents(events) {
  let changed = false;
  for (const event of events) {
    if (!deduper.admit(event.id)) continue;
    const { caches, effects } = applyEvent({ tasks: state.tasks, order: state.order, sessions: state.sessions }, event);
    if (caches.tasks !== state.tasks || caches.sessions !== state.sessions) changed = true;
    state.tasks = caches.tasks;
    state.sessions = caches.sessions;
    if (effects.refreshTasks) {
      clearTimeout(tasksTimer);
      tasksTimer = setTimeout(loadTasks, 50);
    }
    if (effects.refreshSession && effects.refreshSession === state.route.sessionId) scheduleTranscriptRefresh();
  }
  if (changed) render();
}

// ------------------------------------------------------------------ answering

const surfaceOf = (cid) => state.surfaces.get(cid) ?? initialSurface(cid);

function setSurface(surface) {
  state.surfaces = new Map(state.surfaces).set(surface.clarificationId, surface);
  persistSurfaces();
  render();
}

function findEntry(cid) {
  return state.transcript?.messages.find((m) => m.clarification_id === cid) ?? null;
}

async function submitAnswers(cid) {
  const entry = findEntry(cid);
  const current = surfaceOf(cid);
  if (!entry || isBusy(current)) return; // answering all questions submits once
  const answers = buildAnswers(pendingQuestions(entry), state.drafts.get(cid));
  let surface = beginRespond(current, { answers }, newId);
  setSurface(surface);
  const result = await api.respond(cid, { answers }, surface.idempotencyKey);
  surface = respondResult(surfaceOf(cid), result, newId);
  setSurface(surface);
  if (surface.phase === Phase.LATE_READY) {
    // A recognised inactive result: the kept answers continue as an ordinary message to the same session.
    await sendLate(cid, entry.session_id ?? state.route.sessionId);
  }
  scheduleTranscriptRefresh();
}

async function skip(cid) {
  const current = surfaceOf(cid);
  if (isBusy(current)) return;
  let surface = beginRespond(current, { rejected: true }, newId);
  setSurface(surface);
  const result = await api.respond(cid, { rejected: true }, surface.idempotencyKey);
  surface = respondResult(surfaceOf(cid), result, newId);
  setSurface(surface);
  scheduleTranscriptRefresh();
}

async function sendLate(cid, sessionId, { userRetry = false } = {}) {
  let surface = surfaceOf(cid);
  if (!canSendLate(surface, { userRetry })) return;
  surface = beginLate(surface);
  setSurface({ ...surface, sessionId });
  const result = await api.sendMessage(sessionId, lateMessageBody(surface));
  setSurface({ ...lateResult(surfaceOf(cid), result), sessionId });
  if (surfaceOf(cid).phase === Phase.LATE_DONE) state.lateOpen.delete(cid);
  scheduleTranscriptRefresh();
}

async function sendLateFromForm(cid) {
  const entry = findEntry(cid);
  if (!entry || isBusy(surfaceOf(cid))) return;
  const answers = buildAnswers(unansweredQuestions(entry), state.drafts.get(cid));
  setSurface(composeLate(surfaceOf(cid), answers, newId, (state.lateNotes.get(cid) ?? "").trim()));
  await sendLate(cid, entry.session_id ?? state.route.sessionId);
}

async function dismiss(cid) {
  const result = await api.dismiss(cid);
  if (result.kind === "response" && result.ok) {
    state.lateOpen.delete(cid);
    setSurface({ ...surfaceOf(cid), phase: Phase.DISMISSED, error: null });
  } else {
    state.notice = "The question could not be dismissed.";
  }
  scheduleTranscriptRefresh();
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

// ------------------------------------------------------------------ ordinary messages

async function sendMessage({ retry = false } = {}) {
  const sessionId = state.route.sessionId;
  const c = state.composer;
  if (!sessionId || c.phase === Phase.LATE_SENDING) return;
  if (!retry) {
    if (!c.text.trim()) return;
    c.clientMessageId = newId();
    c.sentText = c.text.trim();
  }
  Object.assign(c, { phase: Phase.LATE_SENDING, status: "Sending…", error: false, retryable: false });
  render();
  const result = await api.sendMessage(sessionId, { client_message_id: c.clientMessageId, content: c.sentText });
  const outcome = lateResult({ phase: Phase.LATE_SENDING }, result);
  if (state.composer !== c) return;
  if (outcome.phase === Phase.LATE_DONE) {
    Object.assign(c, { text: c.text.trim() === c.sentText ? "" : c.text, phase: null, error: false, retryable: false,
      status: `Message ${admissionLabel(outcome.admission).toLowerCase()}.` });
  } else {
    Object.assign(c, { phase: null, error: true, retryable: outcome.phase === Phase.LATE_UNKNOWN || outcome.retryable,
      status: outcome.error });
  }
  render();
  scheduleTranscriptRefresh();
}

// ------------------------------------------------------------------ DOM events (delegated)

function draftFor(cid) {
  const draft = { ...(state.drafts.get(cid) ?? {}) };
  state.drafts = new Map(state.drafts).set(cid, draft);
  return draft;
}

root.addEventListener("click", (e) => {
  const el = e.target.closest("[data-action]");
  if (!el || el.tagName === "FORM" || el.tagName === "INPUT" || el.tagName === "TEXTAREA") return;
  const { action, taskId, sessionId, clarificationId: cid, where } = el.dataset;
  switch (action) {
    case "activate-task": activate(taskId, where); break;
    case "open-session": go({ taskId, sessionId }); break;
    case "open-sheet": openSheet(); break;
    case "close-sheet": state.sheet?.controller.close(); break;
    case "skip": skip(cid); break;
    case "open-late": state.lateOpen.add(cid); render(() => document.querySelector(`#entry-${CSS.escape(cid)} input`)?.focus()); break;
    case "close-late": state.lateOpen.delete(cid); render(); break;
    case "dismiss": dismiss(cid); break;
    case "retry-late": sendLate(cid, surfaceOf(cid).sessionId ?? state.route.sessionId, { userRetry: true }); break;
    case "retry-message": sendMessage({ retry: true }); break;
    case "sign-out": signOut(); break;
    default: return;
  }
  e.preventDefault();
});

root.addEventListener("change", (e) => {
  const el = e.target;
  if (el.dataset.action !== "choose") return;
  const draft = draftFor(el.dataset.clarificationId);
  draft[el.dataset.questionId] = { ...(draft[el.dataset.questionId] ?? {}), selected: [el.value] };
  render();
});

root.addEventListener("input", (e) => {
  const el = e.target;
  const { action, clarificationId: cid, questionId } = el.dataset;
  if (action === "custom") {
    const draft = draftFor(cid);
    draft[questionId] = { ...(draft[questionId] ?? {}), custom: el.value };
  } else if (action === "late-note") {
    state.lateNotes.set(cid, el.value);
  } else if (action === "compose") {
    state.composer.text = el.value;
  } else return;
  render();
});

root.addEventListener("submit", async (e) => {
  const form = e.target;
  e.preventDefault();
  const cid = form.dataset.clarificationId;
  switch (form.dataset.action) {
    case "submit-answers": submitAnswers(cid); break;
    case "send-late": sendLateFromForm(cid); break;
    case "send-message": sendMessage(); break;
    case "save-token": signIn(new FormData(form).get("token")); break;
    case "create-task": {
      const title = String(new FormData(form).get("title") ?? "").trim();
      if (!title) return;
      form.reset();
      const result = await api.createTask(title);
      if (result.ok) {
        await loadTasks();
        const where = form.closest("#task-sheet") ? "sheet" : "desktop";
        activate(result.body.id, where);
      }
      break;
    }
    case "create-session": {
      const prompt = String(new FormData(form).get("prompt") ?? "").trim();
      const taskId = state.route.taskId;
      const result = await api.createSession(taskId, prompt);
      if (result.ok) go({ taskId, sessionId: result.body.id });
      break;
    }
    default:
  }
});

root.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && state.sheet) {
    state.sheet.controller.close();
    e.preventDefault();
  } else if (e.key === "Tab" && state.sheet) {
    const focusable = [...document.querySelectorAll("#task-sheet button, #task-sheet input")].filter((el) => !el.disabled);
    if (!focusable.length) return;
    const first = focusable[0], last = focusable[focusable.length - 1];
    if (e.shiftKey && document.activeElement === first) { last.focus(); e.preventDefault(); }
    else if (!e.shiftKey && document.activeElement === last) { first.focus(); e.preventDefault(); }
  } else if (e.key === "Enter" && !e.shiftKey && e.target.dataset.action === "compose") {
    e.preventDefault();
    sendMessage();
  }
});

phoneQuery.addEventListener("change", () => {
  state.layout = phoneQuery.matches ? "phone" : "desktop";
  if (!phoneQuery.matches) unmountSheet(); // a responsive remount drops the sheet's in-flight choice
  render();
});

// ------------------------------------------------------------------ sign in / boot

function signIn(token) {
  const value = String(token ?? "").trim();
  if (!value) return;
  state.token = value;
  state.notice = null;
  localStorage.setItem(TOKEN_KEY, value);
  start();
}

function signOut(notice = null) {
  eventsAbort?.abort();
  localStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.notice = notice;
  render();
}

function start() {
  render();
  loadTasks();
  eventLoop();
  applyRoute(parseRoute(location.hash));
}

function boot() {
  const fromHash = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (fromHash) {
    localStorage.setItem(TOKEN_KEY, decodeURIComponent(fromHash[1]));
    history.replaceState(null, "", location.pathname + location.search + "#/");
  }
  state.token = localStorage.getItem(TOKEN_KEY);
  restoreSurfaces();
  if (state.token) start();
  else render();
}

boot();
// Exposed for debugging in the browser console only.
window.clarify = { state, activeBundle };
