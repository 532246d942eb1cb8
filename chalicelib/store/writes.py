"""Every write of the session aggregate, defined once: its condition clauses and its changes.

A store provides `_commit(session_id, write, remember)`: DynamoStore renders the write as one UpdateItem (or a
transaction with the idempotency record), MemoryStore evaluates the same clauses and applies the same changes
on its item under one lock. Nothing here reads a clock; every time comes from the caller.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..domain.errors import ConditionFailed
from ..domain.model import (
    Bundle,
    DeferredReady,
    Delivery,
    Dispatch,
    Prompt,
    Reservation,
    Session,
    StartEvent,
    State,
    Task,
    Turn,
    Watchdog,
)
from . import codec
from . import conditions as c
from .document import Append, Change, Clause, Drop, Equals, Exists, Increment, Missing, Not, Put, Write
from .protocol import Remembered
from .size import item_size, value_size

RECON_SHARD = "due"  # one partition of the sparse index; it only ever holds outstanding work
QUARANTINE_SHARD = "quarantined"  # the same index's other partition: aggregates set apart for an operator


class _Builder:
    def __init__(self) -> None:
        self.conditions: list[Clause] = [c.session_exists()]
        self.changes: list[Change] = []
        self._due: str | None = None

    def require(self, *clauses: Clause) -> _Builder:
        self.conditions.extend(clauses)
        return self

    def put(self, path: tuple[str | int, ...], value: Any) -> _Builder:
        self.changes.append(Put(path, value))
        return self

    def drop(self, path: tuple[str | int, ...]) -> _Builder:
        self.changes.append(Drop(path))
        return self

    def put_or_drop(self, path: tuple[str | int, ...], value: Any) -> _Builder:
        if value is None:
            return self.drop(path)
        return self.put(path, value)

    def deadline(self, deadline: str | None) -> _Builder:
        """Owner deadline: its presence puts the aggregate in the reconciler's sparse index. Writers only set
        it (a later one may postpone an earlier one by at most one owner window); the reconciler clears it."""
        if deadline:
            self._due = min(self._due, deadline) if self._due else deadline
        return self

    def complete(self, turn_id: str, from_state: State, to_state: State, at: str) -> _Builder:
        """Complete `turn_id` only while it is the open current turn and the session is in `from_state`.
        A completed turn is the agent's activity and takes no re-prompt: its watchdog goes with it."""
        self.require(c.turn_is(turn_id), c.turn_open(), c.state_is(from_state))
        self.put(("current_turn", "completed_at"), at).put(("state",), to_state.value)
        return self.drop(("watchdog",))

    def start(self, turn: Turn, state: State) -> _Builder:
        self.put(("current_turn",), codec.turn_to_item(turn)).put(("turn_seq",), turn.seq)
        return self.put(("state",), state.value)

    def prompt(self, prompt: Prompt) -> _Builder:
        self.put(("generation",), prompt.generation).put(("prompt",), codec.prompt_to_item(prompt))
        return self.deadline(prompt.deadline)

    def done(self, at: str | None) -> Write:
        if self._due:
            self.put(("recon_shard",), RECON_SHARD).put(("recon_due",), self._due)
        if at is not None:
            self.put(("updated_at",), at)
            self.changes.append(Increment(("version",)))
        return Write(tuple(self.conditions), tuple(self.changes))


class _TaskBuilder(_Builder):
    def __init__(self) -> None:
        super().__init__()
        self.conditions = [Exists(("task_id",))]  # an update never creates a task


def _row(bundle_id: str, row_id: str, *name: str) -> tuple[str, ...]:
    return ("bundles", bundle_id, "rows", row_id, *name)


def _delivery(bundle_id: str, *name: str) -> tuple[str, ...]:
    return ("bundles", bundle_id, "delivery", *name)


def _activity_is(seen: str) -> Clause:
    return Equals(("activity_at",), seen) if seen else Not(Exists(("activity_at",)))


