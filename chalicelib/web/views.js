// Rendering: state in, a DOM tree out. No decisions live here; controls carry data-action attributes that
// app.js handles by delegation, so the tree can be rebuilt and morphed in place freely.

import { Phase, admissionLabel, answersComplete, isBusy, unansweredQuestions } from "./admission.js";
import { showsQuestionIcon } from "./selection.js";
import { activeBundle, entryStatusText, offersLateAnswer, pendingQuestions, responseText, sessionLabel } from "./transcript.js";

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
    if (name === "value" && (tag === "textarea" || tag === "input")) {
      el.value = value;
      if (tag === "input") el.setAttribute("value", value);
    } else if (name === "class") {
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

// ------------------------------------------------------------------ the app frame

export function renderApp(state) {
  if (!state.token) return h("div.app.signin#app", {}, renderTokenForm(state));
  const phone = state.layout === "phone";
  return h(`div.app.${state.layout}#app`, {},
    renderTopbar(state),
    phone ? null : h("aside.sidebar#sidebar", { "aria-label": "Tasks" }, renderTaskPanel(state, "desktop")),
    h("main.chat#main", { "aria-label": "Chat" }, renderMain(state)),
    phone && state.sheet ? renderSheet(state) : null,
  );
}

function renderTokenForm(state) {
  return h("form.token-form", { "data-action": "save-token", "aria-labelledby": "token-title" },
    h("h1#token-title", {}, "Clarify"),
    h("p", {}, "Paste a user token to sign in (make run prints one)."),
    h("label", { for: "token-input" }, "User token"),
    h("input#token-input", { name: "token", type: "password", autocomplete: "off", required: true }),
    h("button.primary", { type: "submit" }, "Sign in"),
    state.notice ? h("p.error", { role: "alert" }, state.notice) : null);
}

function renderTopbar(state) {
  const phone = state.layout === "phone";
  const pendingCount = state.order.filter((id) => showsQuestionIcon(state.tasks.get(id))).length;
  const task = state.route.taskId ? state.tasks.get(state.route.taskId) : null;
  return h("header.topbar#topbar", {},
    phone
      ? h("button.tasks-button#open-sheet", { type: "button", "data-action": "open-sheet", "aria-haspopup": "dialog",
          "aria-expanded": state.sheet ? "true" : "false",
          "aria-label": pendingCount ? `Tasks, ${pendingCount} with a pending question` : "Tasks" },
        "Tasks", pendingCount ? h("span.badge", { "aria-hidden": "true" }, String(pendingCount)) : null)
      : h("span.brand", {}, "Clarify"),
    h("h1.title", {}, task ? task.title : phone ? "Clarify" : ""),
    h("span.conn", { role: "status", "aria-live": "polite", class: state.online ? "ok" : "off" },
      state.online ? "" : "Reconnecting…"),
    h("button.link", { type: "button", "data-action": "sign-out" }, "Sign out"));
}

// ------------------------------------------------------------------ task list (sidebar and phone sheet)

export function renderTaskPanel(state, where) {
  const items = state.order.map((id) => state.tasks.get(id)).filter(Boolean);
  return h(`div.task-panel#task-panel-${where}`, {},
    h("h2", { id: `tasks-heading-${where}` }, "Tasks"),
    items.length
      ? h("ul.task-list", { "aria-labelledby": `tasks-heading-${where}` }, items.map((t) => renderTaskRow(state, t, where)))
      : h("p.muted", {}, state.tasksLoaded ? "No tasks yet." : "Loading tasks…"),
    h("form.new-task", { "data-action": "create-task" },
      h("label", { for: `new-task-${where}` }, "New task"),
      h("div.row", {},
        h("input", { id: `new-task-${where}`, name: "title", placeholder: "Task title", autocomplete: "off" }),
        h("button", { type: "submit" }, "Add"))));
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
    pending ? questionIcon() : null));
}

