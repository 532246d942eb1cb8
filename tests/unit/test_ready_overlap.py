"""A predecessor's delayed `ready` frame overlapping a detached answer's reservation.

It waits for the reservation to resolve, then revalidates the prompt generation: it never completes the
reserved successor; after a rollback the predecessor's generation completes normally (the predecessor is not
stranded); a generationless frame that overlapped is dropped.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.domain.errors import DispatchFailed
from chalicelib.domain.model import Delivery, Dispatch, Prompt, Reservation, Session
from chalicelib.functions.reconciler import reconcile
from chalicelib.services import frames
from chalicelib.services.resume import _handed_back, rollback
from tests.support.world import HookedStore, World


@pytest.fixture
def w() -> World:
    return World(HookedStore())


def _running_with_detached_question(w: World) -> tuple[Session, str]:
    """The agent's turn T1 is still open (generation 1); its question is detached."""
    sid, cid = w.detached()
    s = w.get(sid)
    assert s.current_turn is not None and s.current_turn.open and s.generation == 1
    return s, cid


def _reserve(w: World, s: Session, cid: str, *, attempted: bool) -> tuple[Reservation, Delivery]:
    """A detached answer's claim + reservation, as the responder writes them (optionally also attempted)."""
    assert s.current_turn is not None
    now = w.deps.now()
    reservation = Reservation(turn_id="T2", seq=s.turn_seq + 1, predecessor=s.current_turn, bundle_id=cid,
                              bundle_turn_id=s.current_turn.id, row_ids=("q1", "q2"),
                              generation=s.generation + 1, created_at=now, deadline=now)
    delivery = Delivery("d1", ("q1", "q2"), "answered", "detached", now, now)
    answers = {q: {"question_id": q, "selected_options": [], "custom_text": "x"} for q in ("q1", "q2")}
    w.store.claim(s.id, cid, answers, status="answered", delivery=delivery, reservation=reservation, at=now)
    if attempted:
        prompt = Prompt("p2", "resume-d1", "T2", "answer", "system:clarification", now, reservation.generation,
                        Dispatch.ATTEMPTED, now)
        w.store.mark_attempted(s.id, reservation, prompt, at=now)
        reservation = replace(reservation, attempted=True)
    return reservation, delivery


def _ready(w: World, s: Session, **overrides: Any) -> frames.FrameResult:
    frame = {"type": "ready", "execution_id": s.execution_id, "prompt_generation": s.generation,
             "turn_id": s.current_turn.id if s.current_turn else None, **overrides}
    return w.frames(s.id, frame)


def test_ready__reservation_rolls_back_while_it_waits__predecessor_completes_normally(w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=False)
    w.sleeper.at(1, lambda: rollback(w.deps, s.id, reservation, cid, delivery))

    result = _ready(w, s)

    after = w.get(s.id)
    assert result.applied == 1 and w.sleeper.calls >= 1  # it waited, then completed
    assert after.current_turn is not None and after.current_turn.id == s.current_turn.id  # type: ignore[union-attr]
    assert after.current_turn.completed_at is not None and after.reservation is None
    assert [r.status for r in w.bundle(cid).rows] == ["pending", "pending"]  # the answer is retryable


def test_ready__attempted_reservation_accepted_while_it_waits__successor_never_completed(w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=True)
    w.sleeper.at(1, lambda: w.store.finish_reservation(s.id, reservation, result="resumed", dispatch=Dispatch.ACCEPTED,
                                                       at=w.deps.now()))

    result = _ready(w, s)  # the predecessor's frame: generation 1, turn T1

    after = w.get(s.id)
    assert result.applied == 0
    assert after.current_turn is not None and after.current_turn.id == "T2" and after.current_turn.open
    assert after.generation == 2 and after.state.value == "RUNNING"


def test_ready__attempted_reservation_rolled_back_while_it_waits__predecessor_generation_completes(
        w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=True)
    assert w.get(s.id).generation == 2
    w.sleeper.at(1, lambda: rollback(w.deps, s.id, reservation, cid, delivery))

    result = _ready(w, s)

    after = w.get(s.id)
    assert result.applied == 1
    assert after.generation == 1 and after.current_turn is not None
    assert after.current_turn.id == s.current_turn.id and after.current_turn.completed_at  # type: ignore[union-attr]


