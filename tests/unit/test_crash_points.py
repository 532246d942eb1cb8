"""The crash-point harness (issue 5 item 4).

Every durable write of an operation is one Store call (chalicelib.store.protocol). For each operation below
a dry run counts its writes; then, for every write k and phase (right before / right after it), a fresh
world runs the operation until the process dies there, the reconciler runs before traffic, the stream
function catches up on every committed change, and the invariants are checked. The user then retries what
is retryable, time passes, the scheduled reconciler runs, and the invariants are checked again.

Invariants:
  (1) no answer lost: its rows are pending and answerable again (and a resubmission succeeds), or terminal
      with the answer delivered (live, confirmed: the waiter handed it over or an armed watchdog holds it)
      or resumed/ambiguous with the successor turn current; an admitted message is dispatched, queued,
      or visibly failed, never reported as sent when the agent refused it;
  (2) never dispatched twice: at most one prompt that may have reached the agent carries an answer;
  (3) no bundle that was superseded, expired or finished before the operation becomes active again;
  (4) projections equal the rule: each task's stored summary equals task_summary(list_sessions(task)),
      kept so by the stream function alone (refresh_task_summary then has nothing to write);
  (5) no private prompt-dispatch field in any stored event;
  (6) events stay consistent across redelivery: unique ids, and every committed summary revision has its
      task.status_summary.updated event;
  (7) the reconciler converges: nothing is left in its index once the dust has settled.

Coverage: the union of methods at which a kill was injected must equal the Store protocol's write methods
(tests/support/crash.py: all members minus the declared reads) minus ALLOWED_UNREACHED. A new write method
that no scenario reaches fails the test.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from chalicelib.auth.tokens import Caller
from chalicelib.domain import clarify
from chalicelib.domain.errors import DomainError
from chalicelib.domain.model import Dispatch, Event, Session
from chalicelib.domain.rules import bundle_is_active, published_turn
from chalicelib.functions import streams
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import (
    clarifications,
    frames,
    history,
    messages,
    responses,
    sessions,
    task_changes,
    tasks,
    watchdog,
    workflow,
)
from chalicelib.services.deps import Deps, Settings
from chalicelib.services.events import PRIVATE_FIELDS
from chalicelib.services.projection import refresh_task_summary, task_summary
from chalicelib.store.memory import MemoryStore
from tests.support.crash import PHASES, WRITE_METHODS, CrashingStore, KillPoint, ProcessDied, SessionTap
from tests.support.fakes import CounterIds, FakeAgentctl, StepClock, agent_token

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "artifacts" / "crash_points.txt"
USER = Caller(sub="user-1", role="user", workspace_id="ws-1")
MIN_BOUNDARIES = 15

# Store writes that no covered operation performs. Keep this minimal; justify every entry.
ALLOWED_UNREACHED: dict[str, str] = {}


def agent_of(session_id: str) -> Caller:
    return Caller(sub=f"agent:{session_id}", role="agent", workspace_id="ws-1", session_id=session_id)


class Abandon(BaseException):
    """Setup only: leave an operation mid-way, as if its invocation were still running elsewhere."""


@dataclass
class Answer:
    """A user's answer in flight: every delivery of it carries `marker`."""

    session_id: str
    marker: str
    key: str  # the respond Idempotency-Key, or the message's client_message_id
    body: dict[str, Any]
    bundle_id: str | None = None  # None: an ordinary (late) message
    rows: tuple[str, ...] = ("q1", "q2")
    outcome: str = "answered"
    allow_retired: bool = False  # superseded by the user's own newer turn before it could be delivered
    retried: bool = False


QUESTIONS = [
    {"question_id": "q1", "prompt": "Which database?", "options": [
        {"option_id": "q1_a", "label": "Postgres"}, {"option_id": "q1_b", "label": "SQLite"}]},
    {"question_id": "q2", "prompt": "Keep the old API?", "options": [
        {"option_id": "q2_a", "label": "Yes"}, {"option_id": "q2_b", "label": "No"}]},
]


def answers_body(marker: str) -> dict[str, Any]:
    return {"answers": [{"question_id": "q1", "selected_options": ["q1_a"], "custom_text": marker},
                        {"question_id": "q2", "selected_options": ["q2_b"]}]}


