// Rendering: state in, a DOM tree out. No decisions live here; controls carry data-action attributes that
// app.js handles by delegation, so the tree can be rebuilt and morphed in place freely. Text fields carry
// data-field (their identity) so a re-render never replaces what is being typed.

import { Phase, admissionLabel, answersComplete, isBusy, unansweredQuestions } from "./admission.js";
import { answerDraftHasContent } from "./drafts.js";
import { echoStatusText, withEchoes } from "./echo.js";
import { parseMarkdown } from "./markdown.js";
import { orderTasks } from "./merge.js";
import { showsQuestionIcon } from "./selection.js";
import { clarificationStateWords, replyInsteadNote, sessionStateWords, sessionStatus } from "./status.js";
import { activeBundle, entryStatusText, freshMessages, offersLateAnswer, pendingQuestions, responseText, sessionLabel } from "./transcript.js";

// ------------------------------------------------------------------ tiny DOM helpers

/** h("tag.class#id", {attrs}, ...children). Boolean false/null attributes are omitted. */
export function h(spec, attrs = {}, ...children) {
  const [, tag = "div", rest = ""] = /^([a-z0-9]+)?(.*)$/i.exec(spec);
  const el = document.createElement(tag);
  for (const part of rest.match(/[.#][^.#]+/g) ?? []) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === false || value == null) continue;
    if (name === "value" && (tag === "textarea" || tag === "input")) el.value = value;
    else if (name === "class") {
      for (const c of String(value).split(/\s+/).filter(Boolean)) el.classList.add(c);
    } else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function svg(markup) {
  const t = document.createElement("template");
  t.innerHTML = markup.trim();
  return t.content.firstChild;
}

export const questionIcon = (label = "Question pending") =>
  svg(`<svg class="q-icon" viewBox="0 0 24 24" width="20" height="20" role="img" aria-label="${label}">
    <title>${label}</title>
    <path fill="currentColor" d="M4 3h16a2 2 0 0 1 2 2v11a2 2 0 0 1-2 2h-7l-5 4v-4H4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2z"/>
    <text x="12" y="14.5" text-anchor="middle" font-size="11" font-weight="700" fill="#fff">?</text></svg>`);

/**
 * A stable place for something that comes and goes. morphdom matches children by position: a node appearing
 * before a text field would otherwise make it re-create or move the field (losing the caret, or focus).
 * The wrapper has `display: contents`, so layout is as if it were not there.
 */
const slot = (...content) => h("div.slot", {}, ...content);

/** A text field bound to a draft: its value comes from the draft, its identity from the draft's generation. */
function field(state, tag, key, attrs = {}) {
  return h(tag, { ...attrs, value: state.drafts.get(key, attrs.value ?? ""), "data-draft": key, "data-field": state.drafts.field(key) });
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const dayFormat = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short" });

/** A <time> for an ISO moment: the time of day, with the date when it is not today. */
function when(iso, cls = "when") {
  if (!iso) return null;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return null;
  const today = new Date().toDateString() === d.toDateString();
  return h(`time.${cls}`, { datetime: iso, title: d.toLocaleString() }, today ? timeFormat.format(d) : `${dayFormat.format(d)}, ${timeFormat.format(d)}`);
}

// ------------------------------------------------------------------ markdown (plain nodes -> elements; never HTML)

function md(nodes) {
  return nodes.map((n) => {
    switch (n.type) {
      case "text": return n.text;
      case "br": return h("br");
      case "code": return h("code", {}, n.text);
      case "pre": return h("div.code", {},
        h("div.code-bar", {}, h("span", {}, n.lang || "code"), h("button.copy", { type: "button", "data-action": "copy-code", "aria-label": "Copy code" }, "Copy")),
        h("pre", { "data-lang": n.lang || false }, h("code", {}, n.text)));
      case "a": return h("a", { href: n.href, target: "_blank", rel: "noopener noreferrer nofollow" }, md(n.children));
      case "strong": return h("strong", {}, md(n.children));
      case "em": return h("em", {}, md(n.children));
      case "heading": return h("p.md-h", {}, h("strong", {}, md(n.children)));
      case "quote": return h("blockquote", {}, md(n.children));
      case "ul": case "ol": return h(n.type, {}, n.items.map((li) => h("li", {}, md(li.children))));
      default: return h("p", {}, md(n.children ?? []));
    }
  });
}

// ------------------------------------------------------------------ the app frame

export function renderApp(state) {
  if (!state.token || state.noWorkspace) return h("div.app.signin#app", {}, renderSignIn(state));
  const phone = state.layout === "phone";
  return h(`div.app.${state.layout}#app`, {},
    h("a.skip-link", { href: "#main", "data-action": "skip-link" }, "Skip to the conversation"),
    renderTopbar(state),
    renderBanner(state),
    phone ? null : h("aside.sidebar#sidebar", { "aria-label": "Tasks" }, renderTaskPanel(state, "desktop")),
    h("main.chat#main", { tabindex: "-1" }, renderMain(state)),
    slot(phone && state.sheet ? renderSheet(state) : null),
    h("div.toasts#toasts", { role: "status", "aria-live": "polite" },
      state.notices.map((n) => h(`p.toast.${n.tone}`, { id: `notice-${n.id}` }, n.text))));
}

// Email and password at the user pool, then its challenge if any (a new password, an authenticator code); without
// a pool (a local stack without one) a development token is pasted instead.
function renderSignIn(state) {
  const field = (name, label, attrs) => [h("label", { for: `${name}-input` }, label),
    h(`input#${name}-input`, { name, required: true, autocomplete: "off", ...attrs })];
  const newPassword = state.challenge?.challenge === "NEW_PASSWORD_REQUIRED";
  let fields = field("token", "User token", { type: "password" });
  if (state.pool && state.challenge) {
    fields = field("code", newPassword ? "Choose a new password" : "Code from your authenticator app",
      newPassword ? { type: "password", autocomplete: "new-password" } : { inputmode: "numeric", autocomplete: "one-time-code" });
  } else if (state.pool) {
    fields = [field("email", "Email", { type: "email", autocomplete: "username" }),
      field("password", "Password", { type: "password", autocomplete: "current-password" })];
  }
  return h("main.signin-main", {}, h("form.token-form", { "data-action": "sign-in", "aria-labelledby": "token-title" },
    h("h1#token-title", {}, "Clarify"),
    state.noWorkspace
      ? [h("p#no-workspace", { role: "alert" }, `You are signed in as ${state.email}, but your account is not in a workspace yet. `
          + "Ask whoever runs Clarify to add you to one, then sign in again."),
        h("button.primary", { type: "button", "data-action": "sign-out" }, "Sign out")]
      : [fields, h("button.primary", { type: "submit", disabled: state.signingIn }, state.signingIn ? "Signing in…" : "Sign in")],
    state.signInNotice ? h("p.error", { role: "alert" }, state.signInNotice) : null));
}

// Tasks showing a pending question: the phone's badge and the tab title, "(2) Clarify".
const pendingTasks = (state) => [...state.tasks.values()].filter(showsQuestionIcon).length;

export function pageTitle(state) {
  const n = pendingTasks(state);
  return n ? `(${n}) Clarify` : "Clarify";
}

function renderTopbar(state) {
  const phone = state.layout === "phone";
  const pendingCount = pendingTasks(state);
  const notifyAsk = "Notification" in window && Notification.permission === "default";
  const pushOn = localStorage.getItem("clarify.push.device");
  return h("header.topbar#topbar", {},
    phone
      ? h("button.tasks-button#open-sheet", { type: "button", "data-action": "open-sheet", "aria-haspopup": "dialog",
          "aria-expanded": state.sheet ? "true" : "false",
          "aria-label": pendingCount ? `Tasks, ${pendingCount} with a pending question` : "Tasks" },
        "Tasks", pendingCount ? h("span.badge", { "aria-hidden": "true" }, String(pendingCount)) : null)
      : null,
    h("span.brand", {}, "Clarify"),
    h("span.conn", { class: state.online ? "ok" : "off" }, state.online ? "" : "Reconnecting…"),
    "PushManager" in window ? h("button.link", { type: "button", "data-action": "push-toggle", "aria-pressed": String(!!pushOn) },
      phone ? "Alerts" : pushOn ? "Stop notifying here" : "Notify me on this device")
      : notifyAsk ? h("button.link", { type: "button", "data-action": "ask-notifications" }, phone ? "Alerts" : "Notify me of questions") : null,
    h("button.link", { type: "button", "data-action": "sign-out" }, "Sign out"));
}

/** The outage, in words. In a conversation it takes the status line's place (a status read before the outage
 * is no longer known); elsewhere it sits under the top bar. */
const offline = () => h("div.banner.off#banner", { role: "alert" },
  h("span", {}, "Clarify can't be reached — retrying. What you type is kept."),
  h("button.small", { type: "button", "data-action": "retry-now" }, "Retry now"));

function renderBanner(state) {
  if (!state.online) return state.route.sessionId ? h("div.banner-slot", { hidden: true }) : offline();
  if (state.snapshotAt) {
    return h("div.banner.info#banner", { role: "status" }, "Showing what you saw ", when(state.snapshotAt), " — connecting…");
  }
  return h("div.banner-slot#banner", { hidden: true });
}

// ------------------------------------------------------------------ task list (sidebar and phone sheet)

export function renderTaskPanel(state, where) {
  const ids = orderTasks(state.tasks, { filter: state.filter, pending: showsQuestionIcon });
  const empty = state.tasksError
    ? h("div.list-error", { role: "alert" }, h("p", {}, `Tasks could not be loaded. ${state.tasksError}`),
      h("button", { type: "button", "data-action": "retry-now" }, "Retry"))
    : h("p.muted", {}, !state.tasksLoaded ? "Loading tasks…" : state.filter.trim() ? "No task matches." : "No tasks yet.");
  return h(`div.task-panel#task-panel-${where}`, {},
    h("h2", { id: `tasks-heading-${where}` }, "Tasks"),
    // At the top, like "New chat": a title, then Enter or the button.
    h("form.new-task", { "data-action": "create-task" },
      h("label.visually-hidden", { for: `new-task-${where}` }, "New task"),
      h("div.row", {},
        field(state, "input", "new-task", { id: `new-task-${where}`, name: "title", placeholder: "New task title", autocomplete: "off", type: "text" }),
        h("button.primary", { type: "submit", disabled: state.creating }, state.creating ? "Adding…" : "New task"))),
    h("div.search", {},
      h("label.visually-hidden", { for: `task-search-${where}` }, "Search tasks"),
      h("input", { id: `task-search-${where}`, type: "search", placeholder: "Search tasks", autocomplete: "off", value: state.filter,
        "data-action": "filter", "data-field": "filter" })),
    slot(ids.length
      ? h("ul.task-list", { "aria-labelledby": `tasks-heading-${where}` }, ids.map((id) => renderTaskRow(state, state.tasks.get(id), where)))
      : empty),
    // More pages as the list scrolls; while searching, on request (a search reads only what it needs).
    slot(!state.tasksCursor ? null : state.filter.trim()
      ? h("button.link.more", { type: "button", "data-action": "more-tasks" }, "Search older tasks")
      : h("p.more", { id: `more-tasks-${where}`, "data-more": "tasks" }, "Loading more tasks…")));
}

function renderTaskRow(state, task, where) {
  const pending = showsQuestionIcon(task);
  const active = state.route.taskId === task.id;
  const busy = state.activating === task.id;
  return h("li", { id: `task-${where}-${task.id}` },
    h("button.task-row", {
      type: "button", "data-action": "activate-task", "data-task-id": task.id, "data-where": where,
      "aria-current": active ? "true" : false, "aria-busy": busy ? "true" : false,
      "aria-label": `${task.title}${pending ? ", question pending" : ""}`,
      "data-pending": pending ? "true" : "false", "data-revision": String(task.status_summary?.revision ?? ""),
    },
    h("span.task-title", {}, task.title),
    when(task.last_activity_at ?? task.created_at, "task-when"),
    pending ? questionIcon() : null));
}

function renderSheet(state) {
  return h("div.sheet-layer#sheet-layer", {},
    h("div.sheet-backdrop", { "data-action": "close-sheet", "aria-hidden": "true" }),
    h("section.sheet#task-sheet", { role: "dialog", "aria-modal": "true", "aria-labelledby": "tasks-heading-sheet", tabindex: "-1",
      "data-sheet": String(state.sheet.id) },
    h("div.sheet-handle", { "aria-hidden": "true" }),
    h("button.sheet-close.link", { type: "button", "data-action": "close-sheet" }, "Close"),
    renderTaskPanel(state, "sheet")));
}

// ------------------------------------------------------------------ main area

function renderMain(state) {
  const { taskId, sessionId } = state.route;
  if (!taskId) {
    return h("div.empty#empty", {},
      h("h1.empty-title", {}, "Choose a task"),
      h("p", {}, state.layout === "phone" ? "Open Tasks to choose or create one." : "Choose a task from the list, or create one."),
      state.layout === "phone" ? h("button.primary", { type: "button", "data-action": "open-sheet" }, "Show tasks") : null);
  }
  return sessionId ? renderSessionRoute(state) : renderTaskRoute(state);
}

function renderTaskHead(state) {
  return slot(renderTaskHeadContent(state));
}

function renderTaskHeadContent(state) {
  const task = state.tasks.get(state.route.taskId);
  const title = task ? task.title : "Task";
  if (state.renaming === state.route.taskId && task) {
    return h("form.task-head.renaming", { "data-action": "rename-task", "aria-label": "Rename the task" },
      h("label.visually-hidden", { for: "rename-input" }, "Task title"),
      field(state, "input", `rename:${task.id}`, { id: "rename-input", type: "text", value: task.title, autocomplete: "off" }),
      h("button.primary", { type: "submit" }, "Save"),
      h("button", { type: "button", "data-action": "cancel-rename" }, "Cancel"));
  }
  const confirming = state.confirm?.kind === "delete" && state.confirm.id === state.route.taskId;
  return h("div.task-head", {},
    h("h1.task-name#task-name", { title }, title),
    slot(task ? h("details.menu#task-menu", {},
      h("summary.menu-button", { "aria-label": "Task actions", title: "Task actions" }, "⋯"),
      h("div.menu-items", {},
        h("button", { type: "button", "data-action": "rename-task", "aria-label": `Rename “${title}”` }, "Rename"),
        h("button.danger-text", { type: "button", "data-action": "delete-task", "aria-label": `Delete “${title}”` }, "Delete"))) : null),
    slot(confirming ? h("div.confirm", { role: "alertdialog", "aria-labelledby": "confirm-delete-text" },
      h("p#confirm-delete-text", {}, `Delete “${title}”? Its running sessions are stopped. This cannot be undone.`),
      h("button.danger", { type: "button", "data-action": "confirm-delete" }, "Delete task"),
      h("button", { type: "button", "data-action": "cancel-confirm" }, "Cancel")) : null));
}

const TASK_NOTICES = {
  changed: "This task's pending question changed while its sessions were loading. Choose a session.",
  "no-owner": "This task shows a pending question, but no session that can take input owns it. Choose a session.",
  "load-failed": "The task's sessions could not be loaded. Choose a session or try again.",
  "no-sessions": "This task has no sessions yet.",
};

function renderTaskRoute(state) {
  const taskId = state.route.taskId;
  const sessions = state.sessions.get(taskId) ?? [];
  const notice = state.taskNotice ? TASK_NOTICES[state.taskNotice] : null;
  return h("section.task-route#task-route", { "aria-labelledby": "task-name" },
    renderTaskHead(state),
    slot(notice ? h("p.notice", { role: "status" }, notice) : null),
    slot(sessions.length
      ? h("ul.session-list", { "aria-label": "Sessions" }, sessions.map((s, i) =>
        h("li", { id: `session-item-${s.id}` },
          h("button.session-row", { type: "button", "data-action": "open-session", "data-task-id": s.task_id ?? taskId,
            "data-session-id": s.id },
          h("span", {}, sessionLabel(s, sessions.length - i)),
          h("span.state", {}, sessionStateWords(s.state)),
          s.pending_action ? questionIcon("Question pending in this session") : null))))
      : null),
    h("form.new-session", { "data-action": "create-session" },
      h("label", { for: "new-session-prompt" }, "Start a session with a prompt"),
      h("div.row", {},
        field(state, "input", `new-session:${taskId}`, { id: "new-session-prompt", name: "prompt", type: "text", autocomplete: "off",
          placeholder: "What should the agent do?" }),
        h("button.primary", { type: "submit" }, "Start"))));
}

function renderSessionRoute(state) {
  const { taskId, sessionId } = state.route;
  const sessions = state.sessions.get(taskId) ?? [];
  const session = sessions.find((s) => s.id === sessionId) ?? (state.session?.id === sessionId ? state.session : null);
  const transcript = state.transcript?.sessionId === sessionId ? state.transcript : null;
  const bundle = transcript ? activeBundle(transcript.messages, transcript.pending_clarifications) : null;
  const surface = bundle ? state.surfaces.get(bundle.clarification_id) : null;
  const showOverlay = bundle && (!surface || [Phase.EDITING, Phase.RESPONDING, Phase.RESPOND_FAILED, Phase.RESPOND_UNKNOWN].includes(surface.phase));
  const messages = transcript ? withEchoes(freshMessages(transcript.messages, transcript.pending_clarifications), state.echoes.get(sessionId)) : [];
  return h("section.session-route#session-route", { "aria-labelledby": "task-name", "data-session-id": sessionId,
    class: showOverlay ? "asking" : false },
    renderTaskHead(state),
    slot(sessions.length > 1
      ? h("nav.session-tabs", { "aria-label": "Sessions of this task" }, sessions.map((s, i) =>
        h("button.session-tab", { type: "button", "data-action": "open-session", "data-task-id": taskId, "data-session-id": s.id,
          "aria-current": s.id === sessionId ? "true" : false, id: `tab-${s.id}` },
        sessionLabel(s, sessions.length - i), s.pending_action ? questionIcon("Question pending in this session") : null)))
      : null),
    slot(state.online ? renderStatusLine(state, session, showOverlay ? bundle : null) : offline()),
    slot(transcript
      ? h("ol.transcript#transcript", { "aria-label": "Conversation", "data-session": sessionId, tabindex: "0" },
        transcript.older_cursor ? h("li.more#older-messages", { "data-more": "older" }, "Loading earlier messages…") : null,
        messages.map((m) => renderMessage(state, m, showOverlay ? bundle.clarification_id : null)),
        !showOverlay && state.online && sessionStatus(session)?.tone === "working"
          ? h("li.agent-working#working", { "aria-hidden": "true" }, h("span.dots", {}, h("i"), h("i"), h("i")), "Working…") : null)
      : state.transcriptError
        ? h("div.load-error", { role: "alert" }, h("p", {}, `The conversation could not be loaded. ${state.transcriptError}`),
          h("button", { type: "button", "data-action": "retry-transcript" }, "Retry"))
        : h("p.muted.loading", {}, "Loading the conversation…")),
    slot(showOverlay ? renderOverlay(state, bundle, surface) : null),
    renderComposer(state, session, showOverlay ? bundle : null));
}

function renderStatusLine(state, session, bundle) {
  const status = sessionStatus(session, bundle);
  if (!status) return null;
  const confirming = state.confirm?.kind === "stop" && state.confirm.id === session.id;
  return h(`div.status-line.${status.tone}#status-line`, {},
    h("span.dot", { "aria-hidden": "true" }),
    h("span.status-text", { role: "status" }, status.text),
    slot(confirming
      ? h("span.confirm", { role: "group", "aria-label": "Stop the agent?" },
        h("span", {}, "Stop the agent? This ends the session."),
        h("button.danger.small", { type: "button", "data-action": "confirm-stop" }, "Stop session"),
        h("button.small", { type: "button", "data-action": "cancel-confirm" }, "Keep going"))
      : status.canStop ? h("button.small.stop", { type: "button", "data-action": "stop", "aria-label": "Stop the agent" }, "Stop") : null));
}

function renderMessage(state, m, overlayCid) {
  if (m.type === "clarification") return renderClarificationEntry(state, m, overlayCid);
  if (m.type === "echo") return renderEcho(m);
  const user = m.author_type === "user";
  const thinking = m.type === "thinking";
  return h(`li.msg.${user ? "user" : "agent"}${thinking ? ".thinking" : ""}`, { id: `msg-${m.id}` },
    h("div.meta", {}, h("span.who", {}, thinking ? "Agent (thinking)" : user ? "You" : "Agent"), when(m.created_at)),
    h("div.body", {}, thinking ? m.content ?? "" : md(parseMarkdown(m.content ?? ""))),
    m.queued ? h("p.echo-status", {}, echoStatusText({ status: "queued" })) : null,
    m.not_sent ? h("p.echo-status.not-sent", {}, NOT_SENT[m.not_sent] ?? "Not sent") : null,
    m.delivery_unknown ? h("p.echo-status.not-sent", {}, "May not have reached the agent: the connection broke while sending. Send it again if the agent did not act on it") : null);
}

const NOT_SENT = {
  session_ended: "Not sent: the session ended before the agent took it",
  agent_refused: "Not sent: the agent did not accept it. Send it again",
};

function renderEcho(echo) {
  const failed = echo.status === "failed" || echo.status === "unknown";
  return h(`li.msg.user.echo${failed ? ".failed" : ""}`, { id: echo.id, "data-echo-status": echo.status },
    h("div.meta", {}, h("span.who", {}, "You"), when(echo.at)),
    h("div.body", {}, md(parseMarkdown(echo.content))),
    h("p.echo-status", { role: failed ? "alert" : false }, echoStatusText(echo), failed && echo.error ? `: ${echo.error}` : ""),
    failed ? h("div.actions", {},
      echo.retryable !== false ? h("button.small", { type: "button", "data-action": "retry-echo", "data-echo-id": echo.clientMessageId }, "Retry") : null,
      h("button.small", { type: "button", "data-action": "edit-echo", "data-echo-id": echo.clientMessageId }, "Edit")) : null);
}

function renderClarificationEntry(state, entry, overlayCid) {
  const cid = entry.clarification_id;
  const surface = state.surfaces.get(cid);
  const attrs = { id: `entry-${cid}`, "data-clarification-id": cid, "data-state": entry.state };
  if (cid === overlayCid) {
    // Each question is shown once: while the answer panel is open, its card here is a one-line pointer.
    const n = pendingQuestions(entry).length;
    return h("li.clar.active.collapsed", { ...attrs, "aria-label": "Question from the agent" },
      questionIcon("Question"), h("span", {}, `The agent asked ${n > 1 ? `${n} questions` : "a question"} — answer below.`), when(entry.created_at));
  }
  const lateOpen = state.lateOpen.has(cid) && offersLateAnswer(entry);
  const lateActive = surface && [Phase.LATE_READY, Phase.LATE_SENDING, Phase.LATE_DONE, Phase.LATE_FAILED, Phase.LATE_UNKNOWN,
    Phase.DISMISSED].includes(surface.phase);
  const showSurface = surface && !(surface.phase === Phase.DISMISSED && entry.dismissed);
  const draft = state.drafts.get(`answer:${cid}`, {});
  const mine = surface && [Phase.ANSWERED, Phase.SKIPPED].includes(surface.phase);
  const lostDraft = !entry.answerable && !lateOpen && !mine && answerDraftHasContent(draft) && ["answered", "rejected"].includes(entry.state);
  return h(`li.clar.${entry.answerable ? "active" : "inactive"}`, { ...attrs, "aria-label": "Question from the agent" },
    h("div.clar-head", {}, questionIcon("Question"), h("span.who", {}, "Agent asked"), when(entry.created_at),
      h("span.clar-state", {}, clarificationStateWords(entry))),
    h("ul.clar-questions", {}, entry.questions.map((q) =>
      h("li", {}, q.title ? h("strong", {}, q.title, " ") : null, h("span", {}, q.prompt),
        q.response ? h(`div.answer${q.response.rejected ? ".rejected" : ""}`, {}, "Answer: ", responseText(q)) : null))),
    entryStatusText(entry) ? h("p.clar-status", {}, entryStatusText(entry)) : null,
    slot(lostDraft ? renderLostDraft(entry, draft, surface?.phase === Phase.LOST) : null),
    slot(showSurface && !(lostDraft && surface.phase === Phase.LOST) ? renderSurfaceStatus(surface, entry) : null),
    slot(lateOpen ? renderLateForm(state, entry, surface) : null),
    offersLateAnswer(entry) && !lateOpen && !lateActive
      ? h("div.actions.quiet", {},
        h("button.link", { type: "button", "data-action": "open-late", "data-clarification-id": cid }, "Answer as new message"),
        h("button.link", { type: "button", "data-action": "dismiss", "data-clarification-id": cid,
          "aria-label": "Dismiss this question (sends nothing)" }, "Dismiss"))
      : null);
}

/** Someone else answered first: their answer is above; what this person had prepared stays readable. */
function renderLostDraft(entry, draft, submitted) {
  const lines = entry.questions.map((q) => {
    const d = draft[q.question_id] ?? {};
    const labels = (d.selected ?? []).map((id) => q.options.find((o) => o.option_id === id)?.label ?? id);
    if (String(d.custom ?? "").trim()) labels.push(`“${d.custom.trim()}”`);
    return labels.length ? h("li", {}, `${q.title || q.prompt}: ${labels.join(", ")}`) : null;
  });
  return h("div.lost-draft", { role: "status" },
    h("p", {}, `This question was ${entry.state === "rejected" ? "skipped" : "answered"} elsewhere${submitted ? " before yours arrived" : ""}. Your draft (not sent):`),
    h("ul.readonly-draft", { "aria-readonly": "true" }, lines),
    h("button.small", { type: "button", "data-action": "discard-draft", "data-clarification-id": entry.clarification_id }, "Discard draft"));
}

function renderSurfaceStatus(surface, entry) {
  const p = surface.phase;
  if (p === Phase.LATE_SENDING) return h("p.surface.pending", { role: "status" }, "Sending your answer as a new message…");
  if (p === Phase.LATE_READY) return h("p.surface.pending", { role: "status" }, "Your answer will be sent as a new message.");
  if (p === Phase.LATE_DONE) {
    return h("p.surface.ok", { role: "status", "data-admission": surface.admission },
      `Answer sent as a new message: ${admissionLabel(surface.admission)}.`);
  }
  if (p === Phase.LATE_FAILED || p === Phase.LATE_UNKNOWN) {
    return h("div.surface.error", { role: "alert" },
      h("p", {}, p === Phase.LATE_UNKNOWN ? "Not confirmed. " : "Not sent. ", sentence(surface.error), " Your answer is kept."),
      h("div.actions", {},
        (p === Phase.LATE_UNKNOWN || surface.retryable)
          ? h("button", { type: "button", "data-action": "retry-late", "data-clarification-id": surface.clarificationId }, "Retry")
          : null,
        h("button", { type: "button", "data-action": "dismiss", "data-clarification-id": surface.clarificationId,
          "aria-label": "Dismiss this question (sends nothing)" }, "Dismiss")));
  }
  if (p === Phase.LOST) {
    const winner = surface.winner?.status === "rejected" ? "skipped" : "answered";
    return h("p.surface.info", { role: "status" }, `This question was already ${winner} elsewhere; your answer was not sent.`);
  }
  if (p === Phase.CLOSED) return h("p.surface.info", { role: "status" }, "The question was no longer active; nothing was sent.");
  if (p === Phase.SKIPPED) {
    const n = entry.questions.length;
    return h("p.surface.info", { role: "status" }, n > 1 ? `You skipped these ${n} questions.` : "You skipped this question.");
  }
  if (p === Phase.ANSWERED) return h("p.surface.ok", { role: "status" }, "Answer delivered to the agent.");
  if (p === Phase.DISMISSED) return h("p.surface.info", { role: "status" }, "Dismissed; nothing was sent.");
  return null;
}

const sentence = (text) => (!text ? "" : /[.!?]$/.test(text) ? text : `${text}.`);

function renderQuestionFields(state, clarificationId, questions, prefix) {
  const draft = state.drafts.get(`answer:${clarificationId}`, {});
  return questions.map((q, qi) => {
    const d = draft[q.question_id] ?? {};
    const name = `${prefix}-${clarificationId}-${q.question_id}`;
    return h("fieldset.question", { "data-question-id": q.question_id },
      h("legend", {}, h("span.q-count", {}, questions.length > 1 ? `${qi + 1}/${questions.length} ` : ""),
        q.title ? h("strong", {}, q.title, ": ") : null, q.prompt),
      h("div.options", {}, q.options.map((o, oi) =>
        h("label.option", {},
          h("input", { type: "radio", name, value: o.option_id, checked: (d.selected ?? []).includes(o.option_id),
            "data-action": "choose", "data-clarification-id": clarificationId, "data-question-id": q.question_id }),
          h("span", {}, o.label, o.description ? h("small", {}, ` ${o.description}`) : null),
          oi < 9 ? h("kbd.key", { "aria-hidden": "true" }, String(oi + 1)) : null))),
      h("div.custom-row", {},
        h("label", { for: `${name}-custom` }, "Other answer"),
        h("input", { id: `${name}-custom`, type: "text", value: d.custom ?? "", autocomplete: "off", placeholder: "Write your own",
          "data-action": "custom", "data-field": `custom:${clarificationId}:${q.question_id}`,
          "data-clarification-id": clarificationId, "data-question-id": q.question_id })));
  });
}

function renderOverlay(state, bundle, surface) {
  const cid = bundle.clarification_id;
  const questions = pendingQuestions(bundle);
  const draft = state.drafts.get(`answer:${cid}`, {});
  const busy = surface ? isBusy(surface) : false;
  const complete = answersComplete(questions, draft);
  const retry = surface && (surface.phase === Phase.RESPOND_FAILED || surface.phase === Phase.RESPOND_UNKNOWN) && surface.retryable;
  const skipping = state.skipping?.cid === cid;
  const n = questions.length;
  return h("form.overlay#overlay", { "data-action": "submit-answers", "data-clarification-id": cid,
    "aria-labelledby": "overlay-title", "aria-busy": busy ? "true" : false },
  h("div.overlay-head", {},
    h("h2#overlay-title", {}, n > 1 ? `The agent asks ${n} questions` : "The agent asks"),
    h("span.overlay-status", {}, bundle.agent_disconnected ? "Agent stopped waiting — answering resumes it" : "Agent is waiting")),
  h("div.why", {},
    h("button.link.why-toggle", { type: "button", "data-action": "toggle-why", "aria-expanded": state.whyOpen ? "true" : "false",
      "aria-controls": "why-text" }, "Reply with a message instead?"),
    h("p#why-text", { hidden: !state.whyOpen }, replyInsteadNote(bundle))),
  renderQuestionFields(state, cid, questions, "ov"),
  slot(surface?.error ? h("p.error", { role: "alert" }, surface.error) : null),
  skipping
    ? h("div.actions.skip-bar", { role: "alert" },
      h("p", {}, `Skipping declines ${n > 1 ? `all ${n} questions` : "this question"}`,
        answerDraftHasContent(draft) ? " and drops what you picked" : "", ". It is sent in 5 seconds."),
      h("button.primary", { type: "button", "data-action": "undo-skip", "data-clarification-id": cid }, "Undo"),
      h("button", { type: "button", "data-action": "skip-now", "data-clarification-id": cid }, "Skip now"))
    : h("div.actions", {},
      h("button.primary", { type: "submit", disabled: !complete || busy, "aria-keyshortcuts": "Control+Enter" },
        busy && !surface.rejected ? "Sending…" : retry && !surface.rejected ? "Retry" : "Submit answers"),
      h("button", { type: "button", "data-action": "skip", "data-clarification-id": cid, disabled: busy,
        "aria-label": n > 1 ? `Skip: decline all ${n} questions` : "Skip: decline this question" }, "Skip"),
      h("span.hint", { "aria-hidden": "true" }, "Keys 1–9 pick, Ctrl+Enter submits")));
}

function renderLateForm(state, entry, surface) {
  const cid = entry.clarification_id;
  const questions = unansweredQuestions(entry);
  const draft = state.drafts.get(`answer:${cid}`, {});
  const complete = answersComplete(questions, draft);
  const busy = surface ? isBusy(surface) : false;
  return h("form.late-form", { "data-action": "send-late", "data-clarification-id": cid, "aria-label": "Answer as a new message" },
    h("p.overlay-note", {}, "Your answer goes to the session as a new message."), // the status above says the agent is not waiting
    renderQuestionFields(state, cid, questions, "late"),
    h("label", { for: `late-note-${cid}` }, "Note (optional)"),
    field(state, "input", `late-note:${cid}`, { id: `late-note-${cid}`, type: "text", autocomplete: "off" }),
    h("div.actions", {},
      h("button.primary", { type: "submit", disabled: !complete || busy }, "Send as new message"),
      h("button", { type: "button", "data-action": "close-late", "data-clarification-id": cid }, "Cancel")));
}

function renderComposer(state, session, bundle) {
  const disabled = !session || session.input_capable === false;
  const key = `composer:${state.route.sessionId}`;
  const text = String(state.drafts.get(key));
  const placeholder = disabled ? "This session cannot take messages" : bundle ? "Or send a message instead" : "Message the agent";
  return h("form.composer#composer", { "data-action": "send-message", "aria-label": "Send a message" },
    h("label.visually-hidden", { for: "composer-input" }, "Message"),
    h("div.row", {},
      field(state, "textarea", key, { id: "composer-input", name: "content", rows: "2", placeholder, disabled, "data-action": "compose",
        "aria-keyshortcuts": "Enter" }),
      h("button.primary", { type: "submit", disabled: disabled || !text.trim() }, "Send")));
}
