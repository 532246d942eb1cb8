"""Every condition clause of the session aggregate's writes, written once.

Each clause renders a DynamoDB condition expression (DynamoStore) and evaluates itself on the stored item
(MemoryStore), so both stores decide alike. `bundle_active` is THE repository rule as a condition:
chalicelib.domain.rules.bundle_is_active is the same predicate over a read aggregate, and the contract suite
proves the two agree.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..domain.model import TERMINAL_STATES, State, Turn
from ..domain.rules import PENDING
from .document import AnyOf, Clause, Equals, Exists, Missing, Not, OneOf, SameAs, SizeBelow, all_of, any_of

TRUTHY = (True, "true", "1", 1)  # stored flags from old writers and other stores all mean true


def session_exists() -> Clause:
    """An update never creates an aggregate: a missing session is a failed condition, not a new item."""
    return Exists(("session_id",))


def version_is(version: int) -> Clause:
    """Nothing changed in the aggregate since the caller read it (a guard over several aggregates; an archive
    record must hold exactly what leaves the aggregate)."""
    return Equals(("version",), version)


def turn_is(turn_id: str | None) -> Clause:
    """Turn authority: the pointer is still the turn the caller decided on (None: no turn yet)."""
    if turn_id is None:
        return Missing(("current_turn",))
    return Equals(("current_turn", "id"), turn_id)


def turn_as(turn: Turn) -> Clause:
    """The current turn is exactly the one the caller captured, open or completed as it was: a reservation
    that may hand authority back to it never hands back a stale copy."""
    completed = ("current_turn", "completed_at")
    return all_of((turn_is(turn.id),
                   Missing(completed) if turn.completed_at is None else Equals(completed, turn.completed_at)))


def turn_open() -> Clause:
    """Agent output, asks and the queue belong to a turn that has not completed."""
    return Missing(("current_turn", "completed_at"))


def turn_closed() -> Clause:
    """A new turn never cuts into an open one."""
    return Exists(("current_turn", "completed_at"))


def state_in(states: Iterable[State]) -> Clause:
    """The state machine: only the states the transition may leave."""
    return OneOf(("state",), tuple(s.value for s in sorted(states)))


def state_is(state: State) -> Clause:
    """The exact state the caller saw (a turn completes from the state it was in)."""
    return Equals(("state",), state.value)


def not_terminal() -> Clause:
    """Terminal states are final: nothing answers, resumes or reopens an ended session."""
    return Not(OneOf(("state",), tuple(s.value for s in sorted(TERMINAL_STATES))))


def bundle_exists(bundle_id: str) -> Clause:
    """Writes to a bundle need the bundle (deleted bundles stay deleted)."""
    return Exists(("bundles", bundle_id))


def bundle_absent(bundle_id: str) -> Clause:
    """A new bundle never overwrites one with the same id."""
    return Missing(("bundles", bundle_id))


def bundle_settled(bundle_id: str) -> Clause:
    """No answer to the bundle is on its way (no unconfirmed claim, no reservation resuming with it): a
    delivery in flight never loses the bundle it is delivering."""
    delivery = ("bundles", bundle_id, "delivery")
    return all_of((AnyOf((Missing(delivery), Exists((*delivery, "confirmed_at")))),
                   AnyOf((Missing(("reservation",)), Not(Equals(("reservation", "bundle_id"), bundle_id))))))


def bundle_current(bundle_id: str) -> Clause:
    """The bundle belongs to the session's current turn (an attribute-to-attribute comparison)."""
    return SameAs(("current_turn", "id"), ("bundles", bundle_id, "turn_id"))


def moved_on(bundle_id: str) -> Clause:
    """The bundle's question can no longer be answered by its tool request: a newer turn is current, or the
    session ended (rules.moved_on over a read aggregate)."""
    return any_of((Not(bundle_current(bundle_id)), Not(not_terminal())))


def row_pending(bundle_id: str, row_id: str) -> Clause:
    """Absent or empty status counts as pending; any other value does not (fail closed)."""
    path = ("bundles", bundle_id, "rows", row_id, "status")
    return AnyOf((Missing(path), OneOf(path, (PENDING, ""))))


