"""The store interface every implementation (DynamoDB, in-memory fake) provides.

Conditional operations raise ConditionFailed carrying the item as it was when the condition failed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..domain.model import (
    Bundle,
    DeferredReady,
    Delivery,
    Dispatch,
    Event,
    Message,
    Prompt,
    Reservation,
    Session,
    StartEvent,
    State,
    Task,
    Turn,
    TurnRecord,
    Watchdog,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Remembered:
    """The remembered outcome of an idempotent request (message admission): `response` holds either the
    result or the domain error it ended with; `expires_at` (epoch seconds) is when the record may go."""

    key: str
    fingerprint: str
    response: Mapping[str, Any]
    expires_at: int = 0


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of a list, newest first, and where the next (older) page starts: None when this one holds
    the oldest. `after` is the store's position (plain values), opaque to clients once encoded."""

    items: list[T]
    after: tuple[str, ...] | None


class Store(Protocol):
    # -- tasks
    def put_task(self, task: Task) -> None: ...
    def get_task(self, task_id: str) -> Task | None: ...
    def list_tasks(self, workspace_id: str) -> list[Task]: ...
    def page_tasks(self, workspace_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Task]:
        """Tasks in the list's order (codec.task_list_key, newest first) from one index Query."""
        ...

    def unlisted_tasks(self, limit: int, after: str | None) -> tuple[list[Task], str | None]:
        """A bounded Scan step over every task: of the next `limit` tasks after the task id `after` (None: from
        the start), those without a place in the task list's index; and where the next step goes on from
        (None: the table is done)."""
        ...

    def list_old_task(self, task: Task) -> bool:
        """Set the task list's key on a task stored without one (False: it has one already)."""
        ...

    def add_task_session(self, task_id: str, session_id: str) -> Task:
        """Raises ConditionFailed for a task that keeps no session list (stored before it had one)."""
        ...

    def set_task_summary(self, task_id: str, *, pending_action: str | None, primary_session_id: str | None,
                         expected_revision: int, at: str, activity_at: str = "",
                         seen_activity: str | None = None) -> Task:
        """Compare-and-set on the summary revision and the activity read with it (the list's order moves)."""
        ...

    def set_task_activity(self, task: Task, activity_at: str) -> Task:
        """Compare-and-set on what `task` read: only the latest activity and the list's order move."""
        ...

    def set_workflow_step(self, task_id: str, step: str, *, unchanged: Mapping[str, int] | None = None) -> Task:
        """With `unchanged` (session id -> version): one transaction that also checks those versions."""
        ...

    def rename_task(self, task_id: str, title: str) -> Task:
        """Raises ConditionFailed when the task does not exist."""
        ...

    def delete_task(self, task_id: str) -> bool:
        """Removes the task record; False when it was already gone."""
        ...

    # -- the session aggregate: every decision is one conditional write
    def room(self, session: Session, adding: Bundle | Prompt) -> tuple[int, int]:
        """(the aggregate's stored bytes, the bytes `adding` would add), by DynamoDB's size rules."""
        ...

    def create_session(self, session: Session) -> None: ...
    def get_session(self, session_id: str) -> Session | None: ...
    def list_sessions(self, task_id: str) -> list[Session]:
        """Newest first."""
        ...

    def page_sessions(self, task_id: str, limit: int, after: tuple[str, ...] | None) -> Paged[Session]:
        """Newest first, from one index Query."""
        ...

    def get_sessions(self, session_ids: Sequence[str]) -> list[Session]:
        """The aggregates that exist among `session_ids` (batch reads of up to 100), in no given order."""
        ...

    def start_turn(self, session_id: str, *, expected_turn_id: str | None, from_states: Iterable[State],
                   turn: Turn, prompt: Prompt | None, state: State, at: str) -> Session:
        """Move the turn pointer from `expected_turn_id` (None: no turn yet) to `turn` in one write."""
        ...

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch,
                     at: str, deadline: str | None, close_turn_id: str | None = None) -> Session:
        """Advance the latest prompt's dispatch state. With `close_turn_id`, the same write completes that
        (open, RUNNING) turn and makes the session IDLE: a refused or lost prompt never strands a turn."""
        ...

    def complete_turn(self, session_id: str, turn_id: str, *, from_state: State, to_state: State,
                      at: str, version: int | None = None) -> Session:
        """Complete the current turn if it is `turn_id`, still open, and the session is in `from_state`."""
        ...

    def transition(self, session_id: str, *, to: State, from_states: Iterable[State], at: str,
                   expire: Mapping[str, Sequence[str]] | None = None) -> Session:
        """Change state; `expire` names current-turn pending rows that expire in the same write."""
        ...

    # -- clarification bundles (defined once in chalicelib.store.writes; the rule as a condition is
    #    chalicelib.store.conditions.bundle_active)
    def add_bundle(self, session_id: str, bundle: Bundle, *, expected_turn_id: str | None, new_turn: Turn | None,
                   from_states: Iterable[State], state: State, at: str) -> Session:
        """Add a bundle to the open current turn, or start `new_turn` with it, in one write."""
        ...

    def detach_rows(self, session_id: str, rows: Mapping[str, Sequence[str]], *, at: str,
                    complete_turn_id: str | None = None, from_state: State | None = None,
                    to_state: State | None = None, version: int | None = None) -> Session:
        """Detach exactly `rows` (active, pending, not yet detached), optionally completing the turn too."""
        ...

    def close_rows(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, status: str,
                   at: str) -> Session: ...
    def remove_bundle(self, session_id: str, bundle_id: str, at: str) -> Session:
        """Refused (ConditionFailed) while an answer to the bundle is being delivered."""
        ...

    def hide_prompt(self, session_id: str, message_id: str, at: str) -> Session: ...

    def archive_bundles(self, session: Session, bundles: Sequence[Bundle], at: str) -> Session:
        """`bundles` (closed for good) leave `session`, as read, for their history records, in one transaction."""
        ...

    def get_archived(self, session_id: str, bundle_id: str) -> Bundle | None: ...
    def list_archived(self, session_id: str) -> list[Bundle]: ...
    def mark_archived(self, session_id: str, bundle_id: str, *, dismissed_by: str | None = None,
                      late_message_id: str | None = None) -> bool:
        """An archived bundle's record: dismissed for a user, or linked to the message that answered it late
        (False when there is no such record)."""
        ...

    def delete_archived(self, session_id: str, bundle_id: str) -> bool:
        """The user deleted an archived bundle's transcript message: its record goes (True if it was there)."""
        ...

    # -- responses, delivery intents, reservations, watchdog (the recovery operations are required members:
    #    no store can be wired into the app without them)
    def renew_waiter(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, until: str,
                     at: str) -> Session: ...
    def claim(self, session_id: str, bundle_id: str, responses: Mapping[str, Mapping[str, Any]], *,
              status: str, delivery: Delivery, reservation: Reservation | None, at: str) -> None:
        """The rule + exact pending rows → outcome and delivery intent (and reservation) in one write."""
        ...

    def confirm_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                         watchdog: Watchdog | None, at: str) -> Session: ...
    def restore_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                      outcome: str, detach: bool, at: str, reservation: Reservation | None = None) -> Session: ...
    def fall_through(self, session_id: str, bundle_id: str, delivery_id: str, reservation: Reservation, *,
                     at: str) -> Session:
        """An unconfirmed live claim continues as a detached claim with a reserved successor (one write)."""
        ...

    def mark_attempted(self, session_id: str, reservation: Reservation, prompt: Prompt, *, at: str) -> Session: ...
    def to_start_event(self, session_id: str, reservation: Reservation, marker: StartEvent, *, result: str,
                       at: str) -> Session:
        """Replace an attempted reservation by the start-event outbox marker, retiring the intent."""
        ...

    def clear_start_event(self, session_id: str, turn_id: str, at: str) -> Session: ...
    def defer_ready(self, session_id: str, reservation_turn_id: str, ready: DeferredReady) -> Session: ...
    def clear_deferred_ready(self, session_id: str, generation: int, at: str) -> Session: ...
    def finish_reservation(self, session_id: str, reservation: Reservation, *, result: str, dispatch: Dispatch,
                           at: str) -> Session: ...
    def retire_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                     outcome: str, at: str, reservation: Reservation | None = None) -> Session:
        """The question moved on before the answer was taken: its rows are unanswered history again."""
        ...

    def clear_watchdog(self, session_id: str, clarification_id: str, at: str) -> Session: ...
    def admit_watchdog_prompt(self, session_id: str, watchdog: Watchdog, prompt: Prompt, *, at: str) -> Session: ...
    def dismiss(self, session_id: str, bundle_id: str, row_ids: Sequence[str], user_key: str,
                at: str) -> Session: ...
    def quarantine(self, session_id: str, reason: str, at: str) -> None:
        """Set an aggregate the reconciler cannot repair apart (works on an item that does not decode)."""
        ...

    def release(self, session_id: str, at: str) -> None:
        """Undo a quarantine after a repair; the reconciler looks at the aggregate at once."""
        ...

    def quarantined_sessions(self) -> list[str]: ...
    def reschedule(self, session_id: str, *, expected_due: str | None, next_due: str | None) -> bool:
        """Compare-and-set of the owner deadline (the reconciler's bookkeeping)."""
        ...

    # -- message admission (the idempotency record is written atomically with the aggregate)
    def admit(self, session_id: str, prompt: Prompt, *, start: Turn | None, expected_turn_id: str | None,
              from_states: Iterable[State], link_bundle: str | None, remember: Remembered | None,
              queue_cap: int, at: str) -> Session:
        """With `start`: a new turn carrying the prompt (no turn may be open). Without: append the prompt
        to the queue of the open turn `expected_turn_id`. Raises AlreadyRemembered when the key exists."""
        ...

    def start_from_queue(self, session_id: str, *, expected_turn_id: str | None, turn: Turn, head: Prompt,
                         at: str) -> Session:
        """Drain: start `turn` with the queue's head (which must still be `head`) and pop it, in one write."""
        ...

    def link_late_message(self, session_id: str, bundle_id: str, message_id: str, at: str) -> Session:
        """Link an inactive question to the message that answered it late."""
        ...

    def get_remembered(self, key: str) -> Remembered | None: ...
    def remember(self, entry: Remembered) -> None:
        """Create the record; raises AlreadyRemembered when the key exists."""
        ...

    def update_remembered(self, entry: Remembered) -> None: ...

    # -- history (kept in step by the stream functions)
    def put_message(self, message: Message) -> bool:
        """Idempotent: False when the message already exists."""
        ...

    def put_turn_record(self, record: TurnRecord, workspace_id: str, task_id: str) -> None: ...
    def delete_message(self, message: Message) -> bool:
        """Tombstone the message, recorded or not yet: a later put_message never recreates it. False when it
        was deleted already."""
        ...
    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]: ...
    def page_messages(self, session_id: str, limit: int, before: str | None) -> Paged[tuple[str, Message]]:
        """Up to `limit` (history key, message) pairs older than the key `before`, newest first, deleted
        ones left out; a bounded number of Queries (a page can come back short, with `after` set)."""
        ...

    def page_turns(self, session_id: str, limit: int, before: int | None) -> Paged[TurnRecord]:
        """Turn records with a sequence below `before`, newest first (the sparse `turns` index)."""
        ...

    def get_archived_many(self, session_id: str, bundle_ids: Sequence[str]) -> list[Bundle]:
        """The archived bundles among `bundle_ids` (batch reads)."""
        ...

    # -- client event feed
    def put_event(self, event: Event, written_at: str) -> bool:
        """Idempotent on the event id and time: False when it was already written."""
        ...

    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        """(sk, written_at, event) with sk > low_sk and (sk > after_sk or written_at > written_after)."""
        ...

    # -- deployment metadata and reconciler work
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str, at: str) -> None: ...
    def list_meta(self, prefix: str) -> dict[str, str]:
        """Every metadata entry whose key starts with `prefix` (the table holds a handful: a Scan)."""
        ...
    def due_sessions(self, before: str | None) -> list[str]:
        """Sessions carrying an owner deadline (all, or those due before `before`)."""
        ...
