"""Every write of the session aggregate on both stores: what it changes when its conditions hold, and that a
failed condition changes nothing and returns the item as it was (ConditionFailed.current)."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from chalicelib.domain.errors import ConditionFailed
from chalicelib.domain.model import Bundle, DeferredReady, Dispatch, Session, StartEvent, State, Turn
from chalicelib.store import codec
from chalicelib.store.writes import ConditionalWrites
from tests.contract.builders import (
    AT,
    LATER,
    T1,
    T2,
    answers,
    bundle,
    delivery,
    prompt,
    reservation,
    row,
    session,
    task,
    watchdog,
)
from tests.support.stores import put_raw, raw

Op = Callable[[Any, Session], Any]


@dataclass(frozen=True)
class Case:
    name: str
    given: Callable[[str], Session]
    op: Op
    then: Callable[[Session], bool] | None  # None: the condition must fail


def waiting(sid: str) -> Session:
    """Turn t1 open, bundle b1 with q1 and q2 pending and live, WAITING_FOR_INPUT."""
    return session(sid, bundle(sid))


def detached_waiting(sid: str) -> Session:
    return session(sid, bundle(sid, "b1", T1, row("q1", detached=True), row("q2", detached=True)))


def claimed(sid: str, mode: str = "live") -> Session:
    b = bundle(sid, "b1", T1, row("q1", "answered", response={"x": 1}), row("q2", "answered", response={"x": 2}),
               delivery=delivery(mode=mode))
    return session(sid, b)


def reserved(sid: str, attempted: bool = False) -> Session:
    s = claimed(sid, "detached")
    r = reservation(s.bundles[0].id, attempted=attempted)
    if attempted:
        return replace(s, reservation=r, current_turn=Turn("t2", 2, AT), turn_seq=2, state=State.RUNNING,
                       generation=4, prompt=prompt(dispatch=Dispatch.ATTEMPTED))
    return replace(s, reservation=r)


def running(sid: str) -> Session:
    return session(sid, turn=T1, state=State.RUNNING, prompt=prompt("m0", "t1", 3, Dispatch.ATTEMPTED))


def idle(sid: str) -> Session:
    return session(sid, turn=replace(T1, completed_at=AT), state=State.IDLE)


def closed_bundle(sid: str, name: str) -> Bundle:
    return bundle(sid, name, T1, row("q1", "answered", response={"answer": "yes"}), row("q2", "rejected"))


def b1(s: Session) -> str:
    return s.bundles[0].id


def rows_of(s: Session, bundle_id: str) -> dict[str, tuple[str, bool, Any]]:
    b = s.bundle(bundle_id)
    assert b is not None
    return {r.question.question_id: (r.status, r.agent_disconnected, r.response) for r in b.rows}


LIVE = frozenset(State) - {State.COMPLETED, State.FAILED, State.CANCELLED}
NEW_TURN = Turn("t2", 2, AT)

CASES = [
    # ------------------------------------------------------------------ turns and state
    Case("start_turn", idle,
         lambda st, s: st.start_turn(s.id, expected_turn_id="t1", from_states=[State.IDLE], turn=NEW_TURN,
                                     prompt=prompt(), state=State.RUNNING, at=AT),
         lambda s: s.current_turn == NEW_TURN and s.state == State.RUNNING and s.prompt == prompt()
         and s.recon_due == LATER and s.generation == 4),
    Case("start_turn/stale pointer", idle,
         lambda st, s: st.start_turn(s.id, expected_turn_id="t0", from_states=[State.IDLE], turn=NEW_TURN,
                                     prompt=None, state=State.RUNNING, at=AT), None),
    Case("start_turn/wrong state", idle,
         lambda st, s: st.start_turn(s.id, expected_turn_id="t1", from_states=[State.RUNNING], turn=NEW_TURN,
                                     prompt=None, state=State.RUNNING, at=AT), None),
    Case("start_turn/no turn yet", lambda sid: session(sid, turn=None, state=State.IDLE),
         lambda st, s: st.start_turn(s.id, expected_turn_id=None, from_states=[State.IDLE], turn=T1,
                                     prompt=None, state=State.RUNNING, at=AT),
         lambda s: s.current_turn == T1 and s.turn_seq == 1),
    Case("set_dispatch", running,
         lambda st, s: st.set_dispatch(s.id, "m0", expect=Dispatch.ATTEMPTED, to=Dispatch.ACCEPTED, at=AT,
                                       deadline=None),
         lambda s: s.prompt is not None and s.prompt.dispatch == Dispatch.ACCEPTED and s.prompt.deadline is None),
    Case("set_dispatch/closing the turn", running,
         lambda st, s: st.set_dispatch(s.id, "m0", expect=Dispatch.ATTEMPTED, to=Dispatch.REJECTED, at=AT,
                                       deadline=None, close_turn_id="t1"),
         lambda s: s.state == State.IDLE and s.current_turn is not None and s.current_turn.completed_at == AT),
    Case("set_dispatch/not the expected state", running,
         lambda st, s: st.set_dispatch(s.id, "m0", expect=Dispatch.PENDING, to=Dispatch.ATTEMPTED, at=AT,
                                       deadline=LATER), None),
    Case("set_dispatch/attempted", lambda sid: replace(running(sid), prompt=prompt("m0", "t1", 3)),
         lambda st, s: st.set_dispatch(s.id, "m0", expect=Dispatch.PENDING, to=Dispatch.ATTEMPTED, at=AT,
                                       deadline=LATER),
         lambda s: s.prompt is not None and s.prompt.dispatch == Dispatch.ATTEMPTED and s.recon_due == LATER),
    Case("set_dispatch/attempted, but the session ended",
         lambda sid: replace(running(sid), prompt=prompt("m0", "t1", 3), state=State.CANCELLED),
         lambda st, s: st.set_dispatch(s.id, "m0", expect=Dispatch.PENDING, to=Dispatch.ATTEMPTED, at=AT,
                                       deadline=LATER), None),
    Case("set_dispatch/another prompt", running,
         lambda st, s: st.set_dispatch(s.id, "m9", expect=Dispatch.ATTEMPTED, to=Dispatch.ACCEPTED, at=AT,
                                       deadline=None), None),
    Case("complete_turn", running,
         lambda st, s: st.complete_turn(s.id, "t1", from_state=State.RUNNING, to_state=State.IDLE, at=AT),
         lambda s: s.state == State.IDLE and s.current_turn is not None and s.current_turn.completed_at == AT),
    Case("complete_turn/decided on an older version", running,
         lambda st, s: st.complete_turn(s.id, "t1", from_state=State.RUNNING, to_state=State.IDLE, at=AT,
                                        version=s.version - 1), None),
    Case("detach_rows/decided on an older version", waiting,
         lambda st, s: st.detach_rows(s.id, {b1(s): ["q1"]}, at=AT, complete_turn_id="t1",
                                      from_state=State.WAITING_FOR_INPUT, to_state=State.WAITING_FOR_INPUT,
                                      version=s.version - 1), None),
    Case("complete_turn/twice", idle,
         lambda st, s: st.complete_turn(s.id, "t1", from_state=State.IDLE, to_state=State.IDLE, at=AT), None),
    Case("transition/expiring the current turn's rows", waiting,
         lambda st, s: st.transition(s.id, to=State.CANCELLED, from_states=LIVE, at=AT,
                                     expire={b1(s): ["q1", "q2"]}),
         lambda s: s.state == State.CANCELLED and {v[:2] for v in rows_of(s, b1(s)).values()} == {("expired", True)}),
    Case("transition/a row answered meanwhile", claimed,
         lambda st, s: st.transition(s.id, to=State.CANCELLED, from_states=LIVE, at=AT, expire={b1(s): ["q1"]}),
         None),
    Case("transition/already terminal", lambda sid: session(sid, state=State.COMPLETED),
         lambda st, s: st.transition(s.id, to=State.CANCELLED, from_states=LIVE, at=AT), None),
    # ------------------------------------------------------------------ bundles
    Case("add_bundle/joining the open turn", running,
         lambda st, s: st.add_bundle(s.id, bundle(s.id, "b2"), expected_turn_id="t1", new_turn=None,
                                     from_states=LIVE, state=State.WAITING_FOR_INPUT, at=AT),
         lambda s: len(s.bundles) == 1 and s.state == State.WAITING_FOR_INPUT),
    Case("add_bundle/starting a turn", idle,
         lambda st, s: st.add_bundle(s.id, bundle(s.id, "b2", NEW_TURN), expected_turn_id="t1", new_turn=NEW_TURN,
                                     from_states=LIVE, state=State.WAITING_FOR_INPUT, at=AT),
         lambda s: s.current_turn == NEW_TURN and s.bundles[0].turn_id == "t2"),
    Case("add_bundle/turn closed", idle,
         lambda st, s: st.add_bundle(s.id, bundle(s.id, "b2"), expected_turn_id="t1", new_turn=None,
                                     from_states=LIVE, state=State.WAITING_FOR_INPUT, at=AT), None),
    Case("add_bundle/same id again", waiting,
         lambda st, s: st.add_bundle(s.id, bundle(s.id), expected_turn_id="t1", new_turn=None,
                                     from_states=LIVE, state=State.WAITING_FOR_INPUT, at=AT), None),
    Case("detach_rows", waiting,
         lambda st, s: st.detach_rows(s.id, {b1(s): ["q1", "q2"]}, at=AT),
         lambda s: {v[:2] for v in rows_of(s, b1(s)).values()} == {("pending", True)}),
    Case("detach_rows/with turn completion", waiting,
         lambda st, s: st.detach_rows(s.id, {b1(s): ["q1"]}, at=AT, complete_turn_id="t1",
                                      from_state=State.WAITING_FOR_INPUT, to_state=State.WAITING_FOR_INPUT),
         lambda s: rows_of(s, b1(s))["q1"][1] is True and rows_of(s, b1(s))["q2"][1] is False
         and s.current_turn is not None and s.current_turn.completed_at == AT),
    Case("detach_rows/already detached", detached_waiting,
         lambda st, s: st.detach_rows(s.id, {b1(s): ["q1"]}, at=AT), None),
    Case("detach_rows/superseded", lambda sid: session(sid, bundle(sid), turn=T2),
         lambda st, s: st.detach_rows(s.id, {b1(s): ["q1"]}, at=AT), None),
    Case("close_rows", waiting,
         lambda st, s: st.close_rows(s.id, b1(s), ["q1", "q2"], status="cancelled", at=AT),
         lambda s: {v[0] for v in rows_of(s, b1(s)).values()} == {"cancelled"}),
    Case("close_rows/session ended", lambda sid: session(sid, bundle(sid), state=State.FAILED),
         lambda st, s: st.close_rows(s.id, b1(s), ["q1"], status="cancelled", at=AT), None),
    Case("remove_bundle", waiting, lambda st, s: st.remove_bundle(s.id, b1(s), at=AT), lambda s: s.bundles == ()),
    Case("remove_bundle/gone", lambda sid: session(sid), lambda st, s: st.remove_bundle(s.id, f"{s.id}.x", at=AT),
         None),
    Case("remove_bundle/an answer on its way", claimed, lambda st, s: st.remove_bundle(s.id, b1(s), at=AT), None),
    Case("remove_bundle/its reservation resuming", reserved, lambda st, s: st.remove_bundle(s.id, b1(s), at=AT),
         None),
    Case("archive_bundles", lambda sid: session(sid, closed_bundle(sid, "b1"), closed_bundle(sid, "b2"),
                                                bundle(sid, "b3")),
         lambda st, s: st.archive_bundles(s, s.bundles[:2], AT),
         lambda s: [b.id for b in s.bundles] == [f"{s.id}.b3"] and s.archived == 2),
    Case("archive_bundles/changed since read", lambda sid: session(sid, closed_bundle(sid, "b1")),
         lambda st, s: st.archive_bundles(replace(s, version=s.version - 1), s.bundles, AT), None),
    Case("hide_prompt", running, lambda st, s: st.hide_prompt(s.id, "m0", AT),
         lambda s: s.prompt is not None and s.prompt.hidden),
    Case("hide_prompt/another prompt", running, lambda st, s: st.hide_prompt(s.id, "m9", AT), None),
    Case("dismiss/inactive", lambda sid: session(sid, bundle(sid), turn=T2),
         lambda st, s: st.dismiss(s.id, b1(s), ["q1", "q2"], "u-key", AT),
         lambda s: s.bundles[0].dismissed_by == ("u-key",)),
    Case("dismiss/active", waiting, lambda st, s: st.dismiss(s.id, b1(s), ["q1", "q2"], "u-key", AT), None),
    Case("link_late_message", lambda sid: session(sid, bundle(sid), turn=T2),
         lambda st, s: st.link_late_message(s.id, b1(s), "m7", AT), lambda s: s.bundles[0].late_message_id == "m7"),
    # ------------------------------------------------------------------ responses and delivery
    Case("renew_waiter", waiting, lambda st, s: st.renew_waiter(s.id, b1(s), ["q1", "q2"], until=LATER, at=AT),
         lambda s: s.bundles[0].waiter_until == LATER and s.recon_due == LATER),
    Case("renew_waiter/inactive", claimed,
         lambda st, s: st.renew_waiter(s.id, b1(s), ["q1", "q2"], until=LATER, at=AT), None),
    Case("claim/live", waiting,
         lambda st, s: st.claim(s.id, b1(s), answers("q1", "q2"), status="answered", delivery=delivery(),
                                reservation=None, at=AT),
         lambda s: {v[0] for v in rows_of(s, b1(s)).values()} == {"answered"} and s.bundles[0].delivery == delivery()
         and s.recon_due == LATER),
    Case("claim/with a reservation", detached_waiting,
         lambda st, s: st.claim(s.id, b1(s), answers("q1", "q2"), status="answered",
                                delivery=delivery(mode="detached"), reservation=reservation(b1(s)), at=AT),
         lambda s: s.reservation == reservation(s.bundles[0].id)),
    Case("claim/a row answered meanwhile", lambda sid: session(sid, bundle(sid, "b1", T1, row("q1"),
                                                                       row("q2", "answered"))),
         lambda st, s: st.claim(s.id, b1(s), answers("q1", "q2"), status="answered", delivery=delivery(),
                                reservation=None, at=AT), None),
    Case("claim/a second reservation", lambda sid: replace(detached_waiting(sid), reservation=reservation("x.y")),
         lambda st, s: st.claim(s.id, b1(s), answers("q1", "q2"), status="answered",
                                delivery=delivery(mode="detached"), reservation=reservation(b1(s)), at=AT), None),
    Case("confirm_delivery", claimed,
         lambda st, s: st.confirm_delivery(s.id, b1(s), "d1", result="live", watchdog=watchdog(b1(s)), at=AT),
         lambda s: s.bundles[0].delivery is not None and s.bundles[0].delivery.confirmed_at == AT
         and s.watchdog == watchdog(s.bundles[0].id)),
    Case("confirm_delivery/another claim", claimed,
         lambda st, s: st.confirm_delivery(s.id, b1(s), "d9", result="live", watchdog=None, at=AT), None),
    # The waiter read the live claim, then the responder fell through to a resume: the confirmation that
    # follows must lose (else the answer is both handed over live and resumed).
    Case("confirm_delivery/the claim fell through to a resume meanwhile",
         reserved,
         lambda st, s: st.confirm_delivery(s.id, b1(s), "d1", result="live", watchdog=watchdog(b1(s)), at=AT),
         None),
    Case("retire_claim", lambda sid: replace(claimed(sid), current_turn=T2, turn_seq=2),
         lambda st, s: st.retire_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", at=AT),
         lambda s: rows_of(s, b1(s)) == {"q1": ("pending", False, None), "q2": ("pending", False, None)}
         and s.bundles[0].delivery is None),
    Case("retire_claim/the session ended", lambda sid: replace(claimed(sid), state=State.CANCELLED),
         lambda st, s: st.retire_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", at=AT),
         lambda s: s.bundles[0].delivery is None and s.state == State.CANCELLED),
    Case("retire_claim/the question is still current", claimed,
         lambda st, s: st.retire_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", at=AT), None),
    Case("retire_claim/an unattempted reservation", lambda sid: replace(reserved(sid), current_turn=T2, turn_seq=2),
         lambda st, s: st.retire_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", at=AT,
                                       reservation=reservation(b1(s))),
         lambda s: s.reservation is None and s.current_turn == T2 and s.bundles[0].delivery is None),
    Case("retire_claim/an attempted reservation is never retired",
         lambda sid: replace(reserved(sid, attempted=True), state=State.CANCELLED),
         lambda st, s: st.retire_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", at=AT,
                                       reservation=reservation(b1(s), attempted=True)), None),
    Case("restore_claim", claimed,
         lambda st, s: st.restore_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", detach=True, at=AT),
         lambda s: rows_of(s, b1(s)) == {"q1": ("pending", True, None), "q2": ("pending", True, None)}
         and s.bundles[0].delivery is None),
    Case("restore_claim/confirmed already",
         lambda sid: replace(claimed(sid), bundles=(replace(claimed(sid).bundles[0],
                                                            delivery=replace(delivery(), confirmed_at=AT)),)),
         lambda st, s: st.restore_claim(s.id, b1(s), "d1", ["q1"], outcome="answered", detach=True, at=AT), None),
    Case("restore_claim/an attempted reservation", lambda sid: reserved(sid, attempted=True),
         lambda st, s: st.restore_claim(s.id, b1(s), "d1", ["q1", "q2"], outcome="answered", detach=False, at=AT,
                                        reservation=reservation(b1(s), attempted=True)),
         lambda s: s.reservation is None and s.current_turn == T1 and s.state == State.WAITING_FOR_INPUT
         and s.generation == 3),
    Case("fall_through", claimed,
         lambda st, s: st.fall_through(s.id, b1(s), "d1", reservation(b1(s)), at=AT),
         lambda s: s.reservation == reservation(s.bundles[0].id) and s.bundles[0].delivery is not None
         and (s.bundles[0].delivery.mode, s.bundles[0].delivery.deadline) == ("detached", LATER)
         and {v[:2] for v in rows_of(s, b1(s)).values()} == {("answered", True)}),
    Case("fall_through/the waiter confirmed first",
         lambda sid: replace(claimed(sid), bundles=(replace(claimed(sid).bundles[0],
                                                            delivery=replace(delivery(), confirmed_at=AT)),)),
         lambda st, s: st.fall_through(s.id, b1(s), "d1", reservation(b1(s)), at=AT), None),
    Case("fall_through/turn moved on", lambda sid: replace(claimed(sid), current_turn=T2, turn_seq=2),
         lambda st, s: st.fall_through(s.id, b1(s), "d1", reservation(b1(s)), at=AT), None),
    Case("to_start_event", lambda sid: reserved(sid, attempted=True),
         lambda st, s: st.to_start_event(s.id, reservation(b1(s), attempted=True), StartEvent("t2", 2, AT),
                                         result="ambiguous", at=AT),
         lambda s: s.reservation is None and s.start_event == StartEvent("t2", 2, AT) and s.recon_due == AT
         and s.bundles[0].delivery is not None and s.bundles[0].delivery.result == "ambiguous"),
    Case("to_start_event/another reservation", lambda sid: reserved(sid, attempted=True),
         lambda st, s: st.to_start_event(s.id, reservation(b1(s), "t9", attempted=True), StartEvent("t9", 2, AT),
                                         result="ambiguous", at=AT), None),
    Case("clear_start_event", lambda sid: session(sid, start_event=StartEvent("t1", 1, AT)),
         lambda st, s: st.clear_start_event(s.id, "t1", AT), lambda s: s.start_event is None),
    Case("clear_start_event/another turn", lambda sid: session(sid, start_event=StartEvent("t1", 1, AT)),
         lambda st, s: st.clear_start_event(s.id, "t0", AT), None),
    Case("mark_attempted", reserved,
         lambda st, s: st.mark_attempted(s.id, reservation(b1(s)), prompt(dispatch=Dispatch.ATTEMPTED), at=AT),
         lambda s: s.reservation is not None and s.reservation.attempted and s.current_turn == Turn("t2", 2, AT)
         and s.state == State.RUNNING and s.generation == 4),
    Case("mark_attempted/twice", lambda sid: reserved(sid, attempted=True),
         lambda st, s: st.mark_attempted(s.id, reservation(b1(s)), prompt(dispatch=Dispatch.ATTEMPTED), at=AT),
         None),
    Case("finish_reservation", lambda sid: reserved(sid, attempted=True),
         lambda st, s: st.finish_reservation(s.id, reservation(b1(s), attempted=True), result="resumed",
                                             dispatch=Dispatch.ACCEPTED, at=AT),
         lambda s: s.reservation is None and s.prompt is not None and s.prompt.dispatch == Dispatch.ACCEPTED
         and s.bundles[0].delivery is not None and s.bundles[0].delivery.result == "resumed"),
    Case("finish_reservation/gone", claimed,
         lambda st, s: st.finish_reservation(s.id, reservation(b1(s)), result="resumed",
                                             dispatch=Dispatch.ACCEPTED, at=AT), None),
    Case("defer_ready", reserved,
         lambda st, s: st.defer_ready(s.id, "t2", DeferredReady(3, "t1", AT)),
         lambda s: s.deferred_ready == DeferredReady(3, "t1", AT) and s.reservation is not None),
    Case("defer_ready/the reservation resolved", claimed,
         lambda st, s: st.defer_ready(s.id, "t2", DeferredReady(3, "t1", AT)), None),
    Case("clear_deferred_ready", lambda sid: replace(claimed(sid), deferred_ready=DeferredReady(3, "t1", AT)),
         lambda st, s: st.clear_deferred_ready(s.id, 3, AT), lambda s: s.deferred_ready is None),
    Case("clear_deferred_ready/a newer one",
         lambda sid: replace(claimed(sid), deferred_ready=DeferredReady(5, "t1", AT)),
         lambda st, s: st.clear_deferred_ready(s.id, 3, AT), None),
    # ------------------------------------------------------------------ watchdog and bookkeeping
    Case("clear_watchdog", lambda sid: session(sid, watchdog=watchdog(f"{sid}.b1")),
         lambda st, s: st.clear_watchdog(s.id, f"{s.id}.b1", AT), lambda s: s.watchdog is None),
    Case("clear_watchdog/another one", lambda sid: session(sid, watchdog=watchdog(f"{sid}.b1")),
         lambda st, s: st.clear_watchdog(s.id, f"{s.id}.b9", AT), None),
    Case("admit_watchdog_prompt", lambda sid: session(sid, state=State.RUNNING, watchdog=watchdog(f"{sid}.b1")),
         lambda st, s: st.admit_watchdog_prompt(s.id, watchdog(f"{s.id}.b1"), prompt(turn_id="t1"), at=AT),
         lambda s: s.watchdog is None and s.prompt == prompt(turn_id="t1") and s.state == State.RUNNING),
    Case("admit_watchdog_prompt/turn moved on",
         lambda sid: session(sid, turn=T2, state=State.RUNNING, watchdog=watchdog(f"{sid}.b1")),
         lambda st, s: st.admit_watchdog_prompt(s.id, watchdog(f"{s.id}.b1"), prompt(turn_id="t1"), at=AT), None),
    # ------------------------------------------------------------------ admission
    Case("admit/send", idle,
         lambda st, s: st.admit(s.id, prompt(), start=NEW_TURN, expected_turn_id="t1", from_states=LIVE,
                                link_bundle=None, remember=None, queue_cap=2, at=AT),
         lambda s: s.current_turn == NEW_TURN and s.prompt == prompt() and s.state == State.RUNNING),
    Case("admit/send into an open turn", running,
         lambda st, s: st.admit(s.id, prompt(), start=NEW_TURN, expected_turn_id="t1", from_states=LIVE,
                                link_bundle=None, remember=None, queue_cap=2, at=AT), None),
    Case("admit/queue", running,
         lambda st, s: st.admit(s.id, prompt(turn_id=""), start=None, expected_turn_id="t1", from_states=LIVE,
                                link_bundle=None, remember=None, queue_cap=2, at=AT),
         lambda s: s.queue == (prompt(turn_id=""),)),
    Case("admit/queue full", lambda sid: replace(running(sid), queue=(prompt("q1", ""), prompt("q2", ""))),
         lambda st, s: st.admit(s.id, prompt(turn_id=""), start=None, expected_turn_id="t1", from_states=LIVE,
                                link_bundle=None, remember=None, queue_cap=2, at=AT), None),
    Case("admit/late answer linking its question", lambda sid: replace(idle(sid), bundles=(bundle(sid),)),
         lambda st, s: st.admit(s.id, prompt(), start=NEW_TURN, expected_turn_id="t1", from_states=LIVE,
                                link_bundle=b1(s), remember=None, queue_cap=2, at=AT),
         lambda s: s.bundles[0].late_message_id == "m1"),
    Case("start_from_queue", lambda sid: replace(idle(sid), queue=(prompt("m1", ""), prompt("m2", ""))),
         lambda st, s: st.start_from_queue(s.id, expected_turn_id="t1", turn=NEW_TURN, head=prompt("m1"), at=AT),
         lambda s: s.current_turn == NEW_TURN and s.queue == (prompt("m2", ""),) and s.prompt == prompt("m1")),
    Case("start_from_queue/not the head", lambda sid: replace(idle(sid), queue=(prompt("m1", ""),)),
         lambda st, s: st.start_from_queue(s.id, expected_turn_id="t1", turn=NEW_TURN, head=prompt("m2"), at=AT),
         None),
]


READS_NOTHING_BACK = {"claim"}


def _given(store: Any, case: Case) -> Session:
    s = case.given(f"s{uuid.uuid4().hex[:10]}")
    store.create_session(s)
    stored = store.get_session(s.id)
    assert stored is not None
    return stored


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_write__both_stores__same_outcome(store: Any, case: Case) -> None:
    given = _given(store, case)
    before = raw(store, given.id)
    if case.then is None:
        with pytest.raises(ConditionFailed) as failed:
            case.op(store, given)
        assert failed.value.current == given  # the item as it was when the condition failed
        assert raw(store, given.id) == before  # nothing written
        return
    returned = case.op(store, given)
    written = store.get_session(given.id)
    assert written is not None
    # Every write returns the new aggregate, but the claim: respond's claim path reads nothing back.
    assert returned == (None if case.name.split("/")[0] in READS_NOTHING_BACK else written)
    assert case.then(written), written
    assert written.version == given.version + 1 and written.updated_at == AT


def test_every_aggregate_write__has_a_contract_case() -> None:
    methods = {name for name in vars(ConditionalWrites) if not name.startswith("_")} - {
        "set_task_summary", "set_workflow_step", "reschedule", "rename_task",  # task writes: their own tests
        "set_task_activity", "add_task_session", "list_old_task",  # (tests/contract/test_paged_reads.py)
        "room",  # a measure of the aggregate, not a write (tests/unit/test_archive.py)
        "quarantine", "release"}  # below: they return nothing (the item may not decode)
    covered = {case.name.split("/")[0] for case in CASES}
    assert methods <= covered, sorted(methods - covered)


def test_write__missing_session__condition_failed_with_nothing(store: Any) -> None:
    with pytest.raises(ConditionFailed) as failed:
        store.detach_rows(f"missing-{uuid.uuid4().hex}", {"x.y": ["q1"]}, at=AT)
    assert failed.value.current is None


def test_write__flags_from_other_writers__read_and_conditioned_alike(store: Any) -> None:
    """A row another writer stored with agent_disconnected "1" is detached for both the read and the write."""
    sid = f"s{uuid.uuid4().hex[:10]}"
    s = session(sid, bundle(sid))
    item = codec.session_to_item(s)
    item["bundles"][f"{s.id}.b1"]["rows"]["q1"]["agent_disconnected"] = "1"
    item["bundles"][f"{s.id}.b1"]["rows"]["q2"].pop("status")  # absent status counts as pending
    put_raw(store, item)
    stored = store.get_session(s.id)
    assert rows_of(stored, f"{s.id}.b1") == {"q1": ("pending", True, None), "q2": ("", False, None)}
    with pytest.raises(ConditionFailed):
        store.detach_rows(s.id, {f"{s.id}.b1": ["q1"]}, at=AT)
    assert rows_of(store.detach_rows(s.id, {f"{s.id}.b1": ["q2"]}, at=AT), f"{s.id}.b1")["q2"][1] is True


def test_task_writes__both_stores(store: Any) -> None:
    t = replace(task(), id=f"task-{uuid.uuid4().hex[:8]}")
    store.put_task(t)
    with pytest.raises(ConditionFailed):
        store.put_task(t)
    summary = store.set_task_summary(t.id, pending_action="clarification", primary_session_id="s1",
                                     expected_revision=0, at=AT)
    assert (summary.summary.pending_action, summary.summary.revision, summary.summary.updated_at) == (
        "clarification", 1, AT)
    with pytest.raises(ConditionFailed) as stale:
        store.set_task_summary(t.id, pending_action=None, primary_session_id="s1", expected_revision=0, at=AT)
    assert stale.value.current == summary
    cleared = store.set_task_summary(t.id, pending_action=None, primary_session_id=None, expected_revision=1, at=AT)
    assert cleared.summary.pending_action is None and cleared.summary.primary_session_id is None
    assert store.set_workflow_step(t.id, "review").workflow_step == "review"
    assert store.get_task(t.id) == replace(cleared, workflow_step="review")
    with pytest.raises(ConditionFailed):
        store.set_workflow_step("no-such-task", "review")
    assert store.rename_task(t.id, "Renamed").title == "Renamed"
    assert store.delete_task(t.id) is True and store.get_task(t.id) is None
    assert store.delete_task(t.id) is False
    with pytest.raises(ConditionFailed):  # an update never recreates a deleted task
        store.rename_task(t.id, "Back")
    assert store.get_task(t.id) is None


def test_quarantine__even_an_item_that_does_not_decode__set_apart_then_released(store: Any) -> None:
    sid = f"s{uuid.uuid4().hex[:10]}"
    item = codec.session_to_item(session(sid, bundle(sid)))
    item["state"] = "NOT-A-STATE"  # another writer's garbage: the aggregate no longer decodes
    item.update(recon_shard="due", recon_due=AT)
    put_raw(store, item)
    with pytest.raises(ValueError):
        store.get_session(sid)

    store.quarantine(sid, "ValueError: not a state", AT)

    quarantined = store.get_session(sid)  # reads as its identity and the quarantine alone
    assert quarantined is not None and quarantined.quarantined and quarantined.quarantine.reason.startswith("Value")
    assert sid in store.quarantined_sessions() and sid not in store.due_sessions(None)
    fixed = dict(raw(store, sid), state="IDLE")
    put_raw(store, fixed)
    store.release(sid, LATER)
    released = store.get_session(sid)
    assert released is not None and not released.quarantined and released.state == State.IDLE
    assert sid not in store.quarantined_sessions() and sid in store.due_sessions(None)
    with pytest.raises(ConditionFailed):
        store.release(sid, LATER)  # nothing to release


def test_workflow_step__checked_sessions_unchanged__one_transaction(store: Any) -> None:
    t = replace(task(), id=f"task-{uuid.uuid4().hex[:8]}")
    store.put_task(t)
    first, second = (session(f"s{uuid.uuid4().hex[:10]}", task_id=t.id) for _ in range(2))
    store.create_session(first)
    store.create_session(second)

    moved = store.set_workflow_step(t.id, "review", unchanged={first.id: 1, second.id: 1})
    assert moved.workflow_step == "review"

    store.complete_turn(second.id, "t1", from_state=State.WAITING_FOR_INPUT, to_state=State.IDLE, at=AT)
    with pytest.raises(ConditionFailed):  # the second session changed since the guard read version 1
        store.set_workflow_step(t.id, "done", unchanged={first.id: 1, second.id: 1})
    assert store.get_task(t.id).workflow_step == "review"


def test_archive_bundles__records_hold_what_left__listed_found_and_deleted(store: Any) -> None:
    sid = f"s{uuid.uuid4().hex[:10]}"
    first, second, open_one = closed_bundle(sid, "b1"), closed_bundle(sid, "b2"), bundle(sid, "b3")
    store.create_session(session(sid, first, second, open_one))
    given = store.get_session(sid)
    assert store.get_archived(sid, first.id) is None and store.list_archived(sid) == []
    after = store.archive_bundles(given, [given.bundle(first.id), given.bundle(second.id)], AT)
    assert after.bundles == (given.bundle(open_one.id),) and after.archived == 2
    assert store.get_archived(sid, first.id) == given.bundle(first.id)
    assert store.list_archived(sid) == [given.bundle(first.id), given.bundle(second.id)]
    assert store.list_history(sid) == ([], [])  # archive records are not transcript messages
    assert store.delete_archived(sid, first.id) is True and store.delete_archived(sid, first.id) is False
    assert store.get_archived(sid, first.id) is None and store.list_archived(sid) == [given.bundle(second.id)]
    with pytest.raises(ConditionFailed) as failed:  # the aggregate moved on: nothing archived, nothing written
        store.archive_bundles(given, [given.bundle(open_one.id)], AT)
    assert failed.value.current == after and store.list_archived(sid) == [given.bundle(second.id)]