def row_has_status(bundle_id: str, row_id: str, status: str) -> Clause:
    """A restore puts back only rows that still carry the claim's own outcome."""
    return Equals(("bundles", bundle_id, "rows", row_id, "status"), status)


def row_not_detached(bundle_id: str, row_id: str) -> Clause:
    """Detach changes only rows not detached yet, so a repeat writes nothing."""
    return Not(OneOf(("bundles", bundle_id, "rows", row_id, "agent_disconnected"), TRUTHY))


def bundle_active(bundle_id: str, row_ids: Iterable[str]) -> Clause:
    """THE rule: a pending row AND the current turn AND a non-terminal session."""
    rows = [row_pending(bundle_id, q) for q in row_ids]
    if not rows:
        raise ValueError("an active bundle needs at least one candidate row")
    return all_of((bundle_current(bundle_id), not_terminal(), any_of(rows)))


def bundle_claimable(bundle_id: str, row_ids: Iterable[str]) -> Clause:
    """THE rule with every claimed row still pending (which implies the rule's own any-row clause): a claim
    takes exactly the rows it names, or nothing."""
    rows = [row_pending(bundle_id, q) for q in row_ids]
    if not rows:
        raise ValueError("a claim needs at least one row")
    return all_of((bundle_current(bundle_id), not_terminal(), *rows))


def delivery_unconfirmed(bundle_id: str, delivery_id: str) -> Clause:
    """Confirmation and restore race on the same unconfirmed claim: exactly one of them wins."""
    path = ("bundles", bundle_id, "delivery")
    return all_of((Equals((*path, "delivery_id"), delivery_id), Missing((*path, "confirmed_at"))))


def delivery_live(bundle_id: str) -> Clause:
    """A live claim: the waiter's confirmation loses to the responder's fall-through (mode detached)."""
    return Equals(("bundles", bundle_id, "delivery", "mode"), "live")


def no_reservation() -> Clause:
    """One reservation at a time: a second detached resume cannot reserve over the first."""
    return Missing(("reservation",))


def reservation_is(turn_id: str) -> Clause:
    """Recovery and acknowledgement touch only the reservation they were decided on."""
    return Equals(("reservation", "turn_id"), turn_id)


def reservation_unattempted() -> Clause:
    """A reservation never dispatched: only that one may be retired (nothing reached the agent)."""
    return Not(OneOf(("reservation", "attempted"), TRUTHY))


def deferred_ready_is(generation: int) -> Clause:
    """Only the deferred ready the caller settled is cleared (a newer one stays for its own settling)."""
    return Equals(("deferred_ready", "generation"), generation)


def start_event_is(turn_id: str) -> Clause:
    """Only the outbox marker the caller published is cleared."""
    return Equals(("start_event", "turn_id"), turn_id)


def prompt_in(message_id: str, dispatch: str) -> Clause:
    """Dispatch markers move forward only, and only for the prompt the caller handled."""
    return all_of((Equals(("prompt", "message_id"), message_id), Equals(("prompt", "dispatch"), dispatch)))


def watchdog_for(clarification_id: str) -> Clause:
    """Only the armed watchdog of this clarification may fire or be disarmed."""
    return Equals(("watchdog", "clarification_id"), clarification_id)


def queue_below(cap: int) -> Clause:
    """The queue is bounded so the aggregate stays small."""
    return AnyOf((Missing(("queue",)), SizeBelow(("queue",), cap)))


def queue_head_is(message_id: str) -> Clause:
    """The drain pops exactly the head it dispatches: in order, once."""
    return Equals(("queue", 0, "message_id"), message_id)


def quarantined() -> Clause:
    """A release lifts only a quarantine that is there: it never touches a healthy session."""
    return Exists(("quarantine",))


def recon_due_is(due: str | None) -> Clause:
    """The reconciler clears or moves only the owner deadline it read: a writer's newer one survives."""
    return Missing(("recon_due",)) if due is None else Equals(("recon_due",), due)