function renderSheet(state) {
  return h("div.sheet-layer#sheet-layer", {},
    h("div.sheet-backdrop", { "data-action": "close-sheet", "aria-hidden": "true" }),
    h("section.sheet#task-sheet", { role: "dialog", "aria-modal": "true", "aria-labelledby": "tasks-heading-sheet",
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
      h("p", {}, state.layout === "phone" ? "Open Tasks to choose a task." : "Choose a task from the list."),
      state.layout === "phone" ? h("button.primary", { type: "button", "data-action": "open-sheet" }, "Show tasks") : null);
  }
  if (!sessionId) return renderTaskRoute(state);
  return renderSessionRoute(state);
}

const TASK_NOTICES = {
  changed: "This task's pending question changed while its sessions were loading. Choose a session.",
  "no-owner": "This task shows a pending question, but no session that can take input owns it. Choose a session.",
  "load-failed": "The task's sessions could not be loaded. Choose a session or try again.",
  "no-sessions": "This task has no sessions yet.",
};

function renderTaskRoute(state) {
  const task = state.tasks.get(state.route.taskId);
  const sessions = state.sessions.get(state.route.taskId) ?? [];
  const notice = state.taskNotice ? TASK_NOTICES[state.taskNotice] : null;
  return h("section.task-route#task-route", { "aria-labelledby": "task-route-title" },
    h("h2#task-route-title", {}, task ? task.title : "Task"),
    notice ? h("p.notice", { role: "status" }, notice) : null,
    sessions.length
      ? h("ul.session-list", { "aria-label": "Sessions" }, sessions.map((s, i) =>
        h("li", { id: `session-item-${s.id}` },
          h("button.session-row", { type: "button", "data-action": "open-session", "data-task-id": s.task_id ?? state.route.taskId,
            "data-session-id": s.id },
          h("span", {}, sessionLabel(s, sessions.length - i)),
          h("span.state", {}, s.state),
          s.pending_action ? questionIcon("Question pending in this session") : null))))
      : null,
    h("form.new-session", { "data-action": "create-session" },
      h("label", { for: "new-session-prompt" }, "Start a session with a prompt"),
      h("div.row", {},
        h("input#new-session-prompt", { name: "prompt", autocomplete: "off", placeholder: "What should the agent do?" }),
        h("button", { type: "submit" }, "Start"))));
}

function renderSessionRoute(state) {
  const { taskId, sessionId } = state.route;
  const sessions = state.sessions.get(taskId) ?? [];
  const session = sessions.find((s) => s.id === sessionId) ?? state.session;
  const transcript = state.transcript?.sessionId === sessionId ? state.transcript : null;
  const bundle = transcript ? activeBundle(transcript.messages) : null;
  const surface = bundle ? state.surfaces.get(bundle.clarification_id) : null;
  const showOverlay = bundle && (!surface || [Phase.EDITING, Phase.RESPONDING, Phase.RESPOND_FAILED, Phase.RESPOND_UNKNOWN].includes(surface.phase));
  return h("section.session-route#session-route", { "aria-label": "Session", "data-session-id": sessionId },
    h("div.session-head", {},
      sessions.length > 1
        ? h("nav.session-tabs", { "aria-label": "Sessions of this task" }, sessions.map((s, i) =>
          h("button.session-tab", { type: "button", "data-action": "open-session", "data-task-id": taskId, "data-session-id": s.id,
            "aria-current": s.id === sessionId ? "true" : false, id: `tab-${s.id}` },
          sessionLabel(s, sessions.length - i), s.pending_action ? questionIcon("Question pending in this session") : null)))
        : null,
      session ? h("span.state", { "aria-label": `Session state ${session.state}` }, session.state) : null),
    transcript
      ? h("ol.transcript#transcript", { role: "log", "aria-label": "Transcript", "aria-live": "polite", "data-session": sessionId },
        transcript.messages.map((m) => renderMessage(state, m)))
      : h("p.muted", {}, state.transcriptError ?? "Loading the transcript…"),
    showOverlay ? renderOverlay(state, bundle, surface) : renderComposer(state, session));
}

function renderMessage(state, m) {
  if (m.type === "clarification") return renderClarificationEntry(state, m);
  const who = m.author_type === "user" ? "You" : "Agent";
  return h(`li.msg.${m.author_type === "user" ? "user" : "agent"}${m.type === "thinking" ? ".thinking" : ""}`, { id: `msg-${m.id}` },
    h("span.who", {}, m.type === "thinking" ? "Agent (thinking)" : who),
    h("div.body", {}, m.content ?? ""));
}

function renderClarificationEntry(state, entry) {
  const surface = state.surfaces.get(entry.clarification_id);
  const lateOpen = state.lateOpen.has(entry.clarification_id) && offersLateAnswer(entry);
  const lateActive = surface && [Phase.LATE_READY, Phase.LATE_SENDING, Phase.LATE_DONE, Phase.LATE_FAILED, Phase.LATE_UNKNOWN,
    Phase.DISMISSED].includes(surface.phase);
  const showSurface = surface && !(surface.phase === Phase.DISMISSED && entry.dismissed);
  return h(`li.clar.${entry.answerable ? "active" : "inactive"}`, { id: `entry-${entry.clarification_id}`,
    "data-clarification-id": entry.clarification_id, "data-state": entry.state, "aria-label": "Question from the agent" },
  h("div.clar-head", {}, questionIcon("Question"), h("span.who", {}, "Agent asked"),
    h("span.clar-state", {}, entry.state.replaceAll("_", " "))),
  h("ul.clar-questions", {}, entry.questions.map((q) =>
    h("li", {}, h("strong", {}, q.title || "Question"), " ", h("span", {}, q.prompt),
      q.response ? h(`div.answer${q.response.rejected ? ".rejected" : ""}`, {}, "Answer: ", responseText(q)) : null))),
  h("p.clar-status", {}, entryStatusText(entry)),
  showSurface ? renderSurfaceStatus(surface) : null,
  lateOpen ? renderLateForm(state, entry, surface) : null,
  offersLateAnswer(entry) && !lateOpen && !lateActive
    ? h("div.actions", {},
      h("button.primary", { type: "button", "data-action": "open-late", "data-clarification-id": entry.clarification_id },
        "Answer as new message"),
      h("button", { type: "button", "data-action": "dismiss", "data-clarification-id": entry.clarification_id,
        "aria-label": "Dismiss this question (sends nothing)" }, "Dismiss"))
    : null);
}

function renderSurfaceStatus(surface) {
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
  if (p === Phase.SKIPPED) return h("p.surface.info", { role: "status" }, "You skipped this question.");
  if (p === Phase.ANSWERED) return h("p.surface.ok", { role: "status" }, "Answer delivered to the agent.");
  if (p === Phase.DISMISSED) return h("p.surface.info", { role: "status" }, "Dismissed; nothing was sent.");
  return null;
}

const sentence = (text) => (!text ? "" : /[.!?]$/.test(text) ? text : `${text}.`);

function renderQuestionFields(state, clarificationId, questions, prefix) {
  const draft = state.drafts.get(clarificationId) ?? {};
  return questions.map((q, qi) => {
    const d = draft[q.question_id] ?? {};
    const name = `${prefix}-${clarificationId}-${q.question_id}`;
    return h("fieldset.question", {},
      h("legend", {}, h("span.q-count", {}, questions.length > 1 ? `${qi + 1}/${questions.length} ` : ""),
        q.title ? h("strong", {}, q.title, ": ") : null, q.prompt),
      h("div.options", {}, q.options.map((o) =>
        h("label.option", {},
          h("input", { type: "radio", name, value: o.option_id, checked: (d.selected ?? []).includes(o.option_id),
            "data-action": "choose", "data-clarification-id": clarificationId, "data-question-id": q.question_id }),
          h("span", {}, o.label, o.description ? h("small", {}, ` ${o.description}`) : null)))),
      h("div.custom-row", {},
        h("label", { for: `${name}-custom` }, "Other answer"),
        h("input", { id: `${name}-custom`, type: "text", value: d.custom ?? "", autocomplete: "off", placeholder: "Write your own",
          "data-action": "custom", "data-clarification-id": clarificationId, "data-question-id": q.question_id })));
  });
}

function renderOverlay(state, bundle, surface) {
  const questions = pendingQuestions(bundle);
  const draft = state.drafts.get(bundle.clarification_id);
  const busy = surface ? isBusy(surface) : false;
  const complete = answersComplete(questions, draft);
  const retry = surface && (surface.phase === Phase.RESPOND_FAILED || surface.phase === Phase.RESPOND_UNKNOWN) && surface.retryable;
  return h("form.overlay#overlay", { "data-action": "submit-answers", "data-clarification-id": bundle.clarification_id,
    "aria-labelledby": "overlay-title", "aria-busy": busy ? "true" : false },
  h("h2#overlay-title", {}, questions.length > 1 ? `The agent asks ${questions.length} questions` : "The agent asks"),
  h("p.overlay-note", {}, bundle.agent_disconnected
    ? "The agent stopped waiting. Answering resumes it with your answer."
    : "The agent is waiting for your answer."),
  renderQuestionFields(state, bundle.clarification_id, questions, "ov"),
  surface?.error ? h("p.error", { role: "alert" }, surface.error) : null,
  h("div.actions", {},
    h("button.primary", { type: "submit", disabled: !complete || busy }, busy && !surface.rejected ? "Sending…" : retry && !surface.rejected ? "Retry" : "Submit answers"),
    h("button", { type: "button", "data-action": "skip", "data-clarification-id": bundle.clarification_id, disabled: busy,
      "aria-label": "Skip: decline to answer these questions" }, "Skip")));
}

function renderLateForm(state, entry, surface) {
  const questions = unansweredQuestions(entry);
  const draft = state.drafts.get(entry.clarification_id);
  const complete = answersComplete(questions, draft);
  const busy = surface ? isBusy(surface) : false;
  return h("form.late-form", { "data-action": "send-late", "data-clarification-id": entry.clarification_id,
    "aria-label": "Answer as a new message" },
  h("p.overlay-note", {}, "The agent is not waiting for this question. Your answer goes to the session as a new message."),
  renderQuestionFields(state, entry.clarification_id, questions, "late"),
  h("label", { for: `late-note-${entry.clarification_id}` }, "Note (optional)"),
  h("input", { id: `late-note-${entry.clarification_id}`, type: "text", autocomplete: "off",
    value: state.lateNotes.get(entry.clarification_id) ?? "", "data-action": "late-note", "data-clarification-id": entry.clarification_id }),
  h("div.actions", {},
    h("button.primary", { type: "submit", disabled: !complete || busy }, "Send as new message"),
    h("button", { type: "button", "data-action": "close-late", "data-clarification-id": entry.clarification_id }, "Cancel")));
}

function renderComposer(state, session) {
  const c = state.composer;
  const disabled = !session || session.input_capable === false;
  return h("form.composer#composer", { "data-action": "send-message", "aria-label": "Send a message" },
    h("label.visually-hidden", { for: "composer-input" }, "Message"),
    h("div.row", {},
      h("textarea#composer-input", { name: "content", rows: "2", value: c.text, placeholder: disabled ? "This session cannot take input" : "Message the agent",
        disabled, "data-action": "compose" }),
      h("button.primary", { type: "submit", disabled: disabled || !c.text.trim() || c.phase === Phase.LATE_SENDING }, "Send")),
    c.status ? h("p.surface", { role: "status", class: c.error ? "error" : "ok" }, c.status,
      c.retryable ? h("button.link", { type: "button", "data-action": "retry-message" }, " Retry") : null) : null);
}
