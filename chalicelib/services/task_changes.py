"""Renaming and deleting tasks (the user's own bookkeeping; no clarification rule is involved).

Other clients learn of both through the tasks table's stream function (task.updated, task.deleted), so the
events cannot be lost between the write and its publication.
"""
from __future__ import annotations

import logging

from ..auth.tokens import Caller
from ..domain.commands import RenameTask
from ..domain.errors import ConditionFailed, NotFound, SessionUnavailable
from ..domain.model import Task
from .access import task_for_user
from .deps import Deps
from .sessions import cancel_session

log = logging.getLogger(__name__)


def rename_task(deps: Deps, caller: Caller, task_id: str, command: RenameTask) -> Task:
    """New title; 404 outside the caller's workspace, or when the task was deleted meanwhile."""
    task = task_for_user(deps, caller, task_id)
    try:
        return deps.store.rename_task(task.id, command.title)
    except ConditionFailed as exc:
        raise NotFound("task not found") from exc


def delete_task(deps: Deps, caller: Caller, task_id: str) -> None:
    """Cancel the task's live sessions, then remove the task.

    Sessions go first: a crash in between leaves a task the user can delete again, never live sessions that
    no task leads to. A repeated delete is 404, like any missing task.
    """
    task = task_for_user(deps, caller, task_id)
    for session in deps.store.list_sessions(task.id):
        if session.terminal:
            continue
        try:
            cancel_session(deps, caller, session.id)
        except SessionUnavailable:  # it ended on its own meanwhile, or it is quarantined
            log.info("session %s was not cancelled by the task's delete", session.id)
    if not deps.store.delete_task(task.id):
        raise NotFound("task not found")
