"""The primary-answer watchdog at the service layer (scenarios WD1, WD2).

A confirmed live answer arms it in the confirmation write; message, thinking and tool frames disarm it,
cancel_ack does not; once due, the scheduled reconciler silently cancels the silent agent and hands the
answer to one replacement prompt in the clarification's own turn, after re-checking that turn both before
the fallback and inside the admission write. The in-memory store, a fake agentctl and a fixed clock make
every interleaving exact.
"""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.agentctl.client import CancelRequest
from chalicelib.domain.model import Dispatch, Session, Watchdog
from chalicelib.domain.time import parse_iso
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import sessions, watchdog
from tests.support.fakes import START
from tests.support.world import ANSWER, SKIP, USER, HookedStore, World

ACTIVITY = ("message", "thinking", "tool")


@pytest.fixture
def w() -> World:
    return World(HookedStore())


def _armed(w: World, body: dict[str, Any] | None = None) -> tuple[str, str, Watchdog]:
    """(session, bundle, watchdog) right after a live answer was confirmed by the agent's waiter."""
    sid, cid = w.waiting()
    w.sleeper.at(w.sleeper.calls + 1, w.agent_confirms(cid))
    assert w.respond(cid, body or ANSWER).delivery == "live"
    armed = w.get(sid).watchdog
    assert armed is not None
    w.agent.calls.clear()
    return sid, cid, armed


def _past_due(w: World) -> None:
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() + 1)


def _past_every_deadline(w: World) -> None:
    """A later writer's deadline may postpone the reconciler's visit by up to one owner window (by design)."""
    settings = w.deps.settings
    w.clock.advance((settings.watchdog_timeout + settings.owner_window).total_seconds() + 1)


def _silent_cancels(w: World) -> list[CancelRequest]:
    return [c for c in w.agent.cancels if c.silent]


# ====================================================================== arming
def test_confirm__live_answer__watchdog_armed_with_turn_execution_and_generation(w: World) -> None:
    sid, cid = w.waiting()
    before = w.get(sid)
    w.sleeper.at(1, w.agent_confirms(cid))

    w.respond(cid, ANSWER)

    armed = w.get(sid).watchdog
    assert armed is not None and before.current_turn is not None
    assert (armed.clarification_id, armed.turn_id, armed.execution_id, armed.prompt_generation) == (
        cid, before.current_turn.id, before.execution_id, before.generation)
    confirmed_at = START.timestamp() + w.sleeper.slept
    assert abs(_epoch(armed.due) - (confirmed_at + w.deps.settings.watchdog_timeout.total_seconds())) < 1e-3
    assert "Which database?" in armed.text and "Postgres" in armed.text and "v7" in armed.text


def test_confirm__live_skip__watchdog_carries_the_rejection(w: World) -> None:
    _, _, armed = _armed(w, SKIP)
    assert "skipped" in armed.text and "Postgres" not in armed.text


def test_confirm__live_skip_with_a_reason__the_re_prompt_carries_the_reason(w: World) -> None:
    """The agent confirmed a Skip and died before using it: the watchdog's re-prompt is the whole answer, the
    user's reason included (the load run found it dropped)."""
    _, _, armed = _armed(w, {"rejected": True, "reject_reason": "ask the DBA instead"})
    assert "skipped" in armed.text and "ask the DBA instead" in armed.text


def test_confirm__armed_in_the_confirmation_write_itself(w: World) -> None:
    """The watchdog is observable no later than the confirmation the agent waits for."""
    sid, cid = w.waiting()
    seen: list[Session] = []

    def confirm_then_look() -> None:
        w.agent_confirms(cid)()
        seen.append(w.get(sid))
    w.sleeper.at(1, confirm_then_look)
    version = w.get(sid).version

    w.respond(cid, ANSWER)

    confirmed = seen[0]
    assert confirmed.version == version + 2  # the claim, then the confirmation: nothing in between
    assert confirmed.watchdog is not None
    assert not confirmed.bundle(cid).delivery.pending  # type: ignore[union-attr]


