// Words for states: people read sentences, not WAITING_FOR_INPUT. Pure functions over the server's views; the
// server's `answerable`, `agent_disconnected` and session state are the truth, these only say them in words.

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const STOPPABLE = new Set(["CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT"]);

/**
 * The status line above the chat: {text, tone: "working"|"waiting"|"idle"|"ended", canStop}.
 * `bundle` is the answerable clarification shown in the answer panel, if any.
 */
export function sessionStatus(session, bundle = null) {
  if (!session) return null;
  const canStop = STOPPABLE.has(session.state);
  if (bundle) {
    return bundle.agent_disconnected
      ? { text: "Agent stopped waiting — your answer will resume it", tone: "waiting", canStop }
      : { text: "Agent is waiting for your answer", tone: "waiting", canStop };
  }
  switch (session.state) {
    case "CREATED":
    case "STARTING":
      return { text: "Agent is starting…", tone: "working", canStop };
    case "RUNNING":
      return { text: "Agent is working…", tone: "working", canStop };
    case "WAITING_FOR_INPUT":
      return { text: "Agent is waiting for your answer", tone: "waiting", canStop };
    case "IDLE":
      return { text: "Agent is idle — send a message to continue", tone: "idle", canStop };
    case "COMPLETED":
      return { text: "This session is finished", tone: "ended", canStop: false };
    case "FAILED":
      return { text: "This session failed", tone: "ended", canStop: false };
    case "CANCELLED":
      return { text: "This session was stopped", tone: "ended", canStop: false };
    default:
      return { text: "Agent status unknown", tone: "idle", canStop };
  }
}

/** A few words for a session in tabs and lists. */
export function sessionStateWords(state) {
  return { CREATED: "starting", STARTING: "starting", RUNNING: "working", WAITING_FOR_INPUT: "waiting for you",
    IDLE: "idle", COMPLETED: "finished", FAILED: "failed", CANCELLED: "stopped" }[state] ?? "unknown";
}

export const isTerminal = (state) => TERMINAL.has(state);

/** A question's state as a short label. */
export function clarificationStateWords(entry) {
  if (entry.answerable) return entry.agent_disconnected ? "Waiting — agent stepped away" : "Waiting for you";
  return { delivery_claimed: "Delivering", answered: "Answered", rejected: "Skipped", expired: "Expired",
    cancelled: "Withdrawn", superseded: "Set aside", active_live: "Closed", active_detached: "Closed" }[entry.state] ?? "Closed";
}

/**
 * What the answer panel says about sending an ordinary message instead of answering. A live waiter blocks
 * the queue, so the message waits and the question stays open; an agent that stopped waiting takes the
 * message as new work, which sets the question aside (it can still be answered later as a new message).
 */
export function replyInsteadNote(bundle) {
  return bundle.agent_disconnected
    ? "You can also just send a message: the agent starts on it and this question is set aside (you can still answer it later)."
    : "You can also send a message instead: it is queued until the agent finishes this turn, and the question stays open.";
}
