"""Closed bundles move from the session aggregate to history (services.archive), on the in-memory store.

The emulator and HTTP side: tests/integration/test_clarifications.py (maximum bundles); crash points and
races: the crash-point harness and the interleaving explorer each have an archiving operation.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.errors import ConditionFailed, ItemTooLarge
from chalicelib.domain.model import Delivery, Reservation, Watchdog
from chalicelib.domain.rules import archivable
from chalicelib.functions import streams
from chalicelib.services.deps import Settings
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from chalicelib.store.size import item_size
from tests.contract.builders import AT, LATER, T1, T2, bundle, row, session
from tests.support.crash import SessionTap
from tests.support.world import ANSWER, World

ANSWERED = row("q1", "answered", response={"selected_options": ["a"]})


@pytest.mark.parametrize(("rows", "extra", "expected"), [
    ((ANSWERED, row("q2", "rejected")), {}, True),
    ((row("q1", "cancelled"),), {}, True),
    ((ANSWERED, row("q2")), {}, False),  # a question still open
    ((row("q1"),), {"turn": T2}, True),  # superseded: a late answer links to its record
    ((row("q1", "expired"),), {}, True),  # expired: the same
    ((row("q1"),), {}, False),  # active: respond answers it
    ((ANSWERED,), {"delivery": Delivery("d1", ("q1",), "answered", "live", AT, LATER)}, False),  # on its way
    ((ANSWERED,), {"reservation": True}, False),  # a resume still carries it
    ((ANSWERED,), {"watchdog": True}, False),  # its watchdog may still re-prompt it
])
def test_archivable__whatever_respond_can_no_longer_answer(rows: tuple, extra: dict, expected: bool) -> None:
    b = bundle("s1", "b1", T1, *rows, **({"delivery": extra["delivery"]} if "delivery" in extra else {}))
    s = session("s1", b, turn=extra.get("turn", T1))
    if extra.get("reservation"):
        s = replace(s, reservation=Reservation("t2", 2, T1, b.id, T1.id, ("q1",), 4, AT, LATER))
    if extra.get("watchdog"):
        s = replace(s, watchdog=Watchdog(b.id, T1.id, "exec-1", 3, LATER, "text"))
    assert archivable(s, b) is expected


def _long_session(budget: int, compact: int) -> World:
    return World(SessionTap(MemoryStore()),
                 settings=Settings(deployment_id="archive", session_budget_bytes=budget, session_compact_bytes=compact))


def _stream(w: World) -> None:
    """The sessions stream function catches up (it copies each question's transcript anchor to history)."""
    for record in w.store.records():
        streams.on_session_record(w.deps, record)


def test_long_session__every_question_answered__never_session_full_and_the_item_stays_small() -> None:
    w = _long_session(budget=12 * 1024, compact=4 * 1024)
    sid = w.session("start").id
    cids = []
    for n in range(40):  # ~40 KB of questions, over three times the budget
        cid = w.ask(sid, [{"question_id": "q1", "prompt": f"Question {n}: " + "x" * 600,
                           "options": [{"option_id": "a", "label": "A"}, {"option_id": "b", "label": "B"}]}])
        w.detach(cid)
        w.respond(cid, {"rejected": True, "reject_reason": f"skip {n}"})
        cids.append(cid)
    s = w.get(sid)
    assert item_size(codec.session_to_item(s)) <= 4 * 1024 + 1024 and s.archived >= 30
    for streamed in (False, True):  # moved before the stream copied them (it lags), then after it ran
        if streamed:
            _stream(w)
        entries = [m for m in w.transcript(sid)["messages"] if m["type"] == "clarification"]
        assert [e["clarification_id"] for e in entries] == cids  # in order and once, wherever each lives
        assert {e["state"] for e in entries} == {"rejected"}


def test_long_session__open_questions_fill_it__session_full_as_before() -> None:
    """Only closed questions move: open ones still count, so the budget still refuses."""
    w = _long_session(budget=4 * 1024, compact=1024)
    sid = w.session("start").id
    big = [{"question_id": "q1", "prompt": "y" * 1800,  # one fits the 4 KB budget, two do not
            "options": [{"option_id": "a", "label": "A"}, {"option_id": "b", "label": "B"}]}]
    w.ask(sid, big)
    with pytest.raises(ItemTooLarge):
        for _ in range(5):
            w.ask(sid, big)
    assert len(w.get(sid).bundles) == 1 and w.get(sid).archived == 0 and w.memory.list_archived(sid) == []


def test_small_session__under_the_compaction_size__nothing_moves() -> None:
    w = World()
    sid, cid = w.detached()
    w.respond(cid, {"rejected": True})
    w.ask(sid)
    assert w.get(sid).bundle(cid) is not None and w.memory.list_archived(sid) == []


def test_archived_question__agent_calls__answered_as_before() -> None:
    w = _long_session(budget=300 * 1024, compact=0)
    sid, cid = w.detached()
    w.respond(cid, ANSWER)
    w.ask(sid)  # moves the answered one to history
    assert w.get(sid).bundle(cid) is None and w.memory.get_archived(sid, cid) is not None
    assert w.wait(cid) == (410, {"state": "inactive", "reason": "answered"})
    assert w.detach(cid) == []


def test_archive_write__lost_race__nothing_moves_and_the_ask_decides_again() -> None:
    """An aggregate read before another write (its version condition): nothing moves on that stale read;
    the ask that triggered it re-reads, archives from the fresh aggregate, then adds its bundle."""
    w = _long_session(budget=300 * 1024, compact=0)
    sid, cid = w.detached()
    w.respond(cid, {"rejected": True})
    current = w.get(sid)
    with pytest.raises(ConditionFailed) as lost:
        w.memory.archive_bundles(replace(current, version=current.version - 1), list(current.bundles), AT)
    assert lost.value.current == current and w.get(sid) == current and w.memory.list_archived(sid) == []
    new = w.ask(sid)
    s = w.get(sid)
    assert s.bundle(cid) is None and s.bundle(new) is not None and w.memory.get_archived(sid, cid) is not None
