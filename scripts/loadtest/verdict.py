"""The verdict of a load run, from the stored aggregates, the simulated agent's record and the journal.

The invariants, exactly as measured here (a marker is unique to one answer or message):

1. Answers lost. An answer or message the user was told was taken (200/201, or a retry's 409 that names
   the user's own answer as the winner) must be, after settling: delivered (the agent confirmed a live
   handoff carrying it, or accepted a prompt or steer carrying it), held by an armed watchdog, recorded
   (a Skip of a detached question: rows rejected, delivery recorded), or durably queued behind a turn
   that is still open. A message the agent refused after admission counts as lost unless asking the API
   again with the same client_message_id now reports the failure. An answer left at the at-most-once
   boundary (delivery result `ambiguous`, or a prompt left `attempted`) is counted apart: by design it is
   never sent again, and the agent may or may not have it.
2. Dispatched twice. More than one accepted prompt or steer carries one marker; or one question had more
   than one different answer handed to the agent (live or by prompt).
3. Stale questions reactivated. Once a user saw a question superseded, expired, cancelled, answered or
   rejected (a transcript state, or respond's 409 naming superseded/expired/session_terminal/cancelled),
   no later answer (begun after that) shows it active or answerable, no later respond wins it, and the
   stored aggregate does not hold it active at the end.
4. Projections disagreeing with the rule after settling. A task's stored status summary (pending action,
   primary session) differs from the rule applied to its stored sessions, read from the store (the task
   list's read-repair is not consulted).
5. Unexpected 5xx. Every answer >= 500, to the users and to the simulated agent, that is not one of the
   expected outcomes of a fault (see `classify`).
6. No answer while the API was up. A request without an HTTP answer (refused, reset, or past the client's
   timeout: 45 s for users, 10 s for the agent's calls, its long-poll plus 10 s) outside the API's down
   windows: the stack was too slow to serve it.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chalicelib.domain.model import Dispatch, Session, Task
from chalicelib.domain.rules import bundle_is_active
from chalicelib.services.projection import task_summary

from .journal import ACTIVE_STATES, FINAL_STATES, AnswerOp, Journal, Request

Event = dict[str, Any]
CONFIRMED_UNRECORDED = "delivered live (the agent's record of its confirmation was cut by its kill)"
OK_FATES = frozenset({"delivered live", CONFIRMED_UNRECORDED, "delivered by prompt", "delivered by steer",
                      "held by the watchdog",
                      "recorded", "queued behind an open turn", "refused; a retry reports it"})
AMBIGUOUS_FATES = frozenset({"ambiguous"})


def epoch(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


@dataclass
class AgentRecord:
    """What the simulated agent received and did, across all its processes (the --record file)."""

    events: list[Event]

    @classmethod
    def load(cls, path: Path) -> AgentRecord:
        events = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:  # a line cut by kill -9 mid-write was never acknowledged
                    continue
        return cls(events)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.get("kind") == kind]

    def carriers(self, marker: str) -> list[Event]:
        """Prompts and steers the agent accepted whose text carries `marker`."""
        return [e for e in self.events if e.get("kind") in ("prompt", "steer") and e.get("accepted")
                and marker in str(e.get("text", ""))]

    def handoffs(self) -> list[Event]:
        """Live deliveries the agent confirmed, with the response it received."""
        received = {e.get("delivery_id"): e for e in self.of("answer_received")}
        return [{**e, "response": received.get(e.get("delivery_id"), {}).get("response")}
                for e in self.of("confirmed")]

    def asked_at(self) -> dict[str, float]:
        return {str(e["clarification_id"]): epoch(e["at"]) for e in self.of("asked")}


@dataclass
class Finding:
    invariant: str
    subject: str
    detail: str


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    fates: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    ambiguous: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    INVARIANTS = ("answers lost", "dispatched twice", "stale questions reactivated",
                  "projections disagreeing with the rule", "unexpected 5xx", "no answer while the API was up")

    def counts(self) -> dict[str, int]:
        return {name: sum(1 for f in self.findings if f.invariant == name) for name in self.INVARIANTS}

    @property
    def clean(self) -> bool:
        return not self.findings

    def add(self, invariant: str, subject: str, detail: str) -> None:
        self.findings.append(Finding(invariant, subject, detail))


def judge(journal: Journal, record: AgentRecord, sessions: dict[str, Session], tasks: list[Task],
          ask_again: Callable[[AnswerOp], int]) -> Verdict:
    v = Verdict()
    handoffs = record.handoffs()
    answers_lost(v, journal, record, handoffs, sessions, ask_again)
    dispatched_twice(v, journal, record, handoffs)
    reactivated(v, journal, sessions)
    projections(v, sessions, tasks)
    unexpected_5xx(v, journal, record)
    return v


# ------------------------------------------------------------------ 1. answers lost
def fate(op: AnswerOp, record: AgentRecord, handoffs: list[Event], sessions: dict[str, Session]) -> str:
    carriers = record.carriers(op.marker)
    if any(op.marker in json.dumps(h.get("response")) for h in handoffs):
        return "delivered live"
    if carriers:
        return "delivered by steer" if all(c["kind"] == "steer" for c in carriers) else "delivered by prompt"
    s = sessions.get(op.session_id)
    if s is None:
        return "session not found"
    if s.watchdog is not None and op.marker in s.watchdog.text:
        return "held by the watchdog"
    if op.kind in ("answer", "skip"):
        return _bundle_fate(op, s, record)
    if any(op.marker in p.content for p in s.queue):
        turn = s.current_turn
        if s.terminal:
            return "discarded with the ended session"
        return "queued behind an open turn" if turn is not None and turn.open else "stuck in the queue"
    if s.prompt is not None and op.marker in s.prompt.content:
        return {Dispatch.ATTEMPTED: "ambiguous", Dispatch.PENDING: "never dispatched",
                Dispatch.REJECTED: "refused by the agent", Dispatch.ACCEPTED: "accepted but not received"
                }[s.prompt.dispatch]
    return "never reached the agent"


def _bundle_fate(op: AnswerOp, s: Session, record: AgentRecord) -> str:
    b = s.bundle(op.clarification_id or "")
    if b is None:
        return "question deleted"
    mine = [r for r in b.rows if r.response is not None and op.marker in json.dumps(dict(r.response))]
    d = b.delivery
    if mine and d is not None and d.result == "ambiguous":
        return "ambiguous"
    if mine and op.kind == "skip" and d is not None and d.result == "recorded" and all(
            r.status == "rejected" for r in mine):
        return "recorded"
    if mine and d is not None and d.confirmed_at and any(
            e.get("delivery_id") == d.delivery_id for e in record.of("answer_received")):
        # The agent logged the answer it received, and Clarify holds its durable confirmation of that delivery:
        # a kill -9 between the confirm's 200 and the agent's own "confirmed" line leaves only these two.
        return CONFIRMED_UNRECORDED
    if mine:
        return f"claimed, delivery {d.result if d else 'missing'}"
    return "restorable" if bundle_is_active(s, b) else "not taken"


def answers_lost(v: Verdict, journal: Journal, record: AgentRecord, handoffs: list[Event],
                 sessions: dict[str, Session], ask_again: Callable[[AnswerOp], int]) -> None:
    for op in journal.answers:
        if not op.told_ok:
            continue
        v.checked["answers and messages told taken"] = v.checked.get("answers and messages told taken", 0) + 1
        what = fate(op, record, handoffs, sessions)
        if what in ("refused by the agent", "never reached the agent") and op.kind in ("message", "late"):
            status = ask_again(op)
            what = "refused; a retry reports it" if status >= 400 else what
        v.fates[f"{op.kind}: {what}"] = v.fates.get(f"{op.kind}: {what}", 0) + 1
        if what in AMBIGUOUS_FATES:
            v.ambiguous.append(f"{op.kind} {op.marker} in {op.session_id}")
        elif what not in OK_FATES:
            f = op.final
            v.add("answers lost", f"{op.kind} {op.marker} (session {op.session_id}, question "
                  f"{op.clarification_id or '-'})", f"told {f.status if f else '-'}; {what}")


# ------------------------------------------------------------------ 2. dispatched twice
def dispatched_twice(v: Verdict, journal: Journal, record: AgentRecord, handoffs: list[Event]) -> None:
    delivered: dict[str, set[str]] = {}
    for op in journal.answers:
        carriers = record.carriers(op.marker)
        if len(carriers) > 1:
            v.add("dispatched twice", f"{op.kind} {op.marker}",
                  f"{len(carriers)} accepted prompts/steers carry it: "
                  + ", ".join(f"{c['kind']} turn {c.get('turn_id')} at {c['at']}" for c in carriers))
        live = [h for h in handoffs if op.marker in json.dumps(h.get("response"))]
        if op.clarification_id and op.kind in ("answer", "skip") and (carriers or live):
            delivered.setdefault(op.clarification_id, set()).add(op.marker)
    for cid, markers in delivered.items():
        if len(markers) > 1:
            v.add("dispatched twice", f"question {cid}", f"{len(markers)} different answers reached the agent: "
                  + ", ".join(sorted(markers)))


# ------------------------------------------------------------------ 3. stale questions reactivated
def reactivated(v: Verdict, journal: Journal, sessions: dict[str, Session]) -> None:
    by_cid: dict[str, list[Any]] = {}
    for o in journal.observations:
        by_cid.setdefault(o.clarification_id, []).append(o)
    wins = [(op.clarification_id, a) for op in journal.answers if op.kind in ("answer", "skip")
            for a in op.attempts if a.status == 200]
    stored = {b.id: (s, b) for s in sessions.values() for b in s.bundles}
    for cid, seen in by_cid.items():
        finals = [o for o in seen if o.state in FINAL_STATES]
        if not finals:
            continue
        v.checked["questions seen final"] = v.checked.get("questions seen final", 0) + 1
        first = min(finals, key=lambda o: o.end)
        for o in seen:
            if o.start > first.end and (o.state in ACTIVE_STATES or o.answerable):
                v.add("stale questions reactivated", f"question {cid}",
                      f"seen {first.state} at {first.end:.3f}, then {o.state} (answerable {o.answerable}) "
                      f"at {o.start:.3f}")
        for wcid, attempt in wins:
            if wcid == cid and attempt.start > first.end:
                v.add("stale questions reactivated", f"question {cid}",
                      f"seen {first.state} at {first.end:.3f}, then a respond begun at {attempt.start:.3f} won it")
        if cid in stored and bundle_is_active(*stored[cid]):
            v.add("stale questions reactivated", f"question {cid}", f"seen {first.state}, active when stored")


# ------------------------------------------------------------------ 4. projections
def projections(v: Verdict, sessions: dict[str, Session], tasks: list[Task]) -> None:
    by_task: dict[str, list[Session]] = {}
    for s in sessions.values():
        by_task.setdefault(s.task_id, []).append(s)
    for task in tasks:
        rule = task_summary(by_task.get(task.id, []))
        stored = (task.summary.pending_action, task.summary.primary_session_id)
        v.checked["task summaries"] = v.checked.get("task summaries", 0) + 1
        if stored != rule:
            v.add("projections disagreeing with the rule", f"task {task.id}", f"stored {stored}, rule {rule}")


# ------------------------------------------------------------------ 5. unexpected 5xx
def classify(r: Request, journal: Journal, asked_at: dict[str, float]) -> str | None:
    """The fault that explains a failed request, or None when nothing does (an unexpected failure)."""
    api_down, agent_down = journal.down("api", r.end), journal.down("agent", r.end)
    kills = [f.killed for f in journal.faults if f.target in ("api", "agent")]
    agent_kills = [f.killed for f in journal.faults if f.target == "agent"]
    if r.status == 0 and any(r.overlaps(a, b) for a, b in api_down):
        return "no HTTP answer: the API was down"
    if r.status == 503 and r.code == "not_ready" and any(r.overlaps(a, b) for a, b in api_down):
        return "503 not_ready: the API was restarting"
    if r.status == 502 and r.code == "dispatch_failed":
        if any(r.overlaps(a, b) for a, b in agent_down):
            return "502 dispatch_failed: the agent was down"
        cid = r.context.get("clarification_id")
        since = asked_at.get(str(cid), r.start) if cid else r.start
        if cid and any(since <= k <= r.end for k in kills):
            return "502 dispatch_failed: the question's waiter died in a kill"
    if r.status == 502 and r.code == "dispatch_ambiguous" and any(r.start <= k <= r.end for k in agent_kills):
        return "502 dispatch_ambiguous: the agent was killed mid-call"
    if r.status == 502 and r.code in ("dispatch_ambiguous", "dispatch_failed") and r.context.get("marker"):
        # A retry is told how its first attempt ended (final for a message's client_message_id and for an
        # answer's Idempotency-Key): that attempt met a kill of the API mid-dispatch or of the agent.
        ops = [op for op in journal.answers if op.marker == r.context["marker"] and op.attempts]
        firsts = [op.attempts[0].start for op in ops]
        if firsts and any(min(firsts) <= k <= r.end for k in kills):
            return f"502 {r.code}: an earlier attempt met a kill (its retry is told the same)"
        # ... or ran while the agent was down (killed before it, back only after it): refused, and final.
        earlier = [a for op in ops for a in op.attempts if a.end <= r.start]
        if r.code == "dispatch_failed" and any(a.start <= b and a.end >= k for a in earlier for k, b in agent_down):
            return "502 dispatch_failed: an earlier attempt met the agent down (its retry is told the same)"
    return None


def unexpected_5xx(v: Verdict, journal: Journal, record: AgentRecord) -> None:
    asked_at = record.asked_at()
    for r in journal.requests:
        if r.status != 0 and r.status < 500:
            continue
        why = classify(r, journal, asked_at)
        if why is None:
            v.add("unexpected 5xx" if r.status else "no answer while the API was up", f"user {r.op}",
                  f"{r.status} {r.code or r.message} at {r.start:.3f}-{r.end:.3f} {json.dumps(r.context)}")
        else:
            v.expected[why] = v.expected.get(why, 0) + 1
    for e in agent_failures(record.events):
        at = epoch(e["at"])
        down = any(a <= at <= b for a, b in journal.down("api", at))
        if down and (e.get("status") is None or e.get("status") == 503):
            why = "agent call without an HTTP answer or 503: the API was down"
            v.expected[why] = v.expected.get(why, 0) + 1
        else:
            v.add("unexpected 5xx" if e.get("status") else "no answer while the API was up",
                  f"agent {e.get('path')}", f"{e.get('status')} {str(e.get('body'))[:200]} at {e['at']}")


def agent_failures(events: Iterable[Event]) -> list[Event]:
    """The agent's failed backend calls without an HTTP answer or with a 5xx, and its own handler crashes.
    A status-less error without a path is no call (a cancel for a session a restarted agent never saw)."""
    out = []
    for e in events:
        status = e.get("status")
        if e.get("kind") != "error" or (status is None and e.get("path") is None):
            continue
        if status is None or status >= 500:
            out.append(e)
    return out