# ------------------------------------------------------------------ the world
class World:
    """One deterministic installation: MemoryStore behind a stream tap, fake agent, step clock, counter ids."""

    def __init__(self) -> None:
        self.memory = MemoryStore()
        self.store = SessionTap(self.memory)
        self.clock = StepClock(step=timedelta(milliseconds=1))
        self.agent = FakeAgentctl(store=self.memory)
        self.sleep_hook: Callable[[float], None] | None = None
        self.deps = Deps(store=self.store, agentctl=self.agent, clock=self.clock,  # type: ignore[arg-type]
                         new_id=CounterIds(), agent_token=agent_token,
                         settings=Settings(deployment_id="crash-harness", poll_interval=1.0),
                         sleep=self._sleep)
        self.handoffs: list[str] = []  # what live waiters returned to the agent
        self.answers: list[Answer] = []
        self.pumped = 0
        self.frozen: set[tuple[str, str]] = set()
        self.task_id = tasks.create_task(self.deps, USER, {"title": "Refactor"}).id
        self._markers = 0

    # -------------------------------------------------------------- plumbing
    def _sleep(self, seconds: float) -> None:
        if self.sleep_hook is not None:
            self.sleep_hook(seconds)

    def using(self, store: Any) -> Deps:
        return replace(self.deps, store=store)

    def session(self, session_id: str) -> Session:
        found = self.memory.get_session(session_id)
        assert found is not None
        return found

    def marker(self) -> str:
        self._markers += 1
        return f"ANSWER-{self._markers:02d}"

    def pump(self, deps: Deps | None = None) -> None:
        """The stream function catches up on every committed aggregate change (redelivering after a crash)."""
        deps = deps or self.deps
        end = len(self.store.changes)
        for record in self.store.records(self.pumped):
            streams.on_session_record(deps, record)
        self.pumped = end

    def crash_during(self, method: str, phase: str, run: Callable[[Deps], Any], occurrence: int = 0) -> None:
        """Setup: run an operation until its process dies at `method` (a broken world for the reconciler)."""
        store = CrashingStore(self.store, KillPoint(occurrence, phase, method=method))
        try:
            run(self.using(store))
        except ProcessDied:
            return
        raise AssertionError(f"setup never reached {phase} {method}")

    # -------------------------------------------------------------- the product, as users and agents use it
    def new_session(self) -> str:
        return sessions.create_session(self.deps, USER, self.task_id, {}).session.id

    def frame(self, kind: str, session_id: str, **extra: Any) -> dict[str, Any]:
        s = self.session(session_id)
        turn = s.current_turn
        return {"type": kind, "execution_id": s.execution_id, "prompt_generation": s.generation,
                "turn_id": turn.id if turn else None, **extra}

    def frames(self, session_id: str, *items: dict[str, Any], deps: Deps | None = None) -> None:
        frames.apply_frames(deps or self.deps, agent_of(session_id), session_id, {"frames": list(items)})

    def complete_turn(self, session_id: str) -> None:
        self.frames(session_id, self.frame("turn_completed", session_id))

    def send(self, session_id: str, content: str, cmid: str, deps: Deps | None = None) -> messages.Admission:
        return messages.send_message(deps or self.deps, USER, session_id,
                                     {"client_message_id": cmid, "content": content})

    def running(self, session_id: str) -> None:
        self.send(session_id, "please start", f"start-{session_id}")

    def ask(self, session_id: str, deps: Deps | None = None) -> str:
        return clarifications.ask(deps or self.deps, agent_of(session_id), session_id, {"questions": QUESTIONS}).id

    def lease(self, bundle_id: str, deps: Deps | None = None) -> None:
        session_id = clarify.session_of(bundle_id)
        assert session_id is not None
        responses.wait(deps or self.deps, agent_of(session_id), bundle_id, timeout=0)

    def live_bundle(self, session_id: str) -> str:
        """The agent is mid-turn, asked, and its waiter holds a lease: the question is active and live."""
        self.running(session_id)
        bundle_id = self.ask(session_id)
        self.lease(bundle_id)
        return bundle_id

    def detached_bundle(self, session_id: str) -> str:
        """The agent's turn completed while it waited: the question is active and detached."""
        bundle_id = self.live_bundle(session_id)
        self.complete_turn(session_id)
        assert clarify.is_detached(self.session(session_id).bundle(bundle_id))  # type: ignore[arg-type]
        return bundle_id

    def superseded_bundle(self, session_id: str) -> str:
        """Detached, then the user sent a new message: a newer turn supersedes the question."""
        bundle_id = self.detached_bundle(session_id)
        self.send(session_id, "never mind, do something else", f"move-on-{session_id}")
        self.complete_turn(session_id)
        return bundle_id

    def answer(self, bundle_id: str, *, outcome: str = "answered", allow_retired: bool = False) -> Answer:
        session_id = clarify.session_of(bundle_id)
        assert session_id is not None
        marker = self.marker()
        body = answers_body(marker) if outcome == "answered" else {"rejected": True, "reject_reason": marker}
        a = Answer(session_id, marker, f"key-{marker}", body, bundle_id=bundle_id, outcome=outcome,
                   allow_retired=allow_retired)
        self.answers.append(a)
        return a

    def late_answer(self, bundle_id: str) -> Answer:
        session_id = clarify.session_of(bundle_id)
        assert session_id is not None
        marker = self.marker()
        body = {"client_message_id": f"late-{marker}", "content": "",
                "in_reply_to": {"clarification_id": bundle_id, **answers_body(marker)}}
        a = Answer(session_id, marker, f"late-{marker}", body)
        self.answers.append(a)
        return a

    def message_answer(self, session_id: str) -> Answer:
        marker = self.marker()
        a = Answer(session_id, marker, f"msg-{marker}", {"client_message_id": f"msg-{marker}", "content": marker})
        self.answers.append(a)
        return a

    def respond(self, a: Answer, deps: Deps | None = None) -> Any:
        assert a.bundle_id is not None
        return responses.respond(deps or self.deps, USER, a.bundle_id, a.body, a.key)

    def send_answer(self, a: Answer, deps: Deps | None = None) -> messages.Admission:
        return messages.send_message(deps or self.deps, USER, a.session_id, a.body)

    def waiter(self, bundle_id: str, deps: Deps | None = None) -> Callable[[float], None]:
        """The agent's live waiter: at the responder's first poll it receives the claim, durably confirms it,
        and only then hands the answer to the agent. It runs in the responder's process here, so a kill
        anywhere in it kills both."""
        done: list[bool] = []

        def hook(_: float) -> None:
            if done:
                return
            done.append(True)
            self.wait_and_confirm(bundle_id, deps)
        return hook

    def wait_and_confirm(self, bundle_id: str, deps: Deps | None = None) -> None:
        deps = deps or self.deps
        session_id = clarify.session_of(bundle_id)
        assert session_id is not None
        agent = agent_of(session_id)
        try:
            status, body = responses.wait(deps, agent, bundle_id, timeout=0)
            if status != 200 or "delivery_id" not in body:
                return
            responses.confirm(deps, agent, bundle_id, {"delivery_id": body["delivery_id"]})
        except DomainError:
            return  # the waiter's own failure: it does not hand anything over
        self.handoffs.append(json.dumps(body["response"]))

    def confirmed_live(self, session_id: str) -> Answer:
        """A live answer delivered: claimed, confirmed by the waiter (watchdog armed), handed to the agent."""
        bundle_id = self.live_bundle(session_id)
        a = self.answer(bundle_id)
        self.sleep_hook = self.waiter(bundle_id)
        try:
            self.respond(a)
        finally:
            self.sleep_hook = None
        return a

    def claimed_live(self, session_id: str) -> Answer:
        """A live answer claimed; the responder is still polling elsewhere and nobody confirmed yet."""
        bundle_id = self.live_bundle(session_id)
        a = self.answer(bundle_id)

        def abandon(_: float) -> None:
            raise Abandon()
        self.sleep_hook = abandon
        try:
            self.respond(a)
        except Abandon:
            pass
        finally:
            self.sleep_hook = None
        return a

    def background(self) -> dict[str, str]:
        """Every world holds history that must never come back to life: a superseded and an expired question."""
        old = self.new_session()
        superseded = self.superseded_bundle(old)
        ended = self.new_session()
        self.running(ended)
        expired = self.ask(ended)
        sessions.cancel_session(self.deps, USER, ended)
        return {"old": old, "superseded": superseded, "ended": ended, "expired": expired}

    def freeze(self) -> None:
        """Remember every bundle that no operation or recovery may reactivate (invariant 3)."""
        for s in self.memory.sessions.values():
            for b in s.bundles:
                if bundle_is_active(s, b):
                    continue
                current = s.current_turn is not None and s.current_turn.id == b.turn_id
                claim_in_flight = b.delivery is not None and b.delivery.pending
                if s.terminal or not current or not claim_in_flight:
                    self.frozen.add((s.id, b.id))

    # -------------------------------------------------------------- invariants
    def check(self, stage: str) -> list[str]:
        problems: list[str] = []
        for a in self.answers:
            _, found = (self.bundle_fate(a) if a.bundle_id else self.message_fate(a))
            problems += [f"{stage}: {a.marker}: {p}" for p in found]
        problems += [f"{stage}: {p}" for p in self.check_history() + self.check_projection() + self.check_events()]
        return problems

    def bundle_fate(self, a: Answer) -> tuple[str, list[str]]:
        assert a.bundle_id is not None
        s = self.session(a.session_id)
        b = s.bundle(a.bundle_id)
        if b is None:
            return "gone", ["(1) the answered bundle vanished"]
        problems: list[str] = []
        carrying = self.agent.carrying(a.marker)
        if len(carrying) > 1:
            problems.append(f"(2) the answer may have reached the agent {len(carrying)} times")
        d = b.delivery
        if d is not None and d.pending:
            problems.append(f"(1) delivery intent {d.delivery_id} is still pending after the reconciler")
        if s.reservation is not None:
            problems.append(f"(1) reservation {s.reservation.turn_id} survived the reconciler")
        rows = {r.question.question_id: r for r in b.rows}
        statuses = {rows[q].status for q in a.rows}
        if statuses == {"pending"}:
            if not bundle_is_active(s, b):
                problems.append(f"(1) the rows are pending but not answerable ({clarify.derived_state(s, b)})")
            return "restorable", problems
        if statuses != {a.outcome}:
            return "mixed", problems + [f"(1) rows are {sorted(statuses)}: neither restorable nor {a.outcome}"]
        if d is None:
            return "terminal", problems + ["(1) terminal rows without a delivery record"]
        result = d.result
        if result == "live":
            w = s.watchdog
            held = w is not None and w.clarification_id == b.id and a.marker in w.text
            prompted = s.prompt is not None and a.marker in s.prompt.content and s.prompt.dispatch in (
                Dispatch.ATTEMPTED, Dispatch.ACCEPTED)
            if not (any(a.marker in h for h in self.handoffs) or held or prompted or carrying):
                problems.append("(1) confirmed live, but no waiter handed it over and no watchdog holds it")
            return "delivered", problems
        if result in ("resumed", "ambiguous"):
            if s.current_turn is None or s.current_turn.id == b.turn_id:
                problems.append(f"(1) terminal ({result}) without a successor turn")
            if result == "resumed" and len(carrying) != 1:
                problems.append(f"(1) resumed, but {len(carrying)} prompts carried the answer")
            return result, problems
        if result == "recorded" and a.outcome == "rejected":
            return "recorded", problems
        if result == "retired" and a.allow_retired:
            return "retired", problems
        return str(result), problems + [f"(1) the delivery ended as {result!r}: the answer never reached the agent"]

    def message_fate(self, a: Answer) -> tuple[str, list[str]]:
        s = self.session(a.session_id)
        problems: list[str] = []
        carrying = self.agent.carrying(a.marker)
        if len(carrying) > 1:
            problems.append(f"(2) the message may have reached the agent {len(carrying)} times")
        remembered = self.memory.get_remembered(f"message:{s.id}:{a.key}")
        told_ok = remembered is not None and remembered.status_code < 400
        prompt = s.prompt if s.prompt is not None and a.marker in s.prompt.content else None
        if any(a.marker in p.content for p in s.queue):
            if s.current_turn is None or not s.current_turn.open:
                problems.append("(1) still queued although no turn is open: the queue was never drained")
            return "queued", problems
        if prompt is None:
            if carrying:
                return "superseded", problems
            if told_ok:
                problems.append("(1) the client is told the message was admitted, but nothing carries it")
            return "not admitted", problems
        if prompt.dispatch == Dispatch.PENDING:
            return "pending", problems + ["(1) an admitted prompt is still undispatched after the reconciler"]
        if prompt.dispatch == Dispatch.ACCEPTED:
            if len(carrying) != 1:
                problems.append(f"(1) accepted, but {len(carrying)} prompts carried it")
            return "sent", problems
        if prompt.dispatch == Dispatch.ATTEMPTED:
            return "ambiguous", problems
        if told_ok and self._replays_success(a):
            problems.append("(1) agentctl refused the message, yet this admission's retry replays success "
                            f"({remembered.status_code if remembered else '-'}): the answer is lost")
        turn = s.current_turn
        if turn is not None and turn.id == prompt.turn_id and turn.open:
            problems.append(f"(1) the refused message's turn is still open: the session is wedged in {s.state}")
        return "refused", problems

    def _replays_success(self, a: Answer) -> bool:
        """What a client retrying this admission is told (the record alone may be stale after a crash)."""
        writes = self.memory.writes
        try:
            self.send_answer(a)
        except DomainError:
            return False
        finally:
            assert self.memory.writes == writes, "a replayed admission must write nothing"
        return True

    def check_history(self) -> list[str]:
        problems = []
        for s in self.memory.sessions.values():
            for b in s.bundles:
                if (s.id, b.id) in self.frozen and bundle_is_active(s, b):
                    problems.append(f"(3) bundle {b.id} was {'finished' if s.terminal else 'inactive'} before the "
                                    f"operation and is active again")
        return problems

    def check_projection(self) -> list[str]:
        problems = []
        for task in list(self.memory.tasks.values()):
            rule = task_summary(self.memory.list_sessions(task.id))
            stored = (task.summary.pending_action, task.summary.primary_session_id)
            if stored != rule:
                problems.append(f"(4) task {task.id} summary {stored} != rule {rule}")
            refreshed = refresh_task_summary(self.deps, task.id)
            if refreshed is None or (refreshed.summary.pending_action, refreshed.summary.primary_session_id) != rule:
                problems.append(f"(4) refresh_task_summary left task {task.id} disagreeing with the rule")
        return problems

    def events(self) -> list[Event]:
        return [e for feed in self.memory.events.values() for _, e in feed.values()]

    def check_events(self) -> list[str]:
        problems = []
        seen: dict[str, int] = {}
        for event in self.events():
            leaked = private_paths(event.payload)
            if leaked:
                problems.append(f"(5) event {event.id} carries private fields {leaked}")
            if "agent-token:" in json.dumps(event.payload, default=str):
                problems.append(f"(5) event {event.id} carries an agent token")
            seen[event.id] = seen.get(event.id, 0) + 1
        problems += [f"(6) event id {eid} written {n} times" for eid, n in seen.items() if n > 1]
        for s in self.memory.sessions.values():  # U5/R7: a published turn's events reached the feed
            turn = published_turn(s)
            if turn is None:
                continue
            if f"turn.started:{turn.id}" not in seen:
                problems.append(f"(6) turn {turn.id} of {s.id} is current and published but turn.started is missing")
            if turn.completed_at and f"turn.completed:{turn.id}" not in seen:
                problems.append(f"(6) turn {turn.id} of {s.id} completed but turn.completed is missing")
        for task in self.memory.tasks.values():
            rev = task.summary.revision
            if rev and f"task.status_summary.updated:{task.id}:{rev}" not in seen:
                problems.append(f"(6) task {task.id} summary revision {rev} was committed but never published")
        return problems

    def retry(self) -> list[str]:
        """The user resubmits whatever came back as retryable: it must now go through, exactly once."""
        problems = []
        for a in self.answers:
            fate, _ = self.bundle_fate(a) if a.bundle_id else self.message_fate(a)
            if fate not in ("restorable", "not admitted"):
                continue
            a.retried = True
            try:
                if a.bundle_id is not None:
                    self.sleep_hook = self.waiter(a.bundle_id)
                    self.respond(a)
                else:
                    self.send_answer(a)
            except DomainError as exc:
                problems.append(f"retry: {a.marker}: (1) the {fate} answer could not be resubmitted: "
                                f"{type(exc).__name__}: {exc}")
            finally:
                self.sleep_hook = None
        return problems


