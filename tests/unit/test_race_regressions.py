"""The races issue 11 names, each as a plain regression test (the explorer runs them among all the others).

Each runs one named case of the interleaving explorer (tests/unit/test_interleavings.py): an operation paused
at a durable boundary, another operation run to completion meanwhile, the first resumed, then the reconciler
and the harness's invariants. The assertions then say what the user of that race must see.
"""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain import clarify
from chalicelib.domain.errors import ClarificationInactive, DispatchFailed, SessionUnavailable
from chalicelib.domain.model import State, Watchdog
from chalicelib.domain.public import clarification_view
from chalicelib.domain.rules import active_bundles
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import archive, watchdog
from tests.support.explorer import Case, run_case
from tests.support.harness import World, answers_body, settle


def _clean(c: Case) -> Case:
    assert not c.problems, c.problems
    assert c.world is not None
    return c


def _events(w: World, kind: str) -> list[Any]:
    return [e for e in w.events() if e.type == kind]


def test_race__question_deleted_while_its_detached_answer_resumes__resumed_once_nothing_left_behind() -> None:
    """Was: `dispatch_ambiguous` though the agent accepted the resume, the reservation stayed behind and the
    before-traffic reconciler failed on every run ("reservation names no claimed bundle")."""
    for boundary in ("after store.claim", "before agentctl.prompt", "after agentctl.prompt"):
        c = _clean(run_case("respond detached", boundary, "delete a question"))
        w = c.world
        assert w is not None
        assert c.outcome == "ok"  # the answer resumed the agent
        assert c.interfered == "Contended"  # the delete waits for the answer on its way (retryable)
        s = w.get(c.ctx["main"])
        assert s.reservation is None and not s.quarantined
        assert len(w.agent.carrying(w.answers[-1].marker)) == 1  # exactly one resume carried the answer
        report = reconcile(w.deps, before_traffic=True)
        assert report.quarantined == [] and report.errors == []


def test_race__agent_completes_its_turn_after_a_live_answer__watchdog_disarmed_nothing_reprompted() -> None:
    """Was: the primary-answer watchdog stayed armed and later re-prompted the answer into the closed turn."""
    for outcome in ("answered", "rejected"):
        w = World()
        sid = w.new_session()
        bundle = w.live_bundle(sid)
        w.pump()
        w.sleep_hook = w.waiter(bundle)
        try:
            w.respond_answer(w.answer(bundle, outcome=outcome))
        finally:
            w.sleep_hook = None
        assert w.get(sid).watchdog is not None  # armed while the agent works on the answer
        prompts = len(w.agent.prompt_calls)

        w.complete_turn(sid)
        w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 60)

        assert w.get(sid).watchdog is None
        assert reconcile(w.deps, before_traffic=False).watchdogs_fired == 0
        assert len(w.agent.prompt_calls) == prompts and w.agent.cancels == []
        assert not settle(w)


@pytest.mark.parametrize("boundary", ["after store.claim", "before store.mark_attempted",
                                      "after store.mark_attempted", "before agentctl.prompt"])
def test_race__session_cancelled_while_a_detached_answer_resumes__not_resumed_no_prompt_after_cancel(
        boundary: str) -> None:
    """Was: the response said `resumed` and a prompt reached the agent after the cancel."""
    c = _clean(run_case("respond detached", boundary, "cancel the session"))
    w = c.world
    assert w is not None
    # Told the truth: the session ended first (never "resumed"); the answer is back with the client.
    assert c.outcome in (SessionUnavailable.__name__, ClarificationInactive.__name__)
    s = w.get(c.ctx["main"])
    assert s.state == State.CANCELLED and s.reservation is None
    # A resume already on its way is fenced by the cancel's generation: the agent takes no prompt after it.
    assert not [p for p in w.agent.prompt_calls if p.state_seen == State.CANCELLED and p.outcome != "reject"]
    assert not w.agent.carrying("ANSWER-01")  # the refused answer (dropped from the in-flight list)


def test_race__agent_rejects_a_detached_resume__rows_restored_published_and_summary_pending() -> None:
    """Was: rows restored but not published and the summary not refreshed, so clients showed nothing pending
    while the API answered "retry"."""
    w = World()
    sid = w.new_session()
    bundle = w.detached_bundle(sid)
    w.pump()
    updates = len(_events(w, "message.updated"))
    w.agent.script("reject")

    with pytest.raises(DispatchFailed) as failed:
        w.respond(bundle, answers_body("SYNC-REJECT"))

    assert failed.value.retryable and failed.value.details["restored"] is True
    published = _events(w, "message.updated")[updates:]
    assert published and published[-1].payload["clarification_id"] == bundle
    assert published[-1].payload["state"] == "active_detached"
    summary = w.memory.get_task(w.task_id).summary  # refreshed in the same request, not by the stream later
    assert summary.pending_action is not None and summary.primary_session_id == sid
    w.agent.script()
    assert w.respond(bundle, answers_body("SYNC-REJECT")).delivery == "resumed"  # the retry goes through