class ConditionalWrites(ABC):
    """The conditional writes of the session aggregate (and of a task's summary and step). A store commits
    a `Write` to its storage; the decisions are all here."""

    @abstractmethod
    def _commit(self, session_id: str, write: Write, remember: Remembered | None = None) -> Session:
        """Apply `write` atomically (with `remember` created in the same transaction) and return the new
        aggregate. Raises ConditionFailed carrying the current aggregate, AlreadyRemembered, ItemTooLarge."""
        ...

    @abstractmethod
    def _commit_archiving(self, session_id: str, write: Write, session: Session, bundles: Sequence[Bundle]) -> Session:
        """Apply `write` and create the archive records of `bundles` (codec.archive_to_item) in one
        transaction; returns the new aggregate. Raises ConditionFailed carrying the current aggregate."""
        ...

    @abstractmethod
    def _commit_task(self, task_id: str, write: Write, checks: Mapping[str, Write] | None = None) -> Task:
        """Apply `write` to the task item; with `checks` (session id -> conditions), in one transaction that
        also requires every check to hold. Raises ConditionFailed (carrying the current task when the task's
        own condition failed)."""
        ...

    def room(self, session: Session, adding: Bundle | Prompt) -> tuple[int, int]:
        """The aggregate's bytes as stored and the bytes `adding` (a bundle, a sent or queued message) would
        add to it, both by DynamoDB's size rules: what the session's byte budget counts."""
        added = codec.bundle_to_item(adding) if isinstance(adding, Bundle) else codec.prompt_to_item(adding)
        return item_size(codec.session_to_item(session)), value_size(added)

    # ------------------------------------------------------------ tasks
    def set_task_summary(self, task_id: str, *, pending_action: str | None, primary_session_id: str | None,
                         expected_revision: int, at: str, activity_at: str = "",
                         seen_activity: str | None = None) -> Task:
        """Compare-and-set on the summary revision (and, given `seen_activity`, the activity read with it): an
        older computation never overwrites a newer one. The task list's sort key moves with it
        (codec.task_list_key)."""
        w = _TaskBuilder().require(Equals(("summary_revision",), expected_revision))
        if seen_activity is not None:
            w.require(_activity_is(seen_activity))
        w.put_or_drop(("pending_action",), pending_action).put_or_drop(("primary_session_id",), primary_session_id)
        w.put(("summary_revision",), expected_revision + 1).put_or_drop(("summary_at",), at or None)
        w.put_or_drop(("activity_at",), activity_at or None)
        w.put(("list_key",), codec.task_list_key(pending_action, max(at, activity_at)))
        return self._commit_task(task_id, w.done(None))

    def set_task_activity(self, task: Task, activity_at: str) -> Task:
        """Move the task's latest activity (and its place in the list) forward, compare-and-set on what
        `task` read; the summary and its revision stay (no new summary event for a turn that started)."""
        w = _TaskBuilder().require(Equals(("summary_revision",), task.summary.revision),
                                   _activity_is(task.summary.activity_at))
        w.put(("activity_at",), activity_at)
        w.put(("list_key",), codec.task_list_key(task.summary.pending_action,
                                                 max(task.created_at, task.summary.updated_at, activity_at)))
        return self._commit_task(task.id, w.done(None))

    def add_task_session(self, task_id: str, session_id: str) -> Task:
        """Name a new session on its task (before it is created: a name without a session is harmless), so
        the task list repairs a page's summaries from one batch read. A task stored before tasks listed their
        sessions keeps no list (its readers query the sessions instead)."""
        w = _TaskBuilder().require(Exists(("sessions",))).put(("sessions", session_id), True)
        return self._commit_task(task_id, w.done(None))

    def list_old_task(self, task: Task) -> bool:
        """Give a task stored before the task list's index existed its place in it (codec.task_list_key, as
        task_to_item computes it): the backfill's one write, a no-op (False) once the task has a place."""
        key = codec.task_list_key(task.summary.pending_action, task.last_activity_at)
        try:
            self._commit_task(task.id, _TaskBuilder().require(Missing(("list_key",))).put(("list_key",), key)
                              .done(None))
            return True
        except ConditionFailed:
            return False

    def rename_task(self, task_id: str, title: str) -> Task:
        """An update never recreates a deleted task."""
        return self._commit_task(task_id, _TaskBuilder().put(("title",), title).done(None))

    def set_workflow_step(self, task_id: str, step: str, *, unchanged: Mapping[str, int] | None = None) -> Task:
        """Move the task to `step`. `unchanged` (session id -> version) makes it one transaction with a check
        that each of those aggregates is still the version the caller decided on: a guard decided by the
        same truth it read, never check-then-act."""
        checks = {sid: Write((c.session_exists(), c.version_is(version)), ()) for sid, version in
                  (unchanged or {}).items()}
        return self._commit_task(task_id, _TaskBuilder().put(("workflow_step",), step).done(None), checks or None)

    # ------------------------------------------------------------ turns and state
    def start_turn(self, session_id: str, *, expected_turn_id: str | None, from_states: Iterable[State],
                   turn: Turn, prompt: Prompt | None, state: State, at: str) -> Session:
        w = _Builder().require(c.turn_is(expected_turn_id), c.state_in(from_states)).start(turn, state)
        if prompt is not None:
            w.prompt(prompt)
        return self._commit(session_id, w.done(at))

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch,
                     at: str, deadline: str | None, close_turn_id: str | None = None) -> Session:
        w = _Builder().require(c.prompt_in(message_id, expect.value)).put(("prompt", "dispatch"), to.value)
        if expect == Dispatch.PENDING and to == Dispatch.ATTEMPTED:
            w.require(c.not_terminal())  # Clarify's own check before a dispatch: an ended session takes none
        if deadline:
            w.put(("prompt", "deadline"), deadline)
        else:
            w.drop(("prompt", "deadline"))
        if close_turn_id is not None:
            w.complete(close_turn_id, State.RUNNING, State.IDLE, at)
        return self._commit(session_id, w.deadline(deadline).done(at))

    def complete_turn(self, session_id: str, turn_id: str, *, from_state: State, to_state: State,
                      at: str, version: int | None = None) -> Session:
        """With `version`, only on the very aggregate the completion pass was decided on: a question asked
        meanwhile is never left live in a completed turn (it would hold the queue)."""
        w = _Builder().complete(turn_id, from_state, to_state, at)
        if version is not None:
            w.require(c.version_is(version))
        return self._commit(session_id, w.done(at))

    def transition(self, session_id: str, *, to: State, from_states: Iterable[State], at: str,
                   expire: Mapping[str, Sequence[str]] | None = None) -> Session:
        w = _Builder().require(c.state_in(from_states)).put(("state",), to.value)
        for bundle_id, rows in (expire or {}).items():
            # Exactly the current-turn pending rows the caller saw expire, in the same write.
            w.require(c.bundle_current(bundle_id))
            for q in rows:
                w.require(c.row_pending(bundle_id, q))
                w.put(_row(bundle_id, q, "status"), "expired").put(_row(bundle_id, q, "agent_disconnected"), True)
        return self._commit(session_id, w.done(at))

    # ------------------------------------------------------------ clarification bundles
    def add_bundle(self, session_id: str, bundle: Bundle, *, expected_turn_id: str | None, new_turn: Turn | None,
                   from_states: Iterable[State], state: State, at: str) -> Session:
        w = _Builder().require(c.turn_is(expected_turn_id), c.state_in(from_states), c.bundle_absent(bundle.id))
        if new_turn is None:
            w.require(c.turn_open())  # the bundle joins the open current turn
        else:
            w.put(("current_turn",), codec.turn_to_item(new_turn)).put(("turn_seq",), new_turn.seq)
        w.put(("bundles", bundle.id), codec.bundle_to_item(bundle)).put(("state",), state.value)
        return self._commit(session_id, w.deadline(bundle.waiter_until).done(at))

    def detach_rows(self, session_id: str, rows: Mapping[str, Sequence[str]], *, at: str,
                    complete_turn_id: str | None = None, from_state: State | None = None,
                    to_state: State | None = None, version: int | None = None) -> Session:
        w = _Builder()
        if version is not None:  # as for complete_turn: the detach pass covers every live question
            w.require(c.version_is(version))
        for bundle_id, row_ids in rows.items():
            w.require(c.bundle_active(bundle_id, row_ids))
            for q in row_ids:  # exactly these rows, still pending and not yet detached
                w.require(c.row_pending(bundle_id, q), c.row_not_detached(bundle_id, q))
                w.put(_row(bundle_id, q, "agent_disconnected"), True)
        if complete_turn_id is not None:
            assert from_state is not None and to_state is not None
            w.complete(complete_turn_id, from_state, to_state, at)
        return self._commit(session_id, w.done(at))

    def close_rows(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, status: str,
                   at: str) -> Session:
        """Pending rows of one active bundle become `status`; other bundles are untouched."""
        w = _Builder().require(c.bundle_active(bundle_id, row_ids))
        for q in row_ids:
            w.require(c.row_pending(bundle_id, q)).put(_row(bundle_id, q, "status"), status)
        return self._commit(session_id, w.done(at))

    def remove_bundle(self, session_id: str, bundle_id: str, at: str) -> Session:
        """The bundle leaves the aggregate (its transcript entry was deleted), unless an answer to it is on
        its way: that delivery needs it to finish."""
        w = _Builder().require(c.bundle_exists(bundle_id), c.bundle_settled(bundle_id)).drop(("bundles", bundle_id))
        return self._commit(session_id, w.done(at))

    def archive_bundles(self, session: Session, bundles: Sequence[Bundle], at: str) -> Session:
        """Closed bundles leave the aggregate for their history records in one transaction, and only from
        the very aggregate they were read from (its version): a record holds exactly what left, and a bundle
        that left can never be archived again, deleted or not."""
        w = _Builder().require(c.version_is(session.version))
        for bundle in bundles:
            w.drop(("bundles", bundle.id))
        w.put(("archived",), session.archived + len(bundles))
        return self._commit_archiving(session.id, w.done(at), session, bundles)

    def hide_prompt(self, session_id: str, message_id: str, at: str) -> Session:
        """The latest prompt's transcript message was deleted: the aggregate stops showing it."""
        w = _Builder().require(Equals(("prompt", "message_id"), message_id)).put(("prompt", "hidden"), True)
        return self._commit(session_id, w.done(at))

    def dismiss(self, session_id: str, bundle_id: str, row_ids: Sequence[str], user_key: str,
                at: str) -> Session:
        """Only an inactive bundle can be dismissed (an active one is answered or rejected instead)."""
        w = _Builder().require(c.bundle_exists(bundle_id), Not(c.bundle_active(bundle_id, row_ids)))
        return self._commit(session_id, w.put(("bundles", bundle_id, "dismissed_by", user_key), True).done(at))

    def link_late_message(self, session_id: str, bundle_id: str, message_id: str, at: str) -> Session:
        w = _Builder().require(c.bundle_exists(bundle_id)).put(("bundles", bundle_id, "late_message_id"), message_id)
        return self._commit(session_id, w.done(at))

    # ------------------------------------------------------------ responses and delivery
    def renew_waiter(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, until: str,
                     at: str) -> Session:
        w = _Builder().require(c.bundle_active(bundle_id, row_ids)).put(("bundles", bundle_id, "waiter_until"), until)
        return self._commit(session_id, w.deadline(until).done(at))

    def claim(self, session_id: str, bundle_id: str, responses: Mapping[str, Mapping[str, Any]], *,
              status: str, delivery: Delivery, reservation: Reservation | None, at: str) -> None:
        """The rule and the exact rows still pending → outcome and delivery intent (and reservation).
        Nothing is read back: the caller holds what it wrote, and respond's claim path is this one write."""
        w = _Builder().require(c.bundle_claimable(bundle_id, list(responses)))
        for q, response in responses.items():
            w.put(_row(bundle_id, q, "status"), status).put(_row(bundle_id, q, "response"), dict(response))
        w.put(_delivery(bundle_id), codec.delivery_to_item(delivery))
        if reservation is not None:
            w.require(c.no_reservation(), c.turn_as(reservation.predecessor))
            w.put(("reservation",), codec.reservation_to_item(reservation))
        if delivery.pending:
            w.deadline(delivery.deadline)
        self._apply(session_id, w.done(at))

    def confirm_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                         watchdog: Watchdog | None, at: str) -> Session:
        """Retire the intent, only for this exact, still-unconfirmed live claim (neither a restore nor the
        responder's fall-through to a resume can have won)."""
        w = _Builder().require(c.delivery_unconfirmed(bundle_id, delivery_id), c.delivery_live(bundle_id))
        w.put(_delivery(bundle_id, "confirmed_at"), at).put(_delivery(bundle_id, "result"), result)
        if watchdog is not None:
            w.put(("watchdog",), codec.watchdog_to_item(watchdog)).deadline(watchdog.due)
        return self._commit(session_id, w.done(at))

    def retire_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                     outcome: str, at: str, reservation: Reservation | None = None) -> Session:
        """The question moved on (a newer turn, an ended session) before anyone took the answer: the claim
        is undone without reactivating history. Exactly its rows are unanswered again in their now inactive
        bundle (answerable only as a new message), the intent goes, and with `reservation` (never attempted:
        nothing was dispatched) the reservation too."""
        w = _Builder().require(c.delivery_unconfirmed(bundle_id, delivery_id), c.moved_on(bundle_id))
        if reservation is not None:
            # The claim's own reservation (delivery_unconfirmed: it is written with its claim and leaves only
            # with it), if never attempted: nothing was dispatched.
            w.require(c.reservation_unattempted()).drop(("reservation",))
        for q in row_ids:
            w.require(c.row_has_status(bundle_id, q, outcome))
            w.put(_row(bundle_id, q, "status"), "pending").drop(_row(bundle_id, q, "response"))
        return self._commit(session_id, w.drop(_delivery(bundle_id)).done(at))

    def restore_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                      outcome: str, detach: bool, at: str, reservation: Reservation | None = None) -> Session:
        """Put exactly the claimed rows back to pending while the claim is unconfirmed, its turn current and
        the session live; with `reservation`, also undo that reservation (handing authority back)."""
        w = _Builder().require(c.delivery_unconfirmed(bundle_id, delivery_id), c.not_terminal())
        if reservation is None:
            w.require(c.bundle_current(bundle_id))
        else:
            w.require(c.reservation_is(reservation.turn_id)).drop(("reservation",))
            if reservation.attempted:  # the successor became current: its predecessor owns the session again
                w.require(c.turn_is(reservation.turn_id))
                w.put(("current_turn",), codec.turn_to_item(reservation.predecessor))
                w.put(("turn_seq",), reservation.predecessor.seq).put(("state",), State.WAITING_FOR_INPUT.value)
                w.put(("generation",), reservation.generation - 1)
            else:
                w.require(c.bundle_current(bundle_id))
        for q in row_ids:
            w.require(c.row_has_status(bundle_id, q, outcome))
            w.put(_row(bundle_id, q, "status"), "pending").drop(_row(bundle_id, q, "response"))
            if detach:
                w.put(_row(bundle_id, q, "agent_disconnected"), True)
        return self._commit(session_id, w.drop(_delivery(bundle_id)).done(at))

    def fall_through(self, session_id: str, bundle_id: str, delivery_id: str, reservation: Reservation, *,
                     at: str) -> Session:
        """A live claim nobody confirmed continues as a detached one: the same claim, its rows detached, and
        a reserved successor, in one write. It races the waiter's confirmation on the same unconfirmed claim,
        so exactly one of them wins; it needs the claim's turn current (turn_as: the successor follows the
        bundle's own turn) and the session live."""
        if reservation.predecessor.id != reservation.bundle_turn_id:
            raise ValueError("a fall-through resumes from the turn its question was asked in")
        w = _Builder().require(c.delivery_unconfirmed(bundle_id, delivery_id), c.not_terminal(), c.no_reservation(),
                               c.turn_as(reservation.predecessor))
        for q in reservation.row_ids:
            w.require(c.row_has_status(bundle_id, q, "answered")).put(_row(bundle_id, q, "agent_disconnected"), True)
        w.put(_delivery(bundle_id, "mode"), "detached").put(_delivery(bundle_id, "deadline"), reservation.deadline)
        w.put(("reservation",), codec.reservation_to_item(reservation))
        return self._commit(session_id, w.deadline(reservation.deadline).done(at))

    def mark_attempted(self, session_id: str, reservation: Reservation, prompt: Prompt, *, at: str) -> Session:
        """The at-most-once boundary: from this write on the successor is the current turn, so the question's
        turn no longer is and a second mark is refused (turn_is)."""
        w = _Builder().require(c.reservation_is(reservation.turn_id), c.turn_is(reservation.bundle_turn_id),
                               c.not_terminal())
        w.put(("reservation", "attempted"), True)
        w.start(Turn(reservation.turn_id, reservation.seq, at), State.RUNNING).prompt(prompt)
        return self._commit(session_id, w.deadline(reservation.deadline).done(at))

    def finish_reservation(self, session_id: str, reservation: Reservation, *, result: str, dispatch: Dispatch,
                           at: str) -> Session:
        """Accepted (or ambiguous): clear the recovery metadata and retire the intent; the claim stays
        terminal. Removing the reservation is what publishes the successor's turn.started. The reservation is
        the guard: it is written with its claim and leaves only with it, so it names the claim's delivery too."""
        bundle_id = reservation.bundle_id
        w = _Builder().require(c.reservation_is(reservation.turn_id))
        w.drop(("reservation",)).put(_delivery(bundle_id, "confirmed_at"), at)
        w.put(_delivery(bundle_id, "result"), result).put(("prompt", "dispatch"), dispatch.value)
        return self._commit(session_id, w.done(at))

    def to_start_event(self, session_id: str, reservation: Reservation, marker: StartEvent, *, result: str,
                       at: str) -> Session:
        """Recovery of an attempted reservation: replace it by the start-event outbox marker and retire the
        intent, in one write (the claim stays terminal; the successor stays current). Guarded by the reservation
        alone, as finish_reservation is."""
        bundle_id = reservation.bundle_id
        w = _Builder().require(c.reservation_is(reservation.turn_id))
        w.drop(("reservation",)).put(("start_event",), codec.start_event_to_item(marker))
        w.put(_delivery(bundle_id, "confirmed_at"), at).put(_delivery(bundle_id, "result"), result)
        w.put(("prompt", "dispatch"), Dispatch.ATTEMPTED.value)
        return self._commit(session_id, w.deadline(at).done(at))

    def clear_start_event(self, session_id: str, turn_id: str, at: str) -> Session:
        """The bus accepted every event of the marker's turn: the marker goes."""
        return self._commit(session_id, _Builder().require(c.start_event_is(turn_id)).drop(("start_event",))
                            .done(at))

    def defer_ready(self, session_id: str, reservation_turn_id: str, ready: DeferredReady) -> Session:
        """A delayed ready waits on the aggregate while that very reservation is unresolved; due at once for
        the reconciler as soon as the reservation is gone (see next_due)."""
        w = _Builder().require(c.reservation_is(reservation_turn_id))
        w.put(("deferred_ready",), codec.deferred_ready_to_item(ready))
        return self._commit(session_id, w.done(ready.at))

    def clear_deferred_ready(self, session_id: str, generation: int, at: str) -> Session:
        """The deferred ready was applied or found stale: it goes (only the one the caller settled)."""
        return self._commit(session_id, _Builder().require(c.deferred_ready_is(generation))
                            .drop(("deferred_ready",)).done(at))

    # ------------------------------------------------------------ watchdog and reconciler bookkeeping
    def clear_watchdog(self, session_id: str, clarification_id: str, at: str) -> Session:
        return self._commit(session_id, _Builder().require(c.watchdog_for(clarification_id)).drop(("watchdog",))
                            .done(at))

    def admit_watchdog_prompt(self, session_id: str, watchdog: Watchdog, prompt: Prompt, *, at: str) -> Session:
        """Serialized admission: the watchdog must still be armed and its turn still current and open."""
        w = _Builder().require(c.watchdog_for(watchdog.clarification_id), c.turn_is(watchdog.turn_id),
                               c.turn_open(), c.not_terminal())
        w.drop(("watchdog",)).put(("state",), State.RUNNING.value).prompt(prompt)
        return self._commit(session_id, w.done(at))

    @abstractmethod
    def _apply(self, session_id: str, write: Write) -> None:
        """Apply `write` without reading the aggregate back (it may not decode, or the caller needs nothing
        of it). ConditionFailed (carrying the current aggregate when it decodes) when its conditions do not
        hold."""
        ...

    def quarantine(self, session_id: str, reason: str, at: str) -> None:
        """Set an aggregate the reconciler cannot repair apart: marked, out of the reconciler's work, refused
        by every write route until released. Works on an item that does not decode."""
        w = _Builder().put(("quarantine",), {"reason": reason[:500], "at": at})
        w.put(("recon_shard",), QUARANTINE_SHARD).put(("recon_due",), at)
        self._apply(session_id, w.done(None))

    def release(self, session_id: str, at: str) -> None:
        """An operator repaired the aggregate: back to normal, and the reconciler looks at it at once."""
        w = _Builder().require(c.quarantined()).drop(("quarantine",))
        w.put(("recon_shard",), RECON_SHARD).put(("recon_due",), at)
        self._apply(session_id, w.done(None))

    def reschedule(self, session_id: str, *, expected_due: str | None, next_due: str | None) -> bool:
        """The reconciler's compare-and-set on the owner deadline; False when a writer set a new one."""
        w = _Builder().require(c.recon_due_is(expected_due))
        if next_due:
            w.deadline(next_due)
        else:
            w.drop(("recon_shard",)).drop(("recon_due",))
        try:
            self._commit(session_id, w.done(None))
            return True
        except ConditionFailed:
            return False

    # ------------------------------------------------------------ message admission
    def admit(self, session_id: str, prompt: Prompt, *, start: Turn | None, expected_turn_id: str | None,
              from_states: Iterable[State], link_bundle: str | None, remember: Remembered | None,
              queue_cap: int, at: str) -> Session:
        w = _Builder().require(c.turn_is(expected_turn_id), c.state_in(from_states))
        if start is not None:
            if expected_turn_id is not None:
                w.require(c.turn_closed())  # a send never cuts into an open turn
            w.start(start, State.RUNNING).prompt(prompt)
        else:  # queue behind the open turn, bounded
            w.require(c.turn_open(), c.queue_below(queue_cap))
            w.changes.append(Append(("queue",), (codec.prompt_to_item(prompt),)))
            w.deadline(prompt.deadline)
        if link_bundle is not None:  # a late answer links its (inactive) question to this message
            w.require(c.bundle_exists(link_bundle)).put(("bundles", link_bundle, "late_message_id"),
                                                        prompt.message_id)
        return self._commit(session_id, w.done(at), remember)

    def start_from_queue(self, session_id: str, *, expected_turn_id: str | None, turn: Turn, head: Prompt,
                         at: str) -> Session:
        w = _Builder().require(c.turn_is(expected_turn_id), c.not_terminal(), c.queue_head_is(head.message_id))
        if expected_turn_id is not None:
            w.require(c.turn_closed())  # the drain never cuts into an open turn
        w.start(turn, State.RUNNING).prompt(head).drop(("queue", 0))
        return self._commit(session_id, w.done(at))
