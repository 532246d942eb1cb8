"""The harness world: one deterministic installation (MemoryStore behind a stream tap, scripted agent, step
clock, counter ids) that plays users and agents, remembers every answer in flight, and checks the
invariants after anything happened to it. The crash-point harness and the interleaving explorer share it.

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
      task.status_summary.updated event.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.auth.tokens import Caller
from chalicelib.domain import clarify
from chalicelib.domain.errors import DomainError
from chalicelib.domain.model import Bundle, Dispatch, Event
from chalicelib.domain.public import PRIVATE_FIELDS
from chalicelib.domain.rules import bundle_is_active, published_turn
from chalicelib.functions import streams
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import archive, messages, responses, sessions
from chalicelib.services.deps import Deps, Settings
from chalicelib.services.projection import refresh_task_summary, task_summary
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from tests.support.crash import CrashingStore, KillPoint, ProcessDied, SessionTap
from tests.support.fakes import CounterIds, PromptCall
from tests.support.world import World as BaseWorld
from tests.support.world import agent_of

USER = Caller(sub="user-1", role="user", workspace_id="ws-1")


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
    told: str = ""  # what the respond that carried it answered ("ok" or the error's name), when recorded


HANDED_BACK = {"restorable", "retired", "answered again", "deleted after it was handed back"}

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
class World(BaseWorld):
    """One deterministic installation: MemoryStore behind a stream tap, fake agent, step clock, counter ids."""

    def __init__(self, memory: MemoryStore | None = None, ids: str = "id") -> None:
        super().__init__(SessionTap(memory or MemoryStore()), step_ms=1,
                         settings=Settings(deployment_id="crash-harness"))
        self.sleep_hook: Callable[[float], None] | None = None
        self.deps = replace(self.deps, sleep=self._sleep, new_id=CounterIds(ids))
        self.handoffs: list[str] = []  # what live waiters returned to the agent
        self.answers: list[Answer] = []
        self.pumped = 0
        self.frozen: set[tuple[str, str]] = set()
        self.task_id = self.task()
        self._markers = 0

    # -------------------------------------------------------------- plumbing
    def _sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if self.sleep_hook is not None:
            self.sleep_hook(seconds)

    def using(self, store: Any) -> Deps:
        return replace(self.deps, store=store)

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
        return self.session(task_id=self.task_id).id

    def unrepairable(self) -> str:
        """A session no repair fits (its reservation names a bundle that is not there): the reconciler must
        set it apart (quarantine) and carry on."""
        sid = self.new_session()
        item = codec.session_to_item(self.get(sid))
        item["reservation"] = {"turn_id": "t-nowhere", "seq": 1,
                               "predecessor": {"id": "t0", "seq": 0, "started_at": ""},
                               "bundle_id": f"{sid}.gone", "bundle_turn_id": "t0", "row_ids": ["q1"],
                               "generation": 1, "created_at": self.deps.now(), "deadline": self.deps.now(),
                               "attempted": False}
        item.update(recon_shard="due", recon_due=self.deps.now())
        self.memory.put_raw_session(item)
        return sid

    def complete_turn(self, session_id: str) -> None:
        self.report(session_id, "turn_completed")


    def running(self, session_id: str) -> None:
        self.send(session_id, "please start", f"start-{session_id}")

    def ask(self, session_id: str, questions: list[dict[str, Any]] | None = None, deps: Deps | None = None,
            **body: Any) -> str:
        return super().ask(session_id, questions or QUESTIONS, deps, **body)

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
        assert clarify.is_detached(self.get(session_id).bundle(bundle_id), self.deps.now())  # type: ignore[arg-type]
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

    def respond_answer(self, a: Answer, deps: Deps | None = None) -> Any:
        assert a.bundle_id is not None
        return self.respond(a.bundle_id, a.body, a.key, deps=deps)

    def send_answer(self, a: Answer, deps: Deps | None = None) -> messages.Admission:
        return self.message(a.session_id, a.body, deps=deps)

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
            self.confirm(bundle_id, body["delivery_id"], deps)
        except DomainError:
            return  # the waiter's own failure: it does not hand anything over
        self.handoffs.append(json.dumps(body["response"]))

    def confirmed_live(self, session_id: str) -> Answer:
        """A live answer delivered: claimed, confirmed by the waiter (watchdog armed), handed to the agent."""
        bundle_id = self.live_bundle(session_id)
        a = self.answer(bundle_id)
        self.sleep_hook = self.waiter(bundle_id)
        try:
            self.respond_answer(a)
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
            self.respond_answer(a)
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
            fate, found = (self.bundle_fate(a) if a.bundle_id else self.message_fate(a))
            if a.told == "DispatchAmbiguous" and fate in HANDED_BACK:
                # (12) "it may have reached the agent; it will not be sent again" is never said of an answer
                # that was handed back: that user would stop, though the question wants an answer again.
                found = [*found, f"(12) told the answer may have reached the agent, but it ended {fate}"]
            problems += [f"{stage}: {a.marker}: {p}" for p in found]
        problems += [f"{stage}: {p}" for p in self.check_history() + self.check_projection() + self.check_events()]
        return problems

    def bundle_fate(self, a: Answer) -> tuple[str, list[str]]:
        assert a.bundle_id is not None
        s = self.get(a.session_id)
        found = archive.find(self.deps, s, a.bundle_id)  # a closed question may have moved to history
        s, b = found if found is not None else (s, None)
        carrying = self.agent.carrying(a.marker)
        problems: list[str] = self._delivered_at_most_once(a, b, carrying)
        if b is None:  # the user deleted the question: only once its answer was delivered (or recorded) or
            # handed back (remove_bundle refuses while an answer is on its way)
            if len(carrying) == 1 or any(a.marker in h for h in self.handoffs) or a.outcome == "rejected":
                return "deleted after delivery", []
            if a.allow_retired and not carrying:
                return "deleted after it was handed back", problems
            return "gone", problems + ["(1) the answered bundle vanished"]
        if len(carrying) > 1:
            problems.append(f"(2) the answer may have reached the agent {len(carrying)} times")
        d = b.delivery
        if d is not None and d.pending and s.reservation is None and d.deadline >= self.deps.now():
            return "in flight", problems  # its owner may still be live: no reconciler takes it back before
        if d is not None and d.pending:
            problems.append(f"(1) delivery intent {d.delivery_id} is still pending after the reconciler")
        if s.reservation is not None:
            problems.append(f"(1) reservation {s.reservation.turn_id} survived the reconciler")
        rows = {r.question.question_id: r for r in b.rows}
        statuses = {rows[q].status for q in a.rows}
        if statuses != {"pending"} and not any(a.marker in json.dumps(rows[q].response) for q in a.rows):
            # Not this answer's rows any more: it was handed back (restored), then the question was answered
            # again, skipped, or expired; each of those answers has its own fate.
            if not carrying and (a.allow_retired or statuses & {"answered", "rejected"}):
                return "answered again", problems
        if statuses == {"pending"}:
            if bundle_is_active(s, b):
                return "restorable", problems
            state = clarify.derived_state(s, b, self.deps.now())
            if a.allow_retired and state in ("superseded", "expired"):
                return "retired", problems  # the question moved on first: unanswered history, sendable late
            return "restorable", problems + [f"(1) the rows are pending but not answerable ({state})"]
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
        return str(result), problems + [f"(1) the delivery ended as {result!r}: the answer never reached the agent"]

    def _delivered_at_most_once(self, a: Answer, b: Bundle | None, carrying: list[PromptCall]) -> list[str]:
        """(2) for every outcome: the live waiters that handed the answer over plus the prompts that may have
        carried it into a new turn are at most one. The watchdog's replacement prompt stays in the question's
        own turn and follows a live handoff the agent showed no sign of having used: it is not a second one."""
        handoffs = sum(a.marker in h for h in self.handoffs)
        resumes = [c for c in carrying if b is None or c.request.turn_id != b.turn_id]
        problems = []
        if handoffs + len(resumes) > 1:
            problems.append(f"(2) the answer reached the agent {handoffs + len(resumes)} times ({handoffs} live "
                            f"handoffs, {len(resumes)} prompts)")
        rows = {r.question.question_id: r for r in b.rows} if b is not None else {}
        if handoffs + len(resumes) and a.rows and all(rows.get(q) is not None and rows[q].response is None
                                                      for q in a.rows):
            problems.append("(2) the answer reached the agent, yet its question is unanswered again (it could "
                            "be answered and delivered a second time)")
        return problems

    def message_fate(self, a: Answer) -> tuple[str, list[str]]:
        s = self.get(a.session_id)
        problems: list[str] = []
        carrying = self.agent.carrying(a.marker)
        if len(carrying) > 1:
            problems.append(f"(2) the message may have reached the agent {len(carrying)} times")
        remembered = self.memory.get_remembered(f"message:{s.id}:{a.key}")
        told_ok = remembered is not None and "error" not in remembered.response
        prompt = s.prompt if s.prompt is not None and a.marker in s.prompt.content else None
        if any(a.marker in p.content for p in s.queue):
            if s.terminal:
                return "not sent (the session ended)", problems  # shown so in the transcript
            if s.current_turn is None or not s.current_turn.open:
                problems.append("(1) still queued although no turn is open: the queue was never drained")
            return "queued", problems
        if prompt is None:
            if carrying:
                return "superseded", problems
            if remembered is not None and not told_ok:
                return "refused", problems  # the client was told (its retries replay it) and holds the text
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
                            f"({remembered.response if remembered else '-'}): the answer is lost")
        turn = s.current_turn
        agent_used_it = any(b.turn_id == prompt.turn_id for b in s.bundles)  # a (late) ask landed in it
        if turn is not None and turn.id == prompt.turn_id and turn.open and not s.terminal and not agent_used_it:
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
        return self.memory.all_events()

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
                    self.respond_answer(a)
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




def settle(w: World, check: Callable[[str], list[str]] | None = None, *, clears_script: bool = True,
           after: Callable[[], None] | None = None) -> list[str]:
    """What happens after an operation (died, raced, or finished): the reconciler runs before traffic, the
    stream catches up, the invariants are checked; the user retries what is retryable; time passes, the
    scheduled reconciler runs, and everything is checked again. Returns the problems found."""
    problems: list[str] = []
    if clears_script:
        w.agent.outcomes.clear()  # the agent behaves again

    def reconcile_and_check(before_traffic: bool, stage: str) -> None:
        try:
            reconcile(w.deps, before_traffic=before_traffic)
        except ReconcileFailed as exc:
            problems.append(f"the {'' if before_traffic else 'scheduled '}reconciler failed: {exc}")
        w.pump()
        problems.extend(w.check(stage))
        if check:
            problems.extend(f"{stage}: {p}" for p in check(stage))
    reconcile_and_check(True, "after reconcile")
    problems += w.retry()
    if after:
        after()
    w.pump()
    w.clock.advance(3600)
    reconcile_and_check(False, "eventually")
    for a in w.answers:
        fate, _ = w.bundle_fate(a) if a.bundle_id else w.message_fate(a)
        if fate in ("restorable", "not admitted") and a.retried:
            problems.append(f"eventually: {a.marker}: (1) still {fate} after a successful resubmission")
    left = w.memory.due_sessions(None)
    if left:
        problems.append(f"eventually: (7) the reconciler left {len(left)} sessions in its index: {left}")
    return problems