def test_race__ask_lands_between_the_guards_read_and_its_write__transition_refused() -> None:
    """Was check-then-act: the transition passed although a question was pending."""
    c = _clean(run_case("workflow transition", "before store.set_workflow_step", "ask"))
    w = c.world
    assert w is not None
    assert c.outcome == "PendingClarification"
    assert w.memory.get_task(w.task_id).workflow_step != "review"
    assert active_bundles(w.get(c.ctx["main"]))


def _armed(w: World) -> tuple[str, Watchdog]:
    """A live answer the agent confirmed: the primary-answer watchdog is armed."""
    sid = w.new_session()
    w.confirmed_live(sid)
    w.pump()
    armed = w.get(sid).watchdog
    assert armed is not None
    return sid, armed


def test_race__foreign_cancel_ack__counts_as_activity_and_disarms_the_watchdog() -> None:
    """Only the watchdog's own captured cancellation acknowledgement is exempt from counting as activity."""
    w = World()
    sid, armed = _armed(w)

    w.report(sid, "cancel_ack", execution_id=armed.execution_id, prompt_generation=armed.prompt_generation - 1)

    assert w.get(sid).watchdog is None
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 60)
    assert reconcile(w.deps, before_traffic=False).watchdogs_fired == 0


def test_race__captured_cancel_ack__not_activity_the_watchdog_still_fires() -> None:
    w = World()
    sid, armed = _armed(w)
    w.report(sid, "cancel_ack", execution_id=armed.execution_id, prompt_generation=armed.prompt_generation)
    assert w.get(sid).watchdog == armed
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 60)
    fired = w.get(sid)
    assert watchdog.fire(w.deps, fired) is True


@pytest.mark.parametrize(("operation", "interferer"), [
    ("reconciler before traffic", "reconciler scheduled"),
    ("reconciler scheduled", "reconciler before traffic"),
])
def test_race__overlapping_reconcilers__the_healthy_session_is_repaired_never_quarantined(
        operation: str, interferer: str) -> None:
    """Two reconcilers on the same broken-but-repairable session: one repairs it, the other finds it changed
    and carries on with the fresh item instead of setting a healthy session apart."""
    for boundary in ("before store.restore_claim", "after store.restore_claim"):
        c = _clean(run_case(operation, boundary, interferer))
        w = c.world
        assert w is not None
        s = w.get(c.ctx["main"])
        assert not s.quarantined and s.reservation is None
        assert w.memory.quarantined_sessions() == []


def test_race__claim_whose_question_moved_on__retired_and_the_answer_can_be_sent_late() -> None:
    """A resume died after its claim; the session ended before the reconciler came: the claim is retired (the
    question ends superseded/expired, unanswered) and the user's answer is not lost: it can go as a late
    answer's text (the session is over, so as a message elsewhere) and the bundle says so."""
    c = _clean(run_case("reconciler retires a moved-on claim", "before store.retire_claim", "wait"))
    w = c.world
    assert w is not None
    found = archive.find(w.deps, w.get(c.ctx["main"]), c.ctx["bundle"])  # moved to history once retired
    assert found is not None
    s, bundle = found
    assert bundle.delivery is None
    assert all(r.response is None for r in bundle.rows)
    assert clarify.derived_state(s, bundle, w.deps.now()) in ("superseded", "expired")
    view = clarification_view(s, bundle, now=w.deps.now())
    assert view["late_answer_allowed"] is True and view["answerable"] is False


@pytest.mark.parametrize("boundary", ["after store.admit", "before agentctl.prompt"])
def test_race__session_cancelled_between_admission_and_dispatch__told_not_sent_never_retry(boundary: str) -> None:
    """The cancel fences the prompt (the agent refuses it): the sender is told the session ended and the
    message was not sent (409, not a retryable 502), and the transcript says so."""
    c = _clean(run_case("send", boundary, "cancel the session"))
    w = c.world
    assert w is not None
    assert c.outcome == SessionUnavailable.__name__
    messages = w.transcript(c.ctx["main"])["messages"]
    mine = [m for m in messages if m["author_type"] == "user" and "ANSWER-01" in m["content"]]
    assert len(mine) == 1 and mine[0]["not_sent"] == "session_ended"
    assert not w.agent.carrying("ANSWER-01")


@pytest.mark.parametrize("interferer", ["reconciler scheduled", "reconciler before traffic"])
def test_race__reconciler_hands_a_reserved_answer_back_first__told_retry_never_ambiguous(interferer: str) -> None:
    """Was: the responder's own rollback found nothing left to undo and told `dispatch_ambiguous` ("it will
    not be sent again") for an answer the reconciler had already handed back, pending and answerable. Now
    it is told the truth: not delivered, retry (502 dispatch_failed, restored)."""
    c = _clean(run_case("respond detached", "after store.claim", interferer))
    w = c.world
    assert w is not None
    assert c.outcome == DispatchFailed.__name__
    [answer] = w.answers
    assert answer.retried  # the harness's user retried, as told: the answer reached the agent exactly once
    assert len(w.agent.carrying("ANSWER-01")) == 1
