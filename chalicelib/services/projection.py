"""Task status summaries: a projection of the sessions' pending actions, written compare-and-set.

Computed from the repository rule over the aggregates, never from event payloads. Task-list reads and
stream functions call the same refresh, so a stale or wrong summary is repaired wherever it is seen.
"""
from __future__ import annotations

from ..domain.model import Session, Task
from ..domain.rules import pending_action
from .deps import Deps
from .events import emit
from .retry import on_conflict


def task_summary(sessions: list[Session]) -> tuple[str | None, str | None]:
    """(pending action, primary session id) of a task from its sessions."""
    action = "clarification" if any(pending_action(s) for s in sessions) else None
    primaries = sorted((s for s in sessions if s.is_primary), key=lambda s: s.created_at)
    return action, primaries[0].id if primaries else None


def refresh_task_summary(deps: Deps, task_id: str, *, task: Task | None = None,
                         fresh: Session | None = None, republish: bool = False,
                         sessions: list[Session] | None = None, activity: str | None = None) -> Task | None:
    """Make the stored summary agree with the rule. Returns the task as stored (None if it vanished).

    `sessions`, read by the caller just now, spare the first attempt its own read. `activity` (a session
    change's time) moves the task's latest activity forward, and with it the task's place in the list.

    With `republish` (stream functions), an already agreeing summary has its event written again: the event
    id is stable, so this writes nothing new unless a crash came between a summary write and its event.
    """
    given = [sessions] if sessions is not None else []

    def attempt(known: Task | None) -> Task | None:
        current = known or deps.store.get_task(task_id)
        if current is None:
            return None
        listed = given.pop() if given else deps.store.list_sessions(task_id)  # a retry reads afresh
        if fresh is not None:  # the index may lag the aggregate that triggered this refresh, but a
            # redelivered record may be older than what is stored: the newer version wins
            listed = [fresh if s.id == fresh.id and fresh.version > s.version else s for s in listed]
            if all(s.id != fresh.id for s in listed):
                listed.append(fresh)
        action, primary = task_summary(listed)
        moved = max(current.summary.activity_at, activity or "")
        if (action, primary) == (current.summary.pending_action, current.summary.primary_session_id):
            if moved != current.summary.activity_at:
                current = deps.store.set_task_activity(current, moved)
            if republish and current.summary.revision:
                publish_summary(deps, current)
            return current
        new = deps.store.set_task_summary(task_id, pending_action=action, primary_session_id=primary,
                                          expected_revision=current.summary.revision, at=deps.now(),
                                          activity_at=moved, seen_activity=current.summary.activity_at)
        publish_summary(deps, new)
        return new
    # someone else moved the revision: recompute from a fresh read
    return on_conflict(attempt, task, lambda exc: None, f"the summary of task {task_id}")


def publish_summary(deps: Deps, task: Task) -> None:
    """The event of the task's current summary revision (its id and time are the revision's, so stable)."""
    emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None,
         event_id=f"task.status_summary.updated:{task.id}:{task.summary.revision}",
         kind="task.status_summary.updated", at=task.summary.updated_at or task.created_at,
         payload={"task_id": task.id, "status_summary": {
             "pending_action": task.summary.pending_action, "revision": task.summary.revision,
             "primary_session_id": task.summary.primary_session_id}})
