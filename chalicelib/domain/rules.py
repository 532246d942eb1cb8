"""The repository rule and the state machine: pure functions over domain objects."""
from __future__ import annotations

from typing import Any

from .model import (
    INPUT_CAPABLE_STATES,
    TERMINAL_STATES,
    Bundle,
    Row,
    Session,
    State,
    Turn,
)

PENDING = "pending"
ROW_STATUSES = frozenset({"pending", "answered", "rejected", "expired", "cancelled"})


def flag(value: Any) -> bool:
    """Stored flags: True, "true", "1" and 1 are all true (old writers, other stores)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value == 1
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return False


def row_status(raw: Any) -> str:
    """Absent/empty status counts as pending; an unknown status never does (fail closed)."""
    if raw is None or raw == "":
        return PENDING
    status = str(raw)
    return status if status in ROW_STATUSES else "unknown"


def row_pending(row: Row) -> bool:
    return row_status(row.status) == PENDING


def bundle_is_active(session: Session, bundle: Bundle) -> bool:
    """THE repository rule: a pending row, the session's current turn, a non-terminal session.

    chalicelib.store.conditions.bundle_active is the same predicate as a condition expression.
    """
    return (
        any(row_pending(r) for r in bundle.rows)
        and session.current_turn is not None
        and bundle.turn_id == session.current_turn.id
        and session.state not in TERMINAL_STATES
    )


def moved_on(session: Session, bundle: Bundle) -> bool:
    """The bundle's tool request can no longer be answered whatever its rows say: a newer turn is current, or
    the session ended. chalicelib.store.conditions.moved_on is the same predicate as a condition."""
    return (session.current_turn is None or bundle.turn_id != session.current_turn.id
            or session.state in TERMINAL_STATES)


def archivable(session: Session, bundle: Bundle) -> bool:
    """The bundle can no longer be answered through respond (superseded, expired, cancelled, answered or
    rejected), so it leaves the aggregate for its history record: the aggregate holds live state only. It
    stays while an answer to it is on its way or the session points at it (a reservation, a watchdog):
    those finish in the aggregate. A late answer and a dismissal work from the record."""
    return (not bundle_is_active(session, bundle)
            and (bundle.delivery is None or not bundle.delivery.pending)
            and (session.reservation is None or session.reservation.bundle_id != bundle.id)
            and (session.watchdog is None or session.watchdog.clarification_id != bundle.id))


def active_bundles(session: Session) -> list[Bundle]:
    return [b for b in session.bundles if bundle_is_active(session, b)]


def published_turn(session: Session | None) -> Turn | None:
    """The current turn as clients may know it: a reserved successor stays hidden until acknowledged, and
    until then its predecessor is what they know."""
    if session is None or session.current_turn is None:
        return None
    r = session.reservation
    if r is not None and r.turn_id == session.current_turn.id:
        return r.predecessor
    return session.current_turn


def input_capable(state: State) -> bool:
    return state in INPUT_CAPABLE_STATES


def pending_action(session: Session) -> str | None:
    """The session's pending-action projection, derived from the rule only."""
    if not input_capable(session.state):
        return None
    return "clarification" if active_bundles(session) else None


# Which state a session may move to from which. Terminal states are final.
_TRANSITIONS: dict[State, frozenset[State]] = {
    State.CREATED: frozenset({State.STARTING, State.IDLE, State.RUNNING}),
    State.STARTING: frozenset({State.IDLE, State.RUNNING}),
    State.RUNNING: frozenset({State.IDLE, State.WAITING_FOR_INPUT}),
    State.IDLE: frozenset({State.RUNNING}),
    State.WAITING_FOR_INPUT: frozenset({State.RUNNING, State.IDLE}),
}


def allowed_sources(target: State) -> frozenset[State]:
    """States from which `target` may be entered. Any live state may become terminal."""
    if target in TERMINAL_STATES:
        return frozenset(State) - TERMINAL_STATES
    return frozenset(s for s, targets in _TRANSITIONS.items() if target in targets)

