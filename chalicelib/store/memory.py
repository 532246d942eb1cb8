"""In-memory store with the same contract as DynamoStore, for fast service tests.

Each operation checks its condition and applies its change under one lock, as one DynamoDB write would.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..domain.errors import AlreadyRemembered, ConditionFailed
from ..domain.model import (
    Bundle,
    Delivery,
    Dispatch,
    Event,
    Message,
    Prompt,
    Reservation,
    Session,
    State,
    StatusSummary,
    Task,
    Turn,
    TurnRecord,
    Watchdog,
)
from ..domain.rules import bundle_is_active, row_pending
from . import codec
from .protocol import Remembered


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.tasks: dict[str, Task] = {}
        self.sessions: dict[str, Session] = {}
        self.deadlines: dict[str, str] = {}
        self.history: dict[str, dict[str, Message | TurnRecord]] = {}
        self.events: dict[str, dict[str, tuple[str, Event]]] = {}
        self.meta: dict[str, str] = {}
        self.remembered: dict[str, Remembered] = {}
        self.tombstones: set[tuple[str, str]] = set()
        self.writes = 0

    # ---------------------------------------------------------------- tasks
    def put_task(self, task: Task) -> None:
        with self._lock:
            if task.id in self.tasks:
                raise ConditionFailed("task exists", current=self.tasks[task.id])
            self.tasks[task.id] = task
            self.writes += 1

    def get_task(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def list_tasks(self, workspace_id: str) -> list[Task]:
        return sorted((t for t in self.tasks.values() if t.workspace_id == workspace_id),
                      key=lambda t: t.created_at)

    def set_task_summary(self, task_id: str, *, pending_action: str | None, primary_session_id: str | None,
                         expected_revision: int, at: str = "") -> Task:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None or task.summary.revision != expected_revision:
                raise ConditionFailed("the task changed", current=task)
            new = replace(task, summary=StatusSummary(pending_action, expected_revision + 1, primary_session_id, at))
            self.tasks[task_id] = new
            self.writes += 1
            return new

    def set_workflow_step(self, task_id: str, step: str) -> Task:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None:
                raise ConditionFailed("no such task")
            self.tasks[task_id] = replace(task, workflow_step=step)
            self.writes += 1
            return self.tasks[task_id]

    def rename_task(self, task_id: str, title: str) -> Task:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None:
                raise ConditionFailed("no such task")
            self.tasks[task_id] = replace(task, title=title)
            self.writes += 1
            return self.tasks[task_id]

    def delete_task(self, task_id: str) -> bool:
        with self._lock:
            if self.tasks.pop(task_id, None) is None:
                return False
            self.writes += 1
            return True

    # ---------------------------------------------------------------- sessions
    def create_session(self, session: Session) -> None:
        with self._lock:
            if session.id in self.sessions:
                raise ConditionFailed("session exists", current=self.sessions[session.id])
            self.sessions[session.id] = session
            self.writes += 1

    def get_session(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    def list_sessions(self, task_id: str) -> list[Session]:
        return sorted((s for s in self.sessions.values() if s.task_id == task_id),
                      key=lambda s: s.created_at, reverse=True)

    def start_turn(self, session_id: str, *, expected_turn_id: str | None, from_states: Iterable[State],
                   turn: Turn, prompt: Prompt | None, state: State, at: str) -> Session:
        states = frozenset(from_states)

        def cond(s: Session) -> bool:
            current = s.current_turn.id if s.current_turn else None
            return current == expected_turn_id and s.state in states

        def change(s: Session) -> Session:
            if prompt is None:
                return replace(s, current_turn=turn, turn_seq=turn.seq, state=state)
            s = self._deadline(s, prompt.deadline)
            return replace(s, current_turn=turn, turn_seq=turn.seq, state=state, prompt=prompt,
                           generation=prompt.generation)
        return self._update(session_id, cond, change, at)

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch,
                     at: str, deadline: str | None, close_turn_id: str | None = None) -> Session:
        def cond(s: Session) -> bool:
            ok = s.prompt is not None and s.prompt.message_id == message_id and s.prompt.dispatch == expect
            if ok and close_turn_id is not None:
                t = s.current_turn
                ok = t is not None and t.id == close_turn_id and t.open and s.state == State.RUNNING
            return ok

        def change(s: Session) -> Session:
            prompt = s.prompt
            assert prompt is not None
            s = replace(self._deadline(s, deadline), prompt=replace(prompt, dispatch=to, deadline=deadline))
            if close_turn_id is not None and s.current_turn is not None:
                s = replace(s, current_turn=replace(s.current_turn, completed_at=at), state=State.IDLE)
            return s
        return self._update(session_id, cond, change, at)

    def complete_turn(self, session_id: str, turn_id: str, *, from_state: State, to_state: State,
                      at: str) -> Session:
        def cond(s: Session) -> bool:
            t = s.current_turn
            return t is not None and t.id == turn_id and t.completed_at is None and s.state == from_state

        def change(s: Session) -> Session:
            assert s.current_turn is not None
            return replace(s, current_turn=replace(s.current_turn, completed_at=at), state=to_state)
        return self._update(session_id, cond, change, at)

    def transition(self, session_id: str, *, to: State, from_states: Iterable[State], at: str,
                   expire: Mapping[str, Sequence[str]] | None = None) -> Session:
        states = frozenset(from_states)
        expire = expire or {}

        def cond(s: Session) -> bool:
            return s.state in states and all(_current(s, b) and _rows_pending(s, b, rows) for b, rows in expire.items())

        def change(s: Session) -> Session:
            s = _edit_rows(s, expire, status="expired", agent_disconnected=True)
            return replace(s, state=to)
        return self._update(session_id, cond, change, at)

    # ---------------------------------------------------------------- clarification bundles
    def add_bundle(self, session_id: str, bundle: Bundle, *, expected_turn_id: str | None, new_turn: Turn | None,
                   from_states: Iterable[State], state: State, at: str) -> Session:
        states = frozenset(from_states)

        def cond(s: Session) -> bool:
            current = s.current_turn.id if s.current_turn else None
            open_turn = new_turn is not None or (s.current_turn is not None and s.current_turn.open)
            return (current == expected_turn_id and open_turn and s.state in states
                    and s.bundle(bundle.id) is None)

        def change(s: Session) -> Session:
            if new_turn is not None:
                s = replace(s, current_turn=new_turn, turn_seq=new_turn.seq)
            return replace(s, bundles=(*s.bundles, bundle), state=state)
        return self._update(session_id, cond, change, at)

    def detach_rows(self, session_id: str, rows: Mapping[str, Sequence[str]], *, at: str,
                    complete_turn_id: str | None = None, from_state: State | None = None,
                    to_state: State | None = None) -> Session:
        def cond(s: Session) -> bool:
            for bundle_id, row_ids in rows.items():
                b = s.bundle(bundle_id)
                if b is None or not bundle_is_active(s, b) or not _rows_pending(s, bundle_id, row_ids):
                    return False
                if any(r.agent_disconnected for r in b.rows if r.question.question_id in row_ids):
                    return False
            if complete_turn_id is not None:
                t = s.current_turn
                return t is not None and t.id == complete_turn_id and t.open and s.state == from_state
            return True

        def change(s: Session) -> Session:
            s = _edit_rows(s, rows, agent_disconnected=True)
            if complete_turn_id is not None and s.current_turn is not None and to_state is not None:
                s = replace(s, current_turn=replace(s.current_turn, completed_at=at), state=to_state)
            return s
        return self._update(session_id, cond, change, at)

    def close_rows(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, status: str,
                   at: str) -> Session:
        def cond(s: Session) -> bool:
            b = s.bundle(bundle_id)
            return b is not None and bundle_is_active(s, b) and _rows_pending(s, bundle_id, row_ids)
        return self._update(session_id, cond, lambda s: _edit_rows(s, {bundle_id: row_ids}, status=status), at)

    # ---------------------------------------------------------------- responses and delivery
    def renew_waiter(self, session_id: str, bundle_id: str, row_ids: Sequence[str], *, until: str,
                     at: str) -> Session:
        return self._update(session_id, lambda s: _active(s, bundle_id, row_ids),
                            lambda s: self._deadline(_edit_bundle(s, bundle_id, waiter_until=until), until), at)

    def claim(self, session_id: str, bundle_id: str, responses: Mapping[str, Mapping[str, Any]], *,
              status: str, delivery: Delivery, reservation: Reservation | None, at: str) -> Session:
        def cond(s: Session) -> bool:
            return (_active(s, bundle_id, list(responses)) and _rows_pending(s, bundle_id, list(responses))
                    and (reservation is None or s.reservation is None))

        def change(s: Session) -> Session:
            b = s.bundle(bundle_id)
            assert b is not None
            rows = tuple(replace(r, status=status, response=dict(responses[r.question.question_id]))
                         if r.question.question_id in responses else r for r in b.rows)
            s = _edit_bundle(s, bundle_id, rows=rows, delivery=delivery)
            if reservation is not None:
                s = replace(s, reservation=reservation)
            return self._deadline(s, delivery.deadline) if delivery.pending else s
        return self._update(session_id, cond, change, at)

    def confirm_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                         watchdog: Watchdog | None, at: str) -> Session:
        def change(s: Session) -> Session:
            d = _delivery(s, bundle_id)
            assert d is not None
            s = _edit_bundle(s, bundle_id, delivery=replace(d, confirmed_at=at, result=result))
            if watchdog is not None:
                s = self._deadline(replace(s, watchdog=watchdog), watchdog.due)
            return s
        return self._update(session_id, lambda s: _unconfirmed(s, bundle_id, delivery_id), change, at)

    def restore_claim(self, session_id: str, bundle_id: str, delivery_id: str, row_ids: Sequence[str], *,
                      outcome: str, detach: bool, at: str, reservation: Reservation | None = None) -> Session:
        def cond(s: Session) -> bool:
            b = s.bundle(bundle_id)
            if b is None or not _unconfirmed(s, bundle_id, delivery_id) or s.terminal:
                return False
            rows = {r.question.question_id: r for r in b.rows}
            if not all(q in rows and rows[q].status == outcome for q in row_ids):
                return False
            turn = s.current_turn.id if s.current_turn else None
            if reservation is None:
                return turn == b.turn_id
            if s.reservation is None or s.reservation.turn_id != reservation.turn_id:
                return False
            return turn == (reservation.turn_id if reservation.attempted else b.turn_id)

        def change(s: Session) -> Session:
            b = s.bundle(bundle_id)
            assert b is not None
            extra: dict[str, object] = {"agent_disconnected": True} if detach else {}
            rows = tuple(replace(r, status="pending", response=None, **extra)  # type: ignore[arg-type]
                         if r.question.question_id in row_ids else r for r in b.rows)
            s = _edit_bundle(s, bundle_id, rows=rows, delivery=None)
            if reservation is not None:
                s = replace(s, reservation=None)
                if reservation.attempted:
                    s = replace(s, current_turn=reservation.predecessor, turn_seq=reservation.predecessor.seq,
                                state=State.WAITING_FOR_INPUT, generation=reservation.generation - 1)
            return s
        return self._update(session_id, cond, change, at)

    def mark_attempted(self, session_id: str, reservation: Reservation, prompt: Prompt, *, at: str) -> Session:
        def cond(s: Session) -> bool:
            r = s.reservation
            return (r is not None and r.turn_id == reservation.turn_id and not r.attempted and not s.terminal
                    and s.current_turn is not None and s.current_turn.id == reservation.bundle_turn_id)

        def change(s: Session) -> Session:
            assert s.reservation is not None
            s = replace(s, reservation=replace(s.reservation, attempted=True),
                        current_turn=Turn(reservation.turn_id, reservation.seq, at), turn_seq=reservation.seq,
                        state=State.RUNNING, generation=prompt.generation, prompt=prompt)
            return self._deadline(s, reservation.deadline)
        return self._update(session_id, cond, change, at)

    def finish_reservation(self, session_id: str, reservation: Reservation, *, bundle_id: str, delivery_id: str,
                           result: str, dispatch: Dispatch, at: str) -> Session:
        def cond(s: Session) -> bool:
            d = _delivery(s, bundle_id)
            return (s.reservation is not None and s.reservation.turn_id == reservation.turn_id
                    and d is not None and d.delivery_id == delivery_id)

        def change(s: Session) -> Session:
            d = _delivery(s, bundle_id)
            assert d is not None
            s = _edit_bundle(s, bundle_id, delivery=replace(d, confirmed_at=at, result=result))
            prompt = replace(s.prompt, dispatch=dispatch) if s.prompt else None
            return replace(s, reservation=None, prompt=prompt)
        return self._update(session_id, cond, change, at)

    def retire_delivery(self, session_id: str, bundle_id: str, delivery_id: str, *, result: str,
                        at: str) -> Session:
        return self.confirm_delivery(session_id, bundle_id, delivery_id, result=result, watchdog=None, at=at)

    def clear_watchdog(self, session_id: str, clarification_id: str, at: str) -> Session:
        return self._update(session_id,
                            lambda s: s.watchdog is not None and s.watchdog.clarification_id == clarification_id,
                            lambda s: replace(s, watchdog=None), at)

    def admit_watchdog_prompt(self, session_id: str, watchdog: Watchdog, prompt: Prompt, *, at: str) -> Session:
        def cond(s: Session) -> bool:
            return (s.watchdog is not None and s.watchdog.clarification_id == watchdog.clarification_id
                    and s.current_turn is not None and s.current_turn.id == watchdog.turn_id and not s.terminal)

        def change(s: Session) -> Session:
            s = replace(s, watchdog=None, prompt=prompt, generation=prompt.generation, state=State.RUNNING)
            return self._deadline(s, prompt.deadline)
        return self._update(session_id, cond, change, at)

    def dismiss(self, session_id: str, bundle_id: str, row_ids: Sequence[str], user: str, at: str) -> Session:
        def cond(s: Session) -> bool:
            b = s.bundle(bundle_id)
            return b is not None and not bundle_is_active(s, b)

        def change(s: Session) -> Session:
            b = s.bundle(bundle_id)
            assert b is not None
            return _edit_bundle(s, bundle_id, dismissed_by=tuple(sorted({*b.dismissed_by, user})))
        return self._update(session_id, cond, change, at)

    def reschedule(self, session_id: str, *, expected_due: str | None, next_due: str | None) -> bool:
        with self._lock:
            s = self.sessions.get(session_id)
            if s is None or s.recon_due != expected_due:
                return False
            self.sessions[session_id] = replace(s, recon_due=next_due)
            if next_due:
                self.deadlines[session_id] = next_due
            else:
                self.deadlines.pop(session_id, None)
            self.writes += 1
            return True

    def remove_bundle(self, session_id: str, bundle_id: str, at: str) -> Session:
        return self._update(session_id, lambda s: s.bundle(bundle_id) is not None,
                            lambda s: replace(s, bundles=tuple(b for b in s.bundles if b.id != bundle_id)), at)

    def _update(self, session_id: str, cond: Callable[[Session], bool], change: Callable[[Session], Session],
                at: str) -> Session:
        with self._lock:
            current = self.sessions.get(session_id)
            if current is None or not cond(current):
                raise ConditionFailed("the session changed", current=current)
            new = replace(change(current), version=current.version + 1, updated_at=at)
            self.sessions[session_id] = new
            self.writes += 1
            return new

    def _deadline(self, s: Session, deadline: str | None) -> Session:
        """Writers only set the owner deadline; the reconciler removes it (see DynamoStore)."""
        if deadline:
            self.deadlines[s.id] = deadline
            return replace(s, recon_due=deadline)
        return s

    # ---------------------------------------------------------------- message admission
    def admit(self, session_id: str, prompt: Prompt, *, start: Turn | None, expected_turn_id: str | None,
              from_states: Iterable[State], link_bundle: str | None, remember: Remembered | None,
              queue_cap: int, at: str) -> Session:
        states = frozenset(from_states)

        def cond(s: Session) -> bool:
            current = s.current_turn.id if s.current_turn else None
            if current != expected_turn_id or s.state not in states:
                return False
            if link_bundle is not None and s.bundle(link_bundle) is None:
                return False
            turn_open = s.current_turn is not None and s.current_turn.open
            return not turn_open if start is not None else (turn_open and len(s.queue) < queue_cap)

        def change(s: Session) -> Session:
            if link_bundle is not None:
                s = _edit_bundle(s, link_bundle, late_message_id=prompt.message_id)
            if start is None:
                return self._deadline(replace(s, queue=(*s.queue, prompt)), prompt.deadline)
            s = self._deadline(s, prompt.deadline)
            return replace(s, current_turn=start, turn_seq=start.seq, state=State.RUNNING,
                           generation=prompt.generation, prompt=prompt)
        with self._lock:
            if remember is not None and remember.key in self.remembered:
                raise AlreadyRemembered("this idempotency key was already used")
            session = self._update(session_id, cond, change, at)
            if remember is not None:
                self.remembered[remember.key] = remember
            return session

    def start_from_queue(self, session_id: str, *, expected_turn_id: str | None, turn: Turn, head: Prompt,
                         at: str) -> Session:
        def cond(s: Session) -> bool:
            current = s.current_turn.id if s.current_turn else None
            open_turn = s.current_turn is not None and s.current_turn.open
            return (current == expected_turn_id and not open_turn and not s.terminal and bool(s.queue)
                    and s.queue[0].message_id == head.message_id)

        def change(s: Session) -> Session:
            s = self._deadline(s, head.deadline)
            return replace(s, current_turn=turn, turn_seq=turn.seq, state=State.RUNNING,
                           generation=head.generation, prompt=head, queue=s.queue[1:])
        return self._update(session_id, cond, change, at)

    def link_late_message(self, session_id: str, bundle_id: str, message_id: str, at: str) -> Session:
        return self._update(session_id, lambda s: s.bundle(bundle_id) is not None,
                            lambda s: _edit_bundle(s, bundle_id, late_message_id=message_id), at)

    def get_remembered(self, key: str) -> Remembered | None:
        return self.remembered.get(key)

    def remember(self, entry: Remembered) -> None:
        with self._lock:
            if entry.key in self.remembered:
                raise AlreadyRemembered("this idempotency key was already used")
            self.remembered[entry.key] = entry
            self.writes += 1

    def update_remembered(self, entry: Remembered) -> None:
        with self._lock:
            if entry.key in self.remembered:
                self.remembered[entry.key] = entry

    # ---------------------------------------------------------------- history
    def put_message(self, message: Message) -> bool:
        key = codec.history_sk_message(message.turn_seq, message.created_at, message.id)
        with self._lock:
            items = self.history.setdefault(message.session_id, {})
            if key in items or (message.session_id, key) in self.tombstones:
                return False
            items[key] = message
            self.writes += 1
            return True

    def put_turn_record(self, record: TurnRecord, workspace_id: str, task_id: str) -> None:
        key = codec.history_sk_turn(record.seq)
        with self._lock:
            items = self.history.setdefault(record.session_id, {})
            old = items.get(key)
            completed = record.completed_at or (old.completed_at if isinstance(old, TurnRecord) else None)
            items[key] = replace(record, completed_at=completed)
            self.writes += 1

    def delete_message(self, message: Message) -> bool:
        key = codec.history_sk_message(message.turn_seq, message.created_at, message.id)
        with self._lock:
            removed = self.history.get(message.session_id, {}).pop(key, None) is not None
            if removed:  # a tombstone: put_message never recreates it
                self.tombstones.add((message.session_id, key))
                self.writes += 1
            return removed

    def list_history(self, session_id: str) -> tuple[list[TurnRecord], list[Message]]:
        items = [v for _, v in sorted(self.history.get(session_id, {}).items())]
        return ([i for i in items if isinstance(i, TurnRecord)], [i for i in items if isinstance(i, Message)])

    # ---------------------------------------------------------------- events
    def put_event(self, event: Event, written_at: str) -> bool:
        key = f"{event.at}#{event.id}"
        with self._lock:
            feed = self.events.setdefault(event.workspace_id, {})
            if key in feed:
                return False
            feed[key] = (written_at, event)
            self.writes += 1
            return True

    def list_events(self, workspace_id: str, *, low_sk: str, after_sk: str, written_after: str,
                    limit: int) -> list[tuple[str, str, Event]]:
        out = []
        for sk, (written_at, event) in sorted(self.events.get(workspace_id, {}).items()):
            if sk > low_sk and (sk > after_sk or written_at > written_after):
                out.append((sk, written_at, event))
        return out[:limit]

    # ---------------------------------------------------------------- meta and reconciler work
    def get_meta(self, key: str) -> str | None:
        return self.meta.get(key)

    def set_meta(self, key: str, value: str, at: str) -> None:
        self.meta[key] = value

    def due_sessions(self, before: str | None) -> list[str]:
        return sorted(sid for sid, due in self.deadlines.items() if before is None or due < before)


def _current(s: Session, bundle_id: str) -> bool:
    b = s.bundle(bundle_id)
    return b is not None and s.current_turn is not None and b.turn_id == s.current_turn.id


def _rows_pending(s: Session, bundle_id: str, row_ids: Sequence[str]) -> bool:
    b = s.bundle(bundle_id)
    if b is None:
        return False
    rows = {r.question.question_id: r for r in b.rows}
    return all(q in rows and row_pending(rows[q]) for q in row_ids)


def _edit_rows(s: Session, rows: Mapping[str, Sequence[str]], **changes: object) -> Session:
    bundles = []
    for b in s.bundles:
        targets = rows.get(b.id, ())
        new_rows = tuple(replace(r, **changes) if r.question.question_id in targets else r  # type: ignore[arg-type]
                         for r in b.rows)
        bundles.append(replace(b, rows=new_rows))
    return replace(s, bundles=tuple(bundles))


def _active(s: Session, bundle_id: str, row_ids: Sequence[str]) -> bool:
    b = s.bundle(bundle_id)
    return b is not None and bundle_is_active(s, b) and any(
        row_pending(r) for r in b.rows if r.question.question_id in row_ids)


def _delivery(s: Session, bundle_id: str) -> Delivery | None:
    b = s.bundle(bundle_id)
    return b.delivery if b is not None else None


def _unconfirmed(s: Session, bundle_id: str, delivery_id: str) -> bool:
    d = _delivery(s, bundle_id)
    return d is not None and d.delivery_id == delivery_id and d.confirmed_at is None


def _edit_bundle(s: Session, bundle_id: str, **changes: Any) -> Session:
    return replace(s, bundles=tuple(replace(b, **changes) if b.id == bundle_id else b for b in s.bundles))
