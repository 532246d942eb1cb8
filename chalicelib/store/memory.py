"""In-memory store with the same contract as DynamoStore, for fast service tests.

Each operation checks its condition and applies its change under one lock, as one DynamoDB write would.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from ..domain.errors import ConditionFailed
from ..domain.model import (
    TERMINAL_STATES,
    Bundle,
    Dispatch,
    Event,
    Message,
    Prompt,
    Session,
    State,
    StatusSummary,
    Task,
    Turn,
    TurnRecord,
)
from ..domain.rules import bundle_is_active, row_pending
from . import codec


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.tasks: dict[str, Task] = {}
        self.sessions: dict[str, Session] = {}
        self.deadlines: dict[str, str] = {}
        self.history: dict[str, dict[str, Message | TurnRecord]] = {}
        self.events: dict[str, dict[str, tuple[str, Event]]] = {}
        self.meta: dict[str, str] = {}
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
                         expected_revision: int) -> Task:
        with self._lock:
            task = self.tasks.get(task_id)
            if task is None or task.summary.revision != expected_revision:
                raise ConditionFailed("the task changed", current=task)
            new = replace(task, summary=StatusSummary(pending_action, expected_revision + 1, primary_session_id))
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
            self._deadline(s.id, prompt.deadline)
            return replace(s, current_turn=turn, turn_seq=turn.seq, state=state, prompt=prompt,
                           generation=prompt.generation)
        return self._update(session_id, cond, change, at)

    def set_dispatch(self, session_id: str, message_id: str, *, expect: Dispatch, to: Dispatch,
                     at: str, deadline: str | None) -> Session:
        def cond(s: Session) -> bool:
            return s.prompt is not None and s.prompt.message_id == message_id and s.prompt.dispatch == expect

        def change(s: Session) -> Session:
            assert s.prompt is not None
            self._deadline(s.id, deadline)
            return replace(s, prompt=replace(s.prompt, dispatch=to, deadline=deadline))
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
            if to in TERMINAL_STATES:
                self._deadline(s.id, None)
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

    def _deadline(self, session_id: str, deadline: str | None) -> None:
        if deadline:
            self.deadlines[session_id] = deadline
        else:
            self.deadlines.pop(session_id, None)

    # ---------------------------------------------------------------- history
    def put_message(self, message: Message) -> bool:
        key = codec.history_sk_message(message.turn_seq, message.created_at, message.id)
        with self._lock:
            items = self.history.setdefault(message.session_id, {})
            if key in items:
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
            return self.history.get(message.session_id, {}).pop(key, None) is not None

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
