"""The crash-point harness.

Every durable write of an operation is one Store call (chalicelib.store.protocol). For each operation below
a dry run counts its writes; then, for every write k and phase (right before / right after it), a fresh
world runs the operation until the process dies there, the reconciler runs before traffic, the stream
function catches up on every committed change, and the invariants are checked. The user then retries what
is retryable, time passes, the scheduled reconciler runs, and the invariants are checked again.

Invariants: (1)-(6) as tests/support/harness.py states them, and
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
from pathlib import Path
from typing import Any

from chalicelib.auth.tokens import Caller
from chalicelib.domain import clarify, commands
from chalicelib.domain.errors import DomainError
from chalicelib.domain.model import Dispatch, Task
from chalicelib.domain.rules import bundle_is_active
from chalicelib.functions import streams
from chalicelib.functions.reconciler import ReconcileFailed, reconcile
from chalicelib.services import (
    archive,
    backfill,
    clarifications,
    history,
    responses,
    sessions,
    task_changes,
    tasks,
    watchdog,
    workflow,
)
from chalicelib.services.deps import Deps
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from tests.support.crash import PHASES, WRITE_METHODS, CrashingStore, KillPoint, ProcessDied
from tests.support.harness import World, settle
from tests.support.world import agent_of

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "artifacts" / "crash_points.txt"
USER = Caller(sub="user-1", role="user", workspace_id="ws-1")
MIN_BOUNDARIES = 15

# Store writes that no covered operation performs. Keep this minimal; justify every entry.
ALLOWED_UNREACHED: dict[str, str] = {
    # An operator's one write after a manual repair (clarify-ops release): no flow runs it, and a crash
    # before or after it leaves the mark either there (release again) or gone with the session due.
}


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
    bundle_id = w.ask(sid, deps=deps)
    w.lease(bundle_id, deps)
    current = deps.store.get_session(sid)
    assert current is not None
    clarifications.pause_for_input(deps, current, bundle_id, expected)


def check_ask_detach(w: World, ctx: Ctx, stage: str) -> list[str]:
    s = w.get(ctx["main"])
    problems = []
    for b in s.bundles:
        if not bundle_is_active(s, b):
            state = clarify.derived_state(s, b, w.deps.now())
            problems.append(f"(1) the asked question {b.id} is no longer answerable ({state})")
        if stage == "eventually" and b.waiter_until and not clarify.is_detached(b, w.deps.now()):
            problems.append(f"(7) the waiter's lease of {b.id} lapsed but the question was never detached")
        if stage == "eventually" and clarify.is_detached(b, w.deps.now()):
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
    w.respond_answer(a, deps)


def op_respond(w: World, deps: Deps, ctx: Ctx) -> None:
    w.respond_answer(ctx["answer"], deps)


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
    w.respond_answer(ctx["answer"], deps)


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
    found = archive.find(w.deps, w.get(ctx["main"]), ctx["bundle"])  # wherever it lives: closed ones move on
    b = found[1] if found else None
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
    ctx["answer"] = a = w.claimed_live(ctx["main"])
    w.complete_turn(ctx["main"])  # the turn ends while the live claim is still unconfirmed ...
    w.send(ctx["main"], "something else", "next")
    assert a.bundle_id is not None
    w.wait_and_confirm(a.bundle_id)  # ... and the waiter confirms only after a newer turn began
    assert w.get(ctx["main"]).watchdog is not None
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
    w.frames(sid, w.frame(sid, "message", content="working on it"), w.frame(sid, "turn_completed"), deps=deps)


def agent_finishes_its_turn(key: str) -> Callable[[World, Ctx], None]:
    """The agent completes the turn it is in (it re-posts a completion whose request died)."""
    def after(w: World, ctx: Ctx) -> None:
        turn = w.get(ctx[key]).current_turn
        if turn is not None and turn.open:
            w.complete_turn(ctx[key])
    return after


def s_agent_turn(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["bundle"] = w.detached_bundle(ctx["main"])
    return ctx


def op_agent_output(w: World, deps: Deps, ctx: Ctx) -> None:
    w.frames(ctx["main"], {"type": "message", "execution_id": w.get(ctx["main"]).execution_id,
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
    s = w.get(ctx["main"])
    b = s.bundle(ctx["bundle"])
    if s.terminal and b is not None and any(r.status == "pending" for r in b.rows):
        return ["terminal session kept a pending question (it must expire in the same write)"]
    return []


def op_rename_and_delete_task(w: World, deps: Deps, ctx: Ctx) -> None:
    task_changes.rename_task(deps, USER, w.task_id, commands.rename_task({"title": "Renamed"}))
    task_changes.delete_task(deps, USER, w.task_id)


def op_agent_cancels(w: World, deps: Deps, ctx: Ctx) -> None:
    clarifications.cancel(deps, agent_of(ctx["main"]), ctx["bundle"])


def op_dismiss(w: World, deps: Deps, ctx: Ctx) -> None:
    responses.dismiss(deps, USER, ctx["superseded"])


def op_delete_question(w: World, deps: Deps, ctx: Ctx) -> None:
    found = archive.find(w.deps, w.get(ctx["old"]), ctx["superseded"])  # in history once the stream moved it
    assert found is not None
    history.delete_message(deps, USER, ctx["old"], found[1].message_id)


# -- a long session's closed questions move to history
def s_archivable(w: World) -> Ctx:
    """A detached answer resumed the agent, so its question is closed for good; the session is past the
    compaction size (0 here), so the agent's next ask first moves that question to history."""
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["answer"] = w.answer(w.detached_bundle(ctx["main"]))
    w.respond_answer(ctx["answer"])
    w.deps = replace(w.deps, settings=replace(w.deps.settings, session_compact_bytes=0))
    return ctx