def test_ready__generationless_frame_overlapping_a_reservation__dropped_even_after_rollback(w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=False)
    w.sleeper.at(1, lambda: rollback(w.deps, s.id, reservation, cid, delivery))

    result = _ready(w, s, prompt_generation=None, turn_id=None)

    after = w.get(s.id)
    assert result.applied == 0
    assert after.current_turn is not None and after.current_turn.open  # ownership could not be proven


def test_ready__responder_died_before_the_marker__reconciler_rolls_back__predecessor_completes_and_sends(
        w: World) -> None:
    """The issue's probe: the ready outlasts its bounded wait; the reservation is rolled back by the reconciler
    once its owner deadline passed; the predecessor's turn completes and the user's next message is sent."""
    s, cid = _running_with_detached_question(w)
    reservation, _ = _reserve(w, s, cid, attempted=False)

    result = _ready(w, s)

    assert result.applied == 1 and w.sleeper.slept >= w.deps.settings.reservation_wait
    kept = w.get(s.id)
    assert kept.deferred_ready is not None and kept.current_turn.open  # type: ignore[union-attr]
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)

    report = reconcile(w.deps, before_traffic=False)

    after = w.get(s.id)
    assert (report.reservations_rolled_back, report.ready_settled) == (1, 1)
    assert after.reservation is None and after.deferred_ready is None
    assert after.current_turn is not None and after.current_turn.id == reservation.predecessor.id
    assert after.current_turn.completed_at is not None and after.state.value == "WAITING_FOR_INPUT"
    assert w.send(s.id, "next", "m-next").admission == "sent"


def test_ready__deferred_then_the_successor_is_accepted__dropped_never_completes_the_successor(w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, _ = _reserve(w, s, cid, attempted=True)

    assert _ready(w, s).applied == 1  # kept on the aggregate
    w.store.finish_reservation(s.id, reservation, result="resumed",
                               dispatch=Dispatch.ACCEPTED, at=w.deps.now())
    w.clock.advance(w.deps.settings.owner_window.total_seconds() + 1)
    report = reconcile(w.deps, before_traffic=False)

    after = w.get(s.id)
    assert report.ready_settled == 1 and after.deferred_ready is None
    assert after.current_turn is not None and after.current_turn.id == "T2" and after.current_turn.open
    assert after.generation == 2 and after.state.value == "RUNNING"


def test_ready__rolled_back_by_a_process_that_died_before_settling__reconciler_completes_it(w: World) -> None:
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=False)
    assert _ready(w, s).applied == 1
    rollback(w.deps, s.id, reservation, cid, delivery)  # ... and the process died right after this write
    assert w.get(s.id).current_turn.open  # type: ignore[union-attr]
    assert s.id in w.memory.due_sessions(w.deps.now() + "~")  # due at once: nothing else will settle it

    report = reconcile(w.deps, before_traffic=False)

    after = w.get(s.id)
    assert report.ready_settled == 1 and after.deferred_ready is None
    assert after.current_turn is not None and after.current_turn.completed_at is not None


def test_ready__responder_rolls_back_itself__settles_the_waiting_ready_at_once(w: World) -> None:
    """The resume's own rollback (agentctl refused the answer) settles the deferred ready in the same request."""
    s, cid = _running_with_detached_question(w)
    reservation, delivery = _reserve(w, s, cid, attempted=True)
    assert _ready(w, s).applied == 1

    error = _handed_back(w.deps, s.id, reservation, cid, delivery, "refused")

    after = w.get(s.id)
    assert isinstance(error, DispatchFailed)
    assert after.deferred_ready is None and after.generation == 1
    assert after.current_turn is not None and after.current_turn.completed_at is not None
    assert [r.status for r in w.bundle(cid).rows] == ["pending", "pending"]  # the answer is retryable


def test_turn_completed__the_agent_asks_while_its_completion_is_written__question_detached_queue_drains() -> None:
    """Found by the explorer's second pause: a completion decided before a new question landed must not
    complete the turn over it, leaving it live in a closed turn where it holds the queue."""
    w = World(HookedStore())
    s = w.session("start")
    assert w.send(s.id, "next", "m-next").admission == "queued"
    asked: list[str] = []
    w.store.before["complete_turn"] = lambda: asked.append(w.ask(s.id))  # the retry detaches this one ...
    w.store.before["detach_rows"] = lambda: asked.append(w.ask(s.id))  # ... and must see this one too

    assert w.report(s.id, "turn_completed").applied == 1

    after = w.get(s.id)
    assert len(asked) == 2 and after.queue == ()  # the queued message started the next turn
    assert all(r.agent_disconnected for cid in asked for r in w.bundle(cid).rows)
