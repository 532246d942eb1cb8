"""Workflow transitions of a task, guarded by the repository rule across all of its sessions."""
from __future__ import annotations

from ..auth.tokens import Caller
from ..domain.commands import Transition
from ..domain.errors import PendingClarification, StoreUnavailable
from ..domain.model import Task
from ..domain.rules import active_bundles
from .access import task_for_user
from .deps import Deps


def guard(deps: Deps, task: Task) -> None:
    """Raises PendingClarification while any session of the task has an active bundle (a detached one too).

    A failed read counts as pending: the guard fails closed.
    """
    try:
        sessions = deps.store.list_sessions(task.id)
    except StoreUnavailable as exc:
        raise PendingClarification("could not verify pending clarifications; try again",
                                   reason="unverifiable") from exc
    blocking = [s.id for s in sessions if active_bundles(s)]
    if blocking:
        raise PendingClarification("an active clarification blocks this transition", session_ids=blocking)


def transition(deps: Deps, caller: Caller, task_id: str, command: Transition) -> Task:
    task = task_for_user(deps, caller, task_id)
    guard(deps, task)
    return deps.store.set_workflow_step(task.id, command.to_step)
