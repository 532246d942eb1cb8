"""The repository rule and the state machine (chalicelib/domain/rules.py), as pure functions.

Expectations here are written from the requirements, not from
the implementation: a bundle is active iff it has a pending row, its turn is the session's current turn and
the session is not terminal; absent/empty row statuses read as pending, unknown ones never do.
"""
from __future__ import annotations

import itertools
from typing import Any

import pytest

from chalicelib.domain.model import Bundle, Option, Question, Row, Session, State, Turn
from chalicelib.domain.rules import (
    active_bundles,
    allowed_sources,
    bundle_is_active,
    flag,
    pending_action,
    row_status,
)

TERMINAL = {State.COMPLETED, State.FAILED, State.CANCELLED}
LIVE = set(State) - TERMINAL
INPUT_CAPABLE = {State.IDLE, State.RUNNING, State.WAITING_FOR_INPUT}

# Row statuses as they may be read from storage; None and "" are legacy writers that left it absent.
ROW_STATUSES: list[Any] = ["pending", "answered", "rejected", "expired", "cancelled", "", None, "bogus", "PENDING"]
READS_AS_PENDING = {"pending", "", None}
TURNS = ("current_open", "current_completed", "older", "no_turn")

BUNDLE_TURN = "turn-1"


def _question(n: int = 1) -> Question:
    return Question(question_id=f"q{n}", title=f"Q{n}", prompt=f"Pick {n}",
                    options=(Option("a", "A"), Option("b", "B")))


def _bundle(*statuses: Any, bundle_id: str = "b1", turn_id: str = BUNDLE_TURN) -> Bundle:
    rows = tuple(Row(question=_question(i), status=s) for i, s in enumerate(statuses, start=1))
    return Bundle(id=bundle_id, turn_id=turn_id, message_id=f"m-{bundle_id}", created_at="2024-01-01T00:00:00Z",
                  context="", rows=rows)


def _session(state: State, turn: str, bundles: tuple[Bundle, ...] = ()) -> Session:
    current = {
        "current_open": Turn(id=BUNDLE_TURN, seq=1, started_at="t0"),
        "current_completed": Turn(id=BUNDLE_TURN, seq=1, started_at="t0", completed_at="t1"),
        "older": Turn(id="turn-2", seq=2, started_at="t2"),  # a newer turn superseded the bundle's
        "no_turn": None,
    }[turn]
    return Session(id="s1", workspace_id="ws", task_id="t", created_at="t0", is_primary=True, state=state,
                   version=1, turn_seq=current.seq if current else 0, current_turn=current, bundles=bundles)


def _expected_active(statuses: tuple[Any, ...], turn: str, state: State) -> bool:
    has_pending = any(s in READS_AS_PENDING for s in statuses)
    is_current = turn in ("current_open", "current_completed")
    return has_pending and is_current and state not in TERMINAL


# ------------------------------------------------------------------ flag
@pytest.mark.parametrize("value", [True, "true", "TRUE", " true ", "1", 1, 1.0])
def test_flag__true_spellings__true(value: Any) -> None:
    assert flag(value) is True


@pytest.mark.parametrize("value", [False, "false", "0", "", "yes", "on", "t", 0, 2, -1, 0.5, None, [], {}, [1]])
def test_flag__anything_else__false(value: Any) -> None:
    assert flag(value) is False


# ------------------------------------------------------------------ row_status
@pytest.mark.parametrize("raw", [None, ""])
def test_row_status__absent_or_empty__pending(raw: Any) -> None:
    assert row_status(raw) == "pending"


@pytest.mark.parametrize("raw", ["pending", "answered", "rejected", "expired", "cancelled"])
def test_row_status__known_status__itself(raw: str) -> None:
    assert row_status(raw) == raw


@pytest.mark.parametrize("raw", ["bogus", "PENDING", " pending", "superseded", 0, False, 1])
def test_row_status__unknown_status__never_pending(raw: Any) -> None:
    assert row_status(raw) == "unknown"


# ------------------------------------------------------------------ the repository rule
def test_bundle_is_active__every_one_and_two_row_combination__matches_rule() -> None:
    rows = [(status,) for status in ROW_STATUSES] + list(itertools.product(ROW_STATUSES, repeat=2))
    wrong = []
    for statuses, turn, state in itertools.product(rows, TURNS, State):
        bundle = _bundle(*statuses)
        session = _session(state, turn, (bundle,))
        expected = _expected_active(statuses, turn, state)
        if bundle_is_active(session, bundle) is not expected:
            wrong.append((statuses, turn, state.value, expected))
    assert wrong == [], f"{len(wrong)} combinations disagree with the rule, e.g. {wrong[:5]}"


def test_bundle_is_active__legacy_empty_turn_id_and_no_turn__inactive() -> None:
    bundle = _bundle("pending", turn_id="")
    assert bundle_is_active(_session(State.WAITING_FOR_INPUT, "no_turn", (bundle,)), bundle) is False


def test_active_bundles__mixed_bundles__only_current_turn_pending_ones() -> None:
    live = _bundle("answered", "pending", bundle_id="live")
    done = _bundle("answered", "rejected", bundle_id="done")
    superseded = _bundle("pending", bundle_id="old", turn_id="turn-0")
    session = _session(State.WAITING_FOR_INPUT, "current_open", (superseded, done, live))
    assert [b.id for b in active_bundles(session)] == ["live"]


# ------------------------------------------------------------------ pending_action
@pytest.mark.parametrize(("state", "turn"), list(itertools.product(State, TURNS)))
def test_pending_action__pending_bundle__clarification_only_when_active_and_input_capable(
        state: State, turn: str) -> None:
    session = _session(state, turn, (_bundle("pending"),))
    expected = "clarification" if _expected_active(("pending",), turn, state) and state in INPUT_CAPABLE else None
    assert pending_action(session) == expected


@pytest.mark.parametrize("state", list(State))
def test_pending_action__no_active_bundle__none(state: State) -> None:
    session = _session(state, "current_open", (_bundle("answered"), _bundle("pending", turn_id="turn-0")))
    assert pending_action(session) is None


# ------------------------------------------------------------------ state machine
@pytest.mark.parametrize(("source", "target"), list(itertools.product(sorted(TERMINAL), State)))
def test_allowed_sources__from_terminal__never(source: State, target: State) -> None:
    assert (source in allowed_sources(target)) is False
    assert source not in allowed_sources(target)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(sorted(LIVE), sorted(TERMINAL))))
def test_allowed_sources__live_to_terminal__allowed(source: State, target: State) -> None:
    assert (source in allowed_sources(target)) is True


@pytest.mark.parametrize("target", sorted(TERMINAL))
def test_allowed_sources__terminal_target__exactly_the_live_states(target: State) -> None:
    assert allowed_sources(target) == frozenset(LIVE)


@pytest.mark.parametrize("source", list(State))
def test_allowed_sources__into_created__never(source: State) -> None:
    assert (source in allowed_sources(State.CREATED)) is False


@pytest.mark.parametrize("state", list(State))
def test_allowed_sources__to_itself__never(state: State) -> None:
    assert (state in allowed_sources(state)) is False


@pytest.mark.parametrize(("source", "target"), [
    (State.CREATED, State.STARTING), (State.STARTING, State.RUNNING), (State.IDLE, State.RUNNING),
    (State.RUNNING, State.IDLE), (State.RUNNING, State.WAITING_FOR_INPUT),
    (State.WAITING_FOR_INPUT, State.RUNNING),
])
def test_allowed_sources__ordinary_lifecycle_step__allowed(source: State, target: State) -> None:
    assert (source in allowed_sources(target)) is True