def op_ask_archiving(w: World, deps: Deps, ctx: Ctx) -> None:
    w.ask(ctx["main"], deps=deps)


def _shown(w: World, ctx: Ctx) -> dict[str, Any] | None:
    view = w.transcript(ctx["main"])
    return next((m for m in view["messages"] if m.get("clarification_id") == ctx["answer"].bundle_id), None)


def check_archived(w: World, ctx: Ctx, stage: str) -> list[str]:
    """Wherever the answered question lives now, the transcript shows it exactly as answered."""
    entry = _shown(w, ctx)
    if entry is None:
        return ["the answered question vanished from the transcript"]
    if entry["state"] != "answered" or ctx["answer"].marker not in json.dumps(entry["questions"]):
        return [f"the answered question shows as {entry['state']} without its answer"]
    return []


def s_archived(w: World) -> Ctx:
    ctx = s_archivable(w)
    w.ask(ctx["main"])
    assert w.get(ctx["main"]).bundle(ctx["answer"].bundle_id) is None, "the setup did not archive"
    return ctx


def op_delete_archived(w: World, deps: Deps, ctx: Ctx) -> None:
    history.delete_message(deps, USER, ctx["main"], ctx["answer"].bundle_id)
    ctx["deleted"] = True  # the user was told it is gone


def check_archived_deleted(w: World, ctx: Ctx, stage: str) -> list[str]:
    """Once the user was told, or once its record went, a deleted archived question never shows again."""
    shown = _shown(w, ctx) is not None
    record = w.memory.get_archived(ctx["main"], ctx["answer"].bundle_id)
    if shown and (ctx.get("deleted") or record is None):
        return ["a deleted archived question is still in the transcript"]
    return []


def s_just_sent(w: World) -> Ctx:
    """The user's message was admitted a moment ago; the stream has not copied it into history yet."""
    ctx = _bg(w)
    ctx["main"] = w.new_session()
    ctx["message"] = w.send(ctx["main"], "sent by mistake", "oops").message_id
    return ctx


def op_delete_just_sent(w: World, deps: Deps, ctx: Ctx) -> None:
    history.delete_message(deps, USER, ctx["main"], ctx["message"])
    ctx["deleted"] = True  # the user was told it is gone


def check_just_sent_deleted(w: World, ctx: Ctx, stage: str) -> list[str]:
    """Once the delete answered, the message never comes back (a delete that died is simply retried)."""
    if not ctx.get("deleted"):
        return []
    shown = [m["id"] for m in w.transcript(ctx["main"])["messages"]]
    return [f"the deleted message {ctx['message']} came back"] if ctx["message"] in shown else []


def op_workflow(w: World, deps: Deps, ctx: Ctx) -> None:
    workflow.transition(deps, USER, w.task_id, commands.transition({"to_step": "review"}))