# ====================================================================== firing
def test_reconcile__before_due__watchdog_left_alone(w: World) -> None:
    sid, _, armed = _armed(w)
    w.clock.advance(w.deps.settings.watchdog_timeout.total_seconds() - 1)

    report = reconcile(w.deps, before_traffic=False)

    assert report.watchdogs_fired == 0 and w.get(sid).watchdog == armed and w.agent.calls == []


def test_reconcile__due_and_agent_silent__silent_cancel_then_one_replacement_prompt_in_the_same_turn(
        w: World) -> None:
    sid, _, armed = _armed(w)
    _past_due(w)

    report = reconcile(w.deps, before_traffic=False)

    assert report.watchdogs_fired == 1 and w.agent.calls == ["cancel", "prompt"]
    cancel = w.agent.cancels[-1]
    assert (cancel.execution_id, cancel.prompt_generation, cancel.silent) == (
        armed.execution_id, armed.prompt_generation, True)
    prompt = w.agent.prompts[-1]
    assert (prompt.turn_id, prompt.text, prompt.prompt_generation) == (
        armed.turn_id, armed.text, armed.prompt_generation + 1)
    session = w.get(sid)
    assert session.watchdog is None and session.current_turn is not None
    assert session.current_turn.id == armed.turn_id
    assert session.prompt is not None and session.prompt.dispatch == Dispatch.ACCEPTED


def test_reconcile__fired_once__never_delivers_into_the_same_turn_again(w: World) -> None:
    sid, _, _ = _armed(w)
    _past_due(w)
    reconcile(w.deps, before_traffic=False)
    w.agent.calls.clear()

    for _ in range(3):
        _past_due(w)
        report = reconcile(w.deps, before_traffic=False)
        assert report.watchdogs_fired == 0
    assert watchdog.fire(w.deps, w.get(sid)) is False
    assert w.agent.calls == []


def test_fire__replacement_prompt__attempt_marker_written_before_the_agent_call(w: World) -> None:
    sid, _, armed = _armed(w)
    _past_due(w)

    assert watchdog.fire(w.deps, w.get(sid)) is True

    assert w.agent.seen[-1] == (Dispatch.ATTEMPTED, armed.turn_id)


def test_fire__not_due_yet__nothing(w: World) -> None:
    sid, _, armed = _armed(w)
    assert watchdog.fire(w.deps, w.get(sid)) is False
    assert w.get(sid).watchdog == armed and w.agent.calls == []


# ====================================================================== activity
@pytest.mark.parametrize("kind", ACTIVITY)
def test_frames__agent_activity__disarms_and_nothing_fires(w: World, kind: str) -> None:
    sid, _, _ = _armed(w)
    w.report(sid, kind, content="working on it")
    assert w.get(sid).watchdog is None

    _past_due(w)
    report = reconcile(w.deps, before_traffic=False)

    assert report.watchdogs_fired == 0 and w.agent.calls == []


@pytest.mark.parametrize("kind", ACTIVITY)
def test_frames__activity_carrying_the_cancelled_prompts_identity__still_disarms(w: World, kind: str) -> None:
    sid, _, armed = _armed(w)
    w.report(sid, kind, content="late output", execution_id=armed.execution_id,
            prompt_generation=armed.prompt_generation, turn_id=armed.turn_id)
    assert w.get(sid).watchdog is None


def test_frames__cancel_ack__does_not_disarm_and_the_watchdog_fires(w: World) -> None:
    sid, _, armed = _armed(w)
    w.report(sid, "cancel_ack", execution_id=armed.execution_id, prompt_generation=armed.prompt_generation)
    assert w.get(sid).watchdog == armed

    _past_due(w)
    assert reconcile(w.deps, before_traffic=False).watchdogs_fired == 1
    assert w.agent.calls == ["cancel", "prompt"]