def private_paths(value: Any, path: str = "") -> list[str]:
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            if k in PRIVATE_FIELDS:
                out.append(here)
            out += private_paths(v, here)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += private_paths(v, f"{path}[{i}]")
    return out


# ------------------------------------------------------------------ scenarios
Ctx = dict[str, Any]


@dataclass
class Scenario:
    name: str
    setup: Callable[[World], Ctx]
    op: Callable[[World, Deps, Ctx], Any]
    check: Callable[[World, Ctx, str], list[str]] | None = None
    after: Callable[[World, Ctx], None] | None = None  # the world moves on before time passes
    pump_setup: bool = True
    clears_script: bool = True


def _bg(w: World) -> Ctx:
    return dict(w.background())


# -- ask, then the waiter gives up (detach)
def s_ask_detach(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    w.running(ctx["main"])
    return ctx


def op_ask_detach(w: World, deps: Deps, ctx: Ctx) -> None:
    sid = ctx["main"]
    before = deps.store.get_session(sid)
    expected = before.current_turn.id if before and before.current_turn else None
    bundle_id = w.ask(sid, deps)
    w.lease(bundle_id, deps)
    current = deps.store.get_session(sid)
    assert current is not None
    clarifications.pause_for_input(deps, current, bundle_id, expected)


def check_ask_detach(w: World, ctx: Ctx, stage: str) -> list[str]:
    s = w.session(ctx["main"])
    problems = []
    for b in s.bundles:
        if not bundle_is_active(s, b):
            problems.append(f"(1) the asked question {b.id} is no longer answerable ({clarify.derived_state(s, b)})")
        if stage == "eventually" and b.waiter_until and not clarify.is_detached(b):
            problems.append(f"(7) the waiter's lease of {b.id} lapsed but the question was never detached")
        if stage == "eventually" and clarify.is_detached(b):
            probe = CrashingStore(w.store)  # detaching again is a semantic no-op: no write, nothing returned
            _, rows = clarifications.detach_bundle(w.using(probe), s, b.id)
            if rows or probe.methods:
                problems.append(f"(2) a repeated detach of {b.id} wrote {probe.methods} and returned {rows}")
    return problems


# -- respond live
def s_live(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.answer(w.live_bundle(ctx["main"]))
    return ctx


def op_respond_live_confirmed(w: World, deps: Deps, ctx: Ctx) -> None:
    a = ctx["answer"]
    w.sleep_hook = w.waiter(a.bundle_id, deps)
    w.respond(a, deps)


def op_respond(w: World, deps: Deps, ctx: Ctx) -> None:
    w.respond(ctx["answer"], deps)


# -- respond detached
def s_detached(script: str | None = None, outcome: str = "answered") -> Callable[[World], Ctx]:
    def setup(w: World) -> Ctx:
        ctx = _bg(w)
        ctx["main"] = w.new_session()
        ctx["answer"] = w.answer(w.detached_bundle(ctx["main"]), outcome=outcome)
        ctx["script"] = script
        return ctx
    return setup


def op_respond_scripted(w: World, deps: Deps, ctx: Ctx) -> None:
    if ctx.get("script"):
        w.agent.script(ctx["script"])
    w.respond(ctx["answer"], deps)


def s_partial_sibling(w: World) -> Ctx:
    """U1: an earlier partial write already made sibling q2 terminal; the answer claims q1 only."""
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    bundle_id = w.detached_bundle(ctx["main"])
    w.store.close_rows(ctx["main"], bundle_id, ["q2"], status="cancelled", at=w.deps.now())
    a = w.answer(bundle_id)
    a.rows = ("q1",)
    a.body = {"answers": a.body["answers"][:1]}
    ctx["answer"], ctx["bundle"] = a, bundle_id
    return ctx


def check_sibling(w: World, ctx: Ctx, stage: str) -> list[str]:
    b = w.session(ctx["main"]).bundle(ctx["bundle"])
    q2 = next(r for r in b.rows if r.question.question_id == "q2") if b else None
    if q2 is None or q2.status != "cancelled" or q2.response is not None:
        return [f"U1: the sibling made terminal before the claim was touched: {q2}"]
    return []


# -- the agent's waiter confirms a claim
def s_claimed(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.claimed_live(ctx["main"])
    return ctx


def op_confirm(w: World, deps: Deps, ctx: Ctx) -> None:
    w.wait_and_confirm(ctx["answer"].bundle_id, deps)


# -- the watchdog
def s_watchdog_due(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.confirmed_live(ctx["main"])
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 5)
    return ctx


def s_watchdog_superseded(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.confirmed_live(ctx["main"])
    w.complete_turn(ctx["main"])  # turn_completed is not activity: the watchdog stays armed
    w.send(ctx["main"], "something else", "next")
    assert w.session(ctx["main"]).watchdog is not None
    ctx["cancels"] = len(w.agent.cancels)
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 5)
    return ctx


def op_fire(w: World, deps: Deps, ctx: Ctx) -> None:
    s = deps.store.get_session(ctx["main"])
    assert s is not None
    watchdog.fire(deps, s)


def check_wd1(w: World, ctx: Ctx, stage: str) -> list[str]:
    a = ctx["answer"]
    problems = []
    if w.agent.carrying(a.marker):
        problems.append("(2) WD1: the watchdog prompted a stale answer into the successor turn")
    if len(w.agent.cancels) != ctx["cancels"]:
        problems.append("WD1: the watchdog cancelled the successor turn")
    return problems


# -- late answers and messages
def s_late(script: str | None = None, busy: bool = False) -> Callable[[World], Ctx]:
    def setup(w: World) -> Ctx:
        ctx = _bg(w)
        if busy:
            w.send(ctx["old"], "busy again", "busy")
        ctx["answer"] = w.late_answer(ctx["superseded"])
        ctx["script"] = script
        return ctx
    return setup


def op_send_answer(w: World, deps: Deps, ctx: Ctx) -> None:
    if ctx.get("script"):
        w.agent.script(ctx["script"])
    w.send_answer(ctx["answer"], deps)


def s_late_steered(w: World) -> Ctx:
    """A late answer to a busy agent whose runtime steers it into the running turn."""
    ctx = s_late(busy=True)(w)
    ctx["answer"].body["delivery"] = "steer"
    w.agent.steering = True
    return ctx


def s_plain(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.message_answer(ctx["main"])
    return ctx


# -- agent frames
def s_activity(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.confirmed_live(ctx["main"])
    queued = w.message_answer(ctx["main"])
    admission = w.send_answer(queued)
    assert admission.admission == "queued"
    ctx["queued"] = queued
    return ctx


def op_activity(w: World, deps: Deps, ctx: Ctx) -> None:
    sid = ctx["main"]
    w.frames(sid, w.frame("message", sid, content="working on it"), w.frame("turn_completed", sid), deps=deps)


def agent_finishes_its_turn(key: str) -> Callable[[World, Ctx], None]:
    """The agent completes the turn it is in (it re-posts a completion whose request died)."""
    def after(w: World, ctx: Ctx) -> None:
        turn = w.session(ctx[key]).current_turn
        if turn is not None and turn.open:
            w.complete_turn(ctx[key])
    return after


def s_agent_turn(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["bundle"] = w.detached_bundle(ctx["main"])
    return ctx


def op_agent_output(w: World, deps: Deps, ctx: Ctx) -> None:
    w.frames(ctx["main"], {"type": "message", "execution_id": w.session(ctx["main"]).execution_id,
                           "content": "I carried on"}, deps=deps)


# -- lifecycle and housekeeping
def s_live_question(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["bundle"] = w.live_bundle(ctx["main"])
    return ctx


def op_cancel_session(w: World, deps: Deps, ctx: Ctx) -> None:
    sessions.cancel_session(deps, USER, ctx["main"])


def check_cancelled(w: World, ctx: Ctx, stage: str) -> list[str]:
    s = w.session(ctx["main"])
    b = s.bundle(ctx["bundle"])
    if s.terminal and b is not None and any(r.status == "pending" for r in b.rows):
        return ["terminal session kept a pending question (it must expire in the same write)"]
    return []


def op_rename_and_delete_task(w: World, deps: Deps, ctx: Ctx) -> None:
    task_changes.rename_task(deps, USER, w.task_id, {"title": "Renamed"})
    task_changes.delete_task(deps, USER, w.task_id)


def op_agent_cancels(w: World, deps: Deps, ctx: Ctx) -> None:
    clarifications.cancel(deps, agent_of(ctx["main"]), ctx["bundle"])


def op_dismiss(w: World, deps: Deps, ctx: Ctx) -> None:
    responses.dismiss(deps, USER, ctx["superseded"])


def op_delete_question(w: World, deps: Deps, ctx: Ctx) -> None:
    history.delete_message(deps, USER, ctx["old"], w.session(ctx["old"]).bundle(ctx["superseded"]).message_id)  # type: ignore[union-attr]


def op_workflow(w: World, deps: Deps, ctx: Ctx) -> None:
    workflow.transition(deps, USER, w.task_id, {"to_step": "review"})


def op_create(w: World, deps: Deps, ctx: Ctx) -> None:
    task = tasks.create_task(deps, USER, {"title": "Second task"})
    sessions.create_session(deps, USER, task.id, {"prompt": ctx["marker"]})


def s_create(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["marker"] = w.marker()
    return ctx


def check_create(w: World, ctx: Ctx, stage: str) -> list[str]:
    problems = []
    if len(w.agent.carrying(ctx["marker"])) > 1:
        problems.append("(2) the first prompt may have reached the agent twice")
    for s in w.memory.sessions.values():
        if s.prompt is not None and ctx["marker"] in s.prompt.content and s.prompt.dispatch == Dispatch.PENDING:
            problems.append("(1) the first prompt is still undispatched after the reconciler")
    return problems


# -- the stream function itself
def s_stream(w: World) -> Ctx:
    ctx = _bg(w)
    w.pump()  # the background is already projected; the main session's changes are not
    ctx["main"] = w.new_session()
    bundle_id = w.detached_bundle(ctx["main"])
    a = w.answer(bundle_id)
    w.respond(a)
    ctx["answer"] = a
    # A question still open when its records are processed: the projection must write the task summary.
    ctx["waiting"] = w.new_session()
    w.detached_bundle(ctx["waiting"])
    return ctx


def op_stream(w: World, deps: Deps, ctx: Ctx) -> None:
    end = len(w.store.changes)
    records = w.store.records(w.pumped)
    result = streams.process_batch(records, lambda r: streams.on_session_record(deps, r))
    assert result == {"batchItemFailures": []}
    w.pumped = end


# -- the reconciler itself, repairing a world broken at every kind of boundary
def s_broken(w: World) -> Ctx:
    ctx = _bg(w)
    # A: detached answer, died after claim + reservation (unattempted): roll back, restore exactly the rows.
    a = w.answer(w.detached_bundle(w.new_session()))
    w.crash_during("claim", "after", lambda d: w.respond(a, d))
    # B: detached answer, died after the attempt marker: ambiguous, keep the successor, never resend.
    b = w.answer(w.detached_bundle(w.new_session()))
    w.crash_during("mark_attempted", "after", lambda d: w.respond(b, d))
    # C: live answer, died after the claim (L1/U4): restore the still-current claim to pending.
    c = w.answer(w.live_bundle(w.new_session()))
    w.crash_during("claim", "after", lambda d: w.respond(c, d))
    # D: live answer claimed, then the user moved on: retire the intent, never reactivate history.
    d_session = w.new_session()
    d = w.answer(w.live_bundle(d_session), allow_retired=True)
    w.crash_during("claim", "after", lambda dd: w.respond(d, dd))
    w.complete_turn(d_session)
    w.send(d_session, "forget that, do this", "moved-on")
    # E: a message admitted, died before the attempt marker: dispatch it once.
    e = w.message_answer(w.new_session())
    w.crash_during("set_dispatch", "before", lambda dd: w.send_answer(e, dd))
    # F: a message, died after the attempt marker (before agentctl): ambiguous, never resend.
    f = w.message_answer(w.new_session())
    w.crash_during("set_dispatch", "after", lambda dd: w.send_answer(f, dd))
    # G: a waiter whose lease lapsed: detach and pause the agent.
    w.live_bundle(w.new_session())
    # H: a confirmed live answer whose watchdog is due: fall back once.
    w.confirmed_live(w.new_session())
    # I: a queued message left behind by a crash between turn completion and the drain.
    i_session = w.new_session()
    w.running(i_session)
    i = w.message_answer(i_session)
    assert w.send_answer(i).admission == "queued"
    w.crash_during("complete_turn", "after", lambda dd: w.frames(i_session, w.frame("turn_completed", i_session),
                                                                  deps=dd))
    w.clock.advance(30)  # past the lease of G and the watchdog of H
    return ctx


def op_reconcile(w: World, deps: Deps, ctx: Ctx) -> None:
    reconcile(deps, before_traffic=True)


SCENARIOS: list[Scenario] = [
    Scenario("ask, then the waiter gives up (detach)", s_ask_detach, op_ask_detach, check_ask_detach),
    Scenario("respond live, the waiter confirms", s_live, op_respond_live_confirmed),
    Scenario("respond live, no confirmation (restore)", s_live, op_respond),
    Scenario("respond detached, agentctl accepts (resume)", s_detached(), op_respond_scripted),
    Scenario("respond detached, agentctl rejects", s_detached("reject"), op_respond_scripted),
    Scenario("respond detached, agentctl accepts then the transport fails", s_detached("accept-then-fail"),
             op_respond_scripted),
    Scenario("respond detached, agentctl times out", s_detached("ambiguous"), op_respond_scripted),
    Scenario("skip a detached question", s_detached(outcome="rejected"), op_respond_scripted),
    Scenario("respond detached, a sibling already terminal (U1)", s_partial_sibling, op_respond_scripted,
             check_sibling),
    Scenario("confirm by the agent's waiter", s_claimed, op_confirm),
    Scenario("watchdog fallback", s_watchdog_due, op_fire),
    Scenario("watchdog after its turn was superseded (WD1)", s_watchdog_superseded, op_fire, check_wd1),
    Scenario("late answer admitted and sent", s_late(), op_send_answer),
    Scenario("late answer queued behind a busy agent", s_late(busy=True), op_send_answer,
             after=agent_finishes_its_turn("old")),
    Scenario("late answer, agentctl rejects", s_late("reject"), op_send_answer),
    Scenario("late answer steered into the running turn", s_late_steered, op_send_answer,
             after=agent_finishes_its_turn("old")),
    Scenario("plain message sent", s_plain, op_send_answer),
    Scenario("agent activity, turn completion and queue drain", s_activity, op_activity,
             after=agent_finishes_its_turn("main")),
    Scenario("agent output with no open turn starts one", s_agent_turn, op_agent_output),
    Scenario("cancel a session with a pending question", s_live_question, op_cancel_session, check_cancelled),
    Scenario("the agent withdraws its question", s_live_question, op_agent_cancels),
    Scenario("rename, then delete a task whose session has a pending question", s_live_question,
             op_rename_and_delete_task, check_cancelled),
    Scenario("dismiss a superseded question", _bg, op_dismiss),
    Scenario("delete a superseded question's message", _bg, op_delete_question),
    Scenario("workflow transition guarded by the rule", _bg, op_workflow),
    Scenario("create a task and a session with a first prompt", s_create, op_create, check_create),
    Scenario("stream function (then redelivered)", s_stream, op_stream, pump_setup=False),
    Scenario("the reconciler itself (then run again)", s_broken, op_reconcile),
]


# ------------------------------------------------------------------ the harness
@dataclass
class Run:
    writes: list[str]
    died: ProcessDied | None
    outcome: str
    problems: list[str] = field(default_factory=list)


def run(scenario: Scenario, kill: KillPoint | None) -> Run:
    w = World()
    ctx = scenario.setup(w)
    if scenario.pump_setup:
        w.pump()
    w.freeze()
    store = CrashingStore(w.store, kill)
    outcome = "ok"
    try:
        scenario.op(w, w.using(store), ctx)
    except ProcessDied:
        outcome = "died"
    except (DomainError, ReconcileFailed) as exc:
        outcome = type(exc).__name__
    finally:
        w.sleep_hook = None
    problems: list[str] = []
    if store.died is not None and outcome != "died":
        problems.append(f"ProcessDied was swallowed by the application (operation ended {outcome})")
    if scenario.clears_script:
        w.agent.outcomes.clear()  # the agent behaves again after the crash
    try:
        reconcile(w.deps, before_traffic=True)
    except ReconcileFailed as exc:
        problems.append(f"the reconciler failed: {exc}")
    w.pump()
    problems += w.check("after reconcile")
    if scenario.check:
        problems += [f"after reconcile: {p}" for p in scenario.check(w, ctx, "after reconcile")]
    problems += w.retry()
    if scenario.after:
        scenario.after(w, ctx)
    w.pump()
    w.clock.advance(3600)
    try:
        reconcile(w.deps, before_traffic=False)
    except ReconcileFailed as exc:
        problems.append(f"the scheduled reconciler failed: {exc}")
    w.pump()
    problems += w.check("eventually")
    if scenario.check:
        problems += [f"eventually: {p}" for p in scenario.check(w, ctx, "eventually")]
    for a in w.answers:
        fate, _ = w.bundle_fate(a) if a.bundle_id else w.message_fate(a)
        if fate in ("restorable", "not admitted") and a.retried:
            problems.append(f"eventually: {a.marker}: (1) still {fate} after a successful resubmission")
    left = w.memory.due_sessions(None)
    if left:
        problems.append(f"eventually: (7) the reconciler left {len(left)} sessions in its index: {left}")
    return Run(store.methods, store.died, outcome, problems)


@dataclass
class Violation:
    scenario: str
    index: int | None
    method: str | None
    phase: str | None
    problem: str

    def __str__(self) -> str:
        where = "dry run" if self.index is None else f"{self.phase} write #{self.index} ({self.method})"
        return f"[{self.scenario}] {where}: {self.problem}"


def test_crash_points__every_write_boundary__reconciler_restores_the_invariants(pytestconfig: Any) -> None:
    started = time.perf_counter()
    covered: set[str] = set()
    kill_points = 0
    write_calls = 0
    violations: list[Violation] = []
    lines: list[str] = []
    for scenario in SCENARIOS:
        dry = run(scenario, None)
        violations += [Violation(scenario.name, None, None, None, p) for p in dry.problems]
        assert dry.writes, f"{scenario.name}: the operation wrote nothing"
        write_calls += len(dry.writes)
        lines.append(f"{scenario.name}: {len(dry.writes)} writes ({dry.outcome}): {' '.join(dry.writes)}")
        for k, method in enumerate(dry.writes):
            for phase in PHASES:
                result = run(scenario, KillPoint(k, phase))
                kill_points += 1
                if result.died is None or result.died.index != k or result.writes[:k] != dry.writes[:k]:
                    violations.append(Violation(scenario.name, k, method, phase,
                                                "nondeterministic: the kill point was not reached on the dry "
                                                f"run's path (wrote {result.writes})"))
                    continue
                covered.add(result.died.method)
                violations += [Violation(scenario.name, k, method, phase, p) for p in result.problems]
    elapsed = time.perf_counter() - started
    expected = WRITE_METHODS - set(ALLOWED_UNREACHED)
    summary = (f"crash-point harness: {len(covered)} boundaries ({kill_points} kill points) across "
               f"{len(SCENARIOS)} scenarios; {write_calls} write calls; {elapsed:.1f} s")
    report = [summary, "", *lines, "", f"violations: {len(violations)}", *(str(v) for v in violations)]
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("\n".join(report) + "\n")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # shown without -s too
        with capture.global_and_fixture_disabled():
            print(f"\n{summary}")
    else:
        print(summary)

    assert not (expected - covered), (f"write boundaries no scenario reaches: {sorted(expected - covered)} "
                                      "(add a scenario, or justify an entry in ALLOWED_UNREACHED)")
    assert not (covered - WRITE_METHODS), f"kills injected at non-write methods: {sorted(covered - WRITE_METHODS)}"
    assert len(covered) >= MIN_BOUNDARIES
    assert not violations, f"{len(violations)} invariant violations:\n" + "\n".join(str(v) for v in violations[:60])


def test_crashing_store__write_set__derived_from_the_protocol_minus_reads() -> None:
    class Extended(MemoryStore):
        def archive_session(self, session_id: str) -> None:  # a new store method: a write until declared a read
            pass
    from tests.support.crash import protocol_members, write_methods

    class Proto:
        def get_session(self) -> None: ...
        def archive_session(self) -> None: ...
    assert write_methods(Proto, frozenset({"get_session"})) == {"archive_session"}
    assert "claim" in WRITE_METHODS and "get_session" not in WRITE_METHODS
    assert WRITE_METHODS | {"get_session", "due_sessions"} <= protocol_members()
    store = CrashingStore(Extended(), KillPoint(0, "after"), writes=WRITE_METHODS | {"archive_session"})
    try:
        store.archive_session("s")
    except ProcessDied as died:
        assert (died.method, died.index, died.phase) == ("archive_session", 0, "after")
    else:
        raise AssertionError("the kill was not injected")


def test_crashing_store__process_died__not_an_exception_and_kills_later_calls() -> None:
    assert not issubclass(ProcessDied, Exception)
    w = World()
    store = CrashingStore(w.store, KillPoint(0, "before"))
    try:
        sessions.create_session(w.using(store), USER, w.task_id, {})
    except ProcessDied as died:
        assert died.phase == "before" and died.method == "create_session"
    assert w.memory.list_sessions(w.task_id) == []  # died before the write: nothing written
    try:
        store.get_session("x")
    except ProcessDied:
        pass
    else:
        raise AssertionError("a dead process must not read either")