def op_create(w: World, deps: Deps, ctx: Ctx) -> None:
    task = tasks.create_task(deps, USER, commands.create_task({"title": "Second task"}))
    sessions.create_session(deps, USER, task.id, commands.create_session({"prompt": ctx["marker"]}))


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
    w.respond_answer(a)
    ctx["answer"] = a
    # A question still open when its records are processed: the projection must write the task summary.
    ctx["waiting"] = w.new_session()
    w.detached_bundle(ctx["waiting"])
    return ctx


def op_stream(w: World, deps: Deps, ctx: Ctx) -> None:
    end = len(w.store.changes)
    records = w.store.records(w.pumped)
    result = streams.process_batch(deps, records, streams.on_session_record)
    assert result == {"batchItemFailures": []}
    w.pumped = end


# -- the reconciler itself, repairing a world broken at every kind of boundary
def s_broken(w: World) -> Ctx:
    ctx = _bg(w)
    # A: detached answer, died after claim + reservation (unattempted): roll back, restore exactly the rows.
    a = w.answer(w.detached_bundle(w.new_session()))
    w.crash_during("claim", "after", lambda d: w.respond_answer(a, d))
    # B: detached answer, died after the attempt marker: ambiguous, keep the successor, never resend.
    b = w.answer(w.detached_bundle(w.new_session()))
    w.crash_during("mark_attempted", "after", lambda d: w.respond_answer(b, d))
    # C: live answer, died after the claim (L1/U4): restore the still-current claim to pending.
    c = w.answer(w.live_bundle(w.new_session()))
    w.crash_during("claim", "after", lambda d: w.respond_answer(c, d))
    # D: live answer claimed, then the user moved on: retire the intent, never reactivate history.
    d_session = w.new_session()
    d = w.answer(w.live_bundle(d_session), allow_retired=True)
    w.crash_during("claim", "after", lambda dd: w.respond_answer(d, dd))
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
    w.crash_during("complete_turn", "after", lambda dd: w.frames(i_session, w.frame(i_session, "turn_completed"),
                                                                  deps=dd))
    # K: a predecessor's ready waits (deferred) on the reservation of a responder that died after its claim.
    k_session = w.new_session()
    k_bundle = w.live_bundle(k_session)
    w.detach(k_bundle)  # the waiter gave up; the agent's turn is still open
    k = w.answer(k_bundle)
    w.crash_during("claim", "after", lambda dd: w.respond_answer(k, dd))
    assert w.frames(k_session, w.frame(k_session, "ready")).applied == 1 and w.get(k_session).deferred_ready
    # Past every owner deadline (a deploy's reconciler leaves a live claim to its owner until then), the
    # lease of G and the watchdog of H.
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    # J: an aggregate no repair fits (its reservation names a bundle that is not there): set apart.
    ctx["unrepairable"] = w.unrepairable()
    return ctx