def test_fire__tool_frame_during_the_fallbacks_cancel__interrupted_before_admission(w: World) -> None:
    """WD2: independent activity reaching the session mid-recovery stops the fallback."""
    sid, _, armed = _armed(w)
    _past_due(w)
    w.agent.on_cancel = lambda request: w.report(sid, "tool", content="still working")

    assert watchdog.fire(w.deps, w.get(sid)) is False

    assert w.agent.calls == ["cancel"] and w.get(sid).watchdog is None


def test_fire__own_cancel_ack_during_the_fallback__answer_still_handed_over(w: World) -> None:
    """The fallback's own silent cancellation is acknowledged by cancel_ack: that is not activity."""
    sid, _, armed = _armed(w)
    _past_due(w)
    w.agent.on_cancel = lambda request: w.report(sid, "cancel_ack", execution_id=request.execution_id,
                                                prompt_generation=request.prompt_generation)

    assert watchdog.fire(w.deps, w.get(sid)) is True

    assert w.agent.calls == ["cancel", "prompt"] and w.agent.prompts[-1].turn_id == armed.turn_id


# ====================================================================== the clarification turn moved on (WD1)
def _newer_turn(w: World, sid: str, cmid: str = "m-newer") -> str:
    w.report(sid, "turn_completed")
    admission = w.send(sid, "newer work", cmid)
    assert admission.admission == "sent" and admission.turn_id
    return admission.turn_id


def test_reconcile__turn_superseded_before_firing__disarmed_without_cancel_or_prompt(w: World) -> None:
    sid, _, armed = _armed(w)
    newer = _newer_turn(w, sid)
    w.agent.calls.clear()
    _past_every_deadline(w)

    report = reconcile(w.deps, before_traffic=False)

    assert report.watchdogs_fired == 0 and w.agent.calls == []
    session = w.get(sid)
    assert session.watchdog is None and session.current_turn is not None and session.current_turn.id == newer
    assert session.current_turn.id != armed.turn_id


def test_fire__turn_superseded_between_preflight_and_admission__no_dispatch(w: World) -> None:
    """WD1: the admission write re-checks the clarification turn, so a check-then-act gap cannot slip."""
    sid, _, armed = _armed(w)
    _past_due(w)
    stale = w.get(sid)  # the fallback's preflight read: the clarification turn is still current
    w.store.before["admit_watchdog_prompt"] = lambda: None if _newer_turn(w, sid) else None
    prompts = len(w.agent.prompts)

    assert watchdog.fire(w.deps, stale) is False

    newer = w.get(sid).current_turn
    assert newer is not None and newer.id != armed.turn_id
    assert [p.text for p in w.agent.prompts[prompts:]] == ["newer work"]  # only the user's own message
    # The silent cancel addressed the clarification turn's prompt, never the successor's.
    assert [(c.prompt_generation, c.silent) for c in _silent_cancels(w)] == [(armed.prompt_generation, True)]
    assert w.get(sid).generation != armed.prompt_generation

    w.agent.calls.clear()
    _past_every_deadline(w)
    assert reconcile(w.deps, before_traffic=False).watchdogs_fired == 0  # later passes disarm it
    assert w.get(sid).watchdog is None and w.agent.calls == []


def test_reconcile__session_cancelled_before_firing__no_fallback(w: World) -> None:
    sid, _, _ = _armed(w)
    sessions.cancel_session(w.deps, USER, sid)
    w.agent.calls.clear()
    _past_every_deadline(w)

    assert reconcile(w.deps, before_traffic=False).watchdogs_fired == 0
    assert w.agent.calls == []


def test_fire__stale_watchdog_snapshot_after_activity__no_dispatch(w: World) -> None:
    """A read taken before the agent's activity cannot fire: admission requires the watchdog still armed."""
    sid, _, _ = _armed(w)
    _past_due(w)
    stale = w.get(sid)
    w.report(sid, "message", content="back at work")

    assert watchdog.fire(w.deps, stale) is False
    assert "prompt" not in w.agent.calls and w.get(sid).prompt.dispatch == Dispatch.ACCEPTED  # type: ignore[union-attr]


def _epoch(stamp: str) -> float:
    return parse_iso(stamp).timestamp()
