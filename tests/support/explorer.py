"""The interleaving explorer: every operation raced by every other at each of its durable boundaries.
The machinery; its tests are tests/unit/test_interleavings.py.

For each operation of the catalog, a dry run counts its boundaries (right before and right after each store
write, and around each agentctl call). Then, for every boundary and every other operation, a fresh world
runs the first operation until it reaches that boundary, pauses it there, runs the other operation to
completion, resumes the first, and settles: the reconciler runs, the stream catches up, time passes, and
the harness's invariants are checked (tests/support/harness.py), plus these:
  (8) no prompt reaches the agent after its session was cancelled or ended;
  (9) the workflow guard never lets a transition pass while the rule says a question is pending (an oracle
      checks it at the very write);
  (10) every operation's outcome is a domain answer (no crash), and the reconciler finishes;
  (12) a user told their answer "may have reached the agent; it will not be sent again" never finds it
       handed back (tests/support/harness.py).

It prints how many (operation, boundary, interferer) cases it ran; a store write no operation reaches fails
it. A sample of the cases (every operation pair at least once) also runs on the emulator store.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from chalicelib.domain import clarify, commands
from chalicelib.domain.errors import (
    ClarificationActive,
    ClarificationInactive,
    DomainError,
    IdempotencyMismatch,
    NotFound,
    PendingClarification,
    QueueFull,
    SessionUnavailable,
    ValidationError,
)
from chalicelib.domain.model import Bundle, Session, State, Task
from chalicelib.domain.rules import active_bundles, bundle_is_active
from chalicelib.domain.time import parse_iso
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import archive, clarifications, history, responses, resume, sessions, watchdog, workflow
from chalicelib.services.deps import Deps
from chalicelib.store import codec
from chalicelib.store.document import Write
from chalicelib.store.dynamo import DynamoStore
from chalicelib.store.expr import to_attr
from chalicelib.store.memory import MemoryStore
from chalicelib.store.models import HistoryRecord, IdempotencyRecord, TaskRecord
from tests.support.crash import WRITE_METHODS
from tests.support.fakes import PromptCall
from tests.support.harness import USER, World, settle
from tests.support.pausing import Gate, Paused, PausingAgent, PausingStore
from tests.support.stores import dynamo_store
from tests.support.world import agent_of

Ctx = dict[str, Any]
# Store writes no operation of the catalog performs. Keep this minimal; justify every entry.
ALLOWED_UNREACHED: dict[str, str] = {
    "release": "an operator's write after a manual repair (clarify-ops); the crash-point harness covers it",
    "rename_task": "the user's own bookkeeping on the task record; no clarification flow races it",
    "delete_task": "removes the task record only after its sessions were cancelled (that cancel is raced)",
    "put_task": "creates a task record nothing else can name yet; the sessions created in it are raced",
    "list_old_task": "the reconciler's backfill sets list_key only where it is missing (a summary write that set it "
                     "first wins by that condition); the crash-point harness covers it",
}


class GuardOracle(MemoryStore):
    """Checks invariants at the very write: (9) a workflow step never moves while a question is active;
    (11) a response never changes a bundle the repository rule says is not active (the spec: "any response
    to a superseded or terminal bundle ... performs no message mutation"); (13) an ended session stays ended."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def claim(self, session_id: str, bundle_id: str, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            before = self.get_session(session_id)
            super().claim(session_id, bundle_id, *args, **kwargs)
            bundle = before.bundle(bundle_id) if before is not None else None
            if before is not None and bundle is not None and not bundle_is_active(before, bundle):
                self.violations.append(f"(11) a response was claimed on inactive bundle {bundle_id} "
                                       f"({clarify.derived_state(before, bundle, before.updated_at)})")

    def _commit(self, session_id: str, write: Write, remember: Any = None) -> Session:
        with self._lock:
            before = self.sessions.get(session_id)
            after = super()._commit(session_id, write, remember)
            self._stays_ended(before, after)
            return after

    def _apply(self, session_id: str, write: Write) -> None:
        with self._lock:
            before = self.sessions.get(session_id)
            super()._apply(session_id, write)
            self._stays_ended(before, self.sessions.get(session_id))

    def _stays_ended(self, before: Session | None, after: Session | None) -> None:
        """(13) terminal states are final: no write brings an ended session back to life."""
        if before is not None and before.terminal and after is not None and after.state != before.state:
            self.violations.append(f"(13) the ended session {before.id} ({before.state.value}) became "
                                   f"{after.state.value}")

    def _commit_task(self, task_id: str, write: Write, checks: Any = None) -> Task:
        with self._lock:
            task = super()._commit_task(task_id, write, checks)
            blocking = [s.id for s in self.list_sessions(task_id) if active_bundles(s)]
            if checks is not None and blocking:
                self.violations.append(f"(9) the workflow moved to {task.workflow_step} while {blocking} had an "
                                       "active question")
            return task


class Lockstep(GuardOracle):
    """The emulator store in lockstep with the harness's MemoryStore for the race itself: when the operation is
    paused the DynamoStore is seeded with every aggregate and task as they stand; from then until the paused
    operation finished, every write the services make (the outermost call, not the writes a store method
    makes internally) is made on the DynamoStore too, with the same arguments. Both must answer alike (the
    same aggregate, or the same error), and every aggregate and task must then read back equal. The services
    and the checks see the MemoryStore, so the emulator runs the very same interleaving."""

    def __init__(self, dynamo: DynamoStore) -> None:
        super().__init__()
        self.dynamo = dynamo
        self.mirroring = False
        self.divergences: list[str] = []
        self._local = threading.local()

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name not in WRITE_METHODS or not callable(attr):
            return attr
        local = super().__getattribute__("_local")

        def mirrored(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            try:
                mine = _answer(attr, args, kwargs)
            finally:
                local.depth = depth
            if depth == 0 and self.mirroring:
                theirs = _answer(getattr(self.dynamo, name), args, kwargs)
                # put_event answers whether the event is new; events written before the race are not seeded
                # (their idempotency is the contract tests' business), so only its outcome is compared.
                same = mine[0] == theirs[0] if name == "put_event" else mine[:2] == theirs[:2]
                if not same:
                    self.divergences.append(f"{name}: memory {mine[:2]!r:.300} / emulator {theirs[:2]!r:.300}")
            if mine[2] is not None:
                raise mine[2]
            return mine[1]
        return mirrored

    def seed(self) -> None:
        client = self.dynamo.client
        for item in list(self.items.values()):
            client.put_item(TableName=self.dynamo.sessions_table, Item={k: to_attr(v) for k, v in item.items()})
        for task in list(self.tasks.values()):
            client.put_item(TableName=str(TaskRecord.Meta.table_name),
                            Item={k: to_attr(v) for k, v in codec.task_to_item(task).items()})
        for item in list(self.tables["idempotency"].values()):
            client.put_item(TableName=str(IdempotencyRecord.Meta.table_name),
                            Item={k: to_attr(v) for k, v in item.items()})
        for item in list(self.tables["history"].values()):
            if item["kind"] == "archive":
                client.put_item(TableName=str(HistoryRecord.Meta.table_name),
                                Item={k: to_attr(v) for k, v in item.items()})
        self.mirroring = True

    def compare(self) -> list[str]:
        self.mirroring = False
        problems = list(self.divergences)
        for sid, mine in list(self.sessions.items()):
            if self.dynamo.get_session(sid) != mine:
                problems.append(f"the emulator's aggregate {sid} differs from the memory store's")
            if mine.archived and self.dynamo.list_archived(sid) != self.list_archived(sid):
                problems.append(f"the emulator's archive of {sid} differs from the memory store's")
        for task_id, task in list(self.tasks.items()):
            if self.dynamo.get_task(task_id) != task:
                problems.append(f"the emulator's task {task_id} differs from the memory store's")
        return problems


def _answer(method: Callable[..., Any], args: Any, kwargs: Any) -> tuple[str, Any, BaseException | None]:
    try:
        return "ok", method(*args, **kwargs), None
    except DomainError as exc:
        return type(exc).__name__, getattr(exc, "current", None), exc


# ------------------------------------------------------------------ worlds where an operation is valid
def _main(w: World) -> Ctx:
    return {"main": w.new_session()}


def s_idle(w: World) -> Ctx:
    return _main(w)


def s_running(w: World) -> Ctx:
    ctx = _main(w)
    w.running(ctx["main"])
    return ctx


def s_live(w: World) -> Ctx:
    ctx = _main(w)
    ctx["bundle"] = w.live_bundle(ctx["main"])
    return ctx


def s_detached(w: World) -> Ctx:
    ctx = _main(w)
    ctx["bundle"] = w.detached_bundle(ctx["main"])
    return ctx


def s_superseded(w: World) -> Ctx:
    ctx = _main(w)
    ctx["bundle"] = w.superseded_bundle(ctx["main"])
    return ctx


def s_claimed(w: World) -> Ctx:
    ctx = _main(w)
    a = w.claimed_live(ctx["main"])
    ctx["bundle"] = a.bundle_id
    return ctx


def s_watchdog_due(w: World) -> Ctx:
    ctx = _main(w)
    ctx["bundle"] = w.confirmed_live(ctx["main"]).bundle_id
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 1)
    return ctx


def s_queued(w: World) -> Ctx:
    ctx = s_running(w)
    a = w.message_answer(ctx["main"])
    assert w.send_answer(a).admission == "queued"
    return ctx


def s_broken(w: World) -> Ctx:
    """A resume that died right after its claim and reservation: the reconciler has work to do."""
    ctx = s_detached(w)
    # Nobody was told anything: a newer turn or the end of the session may retire it (sendable late).
    a = w.answer(ctx["bundle"], allow_retired=True)
    w.crash_during("claim", "after", lambda d: w.respond_answer(a, d))
    return ctx


def s_claimed_abandoned(w: World) -> Ctx:
    """A live claim whose responder died (its user was told nothing): once its owner deadline passed the
    reconciler hands it back, and what happens to the question after that is the user's to see."""
    ctx = s_claimed(w)
    for a in w.answers:  # handed back, then expired, withdrawn or deleted: sendable late, never lost
        a.allow_retired = True
    return ctx


def s_claimed_moved_on(w: World) -> Ctx:
    """... and meanwhile the user cancelled the session: the claim is the reconciler's to retire."""
    ctx = s_claimed_abandoned(w)
    sessions.cancel_session(w.deps, USER, ctx["main"])
    return ctx


def s_dead_reservation(w: World) -> Ctx:
    """The waiter gave up mid-turn (the turn is open); a resume died right after its claim and reservation:
    the agent's ready for that turn has to wait for the reservation to resolve."""
    ctx = s_live(w)
    clarifications.detach(w.deps, agent_of(ctx["main"]), ctx["bundle"])
    a = w.answer(ctx["bundle"], allow_retired=True)
    w.crash_during("claim", "after", lambda d: w.respond_answer(a, d))
    return ctx


def s_deferred_ready(w: World) -> Ctx:
    """... and that ready outlasted its bounded wait: it is kept on the aggregate until the reservation
    resolves."""
    ctx = s_dead_reservation(w)
    op_ready(w, w.deps, ctx)
    assert w.get(ctx["main"]).deferred_ready is not None, "the setup did not defer the ready"
    return ctx


def s_unpumped(w: World) -> Ctx:
    """A question asked mid-turn whose stream records (turn started, bundle added) are not processed yet."""
    ctx = s_live(w)
    ctx["unpumped"] = True
    return ctx


def s_superseded_unpumped(w: World) -> Ctx:
    """A superseded question the stream has not seen yet: it is still in the aggregate (the stream moves it
    to history once it copied its transcript anchor)."""
    ctx = s_superseded(w)
    ctx["unpumped"] = True
    return ctx


def s_resume_reply_lost(w: World) -> Ctx:
    """Detached; the agent will take the resume but its reply is lost (the outcome is known only later)."""
    ctx = s_detached(w)
    ctx["agent_script"] = ("accept-then-fail",)
    return ctx


def s_two_detached(w: World) -> Ctx:
    """The agent asked twice in one turn and stopped waiting: two questions open, both answerable."""
    ctx = s_live(w)
    ctx["other_bundle"] = w.ask(ctx["main"])
    w.complete_turn(ctx["main"])
    return ctx


def s_live_and_detached(w: World) -> Ctx:
    """Two questions in one open turn: the agent waits on the first; the second's waiter let go (detached)."""
    ctx = s_live(w)
    ctx["other_bundle"] = w.ask(ctx["main"])
    clarifications.detach(w.deps, agent_of(ctx["main"]), ctx["other_bundle"])
    return ctx


def s_open_turn_refusing(w: World) -> Ctx:
    """The waiter gave up while the agent's turn is still open; the agent will refuse the resume."""
    ctx = s_live(w)
    clarifications.detach(w.deps, agent_of(ctx["main"]), ctx["bundle"])
    ctx["agent_script"] = ("reject",)
    return ctx


def s_refusing(w: World) -> Ctx:
    """Idle; the agent refuses the next prompt (the admitted message's remembered reply becomes the error)."""
    ctx = s_idle(w)
    ctx["agent_script"] = ("reject",)
    return ctx


def s_broken_moved_on(w: World) -> Ctx:
    """A resume died right after its claim, then the user cancelled the session: the claim must be retired."""
    ctx = s_broken(w)
    sessions.cancel_session(w.deps, USER, ctx["main"])
    return ctx


def s_unrepairable(w: World) -> Ctx:
    ctx = s_live(w)
    ctx["unrepairable"] = w.unrepairable()
    return ctx


def s_archivable(w: World) -> Ctx:
    """A detached answer resumed the agent, so its question is closed for good; the session is past the
    compaction size (0 here): the next ask or message first moves that question to history."""
    ctx = s_detached(w)
    w.respond_answer(w.answer(ctx["bundle"]))
    w.deps = replace(w.deps, settings=replace(w.deps.settings, session_compact_bytes=0))
    return ctx


def s_archived(w: World) -> Ctx:
    """The closed question already moved to history."""
    ctx = s_archivable(w)
    w.ask(ctx["main"])
    assert w.get(ctx["main"]).bundle(ctx["bundle"]) is None, "the setup did not archive"
    return ctx


def s_superseded_running(w: World) -> Ctx:
    """A superseded question while the agent's newer turn runs and it can steer."""
    ctx = s_superseded(w)
    w.send(ctx["main"], "and now this", f"again-{ctx['main']}")
    return ctx


def s_superseded_running_unpumped(w: World) -> Ctx:
    ctx = s_superseded_running(w)
    ctx["unpumped"] = True
    return ctx


# ------------------------------------------------------------------ operations, on whatever state they find
def _session(w: World, ctx: Ctx) -> Session:
    return w.get(ctx["main"])


def _bundle(w: World, ctx: Ctx) -> Bundle:
    """The question the operation acts on: the one set up, else the main session's latest."""
    s = _session(w, ctx)
    if ctx.get("bundle"):  # wherever it lives: the aggregate, or history once archived
        located = archive.find(w.deps, s, ctx["bundle"])
        found = located[1] if located is not None else None
    else:
        found = s.bundles[-1] if s.bundles else None
    if found is None:
        raise _Invalid("no question to act on")
    return found


class _Invalid(Exception):
    """The operation is not valid in this state (nothing to act on): the case is counted, not checked."""


def op_ask(w: World, deps: Deps, ctx: Ctx) -> None:
    w.ask(ctx["main"], deps=deps)


def op_detach(w: World, deps: Deps, ctx: Ctx) -> None:
    clarifications.detach(deps, agent_of(ctx["main"]), _bundle(w, ctx).id)


def op_respond_live(w: World, deps: Deps, ctx: Ctx) -> None:
    """An answer while the agent's waiter takes it and confirms (at the responder's first wait)."""
    b = _bundle(w, ctx)
    a = w.answer(b.id, allow_retired=True)
    w.sleep_hook = w.waiter(b.id, deps)
    try:
        w.respond_answer(a, deps)
    finally:
        w.sleep_hook = None


def op_respond(w: World, deps: Deps, ctx: Ctx) -> None:
    """An answer with nobody confirming: live falls through to a resume, detached resumes at once."""
    b = _bundle(w, ctx)
    w.respond_answer(w.answer(b.id, allow_retired=True), deps)


def op_respond_other(w: World, deps: Deps, ctx: Ctx) -> None:
    """An answer to the other question open in the same turn (another device, another question)."""
    if not ctx.get("other_bundle"):
        raise _Invalid("no other question open")
    w.respond_answer(w.answer(ctx["other_bundle"], allow_retired=True), deps)


class _FirstRunsBefore:
    """A store through which `hook` runs once, right before the first call of `method` (a compound
    interference: something else lands inside this operation at a fixed point)."""

    def __init__(self, store: Any, method: str, hook: Callable[[], Any]) -> None:
        self._store, self._method, self._hook = store, method, hook

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method or self._hook is None:
            return attr

        def first(*args: Any, **kwargs: Any) -> Any:
            hook, self._hook = self._hook, None
            if hook is not None:
                hook()
            return attr(*args, **kwargs)
        return first


def op_respond_as_session_ends(w: World, deps: Deps, ctx: Ctx) -> None:
    """Another device answers and the user cancels the session before that answer's resume: its claim is
    retired, so the question's rows are pending again in an ended session."""
    ending = _FirstRunsBefore(deps.store, "mark_attempted", lambda: op_cancel_session(w, deps, ctx))
    op_respond(w, replace(deps, store=ending), ctx)


def op_skip(w: World, deps: Deps, ctx: Ctx) -> None:
    b = _bundle(w, ctx)
    w.respond_answer(w.answer(b.id, outcome="rejected", allow_retired=True), deps)


def op_confirm(w: World, deps: Deps, ctx: Ctx) -> None:
    w.wait_and_confirm(_bundle(w, ctx).id, deps)


def op_give_up(w: World, deps: Deps, ctx: Ctx) -> None:
    """The live responder still polling elsewhere gives up waiting: its claim continues as a detached answer."""
    s = _session(w, ctx)
    b = _bundle(w, ctx)
    if b.delivery is None or not b.delivery.pending or b.delivery.mode != "live":
        raise _Invalid("no unconfirmed live claim")
    for a in w.answers:  # its responder is told the truth, so if the question moved on meanwhile, it is retired
        if a.bundle_id == b.id:
            a.allow_retired = True
    resume.fall_through(deps, s, b, b.delivery)


def op_wait(w: World, deps: Deps, ctx: Ctx) -> None:
    responses.wait(deps, agent_of(ctx["main"]), _bundle(w, ctx).id, timeout=0)


def op_watchdog(w: World, deps: Deps, ctx: Ctx) -> None:
    s = deps.store.get_session(ctx["main"])
    if s is None or s.watchdog is None:
        raise _Invalid("no watchdog armed")
    w.clock.advance(max(0.0, (parse_iso(s.watchdog.due) - w.clock.now).total_seconds()) + 1)
    watchdog.fire(deps, deps.store.get_session(ctx["main"]))  # type: ignore[arg-type]


def op_send(w: World, deps: Deps, ctx: Ctx) -> None:
    w.send_answer(w.message_answer(ctx["main"]), deps)


def op_steer(w: World, deps: Deps, ctx: Ctx) -> None:
    w.agent.steering = True
    a = w.message_answer(ctx["main"])
    a.body["delivery"] = "steer"
    w.send_answer(a, deps)


def op_turn_completed(w: World, deps: Deps, ctx: Ctx) -> None:
    """The agent ends its turn (the completion pass runs, then the queue drains)."""
    w.frames(ctx["main"], w.frame(ctx["main"], "turn_completed"), deps=deps)


def op_agent_output(w: World, deps: Deps, ctx: Ctx) -> None:
    """Agent output with no turn open (it starts one), then the agent ends that turn. The agent speaks with
    the identity of the last prompt it took: it cannot know a generation it was never given."""
    sid = ctx["main"]
    identity = {**_agent_identity(w, sid), "turn_id": None}
    w.frames(sid, w.frame(sid, "message", content="working on it", **identity),
             w.frame(sid, "turn_completed", **identity), deps=deps)


def op_supersede(w: World, deps: Deps, ctx: Ctx) -> None:
    """The agent ends its turn and the user sends newer work right away: a newer turn supersedes the question."""
    sid = ctx["main"]
    w.frames(sid, w.frame(sid, "turn_completed", **_agent_identity(w, sid)), deps=deps)
    w.message(sid, {"client_message_id": f"newer-{w.marker()}", "content": "newer work"}, deps=deps)


def _agent_identity(w: World, sid: str) -> dict[str, Any]:
    """The identity of the last prompt the agent took: it cannot speak for a generation it was never given."""
    took = [c.request for c in w.agent.prompt_calls if c.request.session_id == sid and c.outcome == "accept"]
    return {"prompt_generation": took[-1].prompt_generation if took else 0,
            "turn_id": took[-1].turn_id if took else None}


def op_ready(w: World, deps: Deps, ctx: Ctx) -> None:
    w.frames(ctx["main"], w.frame(ctx["main"], "ready"), deps=deps)


def op_cancel_ack(w: World, deps: Deps, ctx: Ctx) -> None:
    """The acknowledgement of another prompt's cancellation (not the one a watchdog captured): activity."""
    s = _session(w, ctx)
    w.frames(ctx["main"], w.frame(ctx["main"], "cancel_ack", prompt_generation=max(0, s.generation - 1)),
             deps=deps)


def op_agent_failed(w: World, deps: Deps, ctx: Ctx) -> None:
    w.agent.end(ctx["main"])  # the runtime itself ends the session: it takes no prompt any more
    w.frames(ctx["main"], w.frame(ctx["main"], "state", state="FAILED"), deps=deps)


def op_late_answer(w: World, deps: Deps, ctx: Ctx) -> None:
    w.send_answer(w.late_answer(_bundle(w, ctx).id), deps)


def op_late_steer(w: World, deps: Deps, ctx: Ctx) -> None:
    w.agent.steering = True
    a = w.late_answer(_bundle(w, ctx).id)
    a.body["delivery"] = "steer"
    w.send_answer(a, deps)


def op_withdraw(w: World, deps: Deps, ctx: Ctx) -> None:
    """The agent withdraws its own question (agentctl's cancel of a clarification)."""
    clarifications.cancel(deps, agent_of(ctx["main"]), _bundle(w, ctx).id)


def op_new_session(w: World, deps: Deps, ctx: Ctx) -> None:
    sessions.create_session(deps, USER, w.task_id, commands.create_session({"prompt": "another angle"}))


def op_stream(w: World, deps: Deps, ctx: Ctx) -> None:
    """The stream function catches up (turn records, the task's pending-action projection, events)."""
    w.pump(deps)


def op_delete_question(w: World, deps: Deps, ctx: Ctx) -> None:
    history.delete_message(deps, USER, ctx["main"], _bundle(w, ctx).message_id)


def op_delete_prompt(w: World, deps: Deps, ctx: Ctx) -> None:
    s = _session(w, ctx)
    if s.prompt is None:
        raise _Invalid("no message to delete")
    history.delete_message(deps, USER, ctx["main"], s.prompt.message_id)


def op_dismiss(w: World, deps: Deps, ctx: Ctx) -> None:
    responses.dismiss(deps, USER, _bundle(w, ctx).id)


def op_cancel_session(w: World, deps: Deps, ctx: Ctx) -> None:
    sessions.cancel_session(deps, USER, ctx["main"])


def op_workflow(w: World, deps: Deps, ctx: Ctx) -> None:
    workflow.transition(deps, USER, w.task_id, commands.transition({"to_step": "review"}))


def op_reconcile(w: World, deps: Deps, ctx: Ctx) -> None:
    reconcile(deps, before_traffic=True)


def op_reconcile_scheduled(w: World, deps: Deps, ctx: Ctx) -> None:
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    reconcile(deps, before_traffic=False)


@dataclass(frozen=True)
class Operation:
    name: str
    setup: Callable[[World], Ctx]  # a world in which the operation is valid when paused
    run: Callable[[World, Deps, Ctx], Any]


CATALOG = [
    Operation("ask", s_running, op_ask),
    Operation("detach", s_live, op_detach),
    Operation("respond live", s_live, op_respond_live),
    Operation("respond, nobody confirms", s_live, op_respond),
    Operation("respond detached", s_detached, op_respond),
    Operation("skip live", s_live, op_skip),
    Operation("skip detached", s_detached, op_skip),
    Operation("confirm", s_claimed, op_confirm),
    Operation("the live responder gives up waiting", s_claimed, op_give_up),
    Operation("wait", s_live, op_wait),
    Operation("watchdog fallback", s_watchdog_due, op_watchdog),
    Operation("send", s_idle, op_send),
    Operation("queue", s_running, op_send),
    Operation("steer", s_running, op_steer),
    Operation("turn completed, queue drained", s_queued, op_turn_completed),
    Operation("ready", s_running, op_ready),
    Operation("newer work supersedes the question", s_live, op_supersede),
    Operation("agent output with no turn open", s_idle, op_agent_output),
    Operation("cancel_ack", s_watchdog_due, op_cancel_ack),
    Operation("state FAILED", s_running, op_agent_failed),
    Operation("late answer", s_superseded, op_late_answer),
    Operation("delete a question", s_superseded, op_delete_question),
    Operation("delete the message just sent", s_running, op_delete_prompt),
    Operation("dismiss", s_superseded, op_dismiss),
    Operation("cancel the session", s_live, op_cancel_session),
    Operation("workflow transition", s_idle, op_workflow),
    Operation("agent withdraws its question", s_live, op_withdraw),
    Operation("create a session with a prompt", s_idle, op_new_session),
    Operation("steer a late answer", s_superseded_running, op_late_steer),
    Operation("send, the agent refuses", s_refusing, op_send),
    Operation("respond detached, the agent's reply lost", s_resume_reply_lost, op_respond),
    Operation("respond detached, two questions open", s_two_detached, op_respond),
    Operation("respond to the other open question", s_two_detached, op_respond_other),
    Operation("another device answers as the session is cancelled", s_detached, op_respond_as_session_ends),
    Operation("respond, nobody confirms, another question detached", s_live_and_detached, op_respond),
    Operation("respond to the detached question beside a live one", s_live_and_detached, op_respond_other),
    Operation("respond detached in an open turn, the agent refuses", s_open_turn_refusing, op_respond),
    Operation("stream catches up", s_unpumped, op_stream),
    Operation("stream moves a superseded question to history", s_superseded_unpumped, op_stream),
    Operation("late answer before the stream ran", s_superseded_unpumped, op_late_answer),
    Operation("steer a late answer before the stream ran", s_superseded_running_unpumped, op_late_steer),
    Operation("delete a question before the stream ran", s_superseded_unpumped, op_delete_question),
    Operation("ask in a long session: closed questions move to history", s_archivable, op_ask),
    Operation("delete an archived question", s_archived, op_delete_question),
    Operation("reconciler before traffic", s_broken, op_reconcile),
    Operation("reconciler retires a moved-on claim", s_broken_moved_on, op_reconcile),
    Operation("reconciler sets apart an unrepairable session", s_unrepairable, op_reconcile),
    Operation("reconciler scheduled", s_broken, op_reconcile_scheduled),
    Operation("reconciler retires a live claim whose session ended", s_claimed_moved_on, op_reconcile_scheduled),
    Operation("reconciler restores an unconfirmed live claim", s_claimed_abandoned, op_reconcile_scheduled),
    Operation("ready while a dead resume holds a reservation", s_dead_reservation, op_ready),
    Operation("reconciler settles a deferred ready", s_deferred_ready, op_reconcile_scheduled),
]


# ------------------------------------------------------------------ one case
@dataclass
class Case:
    operation: str
    boundary: str
    interferer: str
    valid: bool  # the interferer could act (it found something to act on)
    problems: list[str]
    outcome: str = ""  # what the paused operation ended with ("ok", or the domain error's name)
    interfered: str = ""  # what the interferer ended with
    world: World | None = field(default=None, repr=False)
    ctx: Ctx = field(default_factory=dict, repr=False)
    path: list[str] = field(default_factory=list, repr=False)  # the boundaries the paused operation passed


def world() -> World:
    return World(GuardOracle())


class EmulatorTables:
    """Fresh tables every few dozen cases: the emulator keeps every stream record it ever wrote in memory,
    so one set of tables for a thousand cases grows without bound; dropping a set frees it."""

    def __init__(self, endpoint: str, cases_per_set: int = 40) -> None:
        self.endpoint, self.cases_per_set = endpoint, cases_per_set
        self.store: DynamoStore | None = None
        self.used = 0

    def __call__(self) -> DynamoStore:
        if self.store is None or self.used >= self.cases_per_set:
            if self.store is not None:
                prefix = self.store.sessions_table[:-len("sessions")]
                client = self.store.client
                for name in client.list_tables()["TableNames"]:
                    if name.startswith(prefix):
                        client.delete_table(TableName=name)
            self.store, self.used = dynamo_store(self.endpoint), 0
        self.used += 1
        return self.store


def emulator_world(tables: Callable[[], DynamoStore]) -> Callable[[], World]:
    cases = itertools.count(1)
    return lambda: World(Lockstep(tables()), ids=f"e{next(cases)}")


def boundaries(op: Operation) -> list[str]:
    w = world()
    ctx = _setup(op, w)
    gate = Gate()
    _run(op, w, _paused_deps(w, gate), ctx)
    return gate.passed


def _setup(op: Operation, w: World) -> Ctx:
    ctx = op.setup(w)
    if not ctx.get("unpumped"):
        w.pump()
    if ctx.get("agent_script"):
        w.agent.script(*ctx["agent_script"])
    return ctx


def _paused_deps(w: World, gate: Gate) -> Deps:
    return replace(w.deps, store=PausingStore(w.store, gate), agentctl=PausingAgent(w.agent, gate))


# Answers a user is told were refused (the question moved on, someone else answered, the session ended...):
# the client holds them (and may send them as a new message), so they are not in flight any more.
REFUSALS = (ClarificationActive, ClarificationInactive, SessionUnavailable, NotFound, QueueFull, ValidationError,
            PendingClarification, IdempotencyMismatch)


def _run(op: Operation, w: World, deps: Deps, ctx: Ctx) -> str:
    before = len(w.answers)
    try:
        op.run(w, deps, ctx)
        told = "ok"
    except _Invalid:
        return "invalid"
    except REFUSALS as exc:
        del w.answers[before:]
        return type(exc).__name__
    except (DomainError, ReconcileFailed) as exc:
        told = type(exc).__name__
    for a in w.answers[before:]:
        a.told = told
    return told


def run_case(operation: str, boundary: str, interferer: str) -> Case:
    """One named case (for regression tests): `boundary` is a label such as 'before agentctl.prompt'."""
    op = next(o for o in CATALOG if o.name == operation)
    other = next(o for o in CATALOG if o.name == interferer)
    return case(op, boundaries(op).index(boundary), other)


def case(op: Operation, index: int, other: Operation, make_world: Callable[[], World] = world,
         other_pause: int | None = None, then: int | None = None) -> Case:
    """`op` paused at its boundary `index` while `other` runs to completion. With `other_pause`, the
    interferer is itself paused at its boundary `other_pause`, the first operation finishes meanwhile, and
    then the interferer does (the first operation lands inside the interferer). With `then`, `op` is paused
    again at its boundary `then` (on the path the interference opened: a retry, a fall-through) and the
    interferer runs once more there."""
    w = make_world()
    ctx = _setup(op, w)
    w.freeze()
    gate = Gate(index, then)
    if isinstance(w.memory, Lockstep):
        w.memory.seed()
    outcome: list[str] = []
    paused = Paused(lambda: outcome.append(_run(op, w, _paused_deps(w, gate), ctx)), gate)
    problems: list[str] = []
    if not paused.pause():
        problems.append(f"never reached boundary {index}")
    label = gate.passed[index] if len(gate.passed) > index else "?"
    if other_pause is None:
        interfered = _run(other, w, w.deps, ctx)
        if then is not None:
            if paused.resume_to_next():
                label += f" | again at {gate.passed[then]}"
                _run(other, w, w.deps, ctx)
            else:
                label += " | again at (a boundary it did not reach this time)"
        errors = [(op.name, paused.finish())]
    else:
        other_gate = Gate(other_pause)
        theirs: list[str] = []
        held = Paused(lambda: theirs.append(_run(other, w, _paused_deps(w, other_gate), ctx)), other_gate)
        inside = held.pause()
        errors = [(op.name, paused.finish()), (other.name, held.finish())]
        interfered = theirs[0] if theirs else ""
        if inside:
            label += f" | {other.name} paused {other_gate.passed[other_pause]}"
    problems += [f"(10) {name} crashed: {type(error).__name__}: {error}" for name, error in errors
                 if error is not None]
    problems += _agent_after_end(w)
    memory = w.memory
    assert isinstance(memory, GuardOracle)
    problems += memory.violations
    if isinstance(memory, Lockstep):
        problems += memory.compare()
    problems += settle(w)
    problems += _agent_after_end(w, stage="eventually")
    return Case(op.name, label, other.name, interfered != "invalid", problems, outcome[0] if outcome else "",
                interfered, w, ctx, list(gate.passed))


def _agent_after_end(w: World, stage: str = "after the race") -> list[str]:
    """(8) No prompt reaches the agent after its session ended: one taken after a cancel covering its
    generation reached agentctl (the fence failed), or taken for an ended session with no cancel ever
    covering it (nothing stops the agent). A prompt already on its way when the session ended is stopped by
    the cancel that follows it: that is the fence's contract, not a violation."""
    problems, prompts, cancels = [], iter(w.agent.prompt_calls), iter(w.agent.cancels)
    seen: list[tuple[str, int]] = []  # cancels that reached agentctl so far: (session, generation)
    taken: list[tuple[int, PromptCall]] = []
    for kind in w.agent.calls:
        if kind == "cancel":
            c = next(cancels)
            seen.append((c.session_id, c.prompt_generation))
            continue
        call = next(prompts)
        if call.outcome == "reject":
            continue
        g, sid = call.request.prompt_generation, call.request.session_id
        if any(s == sid and g <= cg for s, cg in seen):
            problems.append(f"{stage}: (8) the agent took a prompt for {sid} after a cancel fenced it")
        elif call.state_seen in _ENDED:
            taken.append((len(seen), call))
    for _, call in taken:
        g, sid = call.request.prompt_generation, call.request.session_id
        if not any(s == sid and g <= cg for s, cg in seen):
            problems.append(f"{stage}: (8) the agent took a prompt for {sid} after it ended ({call.state_seen}) "
                            "and no cancel stops it")
    return problems


_ENDED = {State.CANCELLED, State.FAILED, State.COMPLETED}


def explore(paused: list[Operation], sample: Callable[[Operation, int, Operation], bool] | None = None,
            make_world: Callable[[], World] = world, continuations: bool = False) -> list[Case]:
    """Every operation of `paused` paused at each of its boundaries while each other catalog operation runs.
    With `continuations`, wherever the interference sent the paused operation down a path its dry run never
    took (a retry, a fall-through), it is paused again at each boundary of that path and the interferer runs
    once more there."""
    cases: list[Case] = []
    for op in paused:
        dry = boundaries(op)
        for index in range(len(dry)):
            for other in CATALOG:
                if other is op or (sample is not None and not sample(op, index, other)):
                    continue
                first = case(op, index, other, make_world)
                cases.append(replace(first, world=None, ctx={}))  # keep the verdict only
                if continuations:
                    cases += [replace(case(op, index, other, make_world, then=j), world=None, ctx={})
                              for j in novel(first.path, dry, index)]
    return cases


def novel(path: list[str], dry: list[str], index: int) -> range:
    """The boundaries of `path` after `index` from where it left the dry run's path on."""
    for j in range(index + 1, len(path)):
        if j >= len(dry) or path[j] != dry[j]:
            return range(j, len(path))
    return range(0)


def reached_writes() -> set[str]:
    """The store writes the catalog's operations pass through (a boundary is 'before store.<write>')."""
    return {label.split(".", 1)[1] for op in CATALOG for label in boundaries(op) if label.startswith("before store.")}