# -- a predecessor's delayed ready overlapping a reservation whose responder died
def s_ready_on_a_dead_reservation(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["ready"] = w.new_session()
    bundle_id = w.live_bundle(ctx["ready"])
    w.detach(bundle_id)  # the waiter gave up; the agent's turn is still open
    a = w.answer(bundle_id)
    w.crash_during("claim", "after", lambda dd: w.respond_answer(a, dd))
    ctx["predecessor"] = w.get(ctx["ready"]).current_turn.id  # type: ignore[union-attr]
    return ctx


def op_ready(w: World, deps: Deps, ctx: Ctx) -> None:
    w.frames(ctx["ready"], w.frame(ctx["ready"], "ready"), deps=deps)
    ctx["ready_answered"] = True  # the agent was told its ready was taken


def check_ready_not_stranded(w: World, ctx: Ctx, stage: str) -> list[str]:
    """A ready the agent was told was taken completes its turn once the reservation rolled back."""
    s = w.get(ctx["ready"])
    if not ctx.get("ready_answered") or s.reservation is not None:
        return []
    turn = s.current_turn
    stranded = turn is not None and turn.id == ctx["predecessor"] and turn.open
    return ["the predecessor's turn stayed open after its ready was taken"] if stranded else []


def op_reconcile(w: World, deps: Deps, ctx: Ctx) -> None:
    reconcile(deps, before_traffic=True)


def check_unrepairable(w: World, ctx: Ctx, stage: str) -> list[str]:
    s = w.get(ctx["unrepairable"])
    problems = [] if s.quarantined else ["the unrepairable aggregate was neither repaired nor set apart"]
    if ctx["unrepairable"] in w.memory.due_sessions(None):
        problems.append("a quarantined aggregate is still in the reconciler's work")
    return problems


def s_quarantined(w: World) -> Ctx:
    ctx = _bg(w)
    ctx["unrepairable"] = w.unrepairable()
    reconcile(w.deps, before_traffic=True)
    assert w.get(ctx["unrepairable"]).quarantined
    return ctx


def op_repair_and_release(w: World, deps: Deps, ctx: Ctx) -> None:
    """The operator removes the dangling reservation, then releases the aggregate."""
    item = dict(w.memory.items[ctx["unrepairable"]])
    item.pop("reservation")
    w.memory.put_raw_session(item)
    deps.store.release(ctx["unrepairable"], deps.now())
    ctx["released"] = True  # the operator was told it is released


def check_released(w: World, ctx: Ctx, stage: str) -> list[str]:
    """Once the release answered, the repaired aggregate is back in service (a release that died is retried)."""
    if not ctx.get("released"):
        return []
    return [] if w.get(ctx["unrepairable"]).quarantine is None else [
        "a repaired aggregate stayed quarantined after its release"]


# -- the task list's backfill: an old task gets its place in the index, whatever dies on the way
def s_old_task(w: World) -> Ctx:
    ctx = _bg(w)
    old = Task(id="old-task", workspace_id=USER.workspace_id, title="Old", workflow_step="todo",
               created_at="2024-01-01T00:00:00.000000Z")
    w.memory.task_items[old.id] = {k: v for k, v in codec.task_to_item(old).items() if k != "list_key"}
    ctx["old"] = old.id
    return ctx


def op_backfill(w: World, deps: Deps, ctx: Ctx) -> None:
    backfill.list_old_tasks(deps)


def check_backfill(w: World, ctx: Ctx, stage: str) -> list[str]:
    listed = [t.id for t in w.memory.page_tasks(USER.workspace_id, 200, None).items]
    if stage == "eventually" and ctx["old"] not in listed:
        return ["an old task never got its place in the task list (the backfill lost its position)"]
    return []


SCENARIOS: list[Scenario] = [
    Scenario("ask, then the waiter gives up (detach)", s_ask_detach, op_ask_detach, check_ask_detach),
    Scenario("the task list's backfill (reconciler)", s_old_task, op_backfill, check_backfill),
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
    Scenario("late answer steered before the stream moved the question to history", s_late_steered,
             op_send_answer, after=agent_finishes_its_turn("old"), pump_setup=False),
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
    Scenario("delete a superseded question's message before the stream moved it", _bg, op_delete_question,
             pump_setup=False),
    Scenario("an ask in a long session moves closed questions to history", s_archivable, op_ask_archiving,
             check_archived),
    Scenario("delete an archived question's message", s_archived, op_delete_archived, check_archived_deleted),
    Scenario("delete the message just sent (before the stream ran)", s_just_sent, op_delete_just_sent,
             check_just_sent_deleted, pump_setup=False),
    Scenario("workflow transition guarded by the rule", _bg, op_workflow),
    Scenario("create a task and a session with a first prompt", s_create, op_create, check_create),
    Scenario("stream function (then redelivered)", s_stream, op_stream, pump_setup=False),
    Scenario("a delayed ready on a reservation whose responder died", s_ready_on_a_dead_reservation, op_ready,
             check_ready_not_stranded),
    Scenario("the reconciler itself (then run again)", s_broken, op_reconcile, check_unrepairable),
    Scenario("an operator repairs and releases a quarantined session", s_quarantined, op_repair_and_release,
             check_released),
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
    check = scenario.check
    problems += settle(w, (lambda stage: check(w, ctx, stage)) if check else None,
                       clears_script=scenario.clears_script,
                       after=(lambda: scenario.after(w, ctx)) if scenario.after else None)  # type: ignore[misc]
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
        sessions.create_session(w.using(store), USER, w.task_id, commands.create_session({}))
    except ProcessDied as died:
        assert died.phase == "before" and died.method == "add_task_session"  # the task names it first
    assert w.memory.list_sessions(w.task_id) == []  # died before the write: nothing written
    try:
        store.get_session("x")
    except ProcessDied:
        pass
    else:
        raise AssertionError("a dead process must not read either")
