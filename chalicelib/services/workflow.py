"""Workflow transitions of a task, guarded by the repository rule across all of its sessions."""
from __future__ import annotations

from ..auth.tokens import Caller
from ..domain.commands import Transition
from ..domain.errors import PendingClarification, StoreUnavailable
from ..domain.model import Task
from ..domain.rules import active_bundles
from .access import task_for_user
from .deps import Deps
from .retry import on_conflict

MAX_CHECKED = 99  # one DynamoDB transaction holds at most 100 items: the task and 99 session checks


def guard(deps: Deps, task: Task) -> dict[str, int]:
    """Raises PendingClarification while any session of the task has an active bundle (a detached one too).
    Returns the version of each session it read: the transition is conditioned on them being unchanged.

    A failed read counts as pending: the guard fails closed.
    """
    try:
        sessions = deps.store.list_sessions(task.id)
    except StoreUnavailable as exc:
        raise PendingClarification("could not verify pending clarifications; try again",
                                   reason="unverifiable") from exc
    blocking = [s.id for s in sessions if active_bundles(s) or s.quarantined]
    if blocking:
        raise PendingClarification("an active clarification blocks this transition", session_ids=blocking)
    if len(sessions) > MAX_CHECKED:
        raise PendingClarification(f"a task with more than {MAX_CHECKED} sessions cannot be verified at once",
                                   reason="unverifiable")
    return {s.id: s.version for s in sessions}


def transition(deps: Deps, caller: Caller, task_id: str, command: Transition) -> Task:
    """Decided on the same truth it writes with: the step moves in one transaction that checks every session
    the guard read is unchanged, so a question asked meanwhile makes it decide again."""
    task = task_for_user(deps, caller, task_id)

    def attempt(_: None) -> Task:
        return deps.store.set_workflow_step(task.id, command.to_step, unchanged=guard(deps, task))
    return on_conflict(attempt, None, lambda exc: None, "the task's sessions")
