"""Renaming and deleting tasks (the user's own bookkeeping; no clarification rule is involved)."""
from __future__ import annotations

import logging
from typing import Any

from ..auth.tokens import Caller
from ..domain import validation as v
from ..domain.errors import ConditionFailed, NotFound, SessionUnavailable
from ..domain.model import Task
from .access import task_for_user
from .deps import Deps
from .events import emit
from .sessions import cancel_session
from .tasks import task_payload

log = logging.getLogger(__name__)


def rename_task(deps: Deps, caller: Caller, task_id: str, body: Any) -> Task:
    """New title; 400 naming `title`, 404 outside the caller's workspace. Other clients get `task.updated`."""
    caller.require_user()
    title = v.text(v.body_object(body), "title", max_len=v.MAX_TITLE)
    assert title is not None
    task = task_for_user(deps, caller, task_id)
    try:
        task = deps.store.rename_task(task.id, title)
    except ConditionFailed as exc:  # deleted meanwhile
        raise NotFound("task not found") from exc
    emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None,
         event_id=f"task.updated:{task.id}:{deps.new_id()}", kind="task.updated", at=deps.now(),
         payload=task_payload(task))
    return task


def delete_task(deps: Deps, caller: Caller, task_id: str) -> None:
    """Cancel the task's live sessions, then remove the task; other clients get `task.deleted`.

    Sessions go first: a crash in between leaves a task the user can delete again, never live sessions that
    no task leads to. A repeated delete is 404, like any missing task.
    """
    task = task_for_user(deps, caller, task_id)
    for session in deps.store.list_sessions(task.id):
        if session.terminal:
            continue
        try:
            cancel_session(deps, caller, session.id)
        except SessionUnavailable:  # it reached another terminal state on its own meanwhile
            log.info("session %s ended before the task's delete cancelled it", session.id)
    if not deps.store.delete_task(task.id):
        raise NotFound("task not found")
    now = deps.now()
    emit(deps, workspace_id=task.workspace_id, task_id=task.id, session_id=None, event_id=f"task.deleted:{task.id}",
         kind="task.deleted", at=now, payload={"id": task.id, "deleted_at": now})
